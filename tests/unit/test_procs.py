"""Nothing we start outlives us (trainer.core.procs): the guard around vLLM, what run_local started, and
the whole process tree and /tmp after SIGTERM / SIGINT to run_local (the process alone and its group)
in each stage, and after SIGKILL of `trainer serve` while vLLM loads.

The fast checks; the ones that train, serve or run the pipeline are tests/integration/test_procs.py (the integration tier)."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from trainer.core import procs

ROOT = Path(__file__).resolve().parents[2]
TAG = "FINETUNE_TEST_TAG"


def tagged(tag: str) -> list[int]:
    """Running processes whose environment carries the marker."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"{TAG}={tag}".encode() in env and procs.alive(int(entry)):
                found.append(int(entry))
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def survivors(tag: str, within: float = 5.0) -> list[str]:
    """What still runs `within` seconds from now (a few seconds' allowance for a process on its way out)."""
    deadline = time.monotonic() + within
    while (left := tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [f"{pid}: {cmdline(pid)[:200]}" for pid in left]


def wait_for(what, limit: float, proc: subprocess.Popen | None = None, why: str = ""):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if found := what():
            return found
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"ended (status {proc.returncode}) before {why}")
        time.sleep(0.2)
    pytest.fail(f"not seen within {limit:.0f}s: {why}")


# A process that ignores SIGTERM and starts another in a session of its own that ignores it too:
# what vLLM's api_server and its EngineCore do while a model loads.
STUBBORN = textwrap.dedent("""
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.argv[1:] != ["child"]:
        subprocess.Popen([sys.executable, __file__, "child"], start_new_session=True)
    time.sleep(300)
""")


@pytest.fixture
def stubborn(tmp_path):
    path = tmp_path / "stubborn.py"
    path.write_text(STUBBORN)
    return path


def test_the_guard_takes_down_a_tree_deaf_to_sigterm_when_its_parent_is_killed(tmp_path, stubborn):
    tag, scratch = uuid.uuid4().hex, tmp_path / "scratch"  # the command's temporary directory (vLLM's sockets)
    scratch.mkdir()
    # The parent starts the guard as trainer.serving.local does (own session, --parent), then waits: we SIGKILL it.
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, subprocess, sys, time; subprocess.Popen([sys.executable, '-m', "
            "'trainer.core.procs', '--parent', str(os.getpid()), '--grace', '1', '--remove', sys.argv[2], '--', "
            "sys.executable, sys.argv[1]], start_new_session=True); time.sleep(300)",
            str(stubborn),
            str(scratch),
        ],
        cwd=ROOT,
        env={**os.environ, TAG: tag},
    )
    try:
        # the parent, the guard, the command and its child in its own session
        wait_for(lambda: len(tagged(tag)) == 4, 60, parent, "the whole tree")
        (scratch / "sub").mkdir()  # what the command writes there
        (scratch / "sub" / "socket").write_text("")
        parent.kill()
        parent.wait()
        assert survivors(tag, within=10) == []
        assert not scratch.exists()  # removed by the guard, after the tree
    finally:
        procs.stop(tagged(tag), grace=0)


def test_the_guard_passes_the_status_on_and_stops_what_the_command_left(tmp_path):
    tag = uuid.uuid4().hex
    # The command leaves a process in a session of its own behind, and exits 3.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer.core.procs",
            "--grace",
            "1",
            "--",
            "sh",
            "-c",
            "setsid sleep 300 & sleep 0.5; exit 3",
        ],
        cwd=ROOT,
        env={**os.environ, TAG: tag},
        timeout=60,
    )
    try:
        assert done.returncode == 3
        assert survivors(tag, within=2) == []
    finally:
        procs.stop(tagged(tag), grace=0)


def test_a_signalled_guard_exits_128_plus_the_signal_and_its_tree_is_gone(stubborn):
    tag = uuid.uuid4().hex
    guard = subprocess.Popen(
        [sys.executable, "-m", "trainer.core.procs", "--grace", "1", "--", sys.executable, str(stubborn)],
        cwd=ROOT,
        env={**os.environ, TAG: tag},
        start_new_session=True,
    )
    try:
        wait_for(lambda: len(tagged(tag)) == 3, 60, guard, "the whole tree")
        guard.send_signal(signal.SIGTERM)  # the guard alone, not its group: it must reach the rest itself
        assert guard.wait(timeout=30) == 128 + signal.SIGTERM
        assert survivors(tag, within=2) == []
    finally:
        procs.stop(tagged(tag), grace=0)


def test_started_stops_what_was_started_since_and_only_that(stubborn):
    before = subprocess.Popen(["sleep", "300"])  # ours, but there before: not the run's to stop
    tag = uuid.uuid4().hex
    started = procs.Started()
    try:
        # a child that orphans its own child (re-parented to us, the subreaper) and ignores SIGTERM
        child = subprocess.Popen([sys.executable, str(stubborn)], env={**os.environ, TAG: tag})
        wait_for(lambda: len(tagged(tag)) == 2, 60, child, "the child and its child")
        killed = started.stop(grace=1)
        assert child.pid in killed and len(killed) == 2  # the child and the orphan: both deaf to SIGTERM
        assert survivors(tag, within=2) == [] and child.poll() == -signal.SIGKILL
        assert before.poll() is None
    finally:
        before.kill()
        before.wait()
        procs.stop(tagged(tag), grace=0)


