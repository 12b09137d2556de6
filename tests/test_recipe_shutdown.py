"""SIGTERM at a step boundary (trainer/train.py Recipe): the stopped run keeps that step's log
line, and no rank exits before rank 0's checkpoint upload is done (an early exit makes torchrun
or the local launcher kill rank 0 mid-upload)."""

import json
import multiprocessing
import os
import time
from types import SimpleNamespace

import pytest
import torch

from trainer import train as train_mod
from trainer.config import TrainConfig
from trainer.serving.local import free_port
from trainer.train import Recipe, RunState


class _Stopped(Exception):
    pass


def _recipe(max_steps=10, log_every=5):
    r = Recipe.__new__(Recipe)
    r.cfg = TrainConfig(model_uri="s3://b/models/x", dataset_uri="s3://b/datasets/x", output_prefix="runs/x",
                        max_steps=max_steps, log_every=log_every, eval_every=1000, checkpoint_every=1000)
    r.rank, r.world, r.device, r.state = 0, 1, torch.device("cpu"), RunState()
    r.real_tokens, r.board = 0, None
    r.window_loss, r.window_n = torch.zeros((), dtype=torch.float64), 0
    r.ddp = torch.nn.Linear(1, 1)
    r.scheduler = SimpleNamespace(get_last_lr=lambda: [0.1])
    r.shutdown = SimpleNamespace(requested=False)
    return r


def test_sigterm_on_a_log_step_keeps_that_steps_log_line(monkeypatch):
    r = _recipe()
    steps = iter(range(1, 100))

    def step():
        n = next(steps)
        if n == 5:
            r.shutdown.requested = True  # SIGTERM arrives during step 5, a log step
        return torch.tensor(float(n), dtype=torch.float64), torch.tensor(1.0)

    def stop(step):
        r.saved = (step, float(r.window_loss), r.window_n)
        raise _Stopped

    monkeypatch.setattr(r, "_step", step)
    monkeypatch.setattr(r, "_stop_for_sigterm", stop)
    with pytest.raises(_Stopped):
        r.train()
    assert r.state.history == [{"step": 5, "loss": 3.0, "lr": 0.1}]  # mean of steps 1..5, as uninterrupted
    assert r.saved == (5, 0.0, 0)  # the checkpoint's window: empty, the next log line covers 6..10 only


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


class _LabelMean(torch.nn.Module):
    """Stands in for LossModel: the mean, over a micro-batch's labelled positions, of a per-token
    loss equal to the label's value times a weight."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))

    def forward(self, input_ids, labels, label_positions, **kwargs):
        return (labels[:, 1:].reshape(-1).index_select(0, label_positions).double() * self.w).mean()


def test_a_step_averages_over_its_labelled_tokens_not_over_micro_batches():
    """As transformers' Trainer (num_items_in_batch): micro-batches with few labelled tokens
    do not weigh more per token than those with many."""
    from trainer.batching import collate

    r = _recipe()
    r.accum, r.ddp = 2, _LabelMean()
    r.params = []  # no clipping: the gradient itself is checked
    rows = [[{"input_ids": [5, 6], "labels": [-100, 1]}], [{"input_ids": [5, 6, 7, 8], "labels": [-100, 3, 3, 3]}]]
    r.stream, r.collate = iter(rows), lambda rs: collate(rs, 0)
    grads = []
    r.optimizer = SimpleNamespace(step=lambda: grads.append(r.ddp.w.grad.item()), zero_grad=lambda **_: None)
    r.scheduler = SimpleNamespace(step=lambda: None)
    loss, _ = r._step()
    assert loss.item() == pytest.approx((1 + 3 * 3) / 4)  # not (1 + 3) / 2
    assert grads == [pytest.approx(2.5)]


SIGTERM_AFTER_RESTORE = """
import os, signal, sys, time
from trainer import train as train_mod
from trainer.__main__ import main

close = train_mod.Shutdown.close


def close_then_sigterm(self):
    close(self)  # the recipe's handler is gone from here on
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(2)  # the signal is handled here, not after training returns


train_mod.Shutdown.close = close_then_sigterm
main(["train", *sys.argv[1:]])
"""


@pytest.mark.integration
def test_sigterm_in_the_instant_after_the_recipe_ends_exits_0_once_committed(store, builtin_uris, tmp_path):
    """`python -m trainer train` without trainer.torchrun: a SIGTERM right after the recipe's
    handler is restored (the result committed) ends the process with 0, not the retryable 143."""
    import subprocess
    import sys

    model_uri, data_uri = builtin_uris
    cfg = TrainConfig(model_uri=model_uri, dataset_uri=data_uri, output_prefix="runs/late-sigterm", max_steps=2,
                      batch_size=2, eval_every=1000)
    script = tmp_path / "late_sigterm.py"
    script.write_text(SIGTERM_AFTER_RESTORE)
    proc = subprocess.run([sys.executable, str(script), *cfg.to_args()], capture_output=True, text=True, timeout=300)
    assert store.exists("runs/late-sigterm/result.json"), proc.stderr[-2000:]
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])


def test_run_state_resumes_what_a_checkpoint_saved_and_counts_on():
    """A checkpoint's state.json (its step + RunState.saved) read back by a restarted process:
    the counters go on from there, restarts counted, the history kept."""
    fresh = RunState()
    first = RunState.resumed({"step": 5, **fresh.saved(tokens=100, seconds=2.0)})
    assert first == RunState(step=5, history=[], train_tokens=100, train_seconds=2.0, restarts=1)
    first.history.append({"step": 6, "loss": 1.5, "lr": 0.1})
    second = RunState.resumed({"step": 9, **first.saved(tokens=50, seconds=1.0)})
    assert (second.step, second.train_tokens, second.train_seconds, second.restarts) == (9, 150, 3.0, 2)
    assert second.history == [{"step": 6, "loss": 1.5, "lr": 0.1}]
