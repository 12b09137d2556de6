"""User-facing errors: one clear message, no traceback wall.

Anything the user can fix (bad parameter, missing file, malformed row, unreachable
storage) raises :class:`UserError`. Entry points wrap their work in
:func:`exit_on_user_error`, which prints the message and exits non-zero instead of
printing a traceback; genuine bugs still surface with their full traceback.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterable, Iterator


class UserError(Exception):
    """A problem in the user's input or environment, with the fix in its message."""


class Unavailable(UserError):
    """A service (the S3 endpoint) that did not answer, even after retries: the user's to fix when
    it persists (the message says what to check), a restart's to cure when it passes. Training
    exits with a status that restarts the job for it (trainer.core.exitcodes)."""


def brief(err: BaseException | str, limit: int = 240) -> str:
    """A library's error as part of a message: its first line, cut at a word (not inside one) when
    longer than `limit`; the exception's type when it has no text."""
    text = str(err).strip()
    line = text.splitlines()[0].strip() if text else type(err).__name__
    if len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0].rstrip(" ,;:") + " ..."


def collect(problems: Iterable[str], what: str = "invalid configuration") -> None:
    """Raise one UserError listing every problem, if there are any.

    Validation code appends every problem it finds to a list and calls this once,
    so the user fixes everything in one round instead of one error per run.
    """
    problems = list(problems)
    if problems:
        # A problem that is itself a list (a bad dataset's rows) is indented under its own line.
        lines = "\n".join("  - " + str(p).replace("\n", "\n  ") for p in problems)
        raise UserError(f"{what} ({len(problems)} problem{'s' if len(problems) > 1 else ''}):\n{lines}")


def terminal_safe(text: str) -> str:
    """`text` with every control character but newline and tab written as its escape (`\\x1b`, `\\x07`): a
    value a user gave (a path holding ESC or BEL) echoed raw in a message cleared the screen or set the title."""
    import unicodedata

    return "".join(
        c if c in "\n\t" or unicodedata.category(c) != "Cc" else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


@contextlib.contextmanager
def exit_on_user_error() -> Iterator[None]:
    """Turn a UserError into `error: <message>` on stderr and exit status 2; a reader that went
    away (`... | head`) into a quiet exit, as Unix tools do, instead of a BrokenPipeError traceback."""
    try:
        yield
        sys.stdout.flush()  # a closed pipe shows here rather than as a traceback at exit
    except UserError as err:
        print(f"error: {terminal_safe(str(err))}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    except BrokenPipeError:
        import os

        # Python's advice: point stdout at devnull so that the flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(141) from None  # 128 + SIGPIPE, what a shell reports for a tool cut off by head
