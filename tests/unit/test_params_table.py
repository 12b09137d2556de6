"""One table for every pipeline parameter (trainer.config.params): the pipelines' signatures and the
components' inputs agree with it, the KFP UI's descriptions and --list-params come from it, the
parameter reference page (docs/parameters.md) is its current rendering, and every entry point reads true/false alike."""

import argparse
import inspect
import re
from pathlib import Path

import pytest

from trainer.config import params

ROOT = Path(__file__).resolve().parents[2]


def pipelines():
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.dag.sweep import sweep_pipeline

    return {"finetune": finetune_pipeline, "sweep": sweep_pipeline}


# How KFP types a run parameter by its Python type.
KFP_TYPES = {str: "String", int: "Integer", float: "Float", bool: "Boolean", dict: "Dict", list: "List"}


@pytest.mark.parametrize("name", ["finetune", "sweep"])
def test_each_pipelines_run_parameters_are_the_tables(name):
    """The pipeline's signature is built from the table (pipelines.dag.tasks.table_parameters); what KFP reads off
    it (the component spec the YAML compiles from: the run parameters) has each parameter of the table, and only
    those, with its type, default and help word for word, and the body gets each by name."""
    pipeline = pipelines()[name]
    inputs = pipeline.component_spec.inputs
    assert list(inspect.signature(pipeline.pipeline_func).parameters) == [p.name for p in params.of(name)]
    assert set(inputs) == {p.name for p in params.of(name)}
    for p in params.of(name):
        spec = inputs[p.name]
        assert (spec.type, spec.default) == (KFP_TYPES[p.type], p.default_in(name)), p.name
        assert type(p.default_in(name)) is p.type, p.name  # a float default is a float (KFP types it by the value)
        # the KFP UI's description of the run parameter: the table's help, word for word
        assert " ".join(spec.description.split()) == p.help_in(name), p.name


def test_a_pipeline_body_gets_every_parameter_by_name_given_or_defaulted():
    from pipelines.dag.tasks import table_parameters

    seen = []

    @table_parameters("sweep")
    def body(args: dict) -> int:
        """A body."""
        seen.append(args)
        return len(args)

    names = [p.name for p in params.of("sweep")]
    assert body(*range(3), seed=7) == len(names) and body.__name__ == "body"
    assert list(seen[0]) == names and [seen[0][n] for n in names[:3]] == [0, 1, 2] and seen[0]["seed"] == 7
    assert seen[0]["max_steps"] == params.BY_NAME["max_steps"].default_in("sweep")
    assert body.__doc__.startswith("A body.") and "    seed: " in body.__doc__
    with pytest.raises(TypeError, match="no_such_parameter"):
        body(no_such_parameter=1)


# A component's own default that differs from the pipelines' on purpose.
OWN_DEFAULTS = {("validate_params", "trials"): "[] means a finetune run, not a sweep"}


def test_every_component_input_named_like_a_parameter_has_its_type():
    """A component that takes a pipeline parameter by name (inputs_for) takes it with the table's type,
    and its own default is one of the pipelines' defaults (so a component run alone behaves as a pipeline)."""
    import importlib
    import pkgutil

    import components

    checked, wrong = 0, []
    for info in pkgutil.iter_modules(components.__path__):
        module = importlib.import_module(f"components.{info.name}")
        for component in vars(module).values():
            func = getattr(component, "python_func", None)
            if func is None or func.__module__ != module.__name__:
                continue
            for name, arg in inspect.signature(func).parameters.items():
                p = params.BY_NAME.get(name)
                if p is None or name == "sweep":
                    continue
                if arg.annotation not in (p.type, p.type.__name__):
                    wrong.append(f"{info.name}.{name}: {arg.annotation} is not {p.type.__name__}")
                if (
                    arg.default is not inspect.Parameter.empty
                    and arg.default not in (p.default, p.sweep_default)
                    and (info.name, name) not in OWN_DEFAULTS
                ):
                    wrong.append(f"{info.name}.{name}={arg.default!r}, the table's {p.default!r}")
                checked += 1
    assert not wrong and checked > 60, wrong


def test_validate_defaults_are_the_finetune_pipelines():
    from trainer.validate import DEFAULTS

    finetune = params.defaults("finetune")
    assert DEFAULTS and all(DEFAULTS[k] == finetune.get(k, params.BY_NAME[k].default) for k in DEFAULTS)
    assert DEFAULTS["nodes"] == 2 and DEFAULTS["eval_max_rows"] == 200  # the drift the table ended


def test_list_params_groups_the_tables_text(capsys):
    from pipelines import run_local

    assert run_local.main(["--pipeline", "sweep", "--list-params"]) == 0
    out = capsys.readouterr().out
    assert "placement (cluster):" in out and "  trials = [" in out
    # the sweep's own wording where its meaning differs, and no drift: trainjob is a launcher of both
    assert "0 uses 8 rows (the trainer's batch_size)" in " ".join(out.split())
    assert "trainjob (a Kubeflow Trainer v2 TrainJob" in " ".join(out.split())


def test_the_parameter_reference_page_is_the_tables_rendering():
    page = (ROOT / "docs" / "parameters.md").read_text()
    found = re.search(r"<!-- parameters: python -m trainer.config.params -->\n(.*?)<!-- /parameters -->", page, re.S)
    assert found, "docs/parameters.md lacks the generated parameter reference"
    assert found.group(1) == params.markdown(), "docs/parameters.md is stale: python -m trainer.config.params"


@pytest.mark.parametrize(
    "word, value",
    [
        ("true", True),
        (" Yes ", True),
        ("ON", True),
        ("1", True),
        ("false", False),
        ("no", False),
        ("off", False),
        ("0", False),
    ],
)
def test_one_true_false_reading_for_every_entry_point(word, value):
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.cli_params import parse_params
    from trainer.config.params import _parse_bool
    from trainer.core.settings import parse_bool

    assert parse_bool(word) is value and _parse_bool(word) is value
    assert parse_params(finetune_pipeline, [f"keep_serving={word}"])["keep_serving"] is value
    with pytest.raises(argparse.ArgumentTypeError, match="expected one of true, 1, yes, on or false, 0, no, off"):
        _parse_bool("maybe")


def test_the_trainer_cli_help_is_the_tables_for_pipeline_parameters(capsys):
    from trainer.__main__ import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert " ".join(params.BY_NAME["method"].help.split()) in out  # dora and qlora included
