"""deploy: serve the merged model (or base + adapter side by side) behind vLLM's OpenAI API and
smoke-test it with a tool request."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from trainer.core import settings


# The eval image (vLLM on the project): deploy_backend=local serves with its vLLM, in the step's own container.
@dsl.component(base_image=settings.get("EVAL_IMAGE"), install_kfp_package=False)
def deploy(
    model: Input[Model],
    dataset: Input[Dataset],
    smoke: Output[Metrics],
    base_model: Input[Model] = None,
    adapter: Input[Model] = None,
    serve_adapters: bool = False,
    backend: str = "local",
    keep_serving: bool = False,
    name: str = "llm-finetune",
    gpus: int = 1,
    namespace: str = "",
    accelerator_resource: str = "nvidia.com/gpu",
    node_selector: dict = {},
    tolerations: list = [],
    vllm_image: str = "",
    kueue_queue: str = "",
) -> NamedTuple("Outputs", endpoint=str, smoke_ok=bool):
    """Serve with vLLM (local: on loopback; kubernetes: Deployment + Service named `name`; kserve:
    InferenceService `name` on the project's vLLM ServingRuntime) as
    model `name`; with serve_adapters, the base model as `name`-base and the LoRA adapter as
    `name` side by side instead of the merged model. Then one tool request per served name from
    the first eval row that expects a tool call: smoke_ok only when every answer is a
    well-formed OpenAI tool call (metrics smoke_ok, smoke_server_ok, smoke_latency_s, vllm_ready_s).
    A server that breaks the OpenAI protocol fails the step; a model whose answer is unusable
    (undertrained) leaves it green with smoke_ok 0 and a WARNING line (trainer.serving.client.smoke_outcome)."""
    from collections import namedtuple

    from components.artifacts import read_uri
    from trainer import deploy
    from trainer.core.errors import UserError, exit_on_user_error
    from trainer.core.storage import Store
    from trainer.deploy.base import ServeSpec
    from trainer.launch import cluster_from_params

    with exit_on_user_error():
        if serve_adapters and (base_model is None or adapter is None):
            raise UserError("serve_adapters=true needs the base_model and adapter inputs wired to deploy")
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
        # serve_adapters: the base as `name`-base and the adapter as `name`; else the merged model as `name`
        spec = ServeSpec(
            name=f"{name}-base" if serve_adapters else name,
            model_uri=read_uri(base_model) if serve_adapters else read_uri(model),
            gpus=gpus,
            cluster=placement,
            adapters={name: read_uri(adapter)} if serve_adapters else {},
            vllm_image=vllm_image,
        )
        out, outcome = deploy.smoke_checked(
            backend, spec, store, store.get_tree(read_uri(dataset)) / "eval.jsonl", keep_serving=keep_serving
        )
    for key, value in deploy.smoke_metrics(out, outcome).items():
        smoke.log_metric(key, value)
    smoke.metadata.update(
        endpoint=out.endpoint, served_names=out.names, reason=out.reason, still_serving=not out.stopped
    )
    for n, r in out.results.items():
        smoke.metadata[f"reply_{n}"] = r["reply"][:300]
        print(f"  {n}: {'ok' if r['ok'] else 'FAILED: ' + r['reason']} in {r['latency_s']:.2f}s: {r['reply'][:160]}")
    stopped = out.stopped  # its URL would mislead: say it is gone
    print(
        f"{'served at (now stopped)' if stopped else 'endpoint'} {out.endpoint} ({', '.join(out.names)}): "
        + ("smoke-tested" if outcome["smoke_ok"] else f"smoke test FAILED: {out.reason}")
    )
    deploy.smoke_end(out, outcome, "deploy")
    return namedtuple("Outputs", ["endpoint", "smoke_ok"])(out.endpoint, outcome["smoke_ok"])
