"""Resilience: a training process killed mid-run (SIGKILL) or asked to stop (SIGTERM) under
the local launcher; the job restarts, resumes from the last checkpoint, and ends exactly
where an uninterrupted run ends, with the same data order.

The fast checks; the ones that train, serve or run the pipeline are tests/integration/test_resilience.py (the
integration tier)."""

import getpass
import json
from pathlib import Path

import pytest

from trainer.recipe.checkpoint import Checkpointer
from trainer.recipe.train import batches


def test_data_position_is_exact_after_a_skip():
    examples = list(range(50))
    full = batches(examples, 4, 1, 2, seed=7)
    expected = [next(full) for _ in range(9)][5:]  # crosses an epoch boundary (6 batches/epoch)
    resumed = batches(examples, 4, 1, 2, seed=7, start=5)
    assert [next(resumed) for _ in range(4)] == expected


def test_incomplete_checkpoint_is_ignored(store):
    import io

    ckpt = Checkpointer(store, "runs/partial", keep=2)
    store.ensure_bucket()
    store.client.put_object(store.bucket, "runs/partial/checkpoints/step-00000030/trainable.pt", io.BytesIO(b"x"), 1)
    assert ckpt.latest() is None  # files without a manifest: an interrupted upload
    store.put_json("runs/partial/checkpoints/step-00000010/_manifest.json", {"files": []})
    assert ckpt.latest() == 10


# --- the local launcher's temporary folder -------------------------------------------------------


@pytest.mark.parametrize("compiled_before", [True, False], ids=["cache-exists", "no-cache-yet"])
def test_each_local_job_gets_a_temporary_folder_removed_with_it(tmp_path, monkeypatch, compiled_before):
    """The nodes' TMPDIR (torchrun's torchelastic_* logs, TensorBoard staging, checkpoints on their way up) is
    the job's own and goes with it, whatever its processes left there; inductor's caches stay where torch keeps
    them, so that a restarted job reuses its compiled kernels: TORCHINDUCTOR_CACHE_DIR, and the precompiled
    headers inductor keeps under TMPDIR, through a link in the job's TMPDIR to torch's folder once it exists
    (nothing is created for a job that compiles nothing)."""
    import sys
    import tempfile

    from trainer.launch import local as launch
    from trainer.core import procs

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    cache = f"torchinductor_{getpass.getuser()}"
    if compiled_before:
        (tmp_path / cache / "precompiled_headers").mkdir(parents=True)
        (tmp_path / cache / "precompiled_headers" / "kept.h").write_text("kept")
    node = (
        "import json, os, pathlib; d = os.environ['TMPDIR']; pathlib.Path(d, 'left-behind').mkdir(); "
        "print(json.dumps([d, os.environ['TORCHINDUCTOR_CACHE_DIR'], "
        f"os.path.realpath(os.path.join(d, {cache!r}, 'precompiled_headers'))]), flush=True)"
    )
    monkeypatch.setattr(launch, "train_command", lambda args: [sys.executable, "-c", node])
    seen = []
    monkeypatch.setattr(launch, "_relay", lambda stream, dog: seen.extend(stream))
    launch.LocalLauncher(nnodes=1).run([])
    job_tmp, inductor, headers = json.loads(seen[0])
    assert Path(job_tmp).parent == tmp_path and Path(job_tmp).name.startswith("finetune-job-")
    assert not Path(job_tmp).exists() and {p.name for p in tmp_path.iterdir()} <= {cache}
    assert inductor == procs.inductor_cache_dir() == str(tmp_path / cache)
    if compiled_before:  # where torch keeps them for this machine's TMPDIR; removing the job kept them
        assert headers == str(tmp_path / cache / "precompiled_headers")
        assert (tmp_path / cache / "precompiled_headers" / "kept.h").read_text() == "kept"
    else:
        assert headers == str(Path(job_tmp) / cache / "precompiled_headers") and not (tmp_path / cache).exists()


def test_a_closed_output_pipe_stops_training_as_itself_not_as_a_network_failure():
    """`trainer train ... | head -2`: BrokenPipeError is a ConnectionError, and it said "network failure ... exiting
    with status 203 (transient): the job restarts" (a restart writes to the same closed pipe)."""
    import subprocess
    import sys

    from trainer.core.exitcodes import EXIT_TRANSIENT

    code = (
        "from trainer.core.exitcodes import retry_transient_failures\n"
        "with retry_transient_failures():\n"
        "    while True:\n"
        "        print('step ' * 200, flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(100)
    proc.stdout.close()  # as `head` exits
    status, err = proc.wait(timeout=60), proc.stderr.read().decode()
    assert status == 1 and status != EXIT_TRANSIENT, err
    assert err == "error: the output's reader closed the pipe (stdout): stopping\n", err


@pytest.mark.parametrize("end, status", [("hard_exit(143)", 143), ("raise RuntimeError('crash')", 1)])
def test_a_trainers_local_folders_go_however_it_exits(tmp_path, end, status):
    """The TensorBoard staging folder (tb-*) stayed in /tmp when trainer train crashed or was stopped: the SIGTERM,
    watchdog and transient paths leave through os._exit, which runs no clean-up."""
    import subprocess
    import sys

    staging = tmp_path / "tb-x"
    code = (
        "import os, sys\n"
        "from trainer.core.exitcodes import hard_exit, remove_at_exit\n"
        f"os.mkdir({str(staging)!r}); open(os.path.join({str(staging)!r}, 'events'), 'w').write('x')\n"
        f"remove_at_exit({str(staging)!r})\n"
        f"{end}\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == status, proc.stderr
    assert not staging.exists()
