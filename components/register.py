"""register: the merged model (and its adapter) as a new version in the Kubeflow Model Registry,
with the lineage and metrics to compare and trace runs (trainer.store.registry)."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model

from trainer.core import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
def register(
    merged: Input[Model],
    adapter: Input[Model],
    base_model: Input[Model],
    dataset: Input[Dataset],
    train_metrics: Input[Metrics],
    eval_metrics: Input[Metrics],
    registry_address: str,
    model_name: str,
    run_name: str,
    run_id: str,
    author: str = "llm-finetune pipeline",
) -> NamedTuple("Outputs", version=str):
    """Register version `run_name` of `model_name` (the token, when needed, comes from the
    REGISTRY_TOKEN env var, set from a Secret). A retried task finds its version and changes nothing."""
    from collections import namedtuple

    from components.artifacts import read_uri
    from trainer.core.errors import exit_on_user_error
    from trainer.store.registry import Registration, lineage, register as register_version

    adapter_uri = read_uri(adapter)
    with exit_on_user_error():
        reg = Registration(
            address=registry_address,
            name=model_name,
            version=run_name,
            run_id=run_id,
            model_uri=read_uri(merged),
            adapter_uri=adapter_uri if adapter_uri != read_uri(merged) else "",
            author=author,
            metadata=lineage(
                base_model.metadata.get("source", read_uri(base_model)),
                base_model.metadata.get("revision", ""),
                read_uri(dataset),
                dict(train_metrics.metadata),
                dict(eval_metrics.metadata),
                run_id,
                method=adapter.metadata.get("method", ""),
            ),
        )
        out = register_version(reg)
    print(f"{out['action']}: {model_name} version {out['version']} (id {out['version_id']}) at {registry_address}")
    return namedtuple("Outputs", ["version"])(out["version"])
