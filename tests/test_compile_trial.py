"""compile=true never makes training slower than eager: the trainer times both early in the run
(trainer/train.py `_CompileTrial`) and keeps the faster."""

from types import SimpleNamespace

import pytest
import torch

from trainer.config import TrainConfig
from trainer.storage import Store
from trainer.train import _CompileTrial


class FakeDecoderLayer(torch.nn.Module):  # decoder_layers() finds modules by this name suffix
    pass


def fake_recipe(max_steps=20, done=0):
    layers = [FakeDecoderLayer(), FakeDecoderLayer()]
    for layer in layers:
        layer._compiled_call_impl = f"compiled code of {id(layer)}"
    return SimpleNamespace(model=layers, real_tokens=0, done=done, bucketed=True, max_steps=max_steps, clock=[0.0])


def plan(recipe):
    """The trial as the recipe plans it, with the fake's clock and bucketing switch injected."""
    return _CompileTrial.plan(recipe.done, recipe.max_steps, recipe.model,
                              mark=lambda: (recipe.clock[0], recipe.real_tokens),
                              use_bucketing=lambda on: setattr(recipe, "bucketed", on), device=torch.device("cpu"))


def run_trial(recipe, seconds_per_step):
    """Drive the trial's hooks over the run's steps, with scripted step times: the recipe's
    'compiled' flag is read from the layers, so each step takes what its mode costs."""
    clock = recipe.clock
    trial = plan(recipe)
    assert trial is not None
    for step in range(recipe.done + 1, recipe.max_steps + 1):
        trial.before(step)
        compiled = recipe.model[0]._compiled_call_impl is not None
        clock[0] += seconds_per_step["compiled" if compiled else "eager"]
        recipe.real_tokens += 1000
        trial.after(step)  # where the loop calls it: right after the step, before log/eval/checkpoint
        clock[0] += 5.0 if step % 3 == 0 else 0.0  # an eval or checkpoint: not timed
    return trial


@pytest.mark.parametrize("compiled_s,eager_s,keep", [(1.0, 2.0, True), (2.0, 1.0, False), (1.0, 1.0, True)])
def test_the_faster_setting_runs_the_rest_of_training(capsys, compiled_s, eager_s, keep):
    recipe = fake_recipe()
    trial = run_trial(recipe, {"compiled": compiled_s, "eager": eager_s})
    assert trial.rates == pytest.approx((1000 / compiled_s, 1000 / eager_s))  # eval/checkpoint time excluded
    assert all((layer._compiled_call_impl is not None) == keep for layer in recipe.model)
    if keep:
        assert [layer._compiled_call_impl for layer in recipe.model] == [
            f"compiled code of {id(layer)}" for layer in recipe.model]  # the same compiled code, not a new compile
    assert recipe.bucketed == keep  # eager pads rows only to their longest
    out = capsys.readouterr().out
    assert ("keeping the compiled layers" if keep else "continuing eager") in out
    assert trial.metrics()["compiled_layers"] == float(keep)


def test_a_run_too_short_to_compare_keeps_compiled_and_says_so(capsys, monkeypatch):
    assert plan(fake_recipe(max_steps=11)) is None  # the choice would come after the last step
    assert "too few to time compiled layers against eager" in capsys.readouterr().out
    assert plan(fake_recipe(max_steps=12)).last == 11
    assert plan(fake_recipe(max_steps=30, done=25)) is None  # resumed near the end
    assert plan(fake_recipe(max_steps=30, done=30)) is None
    assert capsys.readouterr().out.count("too few") == 1  # nothing left to run: nothing to say
    trial = plan(fake_recipe(max_steps=30, done=10))
    assert (trial.first, trial.switch, trial.last) == (14, 18, 21)  # counted from the resumed step
    monkeypatch.setenv("FINETUNE_COMPILE_TRIAL", "0")
    assert plan(fake_recipe(max_steps=30)) is None


class ScriptedClock:
    """The recipe's timer (Recipe.clock) on a script: each reading moves it on by a millisecond
    (a step with no compiled code in it takes that long), and each call of a compiled graph costs
    30 ms more. Which setting is faster is then the script's, not this machine's speed."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


@pytest.mark.integration
def test_compiled_layers_slower_than_eager_are_dropped_in_a_real_run(builtin_uris, monkeypatch, capsys):
    """A real training run whose compiled layers are slow (a backend whose every call costs 30 ms
    on the recipe's clock): the run continues eager, finishes and reports both rates."""
    from trainer import model as model_mod
    from trainer import train as train_mod

    clock = ScriptedClock()

    def slow_backend(gm, example_inputs):
        def run(*args):
            clock.now += 0.03
            return gm.forward(*args)
        return run

    real = model_mod.compile_layers
    monkeypatch.setattr(train_mod, "compile_layers", lambda model, dynamic: real(model, dynamic, backend=slow_backend))
    monkeypatch.setattr(train_mod.Recipe, "clock", staticmethod(clock))
    torch._dynamo.reset()
    store = Store.from_env()
    model_uri, data_uri = builtin_uris
    result = train_mod.train(TrainConfig(model_uri=model_uri, dataset_uri=data_uri, output_prefix="runs/compile-trial",
                                         max_steps=14, batch_size=4, compile=True), store)
    metrics = result["metrics"]
    assert metrics["compiled_layers"] == 0.0
    assert metrics["compile_trial_eager_tokens_per_second"] > metrics["compile_trial_compiled_tokens_per_second"] > 0
    out = capsys.readouterr().out
    assert "continuing eager" in out
    assert metrics["train_steps"] == 14.0 and metrics["train_loss"] < 20
    # what was compiled is reported: a compile that silently fell back to eager would show as 0
    assert metrics["compiled_graphs"] >= 1 and "compile=true: the first step compiled" in out
    assert metrics["graphs_compiled_in_steady_window"] == 0.0  # steps 8..14: no recompile in the timed window


@pytest.mark.integration
def test_a_compile_that_fails_is_said_to_have_compiled_nothing(builtin_uris, monkeypatch, capsys):
    """torch.compile errors fall back to eager (compile_layers): the run says so and its metrics
    show 0 graphs, so an eager run cannot pass for a compiled measurement."""
    from trainer import model as model_mod
    from trainer import train as train_mod

    def broken_backend(gm, example_inputs):
        raise RuntimeError("no compiler here")

    real = model_mod.compile_layers
    monkeypatch.setattr(train_mod, "compile_layers",
                        lambda model, dynamic: real(model, dynamic, backend=broken_backend))
    monkeypatch.setenv("FINETUNE_COMPILE_TRIAL", "0")
    torch._dynamo.reset()
    store = Store.from_env()
    model_uri, data_uri = builtin_uris
    result = train_mod.train(TrainConfig(model_uri=model_uri, dataset_uri=data_uri, output_prefix="runs/compile-broken",
                                         max_steps=3, batch_size=4, compile=True), store)
    assert result["metrics"]["compiled_graphs"] == 0.0
    assert "compile=true: nothing was compiled" in capsys.readouterr().out
