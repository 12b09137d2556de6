"""The fine-tuning pipeline: deliver -> finetune -> evaluate -> merge -> deploy.

Run locally:  python -m pipelines.run_local [--param max_steps=100 ...]
Compile:      python -m pipelines.compile   (writes compiled/finetune.yaml)

This module only wires tasks: no I/O, cluster look-ups or random names at compile time.
The run-unique training prefix comes from the KFP run id placeholder at run time, and
credentials come from Kubernetes Secrets (names in trainer.settings), never parameters.
"""

from typing import NamedTuple

from kfp import dsl, kubernetes
from kfp.dsl import Metrics, Model

from components.deliver_dataset import deliver_dataset
from components.deliver_model import deliver_model
from components.deploy import deploy
from components.evaluate import evaluate
from components.finetune import finetune
from components.merge_lora import merge_lora
from components.validate_params import validate_params
from trainer import settings

PIPELINE_NAME = "llm-finetune"


def with_s3(task: dsl.PipelineTask) -> dsl.PipelineTask:
    """S3 credentials from the cluster Secret and the endpoint from an optional ConfigMap
    (kfp.local ignores both; run_local sets the environment itself)."""
    kubernetes.use_secret_as_env(task, secret_name=settings.get("S3_SECRET_NAME"),
                                 secret_key_to_env={"accesskey": "AWS_ACCESS_KEY_ID",
                                                    "secretkey": "AWS_SECRET_ACCESS_KEY"})
    kubernetes.use_config_map_as_env(task, config_map_name=settings.get("CONFIG_MAP_NAME"),
                                     config_map_key_to_env={"S3_ENDPOINT": "S3_ENDPOINT", "S3_BUCKET": "S3_BUCKET"},
                                     optional=True)
    return task


def deliver_inputs(model_source, model_revision, dataset_source, dataset_revision, eval_fraction, seed,
                   after: dsl.PipelineTask | None = None) -> tuple[dsl.PipelineTask, dsl.PipelineTask]:
    """The deliver-model and deliver-dataset tasks (HF token from an optional Secret)."""
    tasks = []
    for task in (deliver_model(source=model_source, revision=model_revision).set_display_name("deliver model"),
                 deliver_dataset(source=dataset_source, revision=dataset_revision, eval_fraction=eval_fraction,
                                 seed=seed).set_display_name("deliver dataset")):
        kubernetes.use_secret_as_env(task, secret_name=settings.get("HF_SECRET_NAME"),
                                     secret_key_to_env={"token": "HF_TOKEN"}, optional=True)
        tasks.append(with_s3(task.after(after) if after is not None else task))
    return tasks[0], tasks[1]


@dsl.pipeline(name=PIPELINE_NAME, description="Fine-tune a Hugging Face model with LoRA, evaluate base vs "
              "tuned, merge, and serve it behind an OpenAI-compatible API.")
