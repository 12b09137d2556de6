"""The sweep: picking the winner, and the deploy gate in both directions, under kfp.local."""

import json
import subprocess
import sys
from pathlib import Path


from tests.unit.test_sweep import TRIALS


ROOT = Path(__file__).resolve().parents[2]


def run_sweep(tmp_path, min_gain, max_steps, trials):
    """The sweep deploying its winner is tests/integration/test_pipeline_local.py's sweep run."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.run_local",
            "--pipeline",
            "sweep",
            "--parallelism",
            "2",
            "--pipeline-root",
            str(tmp_path / "root"),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--param",
            f"trials={json.dumps(trials)}",
            "--param",
            f"max_steps={max_steps}",
            "--param",
            "eval_max_rows=20",
            "--param",
            "select_metric=eval_loss",
            "--param",
            "nodes=1",
            "--param",
            f"min_gain={min_gain}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def statuses(root) -> list[tuple[str, str]]:
    """(task, "SUCCESS") for every task that finished: kfp.local writes a task's executor output
    only on success. Read from disk, not from the log, where parallel trials interleave lines."""
    return [(p.parent.name, "SUCCESS") for p in root.rglob("executor_output.json")]


def test_sweep_says_why_it_did_not_deploy(tmp_path):
    # No model gains 100: one trial of a few steps says so (picking among several: the deploying sweep run).
    proc = run_sweep(tmp_path, min_gain=100, max_steps=5, trials=TRIALS[:1])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    done = statuses(tmp_path / "root")
    assert ("not-deployed", "SUCCESS") in done
    assert not any(t in ("deploy", "merge-lora") for t, _ in done)
    assert "not deployed: the best trial" in proc.stdout and "less than min_gain 100" in proc.stdout
