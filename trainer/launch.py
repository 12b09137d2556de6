"""Launchers start the distributed training job; the finetune component picks one.

The local launcher emulates a PyTorchJob on one machine: it starts one torchrun agent per
"node" with the same PET_* environment the Training Operator injects into each pod
(PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR, PET_MASTER_PORT), all
running the same `torchrun -m trainer train ...` command as the cluster's containers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

from trainer.errors import UserError
from trainer.serve import free_port


def train_command(train_args: list[str]) -> list[str]:
    """The command every node runs; torchrun reads topology from PET_* env vars."""
    return [sys.executable, "-m", "torch.distributed.run", "-m", "trainer", "train", *train_args]


@dataclass
class LocalLauncher:
    """`nnodes` torchrun agents on this machine. When any node fails, every node is stopped and
    the whole job restarts (up to `max_restarts` times) and resumes from its last checkpoint,
    as a PyTorchJob restarts its pods. Restarting the whole job, rather than using torchrun's
    per-agent restarts, avoids restarted workers dialling their peers' stale addresses."""

    nnodes: int = 2
    nproc_per_node: int = 1
    max_restarts: int = 0

    def run(self, train_args: list[str]) -> None:
        """Run the job to completion; raise UserError naming the failed node otherwise."""
        for attempt in range(self.max_restarts + 1):
            failure = self._run_once(train_args)
            if failure is None:
                return
            node, code = failure
            if attempt < self.max_restarts:
                print(f"node {node} exited with status {code}; restarting the job "
                      f"({attempt + 1}/{self.max_restarts})", flush=True)
                continue
            raise UserError(f"training failed on node {node} (exit status {code}); see its log above")

    def _run_once(self, train_args: list[str]) -> tuple[int, int] | None:
        world = self.nnodes * self.nproc_per_node
        port = free_port()
        # No oversubscription: OpenMP threads that outnumber cores spin against each other and
        # can slow training tenfold. FINETUNE_LOCAL_CPUS is this job's share when several run at
        # once (run_local sets it for sweeps).
        cpus = int(os.environ.get("FINETUNE_LOCAL_CPUS") or os.cpu_count() or 1)
        threads = max(1, cpus // world)
        procs = []
        for node in range(self.nnodes):
            env = {**os.environ, "PET_NNODES": str(self.nnodes), "PET_NODE_RANK": str(node),
                   "PET_NPROC_PER_NODE": str(self.nproc_per_node), "PET_MASTER_ADDR": "127.0.0.1",
                   "PET_MASTER_PORT": str(port), "OMP_NUM_THREADS": str(threads)}
            procs.append(subprocess.Popen(train_command(train_args), env=env))
        try:
            while True:
                codes = [p.poll() for p in procs]
                failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    return failed[0]
                if all(c == 0 for c in codes):
                    return None
                time.sleep(0.5)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


# pytorchjob: Training Operator v1 (its first name, kubernetes, still accepted); trainjob: Trainer v2.
LAUNCHERS = ("local", "pytorchjob", "kubernetes", "trainjob")
CLUSTER_LAUNCHERS = ("pytorchjob", "kubernetes", "trainjob")


# Pipeline parameter -> ClusterSpec field, for the settings whose names differ.
_RENAMED = {"kueue_queue": "queue", "max_restarts": "backoff_limit"}
_CLUSTER_PARAMS = ("namespace", "nodes", "procs_per_node", "accelerator_resource", "node_selector", "tolerations",
                   "kueue_queue", "cleanup", "wait_timeout_s", "max_restarts", "training_runtime")


def cluster_from_params(params: dict):
    """The ClusterSpec that pipeline parameters describe: the one place that maps their names
    to ClusterSpec fields. Missing settings keep ClusterSpec's defaults; other keys are ignored."""
    from trainer.k8s.common import ClusterSpec

    return ClusterSpec(**{_RENAMED.get(k, k): params[k] for k in _CLUSTER_PARAMS if k in params})


def run_training(cfg, launcher: str, spec, store, run_id: str = "") -> dict:
    """Validate everything, launch the job, and return the result rank 0 wrote to the bucket.

    `spec` (a ClusterSpec) gives the topology and restart budget for both launchers; its
    Kubernetes settings matter only to the kubernetes one.
    """
    from trainer.errors import collect

    problems = cfg.problems() + spec.topology_problems()
    if launcher in CLUSTER_LAUNCHERS:
        problems += spec.kubernetes_problems()
    if launcher not in LAUNCHERS:
        problems.append(f"launcher must be one of {LAUNCHERS}, got {launcher!r}")
    collect(problems, what="invalid training launch")
    if launcher in CLUSTER_LAUNCHERS:
        from trainer.k8s import launcher_for
        from trainer.k8s.common import job_name

        launcher_for(launcher)(spec).run(cfg.to_args(), job_name(run_id or cfg.output_prefix.rsplit("/", 1)[-1]))
    else:
        LocalLauncher(nnodes=spec.nodes, nproc_per_node=spec.procs_per_node,
                      max_restarts=spec.backoff_limit).run(cfg.to_args())
    return store.get_json(f"{cfg.output_prefix}/result.json")
