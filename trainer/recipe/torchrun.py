"""python -m trainer.recipe.torchrun [torchrun options] -m trainer train ...

torchrun whose exit status tells a restart what to do (trainer.core.exitcodes has the table). In a
pod this process is PID 1, so its status is the container's, which `restartPolicy: ExitCode`
reads. Plain torchrun gets three things wrong there:
- it exits 1 whatever its worker returned, hiding 2 (bad input, never retried) and 143 (SIGTERM,
  retried) alike; here the failed worker's status is passed on, a worker killed by signal N as
  128 + N, as a shell reports it;
- on SIGTERM (eviction, preemption) it gives its workers TORCH_ELASTIC_SHUTDOWN_TIMEOUT (30 s)
  to stop, less than the final checkpoint upload may take (shutdown_grace_s), then exits 1 with
  a traceback: permanent. Here the workers get shutdown_grace_s plus a margin, and the agent
  exits 143: restarted, resuming from that checkpoint;
- a rendezvous that fails or times out (a peer's pod not up yet, its node gone) exits 1; here
  EXIT_TRANSIENT.
And once the run's result is committed (`<output_prefix>/result.json`, written last), a SIGTERM or
transient failure during the cleanup that follows ends with 0: the work is saved, and a failed
pod would fail (or needlessly restart) a job that is done.
It also mends torchrun's exit barrier (pytorch/pytorch#69520, open): node 0's agent hosts the
rendezvous store and left as soon as it saw every node arrive, so a node still on its way to
reading that answer found the store gone and printed a C++ stack and "Error waiting on exit
barrier" after a run that had succeeded. Here node 0 stays until every node has left the barrier.
"""

from __future__ import annotations

import getpass
import math
import os
import re
import shutil
import sys
import tempfile
import time

from trainer.config.training import TrainConfig
from trainer.core.exitcodes import EXIT_TRANSIENT, retryable, transient
from trainer.core.procs import private_tmpdir_env
from trainer.core.storage import Store

SHUTDOWN_MARGIN_S = 15  # on top of shutdown_grace_s: the worker's own hard exit comes first
LEFT_KEY = "trainer/exit_barrier/left"  # how many agents are done with the store after the exit barrier
LINGER_S = 30.0  # node 0 waits at most this long for them: they leave right after the barrier


def train_command(train_args: list[str], python: str = sys.executable) -> list[str]:
    """The command every node runs, here and in a training pod (python="python", the image's);
    torchrun reads the topology from PET_* env vars. trainer.recipe.torchrun is torchrun passing on its
    worker's exit status (plain torchrun exits 1 whatever happened), so that ExitCode restarts and
    podFailurePolicy can tell 2 from 137 (see there)."""
    return [python, "-m", "trainer.recipe.torchrun", "-m", "trainer", "train", *train_args]


def _option(argv: list[str], name: str) -> str | None:
    """The value of `--name=value` / `--name value` in the training arguments, if given."""
    for i, arg in enumerate(argv):
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def committed(output_prefix: str | None) -> bool:
    """Whether the run's result is in the bucket. Any doubt (no prefix, S3 not answering) is a no:
    then the status stays retryable, and a restart finds out."""
    if not output_prefix:
        return False
    try:
        return Store.from_env().exists(f"{output_prefix.rstrip('/')}/result.json")
    except Exception as err:  # noqa: BLE001 - a check that cannot be made leaves the status as it was
        print(
            f"trainer.recipe.torchrun: could not check for {output_prefix}/result.json ({type(err).__name__}); "
            "exit status unchanged",
            file=sys.stderr,
            flush=True,
        )
        return False


def leave_exit_barrier(agent) -> None:
    """After torch's exit barrier: each agent says it is done with the store, and node 0, whose
    process hosts it (static rendezvous: node rank 0 is the master), waits until all have, so that
    no node's last request meets a closed store. Nothing to wait for when the barrier did not
    complete (a node failed): torch has logged that already."""
    from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.utils.store import _NUM_MEMBERS

    group, store = agent._worker_group, agent._store
    if group.group_world_size < 2:
        return
    try:
        if store.add(_TERMINAL_STATE_SYNC_ID + _NUM_MEMBERS, 0) < group.group_world_size:
            return
        left = store.add(LEFT_KEY, 1)
        if group.group_rank != 0:
            return  # its last request, answered: it never touches the store again
        deadline = time.monotonic() + LINGER_S
        while left < group.group_world_size and time.monotonic() < deadline:
            time.sleep(0.05)
            left = store.add(LEFT_KEY, 0)
    except SignalException:
        raise  # a SIGTERM while waiting: _run's rules decide the status, as for torch's own barrier
    except Exception as err:  # noqa: BLE001 - the job is done; the store going away now changes nothing
        print(f"trainer.recipe.torchrun: after the exit barrier: {type(err).__name__}", file=sys.stderr, flush=True)
        return
    if left < group.group_world_size:
        print(
            f"trainer.recipe.torchrun: {group.group_world_size - left} node(s) had not left the exit barrier after "
            f"{LINGER_S:g} s; exiting",
            file=sys.stderr,
            flush=True,
        )


def main() -> None:
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
    from torch.distributed.run import main as torchrun

    torch_exit_barrier = SimpleElasticAgent._exit_barrier

    def exit_barrier(agent) -> None:
        torch_exit_barrier(agent)
        leave_exit_barrier(agent)

    SimpleElasticAgent._exit_barrier = exit_barrier
    argv = sys.argv[1:]
    grace = float(_option(argv, "--shutdown-grace-s") or TrainConfig.shutdown_grace_s)
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(math.ceil(grace) + SHUTDOWN_MARGIN_S))
    # torchelastic's per-run log folder (/tmp/torchelastic_*) and the workers' temporary files go to a folder of
    # this run's, removed when the agent exits: plain torchrun leaves one behind on every run.
    # Where torch keeps inductor's kernels, by its rule (trainer.core.procs.inductor_cache_dir imports inductor to ask:
    # ~2 s of every agent, which compiles nothing itself).
    user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
    shared = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")
    tmp = tempfile.mkdtemp(prefix="torchrun-")
    os.environ.update(private_tmpdir_env(tmp, shared))
    tempfile.tempdir = tmp  # this process's own: tempfile read TMPDIR once already
    try:
        sys.exit(_run(torchrun, argv))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(torchrun, argv: list[str]) -> int:
    """torchrun's run, its outcome as the exit status (the module docstring's rules)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        torchrun()
        return 0
    except ChildFailedError as err:
        code = err.get_first_failure()[1].exitcode
        code = code if code > 0 else 128 - code if code < 0 else 1
    except SignalException as err:
        code = 128 + int(err.sigval)
        print(
            f"trainer.recipe.torchrun: {err.sigval.name}: workers stopped; exit status {code}",
            file=sys.stderr,
            flush=True,
        )
    except Exception as err:  # noqa: BLE001 - classified; anything else is re-raised as it was
        why = transient(err)
        if not why:
            raise
        code = EXIT_TRANSIENT
        first = (str(err).strip().splitlines() or [""])[0][:300]  # c10d messages carry a C++ stack after it
        print(
            f"trainer.recipe.torchrun: {why}: {type(err).__name__}: {first}; exit status {code} (transient)",
            file=sys.stderr,
            flush=True,
        )
    if retryable(code) and committed(_option(argv, "--output-prefix")):
        print(
            f"trainer.recipe.torchrun: status {code} came after the result was committed; the run is done: exit 0",
            file=sys.stderr,
            flush=True,
        )
        code = 0
    return code


if __name__ == "__main__":
    main()
