"""deploy: serve the merged model behind an OpenAI-compatible API and smoke-test it."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from trainer import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
def deploy(
    model: Input[Model],
    dataset: Input[Dataset],
    smoke: Output[Metrics],
    backend: str = "local",
    keep_serving: bool = False,
    name: str = "llm-finetune",
    gpus: int = 1,
    namespace: str = "",
    accelerator_resource: str = "nvidia.com/gpu",
    node_selector: dict = {},
    tolerations: list = [],
) -> NamedTuple("Outputs", endpoint=str):
    """Serve (local: `transformers serve` on loopback; kubernetes: vLLM Deployment + Service named
    `name`), send one chat completion built from the first eval row, log its latency, and output
    the endpoint URL. Cluster settings as in trainer.k8s.common.ClusterSpec."""
    import json
    from collections import namedtuple

    from components.artifacts import read_uri
    from trainer.errors import UserError, exit_on_user_error
    from trainer.storage import Store

    with exit_on_user_error():
        if backend not in ("local", "kubernetes", "kserve"):
            raise UserError(f"deploy backend must be 'local', 'kubernetes' or 'kserve', got {backend!r}")
        store = Store.from_env()
        with open(store.get_tree(read_uri(dataset)) / "eval.jsonl") as f:
            row = json.loads(f.readline())
        if backend in ("kubernetes", "kserve"):
            from trainer.k8s import kserve, vllm
            from trainer.launch import cluster_from_params

            placement = cluster_from_params(dict(namespace=namespace, accelerator_resource=accelerator_resource,
                                                 node_selector=node_selector, tolerations=tolerations))
            spec = vllm.ServeSpec(name=name, model_uri=read_uri(model), gpus=gpus, cluster=placement)
            out = {**(kserve if backend == "kserve" else vllm).deploy(spec, row["messages"][:-1], row.get("tools")),
                   "pid": None}
        else:
            from trainer.serve import deploy_local

            out = deploy_local(store.get_tree(read_uri(model)), row["messages"][:-1], row.get("tools"),
                               keep_serving=keep_serving)
    smoke.log_metric("smoke_latency_s", out["latency_s"])
    smoke.metadata["reply"] = out["reply"][:500]
    print(f"endpoint {out['endpoint']} answered in {out['latency_s']:.2f}s: {out['reply'][:200]}")
    if out["pid"]:
        print(f"still serving (pid {out['pid']}); stop with: kill {out['pid']}")
    return namedtuple("Outputs", ["endpoint"])(out["endpoint"])
