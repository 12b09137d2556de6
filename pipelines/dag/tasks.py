"""What both pipelines' tasks share: the pod's security and S3 settings, GPUs and placement, the pipeline's own
arguments a component takes (`inputs_for`), the delivery tasks, and the KFP UI's parameter descriptions."""

from kfp import dsl, kubernetes

from components.deliver_dataset import deliver_dataset
from components.deliver_model import deliver_model
from trainer.config import params
from trainer.core import settings

PIPELINE_NAME = "llm-finetune"


def restricted(task: dsl.PipelineTask) -> dsl.PipelineTask:
    """Restricted Pod Security for a KFP task's pod: non-root as the project image's user (KFP
    2.17's compiler adds no privilege escalation, all capabilities dropped, RuntimeDefault seccomp)."""
    return kubernetes.set_security_context(task, run_as_user=1000, run_as_group=1000, run_as_non_root=True)


def with_s3(task: dsl.PipelineTask) -> dsl.PipelineTask:
    """S3 credentials from the cluster Secret and the endpoint from an optional ConfigMap
    (kfp.local ignores both; run_local sets the environment itself); restricted Pod Security."""
    restricted(task)
    kubernetes.use_secret_as_env(
        task,
        secret_name=settings.get("S3_SECRET_NAME"),
        secret_key_to_env={"accesskey": "AWS_ACCESS_KEY_ID", "secretkey": "AWS_SECRET_ACCESS_KEY"},
    )
    kubernetes.use_config_map_as_env(
        task,
        config_map_name=settings.get("CONFIG_MAP_NAME"),
        config_map_key_to_env={"S3_ENDPOINT": "S3_ENDPOINT", "S3_BUCKET": "S3_BUCKET"},
        optional=True,
    )
    return task


def on_gpus(task: dsl.PipelineTask, gpus, accelerator_type, node_selector, tolerations) -> dsl.PipelineTask:
    """Run `task` on `gpus` accelerators of `accelerator_type` on matching nodes (all pipeline
    parameters: KFP 2.17 resolves them at run time; 0 GPUs leaves the task on CPU)."""
    task.set_accelerator_type(accelerator_type).set_accelerator_limit(gpus)
    # KFP 2.17 records these two only as placeholders: inside a ParallelFor or If (the sweep) the
    # sub-DAG would not receive them ("Parent pipeline input argument ... not found"). kfp-kubernetes
    # registers its own channels the same way.
    channels = [c for c in (gpus, accelerator_type) if isinstance(c, dsl.pipeline_channel.PipelineChannel)]
    task.register_pipeline_channels(channels)
    kubernetes.add_node_selector_json(task, node_selector)
    kubernetes.add_toleration_json(task, tolerations)
    return task


def inputs_for(component, args: dict) -> dict:
    """The pipeline's own arguments that `component` takes, by name: calls built from the one
    list of names in the pipeline's signature (tests check validate-params takes them all)."""
    return {name: value for name, value in args.items() if name in component.component_spec.inputs}


def deliver_inputs(args: dict, after: dsl.PipelineTask | None = None) -> tuple[dsl.PipelineTask, dsl.PipelineTask]:
    """The deliver-model and deliver-dataset tasks from the pipeline's own arguments (HF token from an optional
    Secret)."""
    tasks = []
    for task in (
        deliver_model(
            source=args["model_source"], revision=args["model_revision"], chat_template=args["chat_template"]
        ).set_display_name("deliver model"),
        deliver_dataset(
            source=args["dataset_source"], revision=args["dataset_revision"], **inputs_for(deliver_dataset, args)
        ).set_display_name("deliver dataset"),
    ):
        kubernetes.use_secret_as_env(
            task, secret_name=settings.get("HF_SECRET_NAME"), secret_key_to_env={"token": "HF_TOKEN"}, optional=True
        )
        tasks.append(with_s3(task.after(after) if after is not None else task))
    return tasks[0], tasks[1]


def documented(pipeline: str):
    """The function's docstring with the Args section of `pipeline`'s parameters from trainer.config.params,
    before dsl.pipeline reads it (the KFP UI's descriptions of the run parameters)."""

    def apply(func):
        func.__doc__ = params.docstring(pipeline, func.__doc__.split("Args:")[0])
        return func

    return apply
