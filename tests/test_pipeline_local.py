"""The whole pipeline under kfp.local, as `make demo` runs it (defaults: built-in tiny model
and data), checking that the tuned model beats the base one and the endpoint answered."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.integration


def test_run_local_end_to_end(tmp_path, s3_env):
    """Against an S3 endpoint given on the command line (as with a real MinIO)."""
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": "very-secret-value-42"}
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.run_local", "--pipeline-root", str(tmp_path / "root"),
         "--output-dir", str(tmp_path / "out"), "--s3-endpoint", s3_env["S3_ENDPOINT"],
         "--param", "eval_max_rows=100"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    out = proc.stdout
    for task in ("validate-params", "deliver-model", "deliver-dataset", "finetune", "evaluate", "merge-lora", "deploy"):
        assert re.search(rf"Task .*{task}.* finished with status .*SUCCESS", out + proc.stderr), task
    acc = re.search(r"function-calling accuracy\s+([\d.]+)%\s+([\d.]+)%", out)
    loss = re.search(r"eval loss\s+([\d.]+)\s+([\d.]+)", out)
    assert acc and loss, out[-3000:]
    assert float(acc.group(2)) > float(acc.group(1)) + 20, acc.group(0)
    assert float(loss.group(2)) < float(loss.group(1)), loss.group(0)
    assert re.search(r"endpoint \(smoke-tested\): http://127\.0\.0\.1:\d+/v1", out)
    merged = tmp_path / "out" / "merged-model"
    assert (merged / "config.json").exists() and (merged / "model.safetensors").exists()
    # credentials handed to components through env must not leak into logs or artifacts
    assert "very-secret-value-42" not in out + proc.stderr
    for path in (tmp_path / "root").rglob("*"):
        if path.is_file():
            assert b"very-secret-value-42" not in path.read_bytes(), path
