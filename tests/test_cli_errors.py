"""Bad input fails before any work: one message naming the problem and the fix, exit 2,
no traceback. These run the real entry points as a user would."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args, env=None):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def bad_rows(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "rows.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "yo"}]}) + "\n"
                    + json.dumps({"prompt": "no messages here"}) + "\n")
    return path


@pytest.mark.parametrize("params, needle", [
    (["model_source=builtin:gpt-9"], "unknown built-in model 'builtin:gpt-9'"),
    (["model_source=not a model!"], "unknown model source"),
    (["dataset_source=/nonexistent/train.jsonl"], "dataset path not found: /nonexistent/train.jsonl"),
    (["lora_r=0", "learning_rate=-1"], "2 problems"),
    (["max_stepz=3"], "unknown parameter 'max_stepz'"),
    (["max_steps=many"], "max_steps='many' is not a valid whole number"),
])
def test_run_local_rejects_bad_parameters(params, needle, tmp_path):
    proc = run("-m", "pipelines.run_local", "--pipeline-root", str(tmp_path / "root"),
               *[a for p in params for a in ("--param", p)])
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "root").exists()  # nothing started, nothing written


def test_row_without_messages_names_file_and_line(bad_rows, tmp_path):
    proc = run("-m", "pipelines.run_local", "--pipeline-root", str(tmp_path / "root"),
               "--param", f"dataset_source={bad_rows}")
    assert proc.returncode == 2
    assert f"{bad_rows}:2: row has no 'messages' field" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_trainer_cli_rejects_bad_config():
    proc = run("-m", "trainer", "train", "--model-uri", "nope", "--dataset-uri", "s3://b/d", "--output-prefix", "r",
               "--lora-r", "0")
    assert proc.returncode == 2
    assert "model_uri must be an s3:// URI" in proc.stderr and "lora_r must be > 0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_local_starts_its_own_s3_with_throwaway_credentials(monkeypatch):
    from pipelines.run_local import start_s3
    from trainer.storage import Store

    for key in ("S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)
    server = start_s3(None)
    try:
        store = Store.from_env()
        assert store.endpoint.startswith("http://127.0.0.1:")
        store.ensure_bucket()
        assert store.put_json("probe.json", {"ok": 1}) and store.get_json("probe.json") == {"ok": 1}
    finally:
        server.stop()


def test_s3_endpoint_without_credentials_is_refused(tmp_path):
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    proc = run("-m", "pipelines.run_local", "--s3-endpoint", "http://127.0.0.1:9", "--pipeline-root",
               str(tmp_path / "r"), env=env)
    assert proc.returncode == 2 and "needs AWS_ACCESS_KEY_ID" in proc.stderr
