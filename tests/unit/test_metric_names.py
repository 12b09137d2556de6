"""Metric names are made in trainer/core/metrics.py and nowhere else (CONTRIBUTING: "Metric names are made and read in
trainer/core/metrics.py only"): KFP's Compare view, the gate, the sweep's pick, the reports and the Model Registry line
runs up by name, so a name spelled out in a second place drifts from the first.

The check reads every module's syntax tree: a name built from pieces (an f-string or a `+`) that reads as a metric name
(`bfcl_{c}_accuracy`, `"tuned_" + k`, `mix{k}_rows`) anywhere but in trainer/core/metrics.py is a failure.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from trainer.core import metrics as names

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("trainer", "components", "pipelines")
HOME = ROOT / "trainer" / "core" / "metrics.py"
# The pieces every family of names in trainer/core/metrics.py's table starts or ends with.
PREFIXES = ("base_", "tuned_", "fc_", "bfcl_", "mix", "scale", "train_", "eval_")
SUFFIXES = ("_accuracy", "_rows", "_lost", "_won", "_too_long", "_gain", "_kept", "_loss")
HOLE = "\0"  # where a formatted value sits in a template


def _template(node: ast.AST) -> str | None:
    """An f-string or a `+` of strings as text with HOLE for each computed part; None for anything else."""
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else HOLE for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        parts = [node.left, node.right]
        if not any(isinstance(p, ast.Constant) and isinstance(p.value, str) for p in parts):
            return None
        texts = [p.value if isinstance(p, ast.Constant) and isinstance(p.value, str) else _template(p) for p in parts]
        return "".join(t if t is not None else HOLE for t in texts)
    return None


def built_names(source: str) -> list[tuple[int, str]]:
    """(line, template) of every metric name built from pieces in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        text = _template(node)
        if text is None or HOLE not in text or not re.fullmatch(rf"[a-z0-9_{HOLE}]+", text):
            continue
        if text.startswith(PREFIXES) or text.endswith(SUFFIXES):
            found.append((node.lineno, text.replace(HOLE, "{}")))
    return found


def test_no_metric_name_is_built_outside_core_metrics():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != HOME
        for line, text in built_names(path.read_text())
    ]
    assert not found, "metric names built outside trainer/core/metrics.py (use its functions):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "planted",
    [
        'key = f"bfcl_{c}_accuracy"',
        'key = "tuned_" + k',
        'key = f"mix{k}_rows"',
        "key = f'{name}_{k}_won'",
        'key = prefix + "_rows"',
        'key = f"scale{round(s * 100)}_{m}"',
    ],
)
def test_a_planted_name_is_found(planted):
    assert built_names(planted), planted


@pytest.mark.parametrize(
    "innocent",
    [
        'msg = f"eval_max_rows must be >= 1, got {n}"',  # a message, not a name
        'path = f"{prefix}/config.json"',
        'name = f"{prefix}-{slug}"',
        'key = "fc_rows"',  # a whole name, written once where it is read
    ],
)
def test_text_that_is_no_built_name_passes(innocent):
    assert not built_names(innocent), innocent


def test_the_home_module_builds_every_family_the_table_names():
    assert names.accuracy("bfcl", "irrelevance") == "bfcl_irrelevance_accuracy"
    assert names.count("heldout", "multiple", "rows") == "fc_multiple_rows"
    assert names.both({"base": {"a": 1}, "tuned": {"a": 2}}) == {"base_a": 1.0, "tuned_a": 2.0}
    assert names.of_tuned("tuned_fc_ast_accuracy") == "fc_ast_accuracy" and names.of_tuned("base_x") is None
    assert names.mix(2, names.ROWS) == "mix2_rows" and names.mix_rows_index("mix12_rows") == 12
    assert names.mix_rows_index("mix_rows") is None and names.mix_rows_index("mix1_text_kept") is None
    assert names.scaled(0.75, names.PRIMARY) == "scale75_fc_ast_accuracy"
    assert names.registry("eval", "tuned_fc_accuracy") == "eval_tuned_fc_accuracy"
    with pytest.raises(ValueError):
        names.of("merged", "x")
