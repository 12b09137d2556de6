"""The launcher contract: what every backend that runs a training job implements (`Launcher`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from trainer.k8s.podspec import ClusterSpec


class Launcher(ABC):
    """What runs a training job: to completion, or a UserError naming what failed (the failed node, the job's
    conditions). One module per backend (local, pytorchjob, trainjob); trainer.launch.LAUNCHERS names them."""

    on_cluster: ClassVar[bool] = True  # it creates Kubernetes objects: the cluster settings must pass the API rules

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> Launcher:
        """The launcher for `spec`'s topology, restart budget and stall limit (a cluster one keeps the spec)."""
        return cls(spec)  # type: ignore[call-arg]  # the cluster launchers are dataclasses over the spec

    def build(self, train_args: list[str], name: str) -> list:
        """The objects `run` would create, not yet sent anywhere (dry runs, submit's rendering); a local job has none."""
        return []

    @abstractmethod
    def run(self, train_args: list[str], name: str) -> None:
        """Run `python -m trainer train <train_args>` on every node to completion. `name`: the job's name where the
        backend names one (a cluster object); local runs name none."""
