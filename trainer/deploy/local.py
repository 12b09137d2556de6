"""deploy_backend=local: vLLM on loopback from the store's downloaded copies of the model and adapters (run_local),
trainer.serving.local's server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from trainer.chat.types import Message
from trainer.deploy.base import Deployed, ServeBackend, ServeSpec
from trainer.serving import local


@dataclass
class LocalBackend(ServeBackend):
    """vLLM on loopback from the store's copies of the model and adapters (run_local)."""

    on_cluster: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.store is None:
            raise ValueError("the local backend serves downloaded copies: it needs the store")

    def build(self, spec: ServeSpec) -> list:
        return []  # a process on this machine: no objects to render

    def deploy(
        self,
        spec: ServeSpec,
        messages: list[Message],
        tools: list | None = None,
        client_configuration: Any = None,
        poll_s: float = 5.0,
    ) -> Deployed:
        adapters = {n: str(self.store.get_tree(uri)) for n, uri in spec.adapters.items()}
        out = Deployed.from_dict(
            local.deploy_local(
                self.store.get_tree(spec.model_uri),
                spec.name,
                messages,
                tools,
                lora_modules=adapters,
                keep_serving=self.keep_serving,
            )
        )
        out.stopped = out.pgid is None  # not kept: the server stopped after its smoke test
        return out
