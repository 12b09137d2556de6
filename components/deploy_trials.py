"""deploy_trials: every sweep trial's LoRA adapter served side by side on one base model, so the
trials (and the base) can be chatted with and compared through one OpenAI endpoint by `model`."""

from typing import List, NamedTuple

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from trainer.core import settings


# The eval image (vLLM on the project): deploy_backend=local serves with its vLLM, in the step's own container.
@dsl.component(base_image=settings.get("EVAL_IMAGE"), install_kfp_package=False)
def deploy_trials(
    base_model: Input[Model],
    adapters: Input[List[Model]],
    dataset: Input[Dataset],
    smoke: Output[Metrics],
    enabled: bool = False,
    backend: str = "local",
    keep_serving: bool = False,
    name: str = "llm-finetune",
    gpus: int = 1,
    namespace: str = "",
    accelerator_resource: str = "nvidia.com/gpu",
    node_selector: dict = {},
    tolerations: list = [],
    kueue_queue: str = "",
    vllm_image: str = "",
) -> NamedTuple("Outputs", endpoint=str, models=list):
    """Serve the base model as `name`-base and trial i's adapter as `name`-trial-i (vLLM
    --enable-lora; locally, as a vLLM Deployment, or as an InferenceService), smoke-test each
    with the deploy step's verdict (a broken server fails the step, an unusable reply warns).
    Does nothing unless `enabled` (the sweep's deploy_all_trials). `keep_serving`: the local server
    stays up after the step, as the deploy step's does, to compare the trials through it."""
    from collections import namedtuple

    if not enabled:
        print("deploy_all_trials is false: only the winner is deployed")
        return namedtuple("Outputs", ["endpoint", "models"])("", [])

    from components.artifacts import read_uri
    from trainer import deploy
    from trainer.core.errors import exit_on_user_error
    from trainer.core.storage import Store
    from trainer.deploy.base import ServeSpec, trial_adapters
    from trainer.launch import cluster_from_params

    with exit_on_user_error():
        store = Store.from_env()
        placement = cluster_from_params(
            dict(
                namespace=namespace,
                accelerator_resource=accelerator_resource,
                node_selector=node_selector,
                tolerations=tolerations,
                kueue_queue=kueue_queue,
            )
        )
        spec = ServeSpec(
            name=f"{name}-base",
            model_uri=read_uri(base_model),
            gpus=gpus,
            cluster=placement,
            adapters=trial_adapters(name, [read_uri(a) for a in adapters]),
            vllm_image=vllm_image,
        )
        keep = keep_serving
        if keep and not deploy.BACKENDS[backend].on_cluster:
            import torch

            if torch.cuda.is_available():  # vLLM takes 90% of the GPU: the winner's merge and server need it next
                keep = False
                print(
                    "WARNING: keep_serving: the trials' server is stopped after its smoke test all the same: on "
                    "this machine's GPU it would hold the memory the winner's merge and server need; compare the "
                    "trials with `python -m trainer serve BASE_DIR --lora NAME=ADAPTER_DIR ...` after the run",
                    flush=True,
                )
        out, outcome = deploy.smoke_checked(
            backend, spec, store, store.get_tree(read_uri(dataset)) / "eval.jsonl", keep_serving=keep
        )  # the same verdict as the deploy step's
    for key, value in deploy.smoke_metrics(out, outcome).items():
        smoke.log_metric(key, value)
    stopped = out.stopped  # its URL would mislead: say it is gone
    smoke.metadata.update(endpoint=out.endpoint, served_names=out.names, reason=out.reason, still_serving=not stopped)
    print(
        f"{'served at (now stopped)' if stopped else 'endpoint'} {out.endpoint}: {', '.join(out.names)}"
        + ("" if outcome["smoke_ok"] else f"; smoke test FAILED: {out.reason}")
    )
    deploy.smoke_end(out, outcome, "deploy all trials")
    return namedtuple("Outputs", ["endpoint", "models"])("" if stopped else out.endpoint, out.names)
