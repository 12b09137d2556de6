"""What a training process runs in, apart from the recipe's loop: the process group torchrun's
environment asks for, the run's counters a checkpoint carries, TensorBoard files beside the
checkpoints, and peak memory."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

from trainer.core.exitcodes import remove_at_exit
from trainer.core.storage import Store


def dist_setup():
    """(rank, world_size, device) from the env torchrun / the operator set; inits the process group."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo", device_id=device if device.type == "cuda" else None
        )
    return rank, world, device


class Board:
    """TensorBoard event files on rank 0, uploaded next to the checkpoints
    (`<output_prefix>/tensorboard/`), so `tensorboard --logdir` on a copy of that prefix
    shows the run while it trains."""

    def __init__(self, store: Store, output_prefix: str):
        from torch.utils.tensorboard import SummaryWriter

        self.store, self.prefix = store, f"{output_prefix}/tensorboard"
        self.dir = tempfile.mkdtemp(prefix="tb-")
        remove_at_exit(self.dir)  # also when the process crashes or is stopped
        self.writer = SummaryWriter(self.dir)

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.writer.add_scalar(tag, value, step)

    def upload(self) -> None:
        self.writer.flush()
        self.store.put_dir(self.dir, self.prefix)

    def close(self) -> None:
        """The last upload, then the local copy goes."""
        self.upload()
        self.writer.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def peak_memory_mb(device) -> float:
    """Peak GPU memory on CUDA, else peak resident memory of this process."""
    import resource

    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class RunState:
    """The run's counters as this process starts: what a checkpoint's state.json carries besides
    weights, optimizer and RNG, resumed whole (a fresh run starts from the defaults)."""

    step: int = 0  # optimizer steps done before this process: the loop goes on from step + 1
    history: list[dict[str, Any]] = field(default_factory=list)  # logged loss / lr and eval_loss
    train_tokens: int = 0  # every rank's real tokens before this process
    train_seconds: float = 0.0  # seconds of training before this process
    restarts: int = 0

    @classmethod
    def resumed(cls, saved: dict[str, Any]) -> "RunState":
        """The state of a checkpoint (`saved`), as the restarted process starts from it."""
        return cls(
            step=saved["step"],
            history=saved["history"],
            train_tokens=saved["train_tokens"],
            train_seconds=saved["train_seconds"],
            restarts=saved["restarts"] + 1,
        )

    def saved(self, tokens: int, seconds: float, settings: dict[str, Any]) -> dict[str, Any]:
        """What a checkpoint's state.json holds beside its step: this process's `tokens` (every
        rank's) and `seconds` added to those before it, and the run's `settings` (a resume compares)."""
        return {
            "history": self.history,
            "train_tokens": self.train_tokens + tokens,
            "train_seconds": self.train_seconds + seconds,
            "restarts": self.restarts,
            "settings": settings,
        }


def start_profiler(steps: int, device, steps_left: int):
    """With `steps` > 0: a torch.profiler trace of that many steps after two warm-up steps, started;
    None otherwise, and with no step left to run (a run resumed straight to cleanup): nothing then
    asks an unstarted profiler for its table."""
    if not steps or steps_left <= 0:
        return None
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    prof = profile(
        activities=activities, schedule=schedule(wait=1, warmup=1, active=steps, repeat=1), record_shapes=True
    )
    prof.start()
    return prof


def save_profile(prof, store: Store | None, output_prefix: str, device) -> None:
    """The trace stopped; with a `store` (rank 0's), put under `<output_prefix>/profile/` (open it in
    Perfetto or chrome://tracing) and the top operators by time printed."""
    prof.stop()
    if store is None:
        return
    sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=15), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        prof.export_chrome_trace(os.path.join(tmp, "trace.json"))
        store.put_dir(tmp, f"{output_prefix}/profile")
    print(f"profile: {store.uri(output_prefix + '/profile/trace.json')}", flush=True)
