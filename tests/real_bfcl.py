"""BFCL v4's data for tests: the wheel `bfcl-eval==2026.3.23` (trainer.data.bfcl.PACKAGE) fetched from PyPI at
test time with `pip download --no-deps`, never committed, kept in `$LLM_FINETUNE_CACHE` (default
`~/.cache/llm-finetune-kfp`) under `bfcl/`:

    bfcl_wheel()   -> the wheel (1.9 MB; also what the official checker is imported from)
    bfcl_tree()    -> the tree trainer.data.bfcl.extract makes of it (what delivery uploads)

Both are session fixtures of the same names (tests/conftest.py); treat them as read-only. A fetch that fails
fails the test (never a skip).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tests.real_tokenizers import cache_root
from trainer.data import bfcl


def _dir() -> Path:
    d = cache_root() / "bfcl"
    d.mkdir(parents=True, exist_ok=True)
    return d


def bfcl_wheel() -> Path:
    """The cached wheel, fetched on first use (a process-unique temporary folder, renamed into place)."""
    root = _dir()
    wheels = sorted(root.glob(f"bfcl_eval-{bfcl.VERSION}-*.whl"))
    if wheels:
        return wheels[0]
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        got = bfcl.fetch(Path(tmp))
        os.replace(got, root / got.name)
    return root / got.name


def bfcl_tree() -> Path:
    """The extracted tree, made once from the cached wheel."""
    tree = _dir() / f"tree-{bfcl.VERSION}"
    if (tree / bfcl.VERSION_FILE).is_file():
        return tree
    tmp = Path(tempfile.mkdtemp(dir=_dir()))
    try:
        bfcl.extract(bfcl_wheel(), tmp / "tree")
        try:
            os.replace(tmp / "tree", tree)
        except OSError:  # another process made it first: theirs is the same
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tree
