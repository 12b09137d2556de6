"""python -m trainer.torchrun [torchrun options] -m trainer train ...

torchrun whose exit status tells a restart what to do (trainer.exitcodes has the table). In a
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
"""

from __future__ import annotations

import getpass
import math
import os
import re
import shutil
import sys
import tempfile

from trainer.config import TrainConfig
from trainer.exitcodes import EXIT_TRANSIENT, retryable, transient
from trainer.procs import private_tmpdir_env
from trainer.storage import Store

SHUTDOWN_MARGIN_S = 15  # on top of shutdown_grace_s: the worker's own hard exit comes first


def train_command(train_args: list[str], python: str = sys.executable) -> list[str]:
    """The command every node runs, here and in a training pod (python="python", the image's);
    torchrun reads the topology from PET_* env vars. trainer.torchrun is torchrun passing on its
    worker's exit status (plain torchrun exits 1 whatever happened), so that ExitCode restarts and
    podFailurePolicy can tell 2 from 137 (see there)."""
    return [python, "-m", "trainer.torchrun", "-m", "trainer", "train", *train_args]


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
        print(f"trainer.torchrun: could not check for {output_prefix}/result.json ({type(err).__name__}); "
              "exit status unchanged", file=sys.stderr, flush=True)
        return False


def main() -> None:
    from torch.distributed.run import main as torchrun


    argv = sys.argv[1:]
    grace = float(_option(argv, "--shutdown-grace-s") or TrainConfig.shutdown_grace_s)
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(math.ceil(grace) + SHUTDOWN_MARGIN_S))
    # torchelastic's per-run log folder (/tmp/torchelastic_*) and the workers' temporary files go to a folder of
    # this run's, removed when the agent exits: plain torchrun leaves one behind on every run.
    # Where torch keeps inductor's kernels, by its rule (trainer.procs.inductor_cache_dir imports inductor to ask:
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
        print(f"trainer.torchrun: {err.sigval.name}: workers stopped; exit status {code}", file=sys.stderr,
              flush=True)
    except Exception as err:  # noqa: BLE001 - classified; anything else is re-raised as it was
        why = transient(err)
        if not why:
            raise
        code = EXIT_TRANSIENT
        first = (str(err).strip().splitlines() or [""])[0][:300]  # c10d messages carry a C++ stack after it
        print(f"trainer.torchrun: {why}: {type(err).__name__}: {first}; exit status {code} (transient)",
              file=sys.stderr, flush=True)
    if retryable(code) and committed(_option(argv, "--output-prefix")):
        print(f"trainer.torchrun: status {code} came after the result was committed; the run is done: exit 0",
              file=sys.stderr, flush=True)
        code = 0
    return code


if __name__ == "__main__":
    main()