def finetune_pipeline(
    model_source: str = "builtin:tiny-llama",
    model_revision: str = "",
    dataset_source: str = "builtin:function-calling",
    dataset_revision: str = "",
    eval_fraction: float = 0.1,
    launcher: str = "local",
    nodes: int = 2,
    procs_per_node: int = 1,
    method: str = "lora",
    lora_r: int = 16,
    lora_alpha: int = 32,
    lora_dropout: float = 0.0,
    lora_train_embeddings: bool = True,
    learning_rate: float = 3e-3,
    max_steps: int = 400,
    batch_size: int = 8,
    batch_tokens: int = 1024,
    tokens_per_step: int = 0,
    gradient_checkpointing: bool = False,
    compile: bool = False,
    max_seq_len: int = 512,
    seed: int = 0,
    checkpoint_every: int = 100,
    max_restarts: int = 2,
    eval_max_rows: int = 200,
    deploy_backend: str = "local",
    keep_serving: bool = False,
    served_model_name: str = "llm-finetune",
    serve_gpus: int = 1,
    namespace: str = "",
    accelerator_resource: str = "nvidia.com/gpu",
    node_selector: dict = {},
    tolerations: list = [],
    kueue_queue: str = "",
    cleanup: str = "on-success",
    wait_timeout_s: int = 0,
) -> NamedTuple("Outputs", eval_metrics=Metrics, train_metrics=Metrics, merged_model=Model, endpoint=str):
    """Defaults run the built-in tiny model and dataset (offline, about a minute on 2 CPU cores).

    For a pretrained model set lora_train_embeddings=False and a learning rate near 2e-4.
    On a cluster set launcher=kubernetes and deploy_backend=kubernetes; `nodes` x
    `procs_per_node` (= GPUs per node) processes train, and the cluster parameters
    (namespace, accelerator_resource, node_selector, tolerations, kueue_queue, cleanup,
    wait_timeout_s: 0 = no limit) shape the PyTorchJob and the vLLM Deployment.
    """
    placement = dict(namespace=namespace, accelerator_resource=accelerator_resource, node_selector=node_selector,
                     tolerations=tolerations)
    checked = validate_params(
        model_source=model_source, dataset_source=dataset_source, eval_fraction=eval_fraction, launcher=launcher,
        nodes=nodes, procs_per_node=procs_per_node, method=method, lora_r=lora_r, lora_alpha=lora_alpha,
        lora_dropout=lora_dropout, lora_train_embeddings=lora_train_embeddings, learning_rate=learning_rate,
        max_steps=max_steps, batch_size=batch_size, batch_tokens=batch_tokens, max_seq_len=max_seq_len, seed=seed,
        checkpoint_every=checkpoint_every, max_restarts=max_restarts, eval_max_rows=eval_max_rows,
        deploy_backend=deploy_backend, accelerator_resource=accelerator_resource, tolerations=tolerations,
        cleanup=cleanup, wait_timeout_s=wait_timeout_s).set_display_name("validate parameters")
    checked.set_caching_options(False)  # local files it reads may change between runs
    model, data = deliver_inputs(model_source, model_revision, dataset_source, dataset_revision, eval_fraction, seed,
                                 after=checked)
    train = with_s3(finetune(
        base_model=model.outputs["model"], dataset=data.outputs["dataset"], run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        launcher=launcher, nodes=nodes, procs_per_node=procs_per_node, method=method, lora_r=lora_r,
        lora_alpha=lora_alpha, lora_dropout=lora_dropout, lora_train_embeddings=lora_train_embeddings,
        learning_rate=learning_rate, max_steps=max_steps, batch_size=batch_size, batch_tokens=batch_tokens,
        tokens_per_step=tokens_per_step, gradient_checkpointing=gradient_checkpointing, compile=compile,
        max_seq_len=max_seq_len, seed=seed, checkpoint_every=checkpoint_every, max_restarts=max_restarts, kueue_queue=kueue_queue, cleanup=cleanup,
        wait_timeout_s=wait_timeout_s, **placement,
    )).set_display_name("fine-tune")
    scores = with_s3(evaluate(base_model=model.outputs["model"], tuned_model=train.outputs["adapter"],
                               dataset=data.outputs["dataset"], max_rows=eval_max_rows,
                               max_seq_len=max_seq_len)).set_display_name("evaluate")
    merged = with_s3(merge_lora(base_model=model.outputs["model"], adapter=train.outputs["adapter"]))
    merged.set_display_name("merge LoRA")
    served = with_s3(deploy(model=merged.outputs["merged"], dataset=data.outputs["dataset"],
                             backend=deploy_backend, keep_serving=keep_serving, name=served_model_name,
                             gpus=serve_gpus, **placement)).set_display_name("deploy")
    outputs = NamedTuple("Outputs", eval_metrics=Metrics, train_metrics=Metrics, merged_model=Model, endpoint=str)
    return outputs(eval_metrics=scores.outputs["metrics"], train_metrics=train.outputs["metrics"],
                   merged_model=merged.outputs["merged"], endpoint=served.outputs["endpoint"])
