"""A wall-clock limit on a body of Python (a chat template's rendering): every template check, the `auto` probe and
the parser's own probe run under it, so that a template that loops on tools is a refusal, not a hang."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

# What rendering a template may take on a data check (a real template renders a row in milliseconds)
TEMPLATE_BUDGET_S = 30.0


class OverBudget(BaseException):
    """Raised by the budget's timer inside a template's rendering: a BaseException, so that the
    checks' `except Exception` (whatever a template raises refuses that row) lets it through."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[bool]:
    """OverBudget in the body after `seconds` of wall-clock time: SIGALRM through setitimer, whose
    handler interrupts Jinja's loops (Python bytecode) where they are. Only the main thread gets
    signals; elsewhere, or under an outer timer due sooner, the body runs without a limit of its own (the outer's
    OverBudget, raised in it, is the outer's to catch). An outer timer is put back with what is left of it. Yields
    whether this limit is the one set (False: none, or an outer one)."""
    import signal
    import threading
    import time

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield False
        return
    outer, _ = signal.getitimer(signal.ITIMER_REAL)
    if outer and outer < seconds:  # someone else's deadline comes first: theirs stands, with its own handler
        yield False  # (replacing that handler with one that ignores it let a nested check run past both: a hang)
        return
    armed = [True]

    def expired(signum, frame):
        if armed[0]:
            raise OverBudget

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield True
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-3))
