"""Resilience: a training process killed mid-run (SIGKILL) or asked to stop (SIGTERM) under
the local launcher; the job restarts, resumes from the last checkpoint, and ends exactly
where an uninterrupted run ends, with the same data order."""

import signal
import threading
import time

import psutil
import pytest

from trainer import sources
from trainer.checkpoint import Checkpointer
from trainer.config import TrainConfig
from trainer.launch import LocalLauncher
from trainer.storage import Store
from trainer.train import batches

pytestmark = pytest.mark.integration
STEPS, EVERY = 60, 10


@pytest.fixture(scope="module")
def inputs(s3_env):
    store = Store.from_env()
    return (sources.deliver_model("builtin:tiny-llama", "", store)[0],
            sources.deliver_dataset("builtin:function-calling", "", store)[0])


def config(inputs, prefix):
    return TrainConfig(model_uri=inputs[0], dataset_uri=inputs[1], output_prefix=prefix, max_steps=STEPS,
                       batch_size=4, checkpoint_every=EVERY, log_every=5, lora_train_embeddings=True)


def trainer_processes() -> list[psutil.Process]:
    """Worker processes (`python -u -m trainer train`), not the torchrun agents."""
    out = []
    for p in psutil.Process().children(recursive=True):  # this test's, not other jobs on the machine
        try:
            cmd = p.cmdline()
        except psutil.Error:  # exited meanwhile
            continue
        if "trainer" in cmd and "train" in cmd and not any(c.endswith("torchrun") or "torch.distributed.run" in c
                                                           for c in cmd):
            out.append(p)
    return out


def interrupt_after(store, prefix, step, sig):
    """Once a checkpoint at >= `step` is complete, send `sig` to one training process."""
    def run():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = [c for c in store.complete_children(f"{prefix}/checkpoints") if int(c.split("-")[1]) >= step]
            procs = trainer_processes()
            if done and procs:
                procs[-1].send_signal(sig)
                return
            time.sleep(0.1)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def uninterrupted(inputs, s3_env):
    store = Store.from_env()
    LocalLauncher(nnodes=2, max_restarts=0).run(config(inputs, "runs/res-base").to_args())
    return store.get_json("runs/res-base/result.json")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_interrupted_run_resumes_and_matches_uninterrupted(inputs, uninterrupted, store, sig, capfd):
    prefix = f"runs/res-{sig.name.lower()}"
    killer = interrupt_after(store, prefix, 20, sig)
    LocalLauncher(nnodes=2, max_restarts=2).run(config(inputs, prefix).to_args())
    killer.join(timeout=1)
    out = capfd.readouterr()
    log = out.out + out.err
    result = store.get_json(f"{prefix}/result.json")
    assert result["metrics"]["restarts"] == 1 and result["metrics"]["train_steps"] == STEPS
    resumed = int(log.split("resuming from checkpoint step ")[1].split()[0])
    assert resumed >= 20
    if sig == signal.SIGTERM:  # the stopped rank wrote a checkpoint at the step it stopped at
        assert "SIGTERM: checkpoint at step" in log and "uploaded" in log
        assert resumed == int(log.split("SIGTERM: checkpoint at step ")[1].split()[0])
    # Same data order and state after the resume point: the loss curve continues identically.
    key = lambda h: (h["step"], "eval_loss" in h)  # noqa: E731 - train and eval points
    value = lambda h: h.get("loss", h.get("eval_loss"))  # noqa: E731
    base = {key(h): value(h) for h in uninterrupted["history"]}
    after = [(key(h), value(h)) for h in result["history"] if h["step"] > resumed]
    assert any(k[1] for k, _ in after)  # eval losses are part of the comparison
    assert after and all(abs(loss - base[step]) < 1e-4 for step, loss in after), after
    assert store.get_tree(result["output_uri"]).joinpath("adapter_config.json").exists()
    # keep-K: only the newest checkpoints remain, each complete
    assert store.complete_children(f"{prefix}/checkpoints") == ["step-00000050", "step-00000060"]


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


def test_sigterm_ends_a_rank_stuck_outside_the_step_loop(tmp_path):
    """A rank waiting for a peer that never comes (blocked in C++ inside init_process_group,
    where Python signal handlers cannot run) still exits 143 within shutdown_grace_s of SIGTERM."""
    import os
    import subprocess
    import sys

    from trainer.serve import free_port

    cfg = TrainConfig(model_uri="s3://b/models/x", dataset_uri="s3://b/datasets/x", output_prefix="runs/stuck",
                      shutdown_grace_s=3)
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "train", *cfg.to_args()], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    guard = threading.Timer(120, proc.kill)  # bounds the wait for the first line too
    guard.start()
    try:
        for line in proc.stdout:
            if "stage=setup: process group" in line:
                break
        time.sleep(2)  # now inside init_process_group, waiting for rank 1
        assert proc.poll() is None
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
        assert 2.5 < time.monotonic() - sent < 30
        assert "no step boundary reached within shutdown_grace_s" in proc.stderr.read()
    finally:
        guard.cancel()
        proc.kill()
        proc.wait()


def test_nonfinite_loss_stops_every_rank_uploads_nothing_and_is_not_restarted(inputs, store, capfd):
    from trainer.errors import UserError

    prefix = "runs/nan"
    cfg = TrainConfig(model_uri=inputs[0], dataset_uri=inputs[1], output_prefix=prefix, max_steps=40, batch_size=4,
                      log_every=20, checkpoint_every=30, learning_rate=1e30)  # finite, and blows the weights up
    with pytest.raises(UserError, match=r"exit status 3: the loss became NaN or infinite.*not restarted"):
        LocalLauncher(nnodes=2, max_restarts=2).run(cfg.to_args())
    log = capfd.readouterr()
    assert "error: the training loss or its gradients became NaN or infinite by step" in log.err
    assert "Lower learning_rate (now 1e+30)" in log.err
    assert "restarting the job" not in log.out and "train_result" not in log.out
    assert not store.exists(f"{prefix}/result.json")
    assert store.complete_children(f"{prefix}/checkpoints") == []  # caught before any checkpoint
