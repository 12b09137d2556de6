"""Progress watchdog: fail a training job whose progress stops, naming the stage it is stuck in.

The trainer's rank 0 prints a progress line whenever its stage changes and at logging steps
(see `progress_line`); a launcher feeds every log line it reads from that process (or pod) to
a Watchdog and polls `check()`:

    dog = Watchdog(stall_s=1800)          # 0 turns it off: check() always returns None
    for line in log_lines:                # any lines; only progress lines count
        dog.feed(line)
        if (why := dog.check()) is not None:
            kill the job, do not restart it, report `why`

`check()` also returns a message when no line arrives at all, so call it on a timer too,
not only after `feed`. A stall is not retried: a restarted job would resume at the same
point and most likely stall there again, holding its accelerators the whole time.
"""

from __future__ import annotations

import re
import time
from typing import Callable

_LINE = re.compile(r"progress: step=(\d+) stage=(.+?)\s*$")


def progress_line(stage: str, step: int) -> str:
    """The line the trainer prints (rank 0 only): `progress: step=<optimizer steps done> stage=<stage>`."""
    return f"progress: step={step} stage={stage}"


def parse(line: str) -> tuple[int, str] | None:
    """(step, stage) of a progress line, or None for any other line."""
    m = _LINE.search(line)
    return (int(m.group(1)), m.group(2)) if m else None


class Watchdog:
    """Fails when neither the step nor the stage changed for `stall_s` seconds (0: never)."""

    def __init__(self, stall_s: float, clock: Callable[[], float] = time.monotonic):
        self.stall_s, self.clock = stall_s, clock
        self.step, self.stage = 0, "starting (before the trainer's first progress line)"
        self.since = clock()

    def feed(self, line: str) -> None:
        """Read one log line; a progress line with a new step or stage resets the timer."""
        got = parse(line)
        if got is not None and got != (self.step, self.stage):
            (self.step, self.stage), self.since = got, self.clock()

    def check(self) -> str | None:
        """None while progressing, else the message to fail the job with."""
        idle = self.clock() - self.since
        if not self.stall_s or idle < self.stall_s:
            return None
        return (
            f"no progress for {idle:.0f} s in stage {self.stage!r} at step {self.step} "
            f"(stall_timeout_s={self.stall_s:g}); the job was stopped and not restarted. "
            f"Look at the log above for what that stage was waiting on, or raise stall_timeout_s "
            f"if the stage is legitimately that slow"
        )
