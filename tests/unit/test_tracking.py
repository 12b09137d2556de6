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
        "import components.evaluate, components.finetune, trainer.launch.pytorchjob, trainer.recipe.train\n"
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
    from trainer.launch.pytorchjob import pod_template

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


def test_a_password_holding_at_or_slash_and_a_token_in_the_query_are_redacted_whole():
    """Issue 57 F14: the user info ended at its first '@' or '/', so half a password was printed, and a query token
    was kept."""
    assert tracking.redacted("see http://u:p@ss/w@mlflow:5000/x?token=abc&page=2 now") == (
        "see http://mlflow:5000/x?token=***&page=2 now"
    )
    assert tracking.redacted("https://host/api?API_KEY=k1&sig=s2#frag") == "https://host/api?API_KEY=***&sig=***#frag"


def test_a_urls_credentials_go_to_mlflows_settings_and_no_url_or_pod_holds_them(monkeypatch, capsys):
    """Issue 57 F14: MLflow's own "View run ... at <url>" lines put the password in run.log, and launch-k8s rendered
    it in the job's environment. The tracker moves user:password into MLflow's basic-auth settings and tracks to the
    bare URL; what a pod gets is the bare URL (credentials come from a Secret)."""
    from trainer.k8s.podspec import ClusterSpec
    from trainer.launch.pytorchjob import pod_template

    for name in (tracking.USERNAME, tracking.PASSWORD, *tracking.BOUNDS):  # set, then unset: restored after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://alice:pa@ss/w0rd@127.0.0.1:9/")  # nothing listens on port 9
    [container] = pod_template(ClusterSpec(), ["train"], "pytorch").spec.containers
    env = {e.name: e.value for e in container.env if e.name.startswith("MLFLOW_")}
    assert env["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:9/" and "pa@ss" not in repr(container.env)
    tracker = Tracker.from_env()
    assert not tracker.on  # the server does not answer: one warning
    assert os.environ["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:9/"
    assert os.environ[tracking.USERNAME] == "alice" and os.environ[tracking.PASSWORD] == "pa@ss/w0rd"
    assert "pa@ss" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "uri, said",
    [
        ("localhost:5000", "has no scheme MLflow tracks to: give the server's URL, e.g. http://localhost:5000"),
        ("file:", "names no folder: give file:///an/absolute/folder"),
        ("ftp://host/x", "MLflow has no tracking store for scheme 'ftp'"),
        ("htp://host:5000", "MLflow has no tracking store for scheme 'htp'"),
        ("http://host:abc", "is no server URL (the port is not a number from 1 to 65535)"),
    ],
)
def test_a_tracking_uri_mlflow_cannot_use_is_refused_at_validate_and_never_fails_a_step(uri, said, monkeypatch, capsys):
    """Issue 57 F13: such a URI passed validation and MLflow raised inside the finetune step, after every delivery
    (tracking is documented never to fail a run): now refused at validate with the fix, and a tracker started with it
    anyway (a step's own environment) is one warning, off."""
    from trainer.validate import pipeline_problems

    for name in tracking.BOUNDS:  # set, then unset: restored after the test (the tracker sets them)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    [problem] = [p for p in pipeline_problems({}) if "MLFLOW_TRACKING_URI" in p]
    assert problem.startswith(f"MLFLOW_TRACKING_URI={uri!r}") and said in problem
    tracker = Tracker.from_env()
    assert not tracker.on and said in capsys.readouterr().err
    for good in (
        "http://127.0.0.1:5000",
        "https://mlflow.example.com/",
        "file:///tmp/mlruns",
        "sqlite:///m.db",
        "databricks",
    ):
        assert tracking.uri_problem(good) == "", good
