"""Imports flow one way (issue 34): pipelines -> components -> trainer, trainer never imports kfp, and inside
trainer the layers of pyproject.toml's [tool.importlinter] contracts (the chat vocabulary at the bottom). The
check is import-linter's (`make lint`), which reads every import, those inside functions included; these tests
run it on the tree and show it turns red on a planted import that breaks the order."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    # its own folder first on the path: the packages checked are the ones under `root`, not the installed tree
    return subprocess.run([str(LINT), "--no-cache", "--no-logo"], cwd=root, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(root), "PATH": str(LINT.parent)})


def test_the_trees_imports_keep_every_contract():
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Contracts: 4 kept, 0 broken." in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize("where, planted, broken", [
    # an upward import hidden in a function body: the kind of circle issue 34 found 135 of
    ("trainer/data/encode.py", "def _planted():\n    from trainer.evaluate import scoring  # noqa\n",
     "trainer.data.encode -> trainer.evaluate.scoring"),
    ("trainer/chat/turns.py", "def _planted():\n    import trainer.storage  # noqa\n",
     "trainer.chat.turns -> trainer.storage"),
    ("trainer/model.py", "def _planted():\n    import kfp  # noqa\n", "trainer.model -> kfp"),
    ("components/merge.py", "def _planted():\n    import pipelines.compile  # noqa\n",
     "components.merge -> pipelines.compile"),
])
def test_a_planted_import_against_the_order_breaks_a_contract_and_is_named(tmp_path, where, planted, broken):
    for package in ("trainer", "components", "pipelines"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / where, "a") as f:
        f.write("\n\n" + planted)
    proc = lint(tmp_path)
    assert proc.returncode == 1 and "1 broken" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert broken in proc.stdout, proc.stdout[-3000:]
