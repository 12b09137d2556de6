"""Progress bars for steps that can take more than a few seconds (transfers, evaluation, merging).

One place decides how a bar looks: tqdm on stderr, refreshed every half second on a terminal
and every 2 s otherwise (a component's stderr is a pipe into kfp.local or the pod log, where
every refresh becomes a line). run_local recognises the tqdm line shape and thins it further.
"""

from __future__ import annotations

import sys
import threading

# Trees smaller than this move in about a second: no bar for them.
QUIET_BELOW_BYTES = 32 << 20


def bar(total: int | None, desc: str, unit: str = "it", disable: bool = False):
    """A tqdm bar; `unit="B"` shows bytes with binary prefixes, rate and ETA."""
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    kwargs = dict(unit_scale=True, unit_divisor=1024) if unit == "B" else {}
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        disable=disable,
        file=sys.stderr,
        mininterval=0.5 if tty else 2.0,
        dynamic_ncols=tty,
        **kwargs,
    )


class TransferProgress:
    """A byte counter shared by parallel transfers; minio's `progress=` object protocol
    (`set_meta`, `update`) on one bar. Use as a context manager."""

    def __init__(self, total_bytes: int, desc: str):
        self._lock = threading.Lock()
        self._bar = bar(total_bytes, desc, unit="B", disable=total_bytes < QUIET_BELOW_BYTES)

    def set_meta(self, object_name: str, total_length: int) -> None:
        pass  # one bar for the whole tree, sized up front

    def update(self, length: int) -> None:
        with self._lock:
            self._bar.update(length)

    def __enter__(self) -> "TransferProgress":
        return self

    def __exit__(self, *exc) -> None:
        self._bar.close()
