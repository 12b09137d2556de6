"""The fine-tuning pipeline: deliver -> finetune -> evaluate -> merge -> deploy.

Run locally:  python -m pipelines.run_local [--param max_steps=100 ...]
Compile:      python -m pipelines.compile   (writes compiled/finetune.yaml)

This module only wires tasks: no I/O, cluster look-ups or random names at compile time.
The run-unique training prefix comes from the KFP run id placeholder at run time, and
credentials come from Kubernetes Secrets (names in trainer.core.settings), never parameters.
"""

from typing import NamedTuple

from kfp import dsl, kubernetes
from kfp.dsl import Metrics, Model

from components.deliver_bfcl import deliver_bfcl
from components.deploy import deploy
from components.evaluate import evaluate
from components.finetune import finetune
from components.merge_lora import merge_lora
from components.not_deployed import not_deployed
from components.register import register
from components.validate_params import validate_params
from pipelines.dag.tasks import (
    PIPELINE_NAME,
    deliver_inputs,
    inputs_for,
    on_eval_gpus,
    restricted,
    table_parameters,
    with_s3,
)
from trainer.core import settings


@dsl.pipeline(
    name=PIPELINE_NAME,
    description="Fine-tune a Hugging Face model with LoRA, evaluate base vs "
    "tuned, merge, and serve it behind an OpenAI-compatible API.",
)
@table_parameters("finetune")
def finetune_pipeline(args: dict) -> NamedTuple(
    "Outputs", eval_metrics=Metrics, train_metrics=Metrics, merged_model=Model, endpoint=str
):
    """Defaults run the built-in tiny model and dataset (offline, about a minute on 2 CPU cores).

    For a pretrained model set lora_train_embeddings=False and a learning rate near 2e-4. A real model on a laptop
    CPU (README: "Fine-tune a real model on a laptop"): model_source=<SmolLM2-135M-Instruct .gguf>
    chat_template=chatml-tools lora_train_embeddings=false nodes=1 learning_rate=1e-3 max_steps=60
    batch_tokens=2200 max_seq_len=640 lora_r=16 lora_alpha=32.
    On a cluster set launcher=trainjob (or pytorchjob) and deploy_backend=kubernetes (or kserve); `nodes` x
    `procs_per_node` (= GPUs per node) processes train. Every parameter is checked by the first
    step (validate-params) before anything is downloaded or started.

    Args: from trainer.config.params (one table for every parameter's name, type, default and help): `args`.
    """
    # with S3: s3:// values are checked against the run's bucket (one HEAD each) before anything is delivered
    checked = with_s3(validate_params(**inputs_for(validate_params, args)).set_display_name("validate parameters"))
    checked.set_caching_options(False)  # local files it reads may change between runs
    model, data = deliver_inputs(args, after=checked)
    # BFCL's data, when scored, delivered before training: a dataset holding its questions is refused here.
    bfcl = with_s3(
        deliver_bfcl(source=args["bfcl_source"], eval_suites=args["eval_suites"], dataset=data.outputs["dataset"])
    )
    bfcl.set_display_name("deliver BFCL")
    train = (
        with_s3(
            finetune(
                **inputs_for(finetune, args),
                base_model=model.outputs["model"],
                dataset=data.outputs["dataset"],
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            )
        )
        .set_display_name("fine-tune")
        .after(bfcl)
    )
    scores = with_s3(
        evaluate(
            **inputs_for(evaluate, args),
            base_model=model.outputs["model"],
            tuned_model=train.outputs["adapter"],
            dataset=data.outputs["dataset"],
            max_rows=args["eval_max_rows"],
            bfcl=bfcl.outputs["bfcl"],
        )
    ).set_display_name("evaluate")
    merged = with_s3(
        merge_lora(
            base_model=model.outputs["model"], adapter=train.outputs["adapter"], scale=scores.outputs["merge_scale"]
        )
    )
    merged.set_display_name("merge LoRA")
    for task in (scores, merged):
        on_eval_gpus(task, args)
    # The promotion gate (min_fc_accuracy, min_gain): deploy and register only a model that passes it;
    # otherwise the run ends green with the evaluate step's "not promoted: ..." line and no endpoint.
    with dsl.If(scores.outputs["promoted"] == True, name="promoted"):  # noqa: E712 - a KFP condition
        served = with_s3(
            deploy(
                **inputs_for(deploy, args),
                model=merged.outputs["merged"],
                dataset=data.outputs["dataset"],
                base_model=model.outputs["model"],
                adapter=train.outputs["adapter"],
                backend=args["deploy_backend"],
                name=args["served_model_name"],
                gpus=args["serve_gpus"],
            )
        ).set_display_name("deploy")
        with dsl.If(args["registry_address"] != "", name="registry-set"):
            registered = register(
                merged=merged.outputs["merged"],
                adapter=train.outputs["adapter"],
                base_model=model.outputs["model"],
                dataset=data.outputs["dataset"],
                train_metrics=train.outputs["metrics"],
                eval_metrics=scores.outputs["metrics"],
                registry_address=args["registry_address"],
                model_name=args["served_model_name"],
                run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            )
            kubernetes.use_secret_as_env(
                restricted(registered.set_display_name("register model")),
                secret_name=settings.get("REGISTRY_SECRET_NAME"),
                secret_key_to_env={"token": "REGISTRY_TOKEN"},
                optional=True,
            )
    with dsl.Else(name="not-promoted"):
        skipped = restricted(not_deployed(reason=scores.outputs["reason"]).set_display_name("not promoted"))
    outputs = NamedTuple("Outputs", eval_metrics=Metrics, train_metrics=Metrics, merged_model=Model, endpoint=str)
    return outputs(
        eval_metrics=scores.outputs["metrics"],
        train_metrics=train.outputs["metrics"],
        merged_model=merged.outputs["merged"],
        endpoint=dsl.OneOf(served.outputs["endpoint"], skipped.outputs["Output"]),
    )
