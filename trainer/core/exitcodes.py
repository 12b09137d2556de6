"""Exit statuses of a training process, and which of them a restart can cure.

A PyTorchJob's pods run under `restartPolicy: ExitCode`: the Training Operator recreates a pod
whose container exited with 128-255 and fails the job at once on 1-127. The TrainJob runtime
that pipelines.manifests ships fails the job at once on 2 and 3 and restarts it otherwise, and
trainer.launch.local.LocalLauncher does the same. A restarted job resumes from its last checkpoint.
The container's status is trainer.recipe.torchrun's (the agent, PID 1), which passes on its worker's.

  status  meaning                                                           restarted
  0       done; also a SIGTERM or transient failure once result.json is      -
          committed: the work is saved, a restart would only redo cleanup
  1       a bug: an unexpected exception (its traceback is in the log)        no (PyTorchJob)
  2       the input is invalid (UserError: one message naming the fix)       no
  3       the loss or its gradients became NaN or infinite                    no
  134     SIGABRT: the NCCL watchdog aborts a collective that hung            yes
  137     SIGKILL: OOM-killed, or the termination grace period ran out        yes
  143     SIGTERM: eviction, preemption, node drain; rank 0 checkpointed      yes
  203     TRANSIENT below: S3 / MinIO unreachable or answering 5xx (loading   yes
          inputs or checkpoints, saving checkpoints or the result), a
          collective or the rendezvous failed or timed out (a peer's node
          went away, the network broke)

203 is sysexits' EX_TEMPFAIL (75) moved above 128, where ExitCode restarts. A transient failure
that persists (a wrong S3_ENDPOINT) uses up the restart budget (max_restarts) and then fails
the job with the message that names what to check.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import Iterator

from trainer.core.errors import Unavailable, UserError

EXIT_INPUT = 2
EXIT_NONFINITE = 3
EXIT_SIGTERM = 128 + 15
EXIT_TRANSIENT = 128 + 75
PERMANENT = {EXIT_INPUT: "the input is invalid", EXIT_NONFINITE: "the loss became NaN or infinite"}

# S3 error codes of a server that is there but cannot answer now (MinIO starting, overloaded).
_S3_BUSY = {"InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "XMinioServerNotInitialized"}
# gloo reports a lost peer or a timed-out collective as a plain RuntimeError (NCCL: DistBackendError).
_GLOO_LOST = ("Connection closed by peer", "Connection reset by peer", "Timed out waiting", "gloo/transport")


# Local folders this process removes however it exits: at interpreter exit, and in `hard_exit`, which skips
# interpreter exit (a crashed or stopped trainer left its TensorBoard staging folder, tb-*, in /tmp).
_REMOVE: list[str] = []


def remove_at_exit(path: str) -> None:
    import atexit

    if not _REMOVE:
        atexit.register(_remove_all)
    _REMOVE.append(path)


def _remove_all() -> None:
    import shutil

    for path in _REMOVE:
        shutil.rmtree(path, ignore_errors=True)


def hard_exit(code: int, flush: bool = True) -> None:
    """os._exit(code) after the folders of `remove_at_exit`, with stdout and stderr flushed: at once, without the
    interpreter's teardown (which can hang on a process group whose peer is gone). `flush=False` from another thread
    than the main one: a flush waits for the stream's lock, which a main thread stuck writing to a full pipe holds."""
    _remove_all()
    for stream in (sys.stdout, sys.stderr) if flush else ():
        with contextlib.suppress(Exception):  # a closed pipe: nothing more to say there
            stream.flush()
    os._exit(code)


def retryable(code: int) -> bool:
    """True for the statuses a PyTorchJob's ExitCode policy restarts."""
    return 128 <= code <= 255


def transient(err: BaseException) -> str:
    """What kind of transient infrastructure failure `err` is ('' when it is not one)."""
    if isinstance(err, Unavailable):
        return "storage unavailable"
    if isinstance(err, UserError):
        return ""  # the user's to fix: a restart would fail the same way
    if type(err).__name__ == "S3Error" and getattr(err, "code", "") in _S3_BUSY:
        return "storage unavailable"
    if "urllib3" in sys.modules:
        from urllib3.exceptions import HTTPError

        if isinstance(err, HTTPError):
            return "storage unavailable"
    if "torch" in sys.modules:
        import torch.distributed as dist

        if isinstance(err, getattr(dist, "DistError", ())):  # NCCL errors and timeouts, c10d store, network
            return "distributed communication failed"
        from torch.distributed.elastic.rendezvous import RendezvousError

        if isinstance(err, RendezvousError):
            return "rendezvous failed"
    if isinstance(err, RuntimeError) and any(s in str(err) for s in _GLOO_LOST):
        return "distributed communication failed"
    if isinstance(err, (ConnectionError, TimeoutError)):
        return "network failure"
    return ""


def _stdout_gone() -> bool:
    """True when stdout is a pipe whose reader has gone: poll reports POLLERR on the write end of such a pipe (a file
    or a terminal never does)."""
    import io
    import select

    try:
        fd = sys.stdout.fileno()
    except io.UnsupportedOperation:  # no file behind it (captured output, a StringIO)
        return False
    except ValueError:  # closed
        return True
    poller = select.poll()
    poller.register(fd, 0)  # errors are always reported
    return any(events & select.POLLERR for _, events in poller.poll(0))


@contextlib.contextmanager
def retry_transient_failures() -> Iterator[None]:
    """Exit with EXIT_TRANSIENT, so that the job restarts and resumes, when a transient
    infrastructure failure ends training; everything else passes through unchanged (UserError to
    exit_on_user_error: 2; a bug: its traceback, 1)."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 - classified here; everything else is re-raised as it was
        if isinstance(err, BrokenPipeError) and _stdout_gone():
            # Whoever read our output went away (`| head`, a launcher or run_local stopped): no network failed, and a
            # restart would write to the same closed pipe. BrokenPipeError is a ConnectionError, so it read as one.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
            with contextlib.suppress(OSError):  # stderr into the same closed pipe (2>&1 | head)
                print("error: the output's reader closed the pipe (stdout): stopping", file=sys.stderr, flush=True)
            hard_exit(1)
        why = transient(err)
        if not why:
            raise

        if not isinstance(err, UserError):
            traceback.print_exc()
        print(
            f"error: {why}: {err}\nexiting with status {EXIT_TRANSIENT} (transient): the job restarts and "
            "resumes from its last checkpoint",
            file=sys.stderr,
            flush=True,
        )
        # At once: a normal exit tears down the process group, which can hang once a peer is gone.
        hard_exit(EXIT_TRANSIENT)
