"""Launchers start the distributed training job; the finetune component picks one by name (`launcher`, the one
chooser, from the `LAUNCHERS` table).

Every launcher is a `trainer.launch.base.Launcher`: `run(train_args, name)` runs the job to completion or raises
UserError naming what failed. One module per backend: local (torchrun nodes on this machine), pytorchjob (a
Kubeflow PyTorchJob; its old name `kubernetes`) and trainjob (a Kubeflow Trainer TrainJob); `run_training` takes a
name or any object with that method (a test's fake). What the cluster ones share (pod specs, the API calls around
a job) is trainer.k8s's.
"""

from __future__ import annotations

import dataclasses

from trainer import parity
from trainer.core.errors import UserError, collect
from trainer.k8s.podspec import ClusterSpec, job_name
from trainer.launch.base import Launcher
from trainer.launch.local import LocalLauncher
from trainer.launch.pytorchjob import PyTorchJobLauncher
from trainer.launch.trainjob import TrainJobLauncher

LAUNCHERS: dict[str, type[Launcher]] = {
    "local": LocalLauncher,
    "pytorchjob": PyTorchJobLauncher,
    "kubernetes": PyTorchJobLauncher,  # pytorchjob's old name
    "trainjob": TrainJobLauncher,
}
CLUSTER_LAUNCHERS = tuple(name for name, kind in LAUNCHERS.items() if kind.on_cluster)


# Pipeline parameter -> ClusterSpec field, for the settings whose names differ.
_RENAMED = {"kueue_queue": "queue", "max_restarts": "backoff_limit"}
_CLUSTER_PARAMS = (
    "namespace",
    "nodes",
    "procs_per_node",
    "accelerator_resource",
    "node_selector",
    "tolerations",
    "kueue_queue",
    "cleanup",
    "wait_timeout_s",
    "max_restarts",
    "training_runtime",
)


def cluster_from_params(params: dict) -> ClusterSpec:
    """The ClusterSpec that pipeline parameters describe: the one place that maps their names
    to ClusterSpec fields. Missing settings keep ClusterSpec's defaults; other keys are ignored."""
    return ClusterSpec(**{_RENAMED.get(k, k): params[k] for k in _CLUSTER_PARAMS if k in params})


def launcher(name: str, spec: ClusterSpec, stall_timeout_s: float = 0.0) -> Launcher:
    """The launcher called `name` (LAUNCHERS) for `spec`'s topology and restart budget: the one place that chooses.
    The kubernetes and Kubeflow clients are imported only when a cluster launcher runs."""
    if name not in LAUNCHERS:
        raise UserError(f"launcher must be one of {tuple(LAUNCHERS)}, got {name!r}")
    # The watchdog reads rank 0's output (the job's streamed log on a cluster); the caller's spec stays as it is.
    return LAUNCHERS[name].from_spec(dataclasses.replace(spec, stall_timeout_s=stall_timeout_s))


def run_training(cfg, launch_with: str | Launcher, spec: ClusterSpec, store, run_id: str = "") -> dict:
    """Validate everything, launch the job, and return the result rank 0 wrote to the bucket.

    `launch_with`: a launcher's name (LAUNCHERS, chosen by `launcher`) or a `Launcher` itself (a test's fake).
    `spec` (a ClusterSpec) gives the topology and restart budget for every launcher; its Kubernetes settings matter
    only to the cluster ones.
    """
    problems = cfg.problems() + spec.topology_problems()
    if launch_with in CLUSTER_LAUNCHERS:
        problems += spec.kubernetes_problems()
    if isinstance(launch_with, str) and launch_with not in LAUNCHERS:
        problems.append(f"launcher must be one of {tuple(LAUNCHERS)}, got {launch_with!r}")
    collect(problems, what="invalid training launch")
    # The delivered template against the delivered rows, for every dataset kind (local files were
    # also checked at validate-params): a template that drops tools or calls never reaches training.
    parity.check_delivered(store, cfg.model_uri, cfg.dataset_uri, cfg.output_prefix)
    job = launcher(launch_with, spec, cfg.stall_timeout_s) if isinstance(launch_with, str) else launch_with
    job.run(cfg.to_args(), job_name(run_id or cfg.output_prefix.rsplit("/", 1)[-1]))
    return store.get_json(f"{cfg.output_prefix}/result.json")
