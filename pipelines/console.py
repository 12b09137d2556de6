"""What a local run shows on the terminal, and what only goes to its log file.

kfp.local prints everything to stdout: its own task lines, each task's executor input as
JSON (dozens of lines per task), the components' output, Python warnings, and every
refresh of every progress bar (a component's stderr is a pipe, so each refresh becomes a
line). `Console` takes the place of sys.stdout for the run: every line goes to the log
file (colour codes removed), and the terminal gets task start/finish lines with their
time, the components' own messages, progress thinned out (redrawn in place on a terminal,
every 15 s otherwise), and on a failure the task's last lines.

kfp.local writes a log record (possibly several lines, e.g. a task's outputs) with one
write() call and a component's output one line at a time, under a 4-space indent. The
rules below look at one line at a time, without state per task, because trials of a sweep
run in parallel threads and their lines interleave; the one state kept, whether a traceback's or a
warning's indented lines follow, is kept per thread.

kfp.local indents a task's lines by swapping `builtins.print`, which is not thread-safe: `install`
puts a per-thread helper in its place (pipelines.kfp_local_patches.thread_safe_indent), and one log
handler shared by the threads in place of its per-task swap (thread_safe_logger), which lost lines.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
import sys
import threading
import time
from typing import IO

from pipelines import kfp_local_patches

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_KFP_RECORD = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} - (?P<level>[A-Z]+) - (?P<msg>.*)", re.S)
_TASK = re.compile(r"^Task '(?P<task>[^']+)' (?P<what>.*)")
# tqdm's line: "desc:  45%|####5     | 180/400 [00:10<00:12, 17.5it/s, loss=0.3]"
PROGRESS = re.compile(
    r"^(?P<desc>.*?):?\s*(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<n>[^/\s]+)/(?P<total>\S+)\s*"
    r"\[(?P<elapsed>[\d:]+)"
)
_RULE = re.compile(r"^\s*-{20,}$")  # kfp.local's line between tasks
# Lines of a JSON dump (the executor input kfp.local's executor prints): brackets, or "key": ...
_JSON_LINE = re.compile(r'^\s*([\[\]{}(),]+|"[^"]*":.*|"[^"]*",?)$')
_WARNING = re.compile(r"^\S.*:\d+: \w*Warning: ")
# The trainer's heartbeat for the launchers' watchdog (trainer/core/watchdog.py), not for people.
_HEARTBEAT = re.compile(r"^progress: step=\d+ stage=")
_TORCH_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")  # torch.distributed's glog-style lines
# Parent-process warnings that say nothing to a local user (kept in the log file).
KNOWN_WARNINGS = ("have no effect in the current local runner", "non-Python base image")
QUIET_PROGRESS_S = 2.0  # a bar that finishes faster than this is not shown
PROGRESS_EVERY_S = 15.0  # on a non-terminal (and in the log), one progress line per bar this often


def _starts_block(body: str) -> bool:
    """A traceback's or a warning's first line: hidden, with the indented lines under it (`Console._line`)."""
    return body.startswith("Traceback (most recent call last)") or bool(_WARNING.match(body))


def _seconds(clock: str) -> int:
    total = 0
    for part in clock.split(":"):
        total = total * 60 + int(part)
    return total


class Console:
    """A sys.stdout stand-in for a local run (see the module docstring)."""

    def __init__(self, terminal: IO[str], log: IO[str]):
        self.terminal, self.log = terminal, log
        self.tty = terminal.isatty()
        self.tail: collections.deque[tuple[str, bool]] = collections.deque(maxlen=25)  # (line, shown)
        # Per task too: after a failure, tasks that kfp.local still runs must not push the failed
        # task's lines out of view. (Trials side by side interleave; there `tail` is the best guess.)
        self._tails: dict[str, collections.deque[str]] = {}
        self._current: str | None = None
        self._failed: list[str] = []
        self.hidden_warnings = 0
        self._buffer = ""
        self._lock = threading.RLock()
        self._started: dict[str, float] = {}
        self._progress_shown: dict[str, tuple[float, str]] = {}
        self._in_place = False  # a progress line is drawn without its newline
        # per thread (trials run side by side): the last unindented line started a traceback or a warning
        self._in_hidden_block: dict[int, bool] = {}

    # --- the file protocol print() and logging need
    def write(self, text: str) -> int:
        with self._lock:
            if _KFP_RECORD.match(_ANSI.sub("", text)) and not self._buffer.strip():
                self._buffer = ""  # at most another thread's pending indent
                self._record(text)
            else:
                self._buffer += text
                while "\n" in self._buffer:
                    line, self._buffer = self._buffer.split("\n", 1)
                    self._line(line)
        return len(text)

    def flush(self) -> None:
        self.terminal.flush()
        self.log.flush()

    def isatty(self) -> bool:
        return False  # kfp.local and libraries must not draw on the terminal through us

    # --- what run_local says itself
    def say(self, text: str = "") -> None:
        """A line for the terminal and the log, not filtered."""
        with self._lock:
            self._to_terminal(text)
            self._to_log(text)

    @property
    def failed(self) -> list[str]:
        """The tasks that failed, in order."""
        return list(self._failed)

    def show_tail(self, header: str) -> bool:
        """The last lines the failed task printed (hidden ones included), after a failure; only when
        some of them were hidden (a traceback's frames): lines already on the terminal are not repeated."""
        with self._lock:
            failed = next((t for t in self._failed if self._tails.get(t)), None)
            if failed is None:  # kfp.local's own failure (its error says it): no task's lines to blame
                return False
            lines = list(self._tails[failed])
            if all(shown for _, shown in lines):
                return False
            self._to_terminal(f"{header.rstrip(':')} ({failed}):" if failed else header)
            for line, _ in lines:
                self._to_terminal("    " + line)
            return True

    def last_line(self, task: str) -> str:
        """The last line `task` printed itself (its error, as a rule), for a run's one-line summary."""
        with self._lock:
            lines = self._tails.get(task) or []
            return lines[-1][0].strip() if lines else ""

    # --- classification
    def _record(self, text: str) -> None:
        plain = _ANSI.sub("", text).rstrip("\n")
        self._to_log(plain)
        m = _KFP_RECORD.match(plain)
        level, msg = m["level"], m["msg"].split("\n", 1)[0]
        task = _TASK.match(msg)
        now = time.monotonic()
        if msg.startswith("Executing task"):
            name = msg.split("'")[1]
            self._started[name] = now
            self._current = name
            self._tails[name] = collections.deque(maxlen=self.tail.maxlen)
            self._to_terminal(f"{time.strftime('%H:%M:%S')} ▶ {name}")
        elif task and task["what"].startswith("finished with status"):
            took = now - self._started.get(task["task"], now)
            ok = "SUCCESS" in task["what"]
            if not ok:
                self._failed.append(task["task"])
            self._to_terminal(
                f"{time.strftime('%H:%M:%S')} {'✓' if ok else '✗'} {task['task']}"
                f"{'' if ok else ' FAILED'} ({took:.1f}s)"
            )
        elif msg.startswith(("Running pipeline", "Pipeline ", "Skipping")) or level in ("WARNING", "ERROR"):
            if not any(k in msg for k in KNOWN_WARNINGS):
                self._to_terminal(msg)

    def _line(self, raw: str) -> None:
        line = _ANSI.sub("", raw).rstrip("\r")
        # A heartbeat printed while a bar is drawn lands at the end of the bar's line.
        head, sep, tail = line.partition("progress: step=")
        if sep and head.strip():
            self._line(head)
            line = ("    " if head.startswith("    ") else "") + sep + tail
        body = line[4:] if line.startswith("    ") else line
        if PROGRESS.match(body.strip()):
            self._progress(body.strip())
            return
        self._to_log(line)
        if not line.startswith("    "):
            if line.strip() and not _RULE.match(line):
                self._to_terminal(line)  # not a component's line: the runner's own
            return
        shown = not self._hidden(body)
        # A traceback's frames and a warning's source line are indented under the line that starts them: hidden with
        # it. Any other indented line is the component's own (a table's rows, the smoke test's answers): shown.
        thread = threading.get_ident()
        if body[:1].isspace():
            shown = shown and not self._in_hidden_block.get(thread, False)
        else:
            self._in_hidden_block[thread] = _starts_block(body)
        if (
            body.strip()
            and not body.startswith("[KFP Executor")
            and not _JSON_LINE.match(body)
            and not _HEARTBEAT.match(body)
        ):  # the component's own lines, not kfp's dump of its input
            self.tail.append((body, shown))
            if self._current in self._tails:
                self._tails[self._current].append((body, shown))
        if shown:
            self._to_terminal(line)
        elif _WARNING.match(body):
            self.hidden_warnings += 1

    @staticmethod
    def _hidden(body: str) -> bool:
        """Executor input JSON, tracebacks, kfp's own chatter, warnings: log file only (their indented lines: `_line`)."""
        return bool(
            not body.strip()
            or _RULE.match(body)
            or _JSON_LINE.match(body)  # kfp's dump of the executor input, indented or not
            or body.startswith("[KFP Executor")
            or (body.startswith('{"') and body.rstrip().endswith("}"))  # JSON for programs (train_result)
            or _TORCH_LOG.match(body)
            or _HEARTBEAT.match(body)
            or _starts_block(body)
            or body.strip() == "KeyboardInterrupt"
        )  # Ctrl-C reaches the tasks too: run_local says it once

    def _progress(self, text: str) -> None:
        m = PROGRESS.match(text)
        desc, now = m["desc"].strip(), time.monotonic()
        done = m["n"] == m["total"]
        if _seconds(m["elapsed"]) < QUIET_PROGRESS_S:
            if done:
                self._to_log("    " + text)
            return
        last_time, last_count = self._progress_shown.get(desc, (float("-inf"), ""))
        count = f"{m['n']}/{m['total']}"  # a slow step redraws the same count: nothing new
        if done and count == last_count and now - last_time < PROGRESS_EVERY_S:
            return  # tqdm repeats its final state (with a new rate) when it closes
        due = done or (now - last_time >= PROGRESS_EVERY_S and count != last_count)
        if due:
            self._progress_shown[desc] = (now, count)
            self._to_log("    " + text)
        if self.tty:
            self.terminal.write("\r\x1b[K    " + text + ("\n" if done else ""))
            self.terminal.flush()
            self._in_place = not done
        elif due:
            self._to_terminal("    " + text)

    def _to_terminal(self, text: str) -> None:
        if self._in_place:
            self.terminal.write("\n")
            self._in_place = False
        self.terminal.write(text + "\n")
        self.terminal.flush()

    def _to_log(self, text: str) -> None:
        self.log.write(text + "\n")


class Tee:
    """sys.stderr for a local run: the terminal and the log file both get everything."""

    def __init__(self, terminal: IO[str], log: IO[str]):
        self.terminal, self.log = terminal, log

    def write(self, text: str) -> int:
        self.terminal.write(text)
        self.log.write(_ANSI.sub("", text))
        return len(text)

    def flush(self) -> None:
        self.terminal.flush()
        self.log.flush()

    def isatty(self) -> bool:
        return self.terminal.isatty()


def install(log: IO[str]):
    """Route this process's stdout, stderr and warnings through a Console; returns it and a
    function that puts everything back."""
    import warnings

    saved = sys.stdout, sys.stderr, warnings.showwarning
    console = Console(sys.stdout, log)
    sys.stdout, sys.stderr = console, Tee(saved[1], log)
    unpatches = [kfp_local_patches.thread_safe_indent(), kfp_local_patches.thread_safe_logger()]
    # A closed terminal pipe (`run_local | head`) raised inside kfp's logging call: logging would
    # print its own 40-line "Logging error" traceback; the command still ends with status 141.
    raise_exceptions, logging.raiseExceptions = logging.raiseExceptions, False

    def showwarning(message, category, filename, lineno, file=None, line=None):
        text = warnings.formatwarning(message, category, filename, lineno, line)
        if any(k in str(message) for k in KNOWN_WARNINGS):
            log.write(text)
        else:
            saved[2](message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning

    def restore() -> None:
        console.flush()
        sys.stdout, sys.stderr, warnings.showwarning = saved
        logging.raiseExceptions = raise_exceptions
        for unpatch in unpatches:
            unpatch()

    return console, restore


class SafeLog:
    """The run's log file, which a full disk (or any write error) closes instead of failing the run:
    the terminal gets one line saying so, and the run goes on without the rest of the log."""

    def __init__(self, file: IO[str], terminal: IO[str]):
        self.file, self.terminal, self.broken = file, terminal, False

    def _guard(self, call, *args) -> None:
        if self.broken:
            return
        try:
            call(*args)
        except (OSError, ValueError) as err:  # ENOSPC, EIO; ValueError: the file was closed
            self.broken = True
            with contextlib.suppress(OSError, ValueError):
                self.terminal.write(
                    f"note: the log {getattr(self.file, 'name', '')} stopped here ({err}); the run goes on\n"
                )

    def write(self, text: str) -> int:
        self._guard(self.file.write, text)
        return len(text)

    def flush(self) -> None:
        self._guard(self.file.flush)

    def __enter__(self) -> SafeLog:
        return self

    def __exit__(self, *_) -> None:
        self.broken = True  # the run is over: late lines (a library's handler bound to the console) are dropped
        with contextlib.suppress(OSError, ValueError):  # closing flushes: the same full disk
            self.file.close()
