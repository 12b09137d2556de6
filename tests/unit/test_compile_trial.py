"""compile=true never makes training slower than eager: the trainer times both early in the run
(trainer/recipe/compile_trial.py `CompileTrial`) and keeps the faster.

The fast checks; the ones that train, serve or run the pipeline are tests/integration/test_compile_trial.py (the integration tier)."""

from types import SimpleNamespace

import pytest
import torch

from trainer.recipe.compile_trial import CompileTrial


class FakeDecoderLayer(torch.nn.Module):  # decoder_layers() finds modules by this name suffix
    pass


def fake_recipe(max_steps=20, done=0):
    layers = [FakeDecoderLayer(), FakeDecoderLayer()]
    for layer in layers:
        layer._compiled_call_impl = f"compiled code of {id(layer)}"
    return SimpleNamespace(model=layers, real_tokens=0, done=done, bucketed=True, max_steps=max_steps, clock=[0.0])


def plan(recipe):
    """The trial as the recipe plans it, with the fake's clock and bucketing switch injected."""
    return CompileTrial.plan(
        recipe.done,
        recipe.max_steps,
        recipe.model,
        mark=lambda: (recipe.clock[0], recipe.real_tokens),
        use_bucketing=lambda on: setattr(recipe, "bucketed", on),
        device=torch.device("cpu"),
    )


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
            f"compiled code of {id(layer)}" for layer in recipe.model
        ]  # the same compiled code, not a new compile
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
