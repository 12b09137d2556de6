"""Imports flow one way (issue 34): pipelines -> components -> trainer, trainer never imports kfp, and inside
trainer the layers of pyproject.toml's [tool.importlinter] contracts (the chat vocabulary at the bottom). The
check is import-linter's (`make lint`), which reads every import, those inside functions included; these tests
run it on the tree and show it turns red on a planted import that breaks the order."""

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    # its own folder first on the path: the packages checked are the ones under `root`, not the installed tree
    return subprocess.run(
        [str(LINT), "--no-cache", "--no-logo"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(root), "PATH": str(LINT.parent)},
    )


def test_the_trees_imports_keep_every_contract():
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Contracts: 4 kept, 0 broken." in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize(
    "where, planted, broken",
    [
        # an upward import hidden in a function body: the kind of circle issue 34 found 135 of
        (
            "trainer/data/encode.py",
            "def _planted():\n    from trainer.evaluate import scoring  # noqa\n",
            "trainer.data.encode -> trainer.evaluate.scoring",
        ),
        (
            "trainer/chat/turns.py",
            "def _planted():\n    import trainer.config.sources  # noqa\n",
            "trainer.chat.turns -> trainer.config.sources",
        ),
        (
            "trainer/models/weights.py",
            "def _planted():\n    from trainer.store import registry  # noqa\n",
            "trainer.models.weights -> trainer.store.registry",
        ),
        ("trainer/models/model.py", "def _planted():\n    import kfp  # noqa\n", "trainer.models.model -> kfp"),
        (
            "components/merge.py",
            "def _planted():\n    import pipelines.compile  # noqa\n",
            "components.merge -> pipelines.compile",
        ),
    ],
)
def test_a_planted_import_against_the_order_breaks_a_contract_and_is_named(tmp_path, where, planted, broken):
    for package in ("trainer", "components", "pipelines"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / where, "a") as f:
        f.write("\n\n" + planted)
    proc = lint(tmp_path)
    assert proc.returncode == 1 and "1 broken" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert broken in proc.stdout, proc.stdout[-3000:]


def unlayered(root: Path) -> list[str]:
    """The modules of trainer/ in no layer of the "trainer's layers" contract (import-linter checks only the
    modules its layers name: one outside every layer would import anything unchecked)."""
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in config if c["name"].startswith("trainer's layers"))
    named = {name.strip() for layer in layers for name in layer.split("|")}
    out = []
    for path in sorted((root / "trainer").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        if module != "trainer" and not any(module == n or module.startswith(n + ".") for n in named):
            out.append(module)
    return out


def test_every_module_of_trainer_is_in_a_layer_and_only_main_sits_at_its_top():
    assert unlayered(ROOT) == []
    assert sorted(p.name for p in (ROOT / "trainer").glob("*.py")) == ["__init__.py", "__main__.py"]


def test_a_module_outside_every_layer_is_named(tmp_path):
    shutil.copytree(ROOT / "trainer", tmp_path / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "trainer" / "stray.py").write_text("")
    (tmp_path / "trainer" / "extra").mkdir()
    (tmp_path / "trainer" / "extra" / "__init__.py").write_text("")
    assert unlayered(tmp_path) == ["trainer.extra", "trainer.stray"]


def private_uses(root: Path) -> list[str]:
    """Every use of another module's `_private` name in trainer/, components/ and pipelines/: imported by name, or
    read through an imported module (`module._name`). A name another module needs is public."""
    import ast

    out = []
    for path in sorted(p for package in ("trainer", "components", "pipelines") for p in (root / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = set()  # local names bound to our modules or to names imported from them
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                "trainer",
                "components",
                "pipelines",
            ):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        out.append(f"{path.relative_to(root)}:{node.lineno}: from {node.module} import {alias.name}")
                    modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                modules |= {a.asname or a.name for a in node.names if a.name.split(".")[0] == "trainer"}
        out += [
            f"{path.relative_to(root)}:{node.lineno}: {node.value.id}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
        ]
    return out


def test_no_module_reads_another_modules_private_names(tmp_path):
    assert private_uses(ROOT) == []
    shutil.copytree(ROOT / "trainer", tmp_path / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    for package in ("components", "pipelines"):
        (tmp_path / package).mkdir()
    with open(tmp_path / "trainer" / "data" / "encode.py", "a") as f:
        f.write(
            "\n\nfrom trainer.core.jsontext import _planted  # noqa\nfrom trainer.core import storage  # noqa\n"
            "storage._client  # noqa\n"
        )
    assert [line.split(": ", 1)[1] for line in private_uses(tmp_path)] == [
        "from trainer.core.jsontext import _planted",
        "storage._client",
    ]
