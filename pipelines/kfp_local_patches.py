"""Every change this project makes to kfp.local's behaviour, in one place, for kfp 2.17.0 (the pinned
version; tests/unit/test_kfp_local_patches.py fails on another, so that each patch is looked at again).

- `thread_safe_indent`: kfp.local indents a task's lines by swapping `builtins.print` for the
  duration of the task, which is not thread-safe: with sweep trials side by side the indents stack
  (8, 12 spaces) and one trial's restore can leave print indented for the runner's own lines (its
  `----` rules). Replaced by a per-thread helper that writes indent and line in one call.
- `thread_safe_logger`: kfp.local swaps the root logger's handlers for each task
  (`local_logger_context`), which is not thread-safe either: when one sweep trial's task ended, its
  restore cleared the handler the other trial's task was about to log with, and that task's
  "Task 'evaluate' finished" line (run_local's "✓ evaluate") was lost. Replaced by one handler
  shared by every thread inside it, put back when the last one leaves.
- `pending_tasks_cancelled`: its ParallelFor executor's `shutdown(wait=True)` runs every queued
  iteration before an interrupt or a failed trial gets out; queued iterations are dropped instead.
- `docker_exit_status`: its DockerRunner starts each container with `auto_remove=True`, so a container that
  ends as its log stream does is often gone before `wait()` asks for its status, which kfp then takes for 0:
  a failed step (exit 1 or 2) was reported SUCCESS and the run went on without its outputs (seen with podman,
  2026-12-01). The container is removed after its status is read instead.

Each patch is undone when the run ends; with another kfp where the patched name is missing, the
patch does nothing and kfp's own behaviour stays.
"""

from __future__ import annotations

import contextlib
import sys
import threading

KFP_VERSION = "2.17.0"


_indent = threading.local()


def _logging_utils(*names: str):
    """kfp.local's logging_utils where it has each of `names` (what a patch replaces or uses), else None:
    with another kfp, or none, kfp's own behaviour stays."""
    try:
        from kfp.local import logging_utils
    except ImportError:
        return None
    return logging_utils if all(hasattr(logging_utils, name) for name in names) else None


def thread_safe_indent():
    """Put a thread-safe `indented_print` in kfp.local's place (see the module docstring);
    returns the function that puts kfp's back."""
    import builtins

    logging_utils = _logging_utils("indented_print")
    if logging_utils is None:
        return lambda: None
    original, real_print = logging_utils.indented_print, builtins.print

    def print_in_thread(*args, sep=" ", end="\n", file=None, flush=False):
        spaces = getattr(_indent, "spaces", 0)
        if not spaces or (file is not None and file is not sys.stdout):
            return real_print(*args, sep=sep, end=end, file=file, flush=flush)
        text = (" " if sep is None else sep).join(map(str, args)) + ("\n" if end is None else end)
        sys.stdout.write(" " * spaces + text)  # one write: another thread's line cannot land inside it

    @contextlib.contextmanager
    def indented_print(num_spaces: int = 4):
        outer = getattr(_indent, "spaces", 0)
        _indent.spaces = num_spaces  # not stacked: a nested task's lines are still a component's
        try:
            yield
        finally:
            _indent.spaces = outer

    logging_utils.indented_print = indented_print
    builtins.print = print_in_thread  # prints as before in every thread outside a task's lines

    def unpatch() -> None:
        logging_utils.indented_print = original
        if builtins.print is print_in_thread:
            builtins.print = real_print

    return unpatch


def thread_safe_logger():
    """Put a thread-safe `local_logger_context` in kfp.local's place (see the module docstring);
    returns the function that puts kfp's back."""
    import logging

    logging_utils = _logging_utils("local_logger_context", "MillisecondFormatter")
    if logging_utils is None:
        return lambda: None
    original, formatter = logging_utils.local_logger_context, logging_utils.MillisecondFormatter
    lock, inside, saved = threading.Lock(), [0], []

    @contextlib.contextmanager
    def local_logger_context():
        logger = logging.getLogger()
        with lock:
            if not inside[0]:  # the first in installs kfp's handler, as kfp's own does
                saved[:] = [logger.level, logger.handlers[:]]
                handler = logging.StreamHandler(sys.stdout)
                handler.setFormatter(formatter(fmt="%(asctime)s - %(levelname)s - %(message)s", datefmt="%H:%M:%S.%f"))
                logger.handlers[:] = [handler]
                logger.setLevel(logging.INFO)
            inside[0] += 1
        try:
            yield
        finally:
            with lock:
                inside[0] -= 1
                if not inside[0]:  # the last out puts back what was there
                    logger.setLevel(saved[0])
                    logger.handlers[:] = saved[1]

    logging_utils.local_logger_context = local_logger_context

    def unpatch() -> None:
        logging_utils.local_logger_context = original

    return unpatch


@contextlib.contextmanager
def pending_tasks_cancelled():
    """While a run lasts, kfp.local's ParallelFor drops its queued iterations when it stops early.

    Its executor's `shutdown(wait=True)` runs every iteration still queued before an interrupt
    (Ctrl-C, SIGTERM) or a failed trial gets out: a sweep would go on training its remaining
    trials (hours each on real models) while the command looks hung. The iterations already
    running still end (their processes got the signal); the queued ones never start."""
    import concurrent.futures
    import types

    try:
        from kfp.local.orchestrator import enhanced_dag_orchestrator as orchestrator
    except ImportError:  # another kfp: its own behaviour
        yield
        return
    saved = orchestrator.concurrent

    class Executor(concurrent.futures.ThreadPoolExecutor):
        def shutdown(self, wait=True, *, cancel_futures=False):
            super().shutdown(wait=wait, cancel_futures=True)

    # Only that module's name `concurrent` is replaced: every other thread pool is untouched.
    orchestrator.concurrent = types.SimpleNamespace(
        futures=types.SimpleNamespace(ThreadPoolExecutor=Executor, as_completed=concurrent.futures.as_completed)
    )
    try:
        yield
    finally:
        orchestrator.concurrent = saved


@contextlib.contextmanager
def docker_exit_status():
    """While a run lasts, kfp.local's DockerRunner reads every container's exit status before removing it (see the
    module docstring)."""
    try:
        from kfp.local import docker_task_handler as handler
    except ImportError:  # kfp without docker installed: its own behaviour
        yield
        return
    saved = handler.run_docker_container

    def run_docker_container(client, image: str, command: list[str], volumes: dict, **container_run_args) -> int:
        image = handler.add_latest_tag_if_not_present(image=image)
        if any(image in (i.tags + i.attrs["RepoDigests"]) for i in client.images.list()):
            print(f"Found image {image!r}\n")  # kfp's own lines
        else:
            print(f"Pulling image {image!r}")
            client.images.pull(image)
        container_run_args.pop("auto_remove", None)
        container = client.containers.run(
            image=image, command=command, detach=True, stdout=True, stderr=True, volumes=volumes, **container_run_args
        )
        try:
            for line in container.logs(stream=True):
                print(line.decode(errors="replace"), end="")
            return container.wait()["StatusCode"]
        finally:
            container.remove(force=True)

    handler.run_docker_container = run_docker_container
    try:
        yield
    finally:
        handler.run_docker_container = saved
