"""trainer.core.tracking without a working server: off when MLFLOW_TRACKING_URI is unset (mlflow not even imported), one
warning and no more tries against a server that never answers, what training pods are handed. The real server's
side (params, per-step losses, the evaluation's metrics and verdict) is tests/integration/test_tracking.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from trainer.core import tracking
from trainer.core.tracking import Tracker


def test_unset_uri_turns_tracking_off_without_importing_mlflow(monkeypatch):
    """The training image need not have mlflow: the recipe, the components and the job's pod spec run without it."""
    code = (
        "import sys\n"
        "import components.evaluate, components.finetune, trainer.k8s.pytorchjob, trainer.recipe.train\n"
        "from trainer.core.tracking import Tracker\n"
        "t = Tracker.from_env(run_name='x')\n"
        "t.share(); t.log_params({'a': 1}); t.log_metrics({'m': 1.0}, step=1); t.set_tags({'k': 'v'})\n"
        "t.log_artifact(sys.executable); t.close()\n"
        "print(t.on, [m for m in sys.modules if m.split('.')[0] == 'mlflow'])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[-2] == "False []"
    assert "MLflow" not in out.stderr


def test_without_mlflow_installed_tracking_is_one_warning_and_the_work_goes_on():
    """A training image without mlflow, on a cluster whose KFP plugin sets MLFLOW_TRACKING_URI."""
    code = (
        "import sys\n"
        "sys.modules['mlflow'] = None  # as if not installed: its import raises ImportError\n"
        "from trainer.core.tracking import Tracker\n"
        "t = Tracker.from_env(run_name='x'); t.log_metrics({'m': 1.0}, step=1); t.close()\n"
        "print('went on', t.on)\n"
    )
    env = {**os.environ, "MLFLOW_TRACKING_URI": "http://user:pw@mlflow.kubeflow:5000"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == "went on False\n", out.stderr
    assert out.stderr == (
        "WARNING: MLflow tracking at http://mlflow.kubeflow:5000 is off for the rest of this process "
        "(mlflow is not installed here): pip install mlflow-skinny, or unset MLFLOW_TRACKING_URI\n"
    )


@pytest.fixture
def silent_server():
    """A server that accepts connections and never answers (a tracking server hung, or a proxy that holds
    requests): (its URI, the count of connections it took)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    taken: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed at teardown
                return
            taken.append(conn)  # held open, never answered

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", taken
    listener.close()
    for conn in taken:
        conn.close()


def _unset(monkeypatch, name: str) -> None:
    """`name` absent for the test and removed after it, even where the code under test set it."""
    monkeypatch.setenv(name, "set-by-the-test")
    monkeypatch.delenv(name)


def test_a_server_that_never_answers_is_one_warning_then_no_more_tries(silent_server, monkeypatch, capsys, tmp_path):
    uri, taken = silent_server
    for name in (*tracking.BOUNDS, tracking.RUN_ID, tracking.EXPERIMENT):
        _unset(monkeypatch, name)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")  # the user's value is kept; the others get BOUNDS'
    tracker = Tracker.from_env(run_name="runs/x")
    assert not tracker.on
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "1"
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == tracking.BOUNDS["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
    # the first request and its one retry (BOUNDS), each given up after the 1 s timeout
    assert len(taken) == 1 + int(tracking.BOUNDS["MLFLOW_HTTP_REQUEST_MAX_RETRIES"])
    tried = len(taken)
    report = tmp_path / "report.md"
    report.write_text("# report\n")
    for _ in range(3):  # the rest of a training: every call a no-op, the server not asked again
        tracker.log_params({"learning_rate": 1e-3})
        tracker.log_metrics({"train/loss": 1.0}, step=1)
        tracker.set_tags({"promoted": "true"})
        tracker.log_artifact(str(report), "reports")
    tracker.close(failed=True)
    assert len(taken) == tried
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if line.strip()]
    assert line.startswith(f"WARNING: MLflow tracking at {uri} is off for the rest of this process (")
    assert "unset MLFLOW_TRACKING_URI to turn tracking off" in line
    tracker.share()  # the training processes it would start do not try that server again
    assert "MLFLOW_TRACKING_URI" not in os.environ


def test_the_training_pods_get_the_tracking_settings_and_no_credentials(monkeypatch):
    """KFP's plugin sets MLFLOW_* on the finetune step's pod; rank 0 runs on the job's pods and logs to that run."""
    from trainer.k8s.podspec import ClusterSpec
    from trainer.k8s.pytorchjob import pod_template

    def mlflow_env() -> dict[str, str]:
        [container] = pod_template(ClusterSpec(), ["train"], "pytorch").spec.containers
        return {e.name: e.value for e in container.env if e.name.startswith("MLFLOW_")}

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for name in tracking.BOUNDS:  # a Tracker made earlier in this process set them (MLflow reads them per request)
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_RUN_ID", "abc")
    assert mlflow_env() == {}  # tracking off: nothing to hand over
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.kubeflow:5000")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "a-secret-token")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "a-secret-password")
    assert mlflow_env() == {"MLFLOW_TRACKING_URI": "http://mlflow.kubeflow:5000", "MLFLOW_RUN_ID": "abc"}
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")  # a limit set here goes with the settings
    assert mlflow_env()["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "30"


def test_credentials_are_redacted_from_text():
    assert tracking.redacted("http://user:pass@mlflow:5000/x and s3://k:s@h/b") == "http://mlflow:5000/x and s3://h/b"
    assert tracking.redacted("s3://bucket/models/sha256-abc") == "s3://bucket/models/sha256-abc"
