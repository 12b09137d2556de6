"""Hygiene held by tools (issue 47): mypy on trainer/ ([tool.mypy]), ruff's lint (pyflakes and pycodestyle:
[tool.ruff] in pyproject.toml) and its format check on the whole tree, as `make lint` runs them, so `make test` fails
on any; and each shown to turn red on a planted fault, so a configuration that checks nothing would fail here too."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUFF = Path(sys.executable).with_name("ruff")


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), *args, "--no-cache", "."], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_tree_passes_ruffs_lint_and_format_check():
    lint = ruff("check")
    assert lint.returncode == 0, lint.stdout[-3000:] + lint.stderr[-2000:]
    form = ruff("format", "--check")
    assert form.returncode == 0, form.stdout[-3000:] + form.stderr[-2000:]


def test_an_unused_import_and_an_unformatted_line_are_caught(tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "planted.py").write_text("import json\n\n\ndef f( a ):\n    return a\n")
    lint = ruff("check", cwd=tmp_path)
    assert lint.returncode == 1 and "F401" in lint.stdout and "planted.py" in lint.stdout, lint.stdout
    form = ruff("format", "--check", cwd=tmp_path)
    assert form.returncode == 1 and "planted.py" in form.stdout + form.stderr, form.stdout + form.stderr


MYPY = Path(sys.executable).with_name("mypy")


def mypy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(MYPY), *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_library_passes_mypy():
    """[tool.mypy]: trainer/ with its vocabulary (trainer/chat/types.py), as `make lint` runs it."""
    checked = mypy()
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]


def test_a_row_shape_mistake_is_caught(tmp_path):
    """The vocabulary is checked, not decoration: a list of messages passed where a Row is wanted fails."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from trainer.chat.turns import target_index\n"
        "from trainer.chat.types import Row\n\n\n"
        "def wrong(row: Row) -> int:\n"
        '    return target_index(row["messages"])\n'
    )
    checked = mypy("trainer", str(planted))
    assert checked.returncode == 1, checked.stdout
    assert "planted.py:6" in checked.stdout and '"Row"' in checked.stdout, checked.stdout
