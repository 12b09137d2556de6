"""MLflow tracking against a real `mlflow server` (sqlite store, artifacts served over HTTP): the finetune step's
settings and per-step losses, logged by rank 0 of its torchrun into the step's run; the evaluate step's metrics,
verdict and report into the run MLFLOW_RUN_ID names (as KFP's plugin sets it). Without a server:
tests/unit/test_tracking.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from kfp.dsl import HTML, Dataset, Markdown, Metrics, Model

from tests.unit.test_components import art

READY_S = 240  # mlflow server's start (migrations, uvicorn) took ~45 s on this busy 2-core machine


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory):
    """A real tracking server on a free loopback port for this module, stopped with everything it started."""
    tmp = tmp_path_factory.mktemp("mlflow")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp / "server.log", "w")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job runner (huey) for a test store
    env.pop("MLFLOW_TRACKING_URI", None)
    # Under trainer.core.procs' guard: the server's uvicorn workers go with it, even if this process is killed.
    guard = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer.core.procs",
            "--parent",
            str(os.getpid()),
            "--grace",
            "10",
            "--",
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp}/mlflow.db",
            "--artifacts-destination",
            str(tmp / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_S
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass  # not listening yet
            if guard.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"mlflow server did not start within {READY_S} s (exit {guard.poll()}):\n"
                    + (tmp / "server.log").read_text()[-3000:],
                    pytrace=False,
                )
            time.sleep(1)
        yield uri
    finally:
        os.killpg(guard.pid, signal.SIGTERM)  # the guard's group: the guard stops the server's tree
        try:
            guard.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(guard.pid, signal.SIGKILL)
            guard.wait()
        log.close()


@pytest.fixture
def tracking_env(mlflow_uri, monkeypatch):
    for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    return mlflow_uri


@pytest.fixture
def client(mlflow_uri):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=mlflow_uri)


@pytest.fixture(scope="module")
def delivered(s3_env, tmp_path_factory):
    from components.deliver_dataset import deliver_dataset
    from components.deliver_model import deliver_model

    tmp = tmp_path_factory.mktemp("delivered")
    model, data = art(Model, tmp, "model"), art(Dataset, tmp, "dataset")
    deliver_model.python_func(source="builtin:tiny-llama", revision="", model=model)
    deliver_dataset.python_func(source="builtin:function-calling", revision="", eval_fraction=0.1, seed=0, dataset=data)
    return model, data


def _steps(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_finetune_logs_its_settings_and_per_step_losses_from_rank_0(
    tracking_env, client, delivered, store, tmp_path, monkeypatch
):
    """The step opens the run (named after it) and hands it to torchrun's rank 0, which logs the run's settings and
    the losses at the steps the loss lines and TensorBoard show; the step ends the run."""
    from components.finetune import finetune

    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "tracking-test-finetune")
    model, data = delivered
    finetune.python_func(
        base_model=model,
        dataset=data,
        run_id="tracked",
        adapter=art(Model, tmp_path, "a"),
        metrics=art(Metrics, tmp_path, "m"),
        report=art(HTML, tmp_path, "r"),
        nodes=1,
        max_steps=12,
        batch_tokens=256,
        max_seq_len=256,
        lora_r=8,
        lora_alpha=16,
    )
    result = store.get_json("runs/tracked/result.json")
    experiment = client.get_experiment_by_name("tracking-test-finetune")
    [run] = client.search_runs([experiment.experiment_id])  # rank 0 logged into the step's run, made none of its own
    assert run.info.run_name == "finetune tracked" and run.info.status == "FINISHED"
    params = run.data.params
    assert params["learning_rate"] == str(result["config"]["learning_rate"]) and params["lora_r"] == "8"
    assert params["max_steps"] == "12" and params["model_uri"] == result["config"]["model_uri"]
    assert "output_prefix" not in params  # may change on a resume: MLflow would refuse the changed param
    # log_every=10, eval_every=50: losses at step 10 and at the last step, the eval loss at the last
    assert _steps(client, run.info.run_id, "train/loss") == [
        (h["step"], pytest.approx(h["loss"])) for h in result["history"] if "loss" in h
    ]
    assert [s for s, _ in _steps(client, run.info.run_id, "train/loss")] == [10, 12]
    assert _steps(client, run.info.run_id, "eval/loss") == [(12, pytest.approx(result["history"][-1]["eval_loss"]))]
    assert run.data.metrics["train_tokens"] == result["metrics"]["train_tokens"]


def test_evaluate_logs_metrics_verdict_and_report_to_the_run_it_is_given(
    tracking_env, client, delivered, store, tmp_path, monkeypatch, capsys
):
    """As on a cluster with KFP's plugin: MLFLOW_RUN_ID names the task's run, which is logged to and left running."""
    from components.evaluate import evaluate
    from trainer.config.training import TrainConfig
    from trainer.recipe.train import train

    model, data = delivered
    experiment = client.create_experiment("tracking-test-evaluate")
    given = client.create_run(experiment, run_name="kfp task").info.run_id
    tuned = art(Model, tmp_path, "tuned")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the tuned model for this test, not tracked
    out = train(
        TrainConfig(
            model_uri=model.metadata["uri"],
            dataset_uri=data.metadata["uri"],
            output_prefix="runs/tracked-eval",
            max_steps=4,
            batch_tokens=256,
            max_seq_len=256,
            lora_r=8,
        ),
        store,
    )
    tuned.metadata["uri"] = out["output_uri"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_env)
    monkeypatch.setenv("MLFLOW_RUN_ID", given)
    scores, examples = art(Metrics, tmp_path, "scores"), art(Markdown, tmp_path, "examples")
    promoted, reason, scale = evaluate.python_func(
        base_model=model,
        tuned_model=tuned,
        dataset=data,
        metrics=scores,
        examples=examples,
        bfcl_answers=art(Dataset, tmp_path, "answers"),
        max_rows=4,
        eval_engine="hf",
        min_fc_accuracy=2.0,
    )
    assert not promoted and reason and scale == 1.0  # a floor no model meets: the verdict and its reason are logged too
    run = client.get_run(given)
    assert run.info.status == "RUNNING"  # its owner (KFP) ends it
    assert run.data.metrics == pytest.approx(dict(scores.metadata))  # base_*, tuned_*, per category, promoted
    assert {"base_fc_accuracy", "tuned_fc_accuracy", "fc_multiple_rows", "promoted"} <= set(run.data.metrics)
    assert run.data.tags["promoted"] == "false" and run.data.tags["gate_reason"] == reason
    [report] = client.list_artifacts(given, "reports")
    local = client.download_artifacts(given, report.path, str(tmp_path / "downloaded"))
    assert Path(local).read_text() == Path(examples.path).read_text()
    assert len(client.search_runs([experiment])) == 1  # no run of its own
    assert "MLflow" not in capsys.readouterr().err


def test_a_new_run_without_a_name_and_no_credentials_in_params(tracking_env, client):
    """Without MLFLOW_RUN_ID or MLFLOW_EXPERIMENT_NAME: a new run in the server's default experiment. Params that
    look like credentials are not logged, nor a URL's user:password."""
    from trainer.core.tracking import Tracker

    with Tracker.from_env(run_name="by hand") as tracker:
        tracker.log_params(
            {
                "learning_rate": 0.001,
                "aws_secret_access_key": "s",
                "HF_TOKEN": "t",
                "model_uri": "https://user:pw@hub.example/m",
            }
        )
        tracker.log_metrics({"train/loss": 2.0}, step=3)
    run = client.get_run(tracker.run_id)
    assert run.info.experiment_id == "0" and run.info.run_name == "by hand" and run.info.status == "FINISHED"
    assert run.data.params == {"learning_rate": "0.001", "model_uri": "https://hub.example/m"}
    assert _steps(client, tracker.run_id, "train/loss") == [(3, 2.0)]
    assert json.dumps(run.data.params).find("pw") == -1


def test_a_run_id_the_server_does_not_have_is_one_warning_naming_it(tracking_env, monkeypatch, capsys):
    from trainer.core.tracking import Tracker

    monkeypatch.setenv("MLFLOW_RUN_ID", "0" * 32)
    tracker = Tracker.from_env(run_name="x")
    tracker.log_metrics({"train/loss": 1.0}, step=1)
    tracker.close()
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"WARNING: MLflow tracking at {tracking_env} is off for the rest of this process (")
    assert f"and that MLFLOW_RUN_ID={'0' * 32} names a run there" in line and not tracker.on