def test_a_group_of_zombies_counts_as_stopped():
    """Server.stop waited its whole 20 s timeout on every deploy: os.killpg(pgid, 0) counts the zombies
    left in vLLM's group (dead helpers handed to run_local, a subreaper that reaps them only at its end)."""
    import psutil

    procs.subreaper(True)  # as run_local is while it runs
    zombies = []
    try:
        # a group leader whose forked child exits at once: a zombie of the group until someone reaps it
        leader = subprocess.Popen(
            [sys.executable, "-c", "import os, time; os.fork() and time.sleep(300)"], start_new_session=True
        )
        zombies = wait_for(
            lambda: [c.pid for c in psutil.Process(leader.pid).children() if c.status() == "zombie"],
            30,
            leader,
            "a zombie in the group",
        )
        assert procs.group_alive(leader.pid)  # the leader runs
        leader.kill()
        leader.wait()
        os.killpg(leader.pid, 0)  # the old check: the zombie, now ours and not reaped, still "alive"
        assert not procs.group_alive(leader.pid)
    finally:
        procs.subreaper(False)
        for pid in zombies:
            os.waitpid(pid, 0)


def test_the_guard_removes_only_a_directory_that_was_empty_as_it_started(tmp_path, capsys):
    """--remove takes the command's own temporary directory: a folder with files in it (a typo, `~`) is
    refused before anything runs, and kept."""
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    for path in (kept, tmp_path / "missing"):
        with pytest.raises(SystemExit) as err:
            procs.main(["--remove", str(path), "--", "true"])
        assert err.value.code == 2 and f"--remove {path}: not an empty directory" in capsys.readouterr().err
    assert (kept / "notes.txt").read_text() == "mine"
    # links (trainer.core.procs.private_tmpdir_env's to inductor's cache) do not count, and removing them keeps
    # what they point to
    own = tmp_path / "own"
    own.mkdir()
    (own / "kept").symlink_to(kept)
    guarded = subprocess.run([sys.executable, "-m", "trainer.core.procs", "--remove", str(own), "--", "true"], cwd=ROOT)
    assert guarded.returncode == 0
    assert not own.exists() and (kept / "notes.txt").read_text() == "mine"


def test_a_guard_that_cannot_write_to_its_log_still_stops_the_tree():
    """A full disk under the server's log (here /dev/full): the guard's own lines cannot be written, and
    the tree still goes down when the parent is gone."""
    tag = uuid.uuid4().hex
    with open("/dev/full", "w") as full:
        parent = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import os, subprocess, sys, time; subprocess.Popen([sys.executable, '-m', "
                "'trainer.core.procs', '--parent', str(os.getpid()), '--grace', '1', '--', 'sleep', '300'], "
                "start_new_session=True); time.sleep(300)",
            ],
            cwd=ROOT,
            env={**os.environ, TAG: tag},
            stderr=full,
        )
    try:
        wait_for(lambda: len(tagged(tag)) == 3, 60, parent, "the whole tree")  # the parent, the guard, sleep
        parent.kill()
        parent.wait()
        assert survivors(tag, within=10) == []
    finally:
        procs.stop(tagged(tag), grace=0)


# A main module tied as trainer.serving.vllm_server ties vLLM's API server, starting what vLLM's API server
# starts: a process by multiprocessing's spawn (the EngineCore on CPU) and one by fork (elsewhere); then it waits.
TIED_MAIN = textwrap.dedent("""
    import multiprocessing, time
    from trainer.core.procs import die_with_parent

    if __name__ in ("__main__", "__mp_main__"):
        die_with_parent()

    def wait():
        time.sleep(300)

    if __name__ == "__main__":
        for method in ("spawn", "fork"):
            multiprocessing.get_context(method).Process(target=wait, name=method).start()
        time.sleep(300)
""")


def test_what_a_tied_main_module_starts_dies_with_it_under_sigkill(tmp_path):
    """SIGKILL of the middle process (an API server killed with `kill -9`) runs none of its code; its children, spawned
    and forked, die with it (they were left running, re-parented to init), and multiprocessing's resource tracker
    with them (it ends when the last of them has). Followed by pid: a process title can hide the marker."""
    import psutil

    (tmp_path / "tied_main.py").write_text(TIED_MAIN)
    tag = uuid.uuid4().hex
    middle = subprocess.Popen(
        [sys.executable, "-m", "tied_main"], cwd=tmp_path, env={**os.environ, TAG: tag, "PYTHONPATH": str(ROOT)}
    )
    children: list[psutil.Process] = []
    try:
        # the spawned child, the forked one and the resource tracker
        wait_for(lambda: len(psutil.Process(middle.pid).children()) == 3, 60, middle, "the children")
        children = psutil.Process(middle.pid).children()
        middle.kill()  # the spawned child may still be starting: it then finds its starter gone as it ties itself
        middle.wait()
        deadline = time.monotonic() + 20
        while any(procs.alive(p.pid) for p in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [" ".join(p.cmdline()) for p in children if procs.alive(p.pid)] == []
    finally:
        for proc in children:  # psutil checks the pid is still that process's
            with contextlib.suppress(psutil.Error):
                proc.kill()
        procs.stop(tagged(tag), grace=0)


@pytest.mark.parametrize("starter", ["alive", "gone"])
def test_a_process_whose_starter_died_before_it_tied_itself_dies_at_once(starter):
    """The kernel sends nothing for a parent that died before the tie was made: the starter's pid, left in the
    environment by it (the guard, or a tied process), says so."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    pid = gone.pid if starter == "gone" else os.getpid()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; from trainer.core.procs import die_with_parent, STARTER_ENV; "
            "die_with_parent(); print(os.environ[STARTER_ENV] == str(os.getpid()))",
        ],
        cwd=ROOT,
        env={**os.environ, procs.STARTER_ENV: str(pid)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if starter == "gone":
        assert done.returncode == -signal.SIGKILL and done.stdout == ""
    else:
        assert done.returncode == 0 and done.stdout == "True\n", done.stderr
