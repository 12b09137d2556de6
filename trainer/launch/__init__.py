"""Launchers start the distributed training job; the finetune component picks one (`launcher`, the one chooser).

Every launcher is a `Launcher`: `run(train_args, name)` runs the job to completion or raises UserError naming what
failed. local (`LocalLauncher`, below), pytorchjob / kubernetes (trainer.k8s.pytorchjob.PyTorchJobLauncher) and
trainjob (trainer.k8s.trainjob.TrainJobLauncher); `run_training` takes a name or any object with that method.

The local launcher emulates a PyTorchJob on one machine: it starts one torchrun agent per
"node" with the same PET_* environment the Training Operator injects into each pod
(PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR, PET_MASTER_PORT), all
running the same `torchrun -m trainer train ...` command as the cluster's containers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from trainer import parity
from trainer.core import procs as procs_mod
from trainer.core.errors import UserError, collect
from trainer.core.exitcodes import EXIT_TRANSIENT, PERMANENT
from trainer.k8s.podspec import ClusterSpec, job_name
from trainer.serving.local import free_port
from trainer.recipe.torchrun import train_command
from trainer.core.watchdog import Watchdog


class Launcher(Protocol):
    """What runs a training job: to completion, or a UserError naming what failed (the failed node, the job's
    conditions). `name`: the job's name where the backend names one (a cluster object); local runs name none."""

    def run(self, train_args: list[str], name: str) -> None: ...


