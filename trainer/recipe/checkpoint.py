"""Checkpoints in the bucket: save in the background, keep the last K, resume exactly.

Layout: `<output_prefix>/checkpoints/step-00000120/{trainable.pt, optimizer.pt,
scheduler.pt, rng.pt, state.json, _manifest.json}`. A checkpoint counts only once its
manifest exists, and that is written after every other file. `trainable.pt` holds only
the parameters that train (LoRA weights and any saved modules; everything for a full
fine-tune), because the frozen base is already in the bucket.

Rank 0 writes files to local disk synchronously (fast) and uploads them on a background
thread, so the next steps run while the upload proceeds; one upload is in flight at a
time. Each rank's RNG state and partial logging window are gathered so every rank resumes
its own stream and logs the same numbers an uninterrupted run logs.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CKPT = "step-{:08d}"


def rng_state() -> dict[str, Any]:
    import torch

    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def trainable_state(model) -> dict[str, Any]:
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


class Checkpointer:
    def __init__(self, store, output_prefix: str, keep: int = 2, rank: int = 0):
        self.store, self.rank, self.keep = store, rank, keep
        self.prefix = f"{output_prefix}/checkpoints"
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.last_upload_s: float | None = None
        self.last_bytes: int = 0

    # -- save
    def save(
        self, step: int, model, optimizer, scheduler, per_rank: list[dict[str, Any]], extra: dict[str, Any]
    ) -> None:
        """Rank 0: write the checkpoint locally, then upload it in the background."""
        import torch

        if self.rank != 0:
            return
        self.wait()  # at most one upload in flight; also surfaces a failed previous upload
        tmp = Path(tempfile.mkdtemp(prefix="ckpt-"))
        torch.save(trainable_state(model), tmp / "trainable.pt")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        torch.save(per_rank, tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, **extra}, indent=1))
        self.last_bytes = sum(p.stat().st_size for p in tmp.iterdir())
        self._thread = threading.Thread(target=self._upload, args=(tmp, step), daemon=True)
        self._thread.start()

    def _upload(self, tmp: Path, step: int) -> None:
        start = time.perf_counter()
        try:
            self.store.put_dir(tmp, f"{self.prefix}/{CKPT.format(step)}")
            self.last_upload_s = time.perf_counter() - start
            for old in self.store.complete_children(self.prefix)[: -self.keep]:
                self.store.delete_prefix(f"{self.prefix}/{old}")
        except BaseException as err:  # noqa: BLE001 - re-raised in the training thread by wait()
            self._error = err
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the in-flight upload; True when none is left. Re-raises its failure."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        return True

    # -- resume
    def latest(self) -> int | None:
        """Step of the newest complete checkpoint of this run, or None."""
        names = self.store.complete_children(self.prefix)
        return int(names[-1].split("-")[1]) if names else None

    def state(self, step: int) -> dict[str, Any]:
        """The state.json of the checkpoint at `step` alone: what its run was, before any weights load."""
        return self.store.get_json(f"{self.prefix}/{CKPT.format(step)}/state.json")

    def load(self, step: int, model, optimizer, scheduler, rank: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """Restore everything saved at `step` (every rank calls this).

        Returns (state.json, this rank's entry: {"rng", "window"}); restores the RNG.
        """
        import torch

        local = self.store.get_tree(
            self.store.uri(f"{self.prefix}/{CKPT.format(step)}"), Path(tempfile.mkdtemp(prefix="resume-")) / "ckpt"
        )
        try:
            # map_location: optimizer.pt holds rank 0's CUDA tensors, which would otherwise be
            # restored onto cuda:0 by every rank of the node (a CUDA context and a copy of the
            # optimizer state each); load_state_dict moves them to each parameter's own device.
            weights = torch.load(local / "trainable.pt", weights_only=True, map_location="cpu")
            missing = set(weights) - {n for n, _ in model.named_parameters()}
            if missing:
                raise RuntimeError(f"checkpoint does not match the model: {sorted(missing)[:3]}")
            model.load_state_dict(weights, strict=False)
            optimizer.load_state_dict(torch.load(local / "optimizer.pt", weights_only=True, map_location="cpu"))
            scheduler.load_state_dict(torch.load(local / "scheduler.pt", weights_only=True))
            per_rank = torch.load(local / "rng.pt", weights_only=False)
            mine = per_rank[rank] if rank < len(per_rank) else per_rank[0]
            set_rng_state(mine["rng"])
            return json.loads((local / "state.json").read_text()), mine
        finally:
            shutil.rmtree(local.parent, ignore_errors=True)
