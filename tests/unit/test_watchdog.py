"""The progress watchdog (trainer/core/watchdog.py) alone, and in the local launcher: a job whose
steps stop moving is stopped and not restarted; a user error (exit 2) is not restarted.

The fast checks; the ones that train, serve or run the pipeline are tests/integration/test_watchdog.py (the integration tier)."""

from trainer.core.watchdog import Watchdog, parse, progress_line


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_watchdog_fails_only_when_step_and_stage_stop_moving():
    clock = Clock()
    dog = Watchdog(60, clock=clock)
    clock.now += 59
    assert dog.check() is None
    dog.feed(progress_line("setup: loading model", 0))
    clock.now += 59
    dog.feed("some other log line")
    dog.feed(progress_line("train", 10))
    clock.now += 59
    assert dog.check() is None  # 118 s since start, but progress every 59 s
    dog.feed(progress_line("train", 10))  # the same step again is no progress
    clock.now += 2
    msg = dog.check()
    assert msg is not None and "no progress for 61 s in stage 'train' at step 10" in msg
    assert "stall_timeout_s=60" in msg


def test_watchdog_names_the_stage_when_no_step_was_ever_reached():
    clock = Clock()
    dog = Watchdog(600, clock=clock)
    dog.feed("[rank0] " + progress_line("setup: downloading model and data", 0) + "\n")  # prefixed, as pod logs
    clock.now += 600
    assert "stage 'setup: downloading model and data'" in dog.check()
    off = Watchdog(0, clock=clock)
    clock.now += 10**6
    assert off.check() is None  # 0 turns it off


def test_progress_lines_round_trip():
    assert parse(progress_line("cleanup: saving the result", 300)) == (300, "cleanup: saving the result")
    assert parse("progress bar 30%") is None


# -- in the local launcher (real torchrun jobs)
