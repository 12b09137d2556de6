"""The kfp.local patches (pipelines/kfp_local_patches.py) are written against kfp 2.17.0: a new kfp
fails here first, so that each patch is looked at again, and each patched name is still there."""

import kfp

from pipelines import kfp_local_patches


def test_the_patches_are_for_the_installed_kfp():
    assert kfp.__version__ == kfp_local_patches.KFP_VERSION, (
        f"kfp {kfp.__version__}: check each patch in pipelines/kfp_local_patches.py against it, then update KFP_VERSION")
    from kfp.local import logging_utils
    from kfp.local.orchestrator import enhanced_dag_orchestrator

    assert callable(logging_utils.indented_print)  # what thread_safe_indent replaces
    assert enhanced_dag_orchestrator.concurrent.futures.ThreadPoolExecutor  # what pending_tasks_cancelled replaces


def test_thread_safe_indent_is_undone():
    import builtins

    from kfp.local import logging_utils

    before_print, before_indent = builtins.print, logging_utils.indented_print
    unpatch = kfp_local_patches.thread_safe_indent()
    assert logging_utils.indented_print is not before_indent and builtins.print is not before_print
    unpatch()
    assert logging_utils.indented_print is before_indent and builtins.print is before_print
