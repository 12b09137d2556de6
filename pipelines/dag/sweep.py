"""The sweep pipeline: several LoRA trials in parallel, the best one merged and deployed only
when it beats the base model by a margin.

Run locally:  python -m pipelines.run_local --pipeline sweep [--parallelism 2] [--param trials='[...]']
Compile:      python -m pipelines.compile   (writes compiled/sweep.yaml with parallelism 2)

validate -> deliver model + dataset -> evaluate_base (the base scored once)
                                    ParallelFor(trials): finetune + evaluate (the tuned model)
-> pick_best (dsl.Collected metrics and adapters) -> If(deploy): merge + deploy
                                                   Else: not_deployed (says why)

Each trial dict sets lora_r, lora_alpha and learning_rate; every other setting is shared.
Trials write to runs/<task id>/ (the KFP task id placeholder), so their checkpoints and
PyTorchJobs never collide. Metric names are the same in every trial and every run, so the
KFP Compare view lines them up. KFP fixes ParallelFor's parallelism at compile time: build
another with `build(parallelism)` (run_local --parallelism N does).
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Markdown, Metrics

from components.deploy import deploy
from components.deploy_trials import deploy_trials
from components.evaluate import evaluate
from components.evaluate_base import evaluate_base
from components.finetune import finetune
from components.merge_lora import merge_lora
from components.not_deployed import not_deployed
from components.pick_best import pick_best
from components.validate_params import validate_params
from pipelines.dag.tasks import deliver_inputs, inputs_for, on_eval_gpus, restricted, table_parameters, with_s3

SWEEP_NAME = "llm-finetune-sweep"


def build(parallelism: int = 2):
    """The sweep pipeline with `parallelism` trials running at once."""

    @dsl.pipeline(
        name=SWEEP_NAME,
        description="LoRA hyperparameter sweep: parallel trials, the best deployed "
        "only if it beats the base model by min_gain.",
    )
    @table_parameters("sweep")
    def sweep_pipeline(args: dict) -> NamedTuple("Outputs", best_metrics=Metrics, summary=Markdown, decision=str):
        """LoRA trials in parallel; the best one is merged and deployed only if it beats the base model.

        Args: from trainer.config.params (one table for every parameter's name, type, default and help): `args`.
        """
        checked = with_s3(
            validate_params(**inputs_for(validate_params, args), sweep=True).set_display_name("validate parameters")
        )
        checked.set_caching_options(False)  # local files it reads may change between runs
        model, data = deliver_inputs(args, after=checked)
        # The base once, beside the trials' training: each trial's evaluate then scores only its own model.
        base = with_s3(
            evaluate_base(
                base_model=model.outputs["model"],
                dataset=data.outputs["dataset"],
                max_rows=args["eval_max_rows"],
                max_seq_len=args["max_seq_len"],
                eval_engine=args["eval_engine"],
            )
        ).set_display_name("evaluate base")
        on_eval_gpus(base, args)
        with dsl.ParallelFor(args["trials"], parallelism=parallelism) as trial:
            # Every shared setting by name, as the finetune pipeline passes them; the trial's own on top.
            train = with_s3(
                finetune(
                    base_model=model.outputs["model"],
                    dataset=data.outputs["dataset"],
                    run_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER,
                    **inputs_for(finetune, args),
                    lora_r=trial.lora_r,
                    lora_alpha=trial.lora_alpha,
                    learning_rate=trial.learning_rate,
                )
            ).set_display_name("trial: fine-tune")
            scores = with_s3(
                evaluate(
                    base_model=model.outputs["model"],
                    tuned_model=train.outputs["adapter"],
                    dataset=data.outputs["dataset"],
                    max_rows=args["eval_max_rows"],
                    max_seq_len=args["max_seq_len"],
                    eval_engine=args["eval_engine"],
                    base_scores=base.outputs["scores"],
                    gate=False,
                    merge_scales=args["merge_scales"],
                    min_fc_accuracy=args["min_fc_accuracy"],
                    max_category_drop=args["max_category_drop"],
                    gate_significance=args["gate_significance"],
                    max_drop_by_category=args["max_drop_by_category"],
                )
            ).set_display_name("trial: evaluate")  # pick best gates
            on_eval_gpus(scores, args)
        best = restricted(
            pick_best(
                trials=args["trials"],
                trial_metrics=dsl.Collected(scores.outputs["metrics"]),
                adapters=dsl.Collected(train.outputs["adapter"]),
                select_metric=args["select_metric"],
                min_gain=args["min_gain"],
                min_fc_accuracy=args["min_fc_accuracy"],
                max_category_drop=args["max_category_drop"],
                gate_significance=args["gate_significance"],
                max_drop_by_category=args["max_drop_by_category"],
            ).set_display_name("pick best")
        )
        # KFP 2.17 cannot compile dsl.Collected inside a condition, so this task always runs and
        # returns at once unless deploy_all_trials is set.
        with_s3(
            deploy_trials(
                enabled=args["deploy_all_trials"],
                base_model=model.outputs["model"],
                adapters=dsl.Collected(train.outputs["adapter"]),
                dataset=data.outputs["dataset"],
                backend=args["deploy_backend"],
                name=args["served_model_name"],
                gpus=args["serve_gpus"],
                **inputs_for(deploy_trials, args),
            )
        ).set_display_name("deploy all trials side by side")
        with dsl.If(best.outputs["deploy"] == True, name="beats-base"):  # noqa: E712 - a KFP condition
            merged = with_s3(
                merge_lora(
                    base_model=model.outputs["model"],
                    adapter=best.outputs["best_adapter"],
                    scale=best.outputs["best_scale"],
                )
            )
            on_eval_gpus(merged.set_display_name("merge LoRA"), args)
            with_s3(
                deploy(
                    **inputs_for(deploy, args),
                    model=merged.outputs["merged"],
                    dataset=data.outputs["dataset"],
                    backend=args["deploy_backend"],
                    name=args["served_model_name"],
                    gpus=args["serve_gpus"],
                )
            ).set_display_name("deploy")
        with dsl.Else(name="not-good-enough"):
            restricted(not_deployed(reason=best.outputs["reason"]).set_display_name("not deployed"))
        outputs = NamedTuple("Outputs", best_metrics=Metrics, summary=Markdown, decision=str)
        return outputs(
            best_metrics=best.outputs["best_metrics"], summary=best.outputs["summary"], decision=best.outputs["reason"]
        )

    return sweep_pipeline


sweep_pipeline = build()
