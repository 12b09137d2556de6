"""Help that helps: every entry point's description whole, every pipeline parameter listed with
its default and the UI's description, and help on every `trainer train` option."""

import argparse
import importlib
import inspect
import re
import sys

import pytest

from pipelines.cli_params import pipeline_defaults

ENTRY_POINTS = [
    "pipelines.run_local",
    "pipelines.runs",
    "pipelines.compile",
    "pipelines.manifests",
    "pipelines.submit",
    "trainer.__main__",
]


def help_text(module_name: str, argv: list[str], capsys, monkeypatch) -> str:
    module = importlib.import_module(module_name)
    monkeypatch.setattr(sys, "argv", [module_name, *argv])  # some mains read sys.argv only
    with pytest.raises(SystemExit) as exit_info:
        module.main()
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("module_name", ENTRY_POINTS)
def test_help_shows_the_whole_module_docstring(module_name, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    text = " ".join(help_text(module_name, ["--help"], capsys, monkeypatch).split())
    doc = importlib.import_module(module_name).__doc__
    for paragraph in [p for p in doc.split("\n\n") if p.strip()]:
        assert " ".join(paragraph.split()) in text, paragraph  # not cut, not re-wrapped into nonsense


def test_list_params_shows_every_parameter_with_default_and_ui_description(capsys):
    from pipelines import run_local
    from pipelines.dag.finetune import finetune_pipeline

    assert run_local.main(["--list-params"]) == 0
    out = capsys.readouterr().out
    text = " ".join(out.split())
    inputs = finetune_pipeline.component_spec.inputs
    for name, default in pipeline_defaults(finetune_pipeline).items():
        assert re.search(rf"^  {name} = ", out, re.M), name
        description = inputs[name].description
        assert description, f"{name} has no description in the pipeline docstring's Args"
        assert " ".join(description.split()) in text, name  # the same text the KFP UI shows
    assert "(no description)" not in out


def test_every_train_option_has_help():
    from trainer.config.params import add_train_arguments

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert len(options) > 20
    for action in options:
        assert action.help and not action.help.startswith("(default"), action.dest
    lr = next(a for a in options if a.dest == "learning_rate")
    assert "learning rate" in lr.help and "(default: 0.001)" in lr.help


class _Parsed(Exception):
    def __init__(self, parser):
        self.parser = parser


def _parsers(module_name: str, monkeypatch) -> list[argparse.ArgumentParser]:
    """The entry point's parser and its subcommands' parsers, as main() builds them."""

    def capture(self, *args, **kwargs):
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    monkeypatch.setattr(sys, "argv", [module_name])  # some mains read sys.argv only
    with pytest.raises(_Parsed) as parsed:
        importlib.import_module(module_name).main()
    top = parsed.value.parser
    subs = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    return [top, *[p for s in subs for p in s.choices.values()]]


@pytest.mark.parametrize("module_name", ENTRY_POINTS)
def test_every_option_of_every_entry_point_and_subcommand_has_help(module_name, monkeypatch):
    for parser in _parsers(module_name, monkeypatch):
        for action in parser._actions:
            if action.dest != "help" and not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{parser.prog} {'/'.join(action.option_strings) or action.dest} has no help"


def test_python_m_pipelines_lists_the_entry_points(capsys):
    from pipelines.__main__ import main

    assert main(["submit"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: python -m pipelines runs nothing itself (got 'submit'); run one of:")
    for module in ("run_local", "runs", "submit", "compile", "manifests"):
        assert f"python -m pipelines.{module}" in err
        importlib.import_module(f"pipelines.{module}")  # every module listed exists
    assert main(["--help"]) == 0 and "python -m pipelines.submit" in capsys.readouterr().out


def test_the_train_cli_the_pipelines_and_the_components_share_one_set_of_training_defaults(monkeypatch):
    """A user who moves from the pipeline to `python -m trainer train` (or the other way) trains
    with the same settings unless they change one (the sweep packs 1,024 tokens, as measured)."""
    from dataclasses import fields

    from components.finetune import finetune
    from components.validate_params import validate_params
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.dag.sweep import sweep_pipeline
    from trainer.config.training import TrainConfig

    expected = {f.name: f.default for f in fields(TrainConfig)}
    train = next(p for p in _parsers("trainer.__main__", monkeypatch) if p.prog.endswith(" train"))
    cli = {a.dest: a.default for a in train._actions if a.dest in expected}
    assert cli == expected
    tuned = ("learning_rate", "max_steps", "batch_tokens", "lora_train_embeddings", "lora_r", "lora_alpha")
    assert [expected[k] for k in tuned] == [1e-3, 800, 512, True, 64, 64]  # the demo's tuned values (README)
    overrides = {sweep_pipeline.name: {"batch_tokens": 1024}}
    for entry in (finetune_pipeline, sweep_pipeline, finetune, validate_params):
        func = getattr(entry, "pipeline_func", None) or entry.python_func
        defaults = {k: p.default for k, p in inspect.signature(func).parameters.items()}
        shared = {k: v for k, v in defaults.items() if k in expected}
        assert len(shared) >= 6, entry.name
        want = {k: overrides.get(entry.name, {}).get(k, expected[k]) for k in shared}
        assert shared == want, entry.name


def test_the_parameter_table_command_answers_help_instead_of_printing_the_table(capsys):
    """`python -m trainer.config.params --help` printed the Markdown table, ignoring --help."""
    from trainer.config import params

    with pytest.raises(SystemExit) as exit_info:
        params.main(["--help"])
    out = capsys.readouterr().out
    assert (
        exit_info.value.code == 0
        and out.startswith("usage: python -m trainer.config.params")
        and "| parameter |" not in out
    )
    assert params.main([]) == 0 and capsys.readouterr().out == params.markdown()


def test_the_trainer_clis_cluster_choices_are_the_backend_tables():
    """`python -m trainer launch-k8s --launcher` and `deploy-k8s --backend` spell their choices out (the tables'
    modules would slow every `python -m trainer` start by importing them): they must be the tables' cluster ones."""
    import argparse

    from trainer import deploy, launch
    from trainer.__main__ import COMMANDS

    def choices(command: str, flag: str) -> tuple:
        parser = argparse.ArgumentParser()
        COMMANDS[command].arguments(parser)
        [action] = [a for a in parser._actions if flag in a.option_strings]
        return tuple(action.choices)

    assert choices("launch-k8s", "--launcher") == launch.CLUSTER_LAUNCHERS
    assert choices("deploy-k8s", "--backend") == deploy.CLUSTER_BACKENDS
