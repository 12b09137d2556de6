"""SIGTERM at a step boundary (trainer/recipe/train.py Recipe): the stopped run keeps that step's log
line, and no rank exits before rank 0's checkpoint upload is done (an early exit makes torchrun
or the local launcher kill rank 0 mid-upload).

The fast checks; the ones that train, serve or run the pipeline are tests/integration/test_recipe_shutdown.py (the integration tier)."""

from types import SimpleNamespace

import pytest
import torch

from trainer.config.training import TrainConfig
from trainer.recipe.runtime import RunState
from trainer.recipe.train import Recipe


class _Stopped(Exception):
    pass


def _recipe(max_steps=10, log_every=5):
    r = Recipe.__new__(Recipe)
    r.cfg = TrainConfig(
        model_uri="s3://b/models/x",
        dataset_uri="s3://b/datasets/x",
        output_prefix="runs/x",
        max_steps=max_steps,
        log_every=log_every,
        eval_every=1000,
        checkpoint_every=1000,
    )
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
    from trainer.data.batching import collate

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


def test_run_state_resumes_what_a_checkpoint_saved_and_counts_on():
    """A checkpoint's state.json (its step + RunState.saved) read back by a restarted process:
    the counters go on from there, restarts counted, the history kept."""
    fresh = RunState()
    first = RunState.resumed({"step": 5, **fresh.saved(tokens=100, seconds=2.0, settings={})})
    assert first == RunState(step=5, history=[], train_tokens=100, train_seconds=2.0, restarts=1)
    first.history.append({"step": 6, "loss": 1.5, "lr": 0.1})
    second = RunState.resumed({"step": 9, **first.saved(tokens=50, seconds=1.0, settings={})})
    assert (second.step, second.train_tokens, second.train_seconds, second.restarts) == (9, 150, 3.0, 2)
    assert second.history == [{"step": 6, "loss": 1.5, "lr": 0.1}]
