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


LAUNCHERS = ("local", "kubernetes")


def cluster_spec(settings: dict | None, nodes: int, procs_per_node: int):
    """A ClusterSpec from a plain dict (pipeline parameters); unknown keys are an error."""
    import dataclasses

    from trainer.cluster import ClusterSpec

    known = {f.name for f in dataclasses.fields(ClusterSpec)}
    unknown = sorted(set(settings or {}) - known)
    if unknown:
        raise UserError(f"unknown cluster setting(s) {unknown}; known: {sorted(known)}")
    return ClusterSpec(**{**(settings or {}), "nodes": nodes, "procs_per_node": procs_per_node})


def cluster_from_params(params: dict) -> "ClusterSpec":  # noqa: F821
    """The ClusterSpec that a full set of pipeline parameters describes."""
    return cluster_spec({"namespace": params["namespace"], "accelerator_resource": params["accelerator_resource"],
                         "node_selector": params["node_selector"], "tolerations": params["tolerations"],
                         "queue": params["kueue_queue"], "cleanup": params["cleanup"],
                         "wait_timeout_s": params["wait_timeout_s"], "backoff_limit": max(params["max_restarts"], 0)},
                        max(params["nodes"], 1), max(params["procs_per_node"], 1))


def run_training(cfg, launcher: str, nodes: int, procs_per_node: int, store, cluster: dict | None = None,
                 run_id: str = "", max_restarts: int = 0) -> dict:
    """Validate everything, launch the job, and return the result rank 0 wrote to the bucket."""
    from trainer.errors import collect

    problems = cfg.problems()
    if launcher not in LAUNCHERS:
        problems.append(f"launcher must be one of {LAUNCHERS}, got {launcher!r}")
    if nodes < 1 or procs_per_node < 1:
        problems.append(f"nodes and procs_per_node must be >= 1, got {nodes} and {procs_per_node}")
    if max_restarts < 0:
        problems.append(f"max_restarts must be >= 0, got {max_restarts}")
    spec = cluster_spec({**(cluster or {}), "backoff_limit": max(max_restarts, 0)}, max(nodes, 1),
                        max(procs_per_node, 1)) if launcher == "kubernetes" else None
    problems += spec.problems() if spec else []
    collect(problems, what="invalid training launch")
    if spec is not None:
        from trainer.cluster import KubernetesLauncher, job_name

        KubernetesLauncher(spec).run(cfg.to_args(), job_name(run_id or cfg.output_prefix.rsplit("/", 1)[-1]))
    else:
        LocalLauncher(nnodes=nodes, nproc_per_node=procs_per_node, max_restarts=max_restarts).run(cfg.to_args())
    return store.get_json(f"{cfg.output_prefix}/result.json")
