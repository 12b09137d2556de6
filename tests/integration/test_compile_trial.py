"""compile=true never makes training slower than eager: the trainer times both early in the run
(trainer/recipe/train.py `CompileTrial`) and keeps the faster."""

import torch

from trainer.config.training import TrainConfig
from trainer.core.storage import Store


class ScriptedClock:
    """The recipe's timer (Recipe.clock) on a script: each reading moves it on by a millisecond
    (a step with no compiled code in it takes that long), and each call of a compiled graph costs
    30 ms more. Which setting is faster is then the script's, not this machine's speed."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def test_compiled_layers_slower_than_eager_are_dropped_in_a_real_run(builtin_uris, monkeypatch, capsys):
    """A real training run whose compiled layers are slow (a backend whose every call costs 30 ms
    on the recipe's clock): the run continues eager, finishes and reports both rates."""
    from trainer.models import model as model_mod
    from trainer.recipe import train as train_mod

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
    result = train_mod.train(
        TrainConfig(
            model_uri=model_uri,
            dataset_uri=data_uri,
            output_prefix="runs/compile-trial",
            max_steps=14,
            batch_size=4,
            compile=True,
        ),
        store,
    )
    metrics = result["metrics"]
    assert metrics["compiled_layers"] == 0.0
    assert metrics["compile_trial_eager_tokens_per_second"] > metrics["compile_trial_compiled_tokens_per_second"] > 0
    out = capsys.readouterr().out
    assert "continuing eager" in out
    assert metrics["train_steps"] == 14.0 and metrics["train_loss"] < 20
    # what was compiled is reported: a compile that silently fell back to eager would show as 0
    assert metrics["compiled_graphs"] >= 1 and "compile=true: the first step compiled" in out
    assert metrics["graphs_compiled_in_steady_window"] == 0.0  # steps 8..14: no recompile in the timed window


def test_a_compile_that_fails_is_said_to_have_compiled_nothing(builtin_uris, monkeypatch, capsys):
    """torch.compile errors fall back to eager (compile_layers): the run says so and its metrics
    show 0 graphs, so an eager run cannot pass for a compiled measurement."""
    from trainer.models import model as model_mod
    from trainer.recipe import train as train_mod

    def broken_backend(gm, example_inputs):
        raise RuntimeError("no compiler here")

    real = model_mod.compile_layers
    monkeypatch.setattr(
        train_mod, "compile_layers", lambda model, dynamic: real(model, dynamic, backend=broken_backend)
    )
    monkeypatch.setenv("FINETUNE_COMPILE_TRIAL", "0")
    torch._dynamo.reset()
    store = Store.from_env()
    model_uri, data_uri = builtin_uris
    result = train_mod.train(
        TrainConfig(
            model_uri=model_uri,
            dataset_uri=data_uri,
            output_prefix="runs/compile-broken",
            max_steps=3,
            batch_size=4,
            compile=True,
        ),
        store,
    )
    assert result["metrics"]["compiled_graphs"] == 0.0
    assert "compile=true: nothing was compiled" in capsys.readouterr().out