@dataclass
class LocalLauncher:
    """`nnodes` torchrun agents on this machine. When any node fails, every node is stopped and
    the whole job restarts (up to `max_restarts` times) and resumes from its last checkpoint,
    as a PyTorchJob restarts its pods. Restarting the whole job, rather than using torchrun's
    per-agent restarts, avoids restarted workers dialling their peers' stale addresses.
    Failures that a restart cannot cure (PERMANENT, a stall caught by the progress
    watchdog) end the job at once."""

    nnodes: int = 2
    nproc_per_node: int = 1
    max_restarts: int = 0
    stall_timeout_s: float = 0.0  # > 0: fail when rank 0's progress stops that long (trainer.core.watchdog)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)  # the watchdog's; tests script it

    def run(self, train_args: list[str], name: str = "") -> None:
        """Run the job to completion; raise UserError naming the failed node otherwise."""
        self.devices = node_devices(self.nnodes, self.nproc_per_node, visible_gpus())
        for attempt in range(self.max_restarts + 1):
            failure = self._run_once(train_args)
            if failure is None:
                return
            node, code, stall = failure
            if stall:
                raise UserError(f"training stalled: {stall}")
            if code in PERMANENT:
                raise UserError(
                    f"training failed on node {node} (exit status {code}: {PERMANENT[code]}); "
                    f"not restarted, a restart would fail the same way. See its log above"
                )
            if attempt < self.max_restarts:
                why = " (transient: storage or network)" if code == EXIT_TRANSIENT else ""
                print(
                    f"node {node} exited with status {code}{why}; restarting the job "
                    f"({attempt + 1}/{self.max_restarts})",
                    flush=True,
                )
                continue
            raise UserError(f"training failed on node {node} (exit status {code}); see its log above")

    def _run_once(self, train_args: list[str]) -> tuple[int, int, str | None] | None:
        """None on success, else (node, exit status, stall message or None)."""
        world = self.nnodes * self.nproc_per_node
        port = free_port()
        # No oversubscription: OpenMP threads that outnumber cores spin against each other and
        # can slow training tenfold. FINETUNE_LOCAL_CPUS is this job's share when several run at
        # once (run_local sets it for sweeps).
        cpus = int(os.environ.get("FINETUNE_LOCAL_CPUS") or os.cpu_count() or 1)
        threads = max(1, cpus // world)
        dog = Watchdog(self.stall_timeout_s, clock=self.clock)
        # The job's temporary files (torchrun's torchelastic_* logs, TensorBoard staging, checkpoints on
        # their way up) go to one directory removed with the job, however its processes ended.
        tmp = tempfile.mkdtemp(prefix="finetune-job-")
        procs = []
        for node in range(self.nnodes):
            env = {
                **os.environ,
                "PET_NNODES": str(self.nnodes),
                "PET_NODE_RANK": str(node),
                "PET_NPROC_PER_NODE": str(self.nproc_per_node),
                "PET_MASTER_ADDR": "127.0.0.1",
                "PET_MASTER_PORT": str(port),
                "OMP_NUM_THREADS": str(threads),
                "PYTHONUNBUFFERED": "1",
                **procs_mod.private_tmpdir_env(tmp),
                **({"CUDA_VISIBLE_DEVICES": self.devices[node]} if self.devices is not None else {}),
            }
            # Own process group: stopping a node stops its workers too, even a frozen one.
            procs.append(
                subprocess.Popen(
                    train_command(train_args),
                    env=env,
                    start_new_session=True,
                    stdout=subprocess.PIPE if node == 0 else None,
                    text=True,
                    errors="replace",
                )
            )
        reader = threading.Thread(target=_relay, args=(procs[0].stdout, dog), daemon=True)
        reader.start()
        try:
            while True:
                codes = [p.poll() for p in procs]
                failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    # Peers of a failed node fail soon after (a collective loses its peer): give
                    # them a moment, so that a certain failure is not hidden behind their status.
                    deadline = time.monotonic() + 5
                    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
                        time.sleep(0.2)
                    codes = [p.poll() for p in procs]
                    certain = [(i, c) for i, c in enumerate(codes) if c in PERMANENT]
                    return (*(certain or failed)[0], None)
                if all(c == 0 for c in codes):
                    reader.join(timeout=5)
                    return None
                stall = dog.check()
                if stall:
                    return 0, -1, stall
                time.sleep(0.5)
        finally:
            _stop(procs)
            reader.join(timeout=5)
            shutil.rmtree(tmp, ignore_errors=True)


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as CUDA_VISIBLE_DEVICES names them."""
    import torch

    count = torch.cuda.device_count()  # honours CUDA_VISIBLE_DEVICES; 0 without CUDA
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [d.strip() for d in listed.split(",") if d.strip()] if listed is not None else []
    return names[:count] if listed is not None else [str(i) for i in range(count)]


def node_devices(nnodes: int, nproc_per_node: int, gpus: list[str]) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES for each emulated node, or None to leave it as it is (no GPU).

    On one machine every node's torchrun numbers its workers from LOCAL_RANK 0, so without
    this every node's first worker takes the same GPU, and NCCL refuses two ranks on one
    device. Node i gets GPUs [i x procs, (i + 1) x procs). With fewer GPUs than processes the
    job runs on CPU (gloo), and says so."""
    if not gpus:
        return None
    world = nnodes * nproc_per_node
    if len(gpus) < world:
        print(
            f"{world} local training processes but {len(gpus)} GPU(s): NCCL needs a GPU of its own for each "
            f"process, so this job runs on CPU; set nodes x procs_per_node <= {len(gpus)} to train on the "
            "GPUs",
            flush=True,
        )
        return [""] * nnodes
    return [",".join(gpus[i * nproc_per_node : (i + 1) * nproc_per_node]) for i in range(nnodes)]


def _relay(stream, dog: Watchdog) -> None:
    """Copy node 0's output to ours line by line, feeding the watchdog."""
    for line in stream:
        sys.stdout.write(line)
        sys.stdout.flush()
        dog.feed(line)


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every node's processes (workers checkpoint and exit 143), SIGKILL what is left
    after 15 s. torchrun starts its workers in sessions of their own, and they outlive a killed
    agent, so the whole process tree is collected first."""
    procs_mod.stop([pid for p in procs for pid in [p.pid, *procs_mod.descendants(p.pid)]], grace=15)
    for p in procs:
        p.wait()


LAUNCHERS = ("local", "pytorchjob", "kubernetes", "trainjob")
CLUSTER_LAUNCHERS = ("pytorchjob", "kubernetes", "trainjob")


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


def cluster_from_params(params: dict):
    """The ClusterSpec that pipeline parameters describe: the one place that maps their names
    to ClusterSpec fields. Missing settings keep ClusterSpec's defaults; other keys are ignored."""
    return ClusterSpec(**{_RENAMED.get(k, k): params[k] for k in _CLUSTER_PARAMS if k in params})


def launcher(name: str, spec: ClusterSpec, stall_timeout_s: float = 0.0) -> Launcher:
    """The launcher called `name` (LAUNCHERS) for `spec`'s topology and restart budget: the one place that chooses.
    The cluster ones are imported only when chosen (the kubernetes and Kubeflow clients)."""
    if name == "local":
        return LocalLauncher(
            nnodes=spec.nodes,
            nproc_per_node=spec.procs_per_node,
            max_restarts=spec.backoff_limit,
            stall_timeout_s=stall_timeout_s,
        )
    spec.stall_timeout_s = stall_timeout_s  # the watchdog reads the job's streamed log
    if name in ("pytorchjob", "kubernetes"):
        from trainer.k8s.pytorchjob import PyTorchJobLauncher

        return PyTorchJobLauncher(spec)
    if name == "trainjob":
        from trainer.k8s.trainjob import TrainJobLauncher

        return TrainJobLauncher(spec)
    raise UserError(f"launcher must be one of {LAUNCHERS}, got {name!r}")


def run_training(cfg, launch_with: str | Launcher, spec, store, run_id: str = "") -> dict:
    """Validate everything, launch the job, and return the result rank 0 wrote to the bucket.

    `launch_with`: a launcher's name (LAUNCHERS, chosen by `launcher`) or a `Launcher` itself (a test's fake).
    `spec` (a ClusterSpec) gives the topology and restart budget for every launcher; its Kubernetes settings matter
    only to the cluster ones.
    """
    problems = cfg.problems() + spec.topology_problems()
    if launch_with in CLUSTER_LAUNCHERS:
        problems += spec.kubernetes_problems()
    if isinstance(launch_with, str) and launch_with not in LAUNCHERS:
        problems.append(f"launcher must be one of {LAUNCHERS}, got {launch_with!r}")
    collect(problems, what="invalid training launch")
    # The delivered template against the delivered rows, for every dataset kind (local files were
    # also checked at validate-params): a template that drops tools or calls never reaches training.

    parity.check_delivered(store, cfg.model_uri, cfg.dataset_uri, cfg.output_prefix)
    job = launcher(launch_with, spec, cfg.stall_timeout_s) if isinstance(launch_with, str) else launch_with
    job.run(cfg.to_args(), job_name(run_id or cfg.output_prefix.rsplit("/", 1)[-1]))
    return store.get_json(f"{cfg.output_prefix}/result.json")
