"""The sweep pipeline: several LoRA trials in parallel, the best one merged and deployed only
when it beats the base model by a margin.

Run locally:  python -m pipelines.run_local --pipeline sweep [--parallelism 2] [--param trials='[...]']
Compile:      python -m pipelines.compile   (writes compiled/sweep.yaml with parallelism 2)

validate -> deliver model + dataset -> ParallelFor(trials): finetune + evaluate
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
from components.evaluate import evaluate
from components.finetune import finetune
from components.merge_lora import merge_lora
from components.not_deployed import not_deployed
from components.pick_best import pick_best
from pipelines.finetune import deliver_inputs, with_s3

SWEEP_NAME = "llm-finetune-sweep"
DEFAULT_TRIALS = [
    {"lora_r": 4, "lora_alpha": 8, "learning_rate": 0.003},
    {"lora_r": 16, "lora_alpha": 32, "learning_rate": 0.003},
    {"lora_r": 64, "lora_alpha": 64, "learning_rate": 0.001},
]


def build(parallelism: int = 2):
    """The sweep pipeline with `parallelism` trials running at once."""

    @dsl.pipeline(name=SWEEP_NAME, description="LoRA hyperparameter sweep: parallel trials, the best deployed "
                  "only if it beats the base model by min_gain.")
    def sweep_pipeline(
        trials: list = DEFAULT_TRIALS,
        select_metric: str = "fc_accuracy",
        min_gain: float = 0.1,
        model_source: str = "builtin:tiny-llama",
        model_revision: str = "",
        dataset_source: str = "builtin:function-calling",
        dataset_revision: str = "",
        eval_fraction: float = 0.1,
        launcher: str = "local",
        nodes: int = 1,
        procs_per_node: int = 1,
        lora_dropout: float = 0.0,
        lora_train_embeddings: bool = True,
        max_steps: int = 300,
        batch_tokens: int = 1024,
        max_seq_len: int = 512,
        seed: int = 0,
        max_restarts: int = 2,
        eval_max_rows: int = 100,
        deploy_backend: str = "local",
        keep_serving: bool = False,
        served_model_name: str = "llm-finetune",
    ) -> NamedTuple("Outputs", best_metrics=Metrics, summary=Markdown, decision=str):
        model, data = deliver_inputs(model_source, model_revision, dataset_source, dataset_revision, eval_fraction,
                                     seed)
        with dsl.ParallelFor(trials, parallelism=parallelism) as trial:
            train = with_s3(finetune(
                base_model=model.outputs["model"], dataset=data.outputs["dataset"],
                run_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER, launcher=launcher, nodes=nodes,
                procs_per_node=procs_per_node, lora_r=trial.lora_r, lora_alpha=trial.lora_alpha,
                learning_rate=trial.learning_rate, lora_dropout=lora_dropout,
                lora_train_embeddings=lora_train_embeddings, max_steps=max_steps, batch_tokens=batch_tokens,
                max_seq_len=max_seq_len, seed=seed, max_restarts=max_restarts)).set_display_name("trial: fine-tune")
            scores = with_s3(evaluate(base_model=model.outputs["model"], tuned_model=train.outputs["adapter"],
                                      dataset=data.outputs["dataset"], max_rows=eval_max_rows,
                                      max_seq_len=max_seq_len)).set_display_name("trial: evaluate")
        best = pick_best(trials=trials, trial_metrics=dsl.Collected(scores.outputs["metrics"]),
                         adapters=dsl.Collected(train.outputs["adapter"]), select_metric=select_metric,
                         min_gain=min_gain).set_display_name("pick best")
        with dsl.If(best.outputs["deploy"] == True, name="beats-base"):  # noqa: E712 - a KFP condition
            merged = with_s3(merge_lora(base_model=model.outputs["model"], adapter=best.outputs["best_adapter"]))
            with_s3(deploy(model=merged.outputs["merged"], dataset=data.outputs["dataset"], backend=deploy_backend,
                           keep_serving=keep_serving, name=served_model_name)).set_display_name("deploy")
        with dsl.Else(name="not-good-enough"):
            not_deployed(reason=best.outputs["reason"]).set_display_name("not deployed")
        outputs = NamedTuple("Outputs", best_metrics=Metrics, summary=Markdown, decision=str)
        return outputs(best_metrics=best.outputs["best_metrics"], summary=best.outputs["summary"],
                       decision=best.outputs["reason"])

    return sweep_pipeline


sweep_pipeline = build()
