"""launcher=local: the training job as torchrun agents on this machine (`LocalLauncher`).

It emulates a PyTorchJob on one machine: it starts one torchrun agent per
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
from typing import Callable, ClassVar

from trainer.core import procs as procs_mod
from trainer.core.errors import UserError
from trainer.core.exitcodes import EXIT_TRANSIENT, PERMANENT
from trainer.k8s.podspec import ClusterSpec
from trainer.launch.base import Launcher
from trainer.serving.local import free_port
from trainer.recipe.torchrun import train_command
from trainer.core.watchdog import Watchdog


@dataclass
class LocalLauncher(Launcher):
    """`nnodes` torchrun agents on this machine. When any node fails, every node is stopped and
    the whole job restarts (up to `max_restarts` times) and resumes from its last checkpoint,
    as a PyTorchJob restarts its pods. Restarting the whole job, rather than using torchrun's
    per-agent restarts, avoids restarted workers dialling their peers' stale addresses.
    Failures that a restart cannot cure (PERMANENT, a stall caught by the progress
    watchdog) end the job at once."""

    on_cluster: ClassVar[bool] = False
    nnodes: int = 2
    nproc_per_node: int = 1
    max_restarts: int = 0
    stall_timeout_s: float = 0.0  # > 0: fail when rank 0's progress stops that long (trainer.core.watchdog)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)  # the watchdog's; tests script it

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> LocalLauncher:
        """The spec's topology as local nodes; its restart budget (backoff_limit) as whole-job restarts."""
        return cls(
            nnodes=spec.nodes,
            nproc_per_node=spec.procs_per_node,
            max_restarts=spec.backoff_limit,
            stall_timeout_s=spec.stall_timeout_s,
        )

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
