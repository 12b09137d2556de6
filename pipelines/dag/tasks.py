"""What both pipelines' tasks share: the pod's security and S3 settings, GPUs and placement, the pipeline's own
arguments a component takes (`inputs_for`), the delivery tasks, and the pipelines' signatures and KFP UI parameter
descriptions from the parameter table (`table_parameters`)."""

import inspect

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


def on_eval_gpus(task: dsl.PipelineTask, args: dict) -> dsl.PipelineTask:
    """`on_gpus` with the pipeline's eval_gpus, eval_accelerator_type, eval_node_selector and eval_tolerations: the
    evaluate, evaluate-base and merge steps' placement."""
    keys = ("eval_gpus", "eval_accelerator_type", "eval_node_selector", "eval_tolerations")
    return on_gpus(task, *(args[k] for k in keys))


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


def table_parameters(pipeline: str):
    """A pipeline's body, `body(args)`, as the function dsl.pipeline compiles: its signature is `pipeline`'s
    parameters from trainer.config.params (name, type, default, in the table's order) and its docstring's Args
    section their help (the KFP UI's descriptions of the run parameters). KFP calls it with one value (a pipeline
    channel) per parameter; `body` gets them by name, `args`, and passes each component the ones it takes
    (`inputs_for`)."""

    def apply(body):
        shape = params.signature(pipeline, inspect.signature(body).return_annotation)

        def pipeline_func(*values, **named):
            bound = shape.bind(*values, **named)
            bound.apply_defaults()
            return body(dict(bound.arguments))

        pipeline_func.__signature__ = shape  # type: ignore[attr-defined]  # what inspect.signature (KFP) reads
        pipeline_func.__name__, pipeline_func.__qualname__ = body.__name__, body.__qualname__
        pipeline_func.__module__ = body.__module__
        pipeline_func.__doc__ = params.docstring(pipeline, (body.__doc__ or "").split("Args:")[0])
        return pipeline_func

    return apply
