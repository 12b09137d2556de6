"""deploy_trials: every sweep trial's LoRA adapter served side by side on one base model, so the
trials (and the base) can be chatted with and compared through one OpenAI endpoint by `model`."""

from typing import List, NamedTuple

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from trainer.core import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
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
    import json
    from collections import namedtuple

    if not enabled:
        print("deploy_all_trials is false: only the winner is deployed")
        return namedtuple("Outputs", ["endpoint", "models"])("", [])

    from components.artifacts import read_uri
    from trainer.core.errors import exit_on_user_error
    from trainer import deploy
    from trainer.k8s.vllm import ServeSpec, trial_adapters
    from trainer.launch import cluster_from_params
    from trainer.serving.client import smoke_outcome, smoke_request
    from trainer.core.storage import Store

    with exit_on_user_error():
        store = Store.from_env()
        with open(store.get_tree(read_uri(dataset)) / "eval.jsonl") as f:
            messages, tools = smoke_request([json.loads(line) for line in f if line.strip()])
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
        if keep and backend == "local":
            import torch

            if torch.cuda.is_available():  # vLLM takes 90% of the GPU: the winner's merge and server need it next
                keep = False
                print(
                    "WARNING: keep_serving: the trials' server is stopped after its smoke test all the same: on "
                    "this machine's GPU it would hold the memory the winner's merge and server need; compare the "
                    "trials with `python -m trainer serve BASE_DIR --lora NAME=ADAPTER_DIR ...` after the run",
                    flush=True,
                )
        out = deploy.deploy(backend, spec, store, messages, tools, keep_serving=keep)
    outcome = smoke_outcome(out.results)  # the same verdict as the deploy step's
    smoke.log_metric("smoke_ok", float(outcome["smoke_ok"]))
    smoke.log_metric("smoke_server_ok", float(outcome["server_ok"]))
    smoke.log_metric("smoke_latency_s", out.latency_s)
    stopped = backend == "local" and not out.pgid  # its URL would mislead: say it is gone
    smoke.metadata.update(endpoint=out.endpoint, served_names=out.names, reason=out.reason, still_serving=not stopped)
    print(
        f"{'served at (now stopped)' if stopped else 'endpoint'} {out.endpoint}: {', '.join(out.names)}"
        + ("" if outcome["smoke_ok"] else f"; smoke test FAILED: {out.reason}")
    )
    if out.pgid:
        print(f"still serving; stop with: kill -- -{out.pgid}  (log: {out.log})")
    if outcome["warning"]:
        print(outcome["warning"], flush=True)
    if outcome["error"]:  # a broken server is no deployment: fail the step
        import sys

        print(f"error: deploy all trials: {outcome['error']}", file=sys.stderr, flush=True)
        sys.exit(1)
    return namedtuple("Outputs", ["endpoint", "models"])("" if stopped else out.endpoint, out.names)
