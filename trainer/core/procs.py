"""python -m trainer.core.procs [--parent PID] [--grace S] [--remove DIR ...] -- COMMAND [ARG ...]

Processes we start never outlive us. Three pieces (Linux; elsewhere the callers' own handlers are all
there is):

- `guard`: the command above. It runs COMMAND as its child, in the process group it leads (the
  caller starts it with start_new_session=True), and takes the whole tree down -- SIGTERM, then
  SIGKILL after `--grace` seconds -- when it is signalled (SIGTERM, SIGINT, SIGHUP), when COMMAND
  exits (its helpers with it), or when the process `--parent` names is gone, however it died
  (SIGKILL included). vLLM needs it: while it loads a model its api_server does not act on SIGTERM,
  and its EngineCore and Worker outlive a killed api_server unless tied (below). The guard is a
  subreaper, so whatever COMMAND orphans is still its to stop.
- `die_with_parent`: a process ties itself to the one that started it: the kernel sends it SIGKILL
  when that one dies (PR_SET_PDEATHSIG), however it died. The line of defence that needs no code of
  ours to run: a guard killed with SIGKILL, with its command (a user's `kill -9` of what looks hung),
  runs nothing. trainer.serving.vllm_server ties each of vLLM's processes so.
- `Started`: what a long command (run_local) started, found again at its end from /proc --
  whichever process it was handed to once its parent died (the command is a subreaper while it
  lasts) -- and stopped the same way, so that Ctrl-C, SIGTERM to it or to its group, or a failed
  task leave no executor, trainer or model server behind.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence

import psutil

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
# The pid of the process that started this one, set by that process (the guard for its command,
# die_with_parent for what the process starts next): a tie made after the starter died catches it.
STARTER_ENV = "FINETUNE_STARTED_BY"


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (none when it is gone)."""
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def alive(pid: int) -> bool:
    """Running (a zombie has ended: only its status is left to collect)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def group_alive(pgid: int) -> bool:
    """A running (not zombie) process is in process group `pgid`."""
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (psutil.Error, OSError):
            continue
    return False


def start_time(pid: int) -> float:
    """When `pid` started: with the pid, a process's identity (pids are reused)."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def subreaper(on: bool = True) -> None:
    """Orphaned descendants are handed to this process instead of PID 1, so it can still find them."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Have the kernel send this process `sig` when the process that started it dies (Linux's
    PR_SET_PDEATHSIG; elsewhere nothing), and do the same for every process forked from this one from
    now on (a forked child does not inherit it). A process started with exec (multiprocessing's spawn,
    subprocess) must call this itself (trainer.serving.vllm_server: spawn runs the main module in the
    child first).

    The kernel's "parent" is the *thread* that started the process: a tied process whose starting
    thread ends gets `sig` then, its parent process alive. A child forked from a thread other than the
    main one is not tied for that reason; a spawned child ties itself whichever thread started it.
    vLLM's API server starts its EngineCore from its main thread, which lasts as long as the process.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    starter = os.environ.get(STARTER_ENV, "")
    # Gone before the line above took effect: the kernel sends nothing for a death that came before. A parent
    # other than the starter is not enough (a shell in between is no death): the starter must have ended.
    if starter.isdigit() and os.getppid() != int(starter) and not alive(int(starter)):
        os.kill(os.getpid(), sig)
    os.environ[STARTER_ENV] = str(os.getpid())  # what this process starts finds its starter here
    global _tie_forks
    if _tie_forks is None:
        os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
    _tie_forks = sig


_tie_forks: int | None = None  # the signal forked children get, once die_with_parent was called
_forking_from_main = False


def _before_fork() -> None:
    # os.fork holds the GIL from these hooks to the fork itself: no other thread can change this between.
    global _forking_from_main
    _forking_from_main = threading.current_thread() is threading.main_thread()


def _after_fork_in_child() -> None:
    # The child's memory is the forking thread's copy: its flag, and STARTER_ENV naming the parent.
    if _forking_from_main and _tie_forks is not None:
        die_with_parent(_tie_forks)


def stop(pids: Iterable[int], grace: float, sleep: Callable[[float], None] = time.sleep) -> list[int]:
    """SIGTERM (and SIGCONT: a stopped process handles SIGTERM once resumed) each of `pids`, SIGKILL
    what is still running after `grace` seconds; returns the pids that had to be killed. Exit statuses
    are left to the processes' owners (a Popen whose status we took would read 0, a success): an
    ended child is a zombie until then, which counts as ended."""
    pids = [p for p in pids if p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGCONT):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        sleep(0.1)
    killed = [p for p in pids if alive(p)]
    for pid in killed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for _ in range(50):  # SIGKILL is not instant: a process frees its memory first
        if not any(alive(p) for p in pids):
            break
        sleep(0.1)
    return killed


class Started:
    """The processes started below this one from now on (see the module's docstring).

    Usage: `started = Started()` before starting work, `started.stop(grace)` on the way out."""

    def __init__(self) -> None:
        self.me = os.getpid()
        self.before = {(p, start_time(p)) for p in descendants(self.me)}
        subreaper(True)

    def running(self) -> list[int]:
        """Processes below us now that were not there at the start (a reused pid is a new process)."""
        return [p for p in descendants(self.me) if alive(p) and (p, start_time(p)) not in self.before]

    def signal(self, sig: int) -> None:
        """Send `sig` to every process started since, without waiting."""
        for pid in self.running():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def release(self) -> None:
        """Leave what runs running (a server kept up on purpose); subreaping ends."""
        subreaper(False)

    def stop(self, grace: float, say: Callable[[str], None] = lambda _: None) -> list[int]:
        """Stop every process started since; returns those that had to be killed. Subreaping ends."""
        try:
            todo = self.running()
            if todo:
                say(f"stopping {len(todo)} process(es) this run started (SIGTERM, SIGKILL after {grace:.0f}s)")
            killed = []
            # A process may start another while we stop it (a trainer's torchrun restarting a worker):
            # go round again until nothing new is left.
            for _ in range(3):
                if not todo:
                    break
                killed += stop(todo, grace)
                todo = self.running()
            return killed
        finally:
            subreaper(False)


def private_tmpdir_env(tmp: str, shared: str = "") -> dict[str, str]:
    """Environment for a child whose temporary files go to `tmp`, a directory removed after it, except
    inductor's compile caches, kept where torch keeps them for us: a restarted job or server reuses its
    compiled kernels. Two places: TORCHINDUCTOR_CACHE_DIR, and inductor's precompiled headers, which it
    keeps under TMPDIR whatever that variable says (torch 2.13): a link in `tmp` to torch's folder, where
    one exists, spares each compiling process 4 s of g++ (2 cores, 2026-11-25)."""
    shared = shared or inductor_cache_dir()  # given: the caller spares importing inductor (~2 s) to find it
    if os.path.isdir(shared):
        with contextlib.suppress(OSError):  # only time is lost without it
            os.symlink(shared, os.path.join(tmp, os.path.basename(shared)))
    return {"TMPDIR": tmp, "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR") or shared}


def inductor_cache_dir() -> str:
    """Where torch keeps inductor's compiled kernels when TORCHINDUCTOR_CACHE_DIR is not set."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # a private module: if it moves, its rule as of torch 2.13
        return os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")
    return default_cache_dir()


def _say(line: str) -> None:
    """A line to our stderr (the server's log file), which a full disk must not turn into a guard that
    stops nothing."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)


def guard(command: list[str], parent: int = 0, grace: float = 10.0, remove: Sequence[str] = ()) -> int:
    """Run `command` and keep its whole tree tied to us and to `parent` (see the module's docstring);
    the directories in `remove` (its temporary files) go once the tree is down, however it ended.
    Returns its exit status (128 + N when we were stopped by signal N first)."""
    subreaper(True)
    stopping: list[int] = []

    def on_signal(signum, _frame):
        stopping.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    child = None
    try:
        # Our pid for the command's own tie (die_with_parent): a SIGKILL to us before it is made is seen.
        child = subprocess.Popen(command, env={**os.environ, STARTER_ENV: str(os.getpid())})
        while child.poll() is None and not stopping:
            if parent and os.getppid() != parent:  # our parent died: we were handed to its reaper
                _say(f"procs: parent {parent} is gone; stopping {command[0]}")
                stopping.append(signal.SIGTERM)
                break
            time.sleep(0.2)
        if stopping:
            _say(f"procs: stopping the server ({signal.Signals(stopping[0]).name})")
    finally:  # whatever happened above, the tree goes down and its temporary files with it
        # The command first (vLLM's api_server shuts its engine down on SIGTERM once it can), then
        # whatever of its tree is left: group members and orphans handed to us.
        stop(
            [child.pid, *descendants(os.getpid())] if child and child.poll() is None else descendants(os.getpid()),
            grace,
        )
        code = child.wait() if child else 127
        for pid in descendants(os.getpid()):  # orphans handed to us that have ended: their status is ours to take
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        for path in remove:
            shutil.rmtree(path, ignore_errors=True)
    return 128 + stopping[0] if stopping else code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.core.procs", description=__doc__.split("\n\n")[1])
    parser.add_argument("--parent", type=int, default=0, help="stop when this process is gone (0: never)")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument(
        "--remove",
        action="append",
        default=[],
        metavar="DIR",
        help="the command's own temporary directory, holding nothing but links as the guard "
        "starts, removed once the command's tree is down (repeatable)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: give it after --")
    for path in args.remove:  # never a folder with anything in it yet: `--remove ~` removes nothing
        # (links aside: removing one leaves what it points to; private_tmpdir_env makes one)
        if (
            not os.path.isdir(path)
            or os.path.islink(path)
            or any(not os.path.islink(os.path.join(path, name)) for name in os.listdir(path))
        ):
            parser.error(
                f"--remove {path}: not an empty directory; give the command's own temporary "
                "directory, created empty for it"
            )
    return guard(command, args.parent, args.grace, args.remove)


if __name__ == "__main__":
    sys.exit(main())
