"""Imports flow one way: pipelines -> components -> trainer, and trainer never imports kfp (its
pods and the trainer CLI run without it). Read from the sources, imports inside functions included."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"trainer": ("kfp", "pipelines", "components"), "components": ("pipelines",)}


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_flow_one_way(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert len(files) > 5
    wrong = {f"{f.relative_to(ROOT)} imports {n}" for f in files for n in imported(f) & set(FORBIDDEN[package])}
    assert not wrong, sorted(wrong)
