"""SIGTERM at a step boundary (trainer/recipe/train.py Recipe): the stopped run keeps that step's log
line, and no rank exits before rank 0's checkpoint upload is done (an early exit makes torchrun
or the local launcher kill rank 0 mid-upload)."""

import json
import multiprocessing
import os
import time
from types import SimpleNamespace


from trainer.recipe import train as train_mod
from trainer.config.training import TrainConfig
from trainer.serving.local import free_port
from trainer.recipe.train import Recipe


def _rank(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    r = Recipe.__new__(Recipe)
    r.rank, r.world = rank, 2
    r.save_checkpoint = lambda step: None
    r.shutdown = SimpleNamespace(remaining=lambda: 60.0)

    def wait(timeout=None):
        time.sleep(2)  # a slow upload
        with open(f"{out}/uploaded", "w") as f:
            f.write(str(time.time()))
        return True

    r.ckpt = SimpleNamespace(wait=wait)

    def exit_now(code):
        with open(f"{out}/exit-{rank}", "w") as f:
            json.dump([code, time.time()], f)
        os._exit(0)

    train_mod.exit_now = exit_now
    r._stop_for_sigterm(7)


def test_no_rank_exits_for_sigterm_before_rank0_uploaded(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(i, port, str(tmp_path))) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    for p in procs:
        if p.is_alive():
            p.kill()
    uploaded = float((tmp_path / "uploaded").read_text())
    for i in range(2):
        code, when = json.loads((tmp_path / f"exit-{i}").read_text())
        assert code == 143 and when >= uploaded


SIGTERM_AFTER_RESTORE = """
import os, signal, sys, time
from trainer.recipe import train as train_mod
from trainer.__main__ import main

close = train_mod.Shutdown.close


def close_then_sigterm(self):
    close(self)  # the recipe's handler is gone from here on
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(2)  # the signal is handled here, not after training returns


train_mod.Shutdown.close = close_then_sigterm
main(["train", *sys.argv[1:]])
"""


def test_sigterm_in_the_instant_after_the_recipe_ends_exits_0_once_committed(store, builtin_uris, tmp_path):
    """`python -m trainer train` without trainer.recipe.torchrun: a SIGTERM right after the recipe's
    handler is restored (the result committed) ends the process with 0, not the retryable 143."""
    import subprocess
    import sys

    model_uri, data_uri = builtin_uris
    cfg = TrainConfig(
        model_uri=model_uri,
        dataset_uri=data_uri,
        output_prefix="runs/late-sigterm",
        max_steps=2,
        batch_size=2,
        eval_every=1000,
    )
    script = tmp_path / "late_sigterm.py"
    script.write_text(SIGTERM_AFTER_RESTORE)
    proc = subprocess.run([sys.executable, str(script), *cfg.to_args()], capture_output=True, text=True, timeout=300)
    assert store.exists("runs/late-sigterm/result.json"), proc.stderr[-2000:]
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
