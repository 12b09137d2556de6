"""The progress watchdog (trainer/core/watchdog.py) alone, and in the local launcher: a job whose
steps stop moving is stopped and not restarted; a user error (exit 2) is not restarted."""

import re
import signal
import threading
import time

import psutil
import pytest


@pytest.fixture(scope="module")
def inputs(builtin_uris):
    return builtin_uris


def workers():
    """This test's training workers (other jobs may run on the machine), not the torchrun agents."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = p.cmdline()
        except psutil.Error:  # exited meanwhile
            continue
        if {"trainer", "train"} <= set(cmd) and not any(c.endswith("torchrun") for c in cmd):
            out.append(p)
    return out


def test_a_frozen_rank_is_caught_by_the_watchdog_and_not_restarted(inputs, store, capfd):
    from trainer.config.training import TrainConfig
    from trainer.core.errors import UserError
    from trainer.launch import LocalLauncher

    prefix = "runs/stall"
    cfg = TrainConfig(
        model_uri=inputs[0],
        dataset_uri=inputs[1],
        output_prefix=prefix,
        max_steps=3000,
        batch_size=4,
        log_every=2,
        checkpoint_every=10**6,
        lora_train_embeddings=True,
    )
    frozen, frozen_at = [], []

    def clock() -> float:
        """The watchdog's: real time until a rank is frozen, then a thousand times faster (the
        1800 s stall timeout is 1.8 s of silence). A slow setup on a busy machine is never taken
        for a stall, and the frozen job is not waited on for long."""
        now = time.monotonic()
        return frozen_at[0] + (now - frozen_at[0]) * 1000 if frozen_at else now

    def freeze_one_rank_once_training():
        deadline, seen = time.monotonic() + 120, ""
        while time.monotonic() < deadline and not frozen:
            seen += capfd.readouterr().out  # a line may arrive in two reads
            if any(int(n) >= 4 for n in re.findall(r"progress: step=(\d+) stage=train", seen)):
                procs = workers()
                procs[-1].send_signal(signal.SIGSTOP)  # as a hung GPU or a dead NIC: alive, no progress
                frozen_at.append(time.monotonic())
                frozen.append(procs)
            time.sleep(0.2)

    thread = threading.Thread(target=freeze_one_rank_once_training, daemon=True)
    thread.start()
    with pytest.raises(UserError, match=r"training stalled: no progress for \d+ s in stage 'train' at step \d+") as err:
        LocalLauncher(nnodes=2, max_restarts=2, stall_timeout_s=1800, clock=clock).run(cfg.to_args())
    thread.join(timeout=1)
    assert frozen, "the job never reached step 4"
    # judged on the watchdog's clock (the injected one): the stall timeout passed there, not in real time
    assert int(re.search(r"no progress for (\d+) s", str(err.value)).group(1)) >= 1800
    assert "restarting the job" not in capfd.readouterr().out
    assert not [p for p in frozen[0] if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]  # all gone


def test_user_error_in_training_is_not_restarted(inputs, capfd):
    from trainer.config.training import TrainConfig
    from trainer.core.errors import UserError
    from trainer.launch import LocalLauncher

    # The tiny model's context (1024) is known only once it loads: a UserError inside training. One node: the
    # launcher's verdict reads its exit status (a node that fails stops the others: the watchdog test above and
    # tests/integration/test_resilience.py's non-finite loss).
    cfg = TrainConfig(
        model_uri=inputs[0],
        dataset_uri=inputs[1],
        output_prefix="runs/too-long",
        max_steps=3,
        batch_size=4,
        batch_tokens=0,
        max_seq_len=100000,
    )  # rows, so the config itself is valid
    with pytest.raises(UserError, match="exit status 2: the input is invalid.*not restarted"):
        LocalLauncher(nnodes=1, max_restarts=2).run(cfg.to_args())
    out = capfd.readouterr()
    assert "restarting the job" not in out.out
    assert "exceeds the model's context length" in out.err
