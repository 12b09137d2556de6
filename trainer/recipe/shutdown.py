"""How a training process ends on SIGTERM (a preempted pod, torchrun stopping its workers, Ctrl-C's
sibling): at the next step boundary with a checkpoint, every rank together, or after `shutdown_grace_s`
without one; 0 once the run's result is committed, else 143 (trainer.core.exitcodes)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

from trainer.core.exitcodes import hard_exit


# Set once this process's run has its result committed (rank 0: result.json written; every rank:
# past the final barrier). From then on a SIGTERM ends the process with 0, not 143: the work
# is saved, and a retryable status would fail or needlessly restart a job that is done.
COMMITTED = threading.Event()


def sigterm_exit(*_) -> None:
    """SIGTERM handler for `python -m trainer train` outside the recipe's own (before its setup
    installs it, after `Shutdown.close` restores this): 0 once the result is committed, else 143."""
    exit_now(0 if COMMITTED.is_set() else 143)


class Shutdown:
    """SIGTERM at any point. `requested` is read at step boundaries, where every rank stops
    together and writes a checkpoint. Whatever the main thread is doing, a watcher thread is
    woken by the signal itself (signal.set_wakeup_fd: Python handlers cannot run while the main
    thread is blocked in C code, such as a collective waiting for a dead peer) and exits the
    process with 143 once `grace_s` has passed without the orderly exit having happened."""

    def __init__(self, grace_s: float):
        self.requested, self.grace_s = False, grace_s
        self.deadline: float | None = None
        self._lock = threading.Lock()
        self._restore = None
        self._timer: threading.Timer | None = None
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach only the main thread's handlers: an in-process caller's concern
        read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._restore = (signal.set_wakeup_fd(self._write), signal.signal(signal.SIGTERM, lambda *_: self._arm()))
        threading.Thread(target=self._watch, args=(read,), daemon=True, name="sigterm-watch").start()

    def close(self) -> None:
        """Restore what was there before (for in-process callers that train more than once)."""
        with self._lock:
            if self._timer is not None:  # a SIGTERM during cleanup: the run ended in time
                self._timer.cancel()
        if self._restore is not None:
            signal.set_wakeup_fd(self._restore[0])
            signal.signal(signal.SIGTERM, self._restore[1])
            os.close(self._write)  # ends the watcher
            self._restore = None

    def _watch(self, fd: int) -> None:
        with contextlib.closing(os.fdopen(fd, "rb", buffering=0)) as f:
            while got := f.read(64):
                if signal.SIGTERM in got:
                    self._arm()

    def _arm(self) -> None:
        with self._lock:
            self.requested = True
            if self.deadline is None:
                self.deadline = time.monotonic() + self.grace_s
                timer = self._timer = threading.Timer(self.grace_s, self._hard_exit)
                timer.daemon = True
                timer.start()

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic()) if self.deadline else self.grace_s

    @staticmethod
    def _hard_exit() -> None:
        if COMMITTED.is_set():  # stuck in the teardown after the result was written: the work is done
            print(
                "SIGTERM: the result is committed; exiting with 0 without waiting for the teardown",
                file=sys.stderr,
                flush=True,
            )
            hard_exit(0, flush=False)  # this timer's thread: see hard_exit
        print(
            "SIGTERM: no step boundary reached within shutdown_grace_s; exiting without a checkpoint",
            file=sys.stderr,
            flush=True,
        )
        hard_exit(143, flush=False)


def exit_now(code: int) -> None:
    """Exit at once: a normal interpreter exit tears down the process group, which can hang
    once a peer has gone, and would hold up torchrun's exit and the restart."""
    hard_exit(code)
