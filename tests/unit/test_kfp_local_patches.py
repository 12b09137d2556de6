"""The kfp.local patches (pipelines/kfp_local_patches.py) are written against kfp 2.17.0: a new kfp
fails here first, so that each patch is looked at again, and each patched name is still there."""

import re

import kfp

from pipelines import kfp_local_patches


def test_the_patches_are_for_the_installed_kfp():
    assert kfp.__version__ == kfp_local_patches.KFP_VERSION, (
        f"kfp {kfp.__version__}: check each patch in pipelines/kfp_local_patches.py against it, then update KFP_VERSION"
    )
    from kfp.local import logging_utils
    from kfp.local.orchestrator import enhanced_dag_orchestrator

    assert callable(logging_utils.indented_print)  # what thread_safe_indent replaces
    assert callable(logging_utils.local_logger_context) and logging_utils.MillisecondFormatter  # thread_safe_logger
    assert enhanced_dag_orchestrator.concurrent.futures.ThreadPoolExecutor  # what pending_tasks_cancelled replaces


def test_thread_safe_indent_is_undone():
    import builtins

    from kfp.local import logging_utils

    before_print, before_indent = builtins.print, logging_utils.indented_print
    unpatch = kfp_local_patches.thread_safe_indent()
    assert logging_utils.indented_print is not before_indent and builtins.print is not before_print
    unpatch()
    assert logging_utils.indented_print is before_indent and builtins.print is before_print


def test_parallel_tasks_lose_no_log_line_and_the_logger_is_put_back(capsys):
    """Trials side by side each log inside kfp.local's per-task logger context: with kfp's own, one task's exit
    cleared the handler another was logging through, and its "finished" line was lost (a sweep showed one
    "✓ evaluate" for two trials). Each thread here enters, logs while the others come and go, and leaves."""
    import logging
    import threading

    from kfp.local import logging_utils

    root = logging.getLogger()
    before = root.level, root.handlers[:]
    unpatch = kfp_local_patches.thread_safe_logger()
    start = threading.Barrier(8)

    def task(i):
        start.wait()
        for j in range(200):
            with logging_utils.local_logger_context():
                logging.info(f"task {i} line {j}")

    threads = [threading.Thread(target=task, args=(i,)) for i in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        unpatch()
    out = capsys.readouterr().out
    logged = re.findall(r"(?m) - INFO - task (\d+) line (\d+)$", out)
    assert sorted(logged) == sorted((str(i), str(j)) for i in range(8) for j in range(200))  # each once
    assert (root.level, root.handlers) == before
    assert logging_utils.local_logger_context.__module__ == "kfp.local.logging_utils"  # kfp's own again
