"""`python -m pipelines.submit` against the real kfp.Client, with a fake KFP API at the HTTP
boundary (tests/kfp_fake_api.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines import submit
from tests.fakes.kfp_fake_api import FakeKfpAPI
from tests.schemas import validate

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = [
    "--param",
    "launcher=kubernetes",
    "--param",
    "deploy_backend=kubernetes",
    "--param",
    "model_source=meta-llama/Llama-3.2-1B-Instruct",
    "--param",
    "lora_train_embeddings=false",
    "--param",
    "learning_rate=0.0002",
    "--param",
    "nodes=2",
    "--param",
    "procs_per_node=8",
]


@pytest.fixture
def kfp_api(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # kfp.Client reads ~/.config/kfp/context.json
    with FakeKfpAPI() as api:
        yield api


def test_first_submit_uploads_pipeline_and_creates_run_fake_api(kfp_api, capsys):
    assert submit.main(["--host", kfp_api.url, *CLUSTER, "--experiment", "exp-a"]) == 0
    out = capsys.readouterr().out
    [pipeline] = kfp_api.state.pipelines.values()
    assert pipeline["display_name"] == "llm-finetune"
    [run] = kfp_api.state.runs.values()
    assert f"url: {kfp_api.url}/#/runs/details/{run['run_id']}" in out
    [exp] = kfp_api.state.experiments.values()
    assert exp["display_name"] == "exp-a" and run["experiment_id"] == exp["experiment_id"]
    ref = run["pipeline_version_reference"]
    assert ref["pipeline_id"] == pipeline["pipeline_id"]
    params = run["runtime_config"]["parameters"]
    assert params["nodes"] == 2 and params["launcher"] == "kubernetes"
    assert params["node_selector"] == {} and params["lora_train_embeddings"] is False
    uploaded = kfp_api.state.uploads[ref["pipeline_version_id"]]
    assert b"pipelineInfo" in uploaded and b"llm-finetune" in uploaded  # the compiled package


def test_resubmit_reuses_experiment_and_version_and_new_code_adds_a_version_fake_api(kfp_api, monkeypatch):
    submit.main(["--host", kfp_api.url, *CLUSTER])
    submit.main(["--host", kfp_api.url, *CLUSTER])
    [pid] = kfp_api.state.pipelines
    names = [v["display_name"] for v in kfp_api.state.versions[pid]]
    assert len(names) == 2 and names[1] == "llm-finetune" and names[0].startswith("llm-finetune-")
    assert len(kfp_api.state.experiments) == 1
    versions = {r["pipeline_version_reference"]["pipeline_version_id"] for r in kfp_api.state.runs.values()}
    assert len(kfp_api.state.runs) == 2 and len(versions) == 1
    monkeypatch.setattr(submit, "package", lambda d, pipeline: (_fake_package(d), "0123456789ab"))
    submit.main(["--host", kfp_api.url, *CLUSTER])
    assert [v["display_name"] for v in kfp_api.state.versions[pid]][0] == "llm-finetune-0123456789ab"


def _fake_package(out_dir):
    path = out_dir / "p.yaml"
    path.write_text("pipelineInfo: {name: llm-finetune}\n")
    return path


def test_recurring_run_fake_api(kfp_api, capsys):
    assert submit.main(["--host", kfp_api.url, *CLUSTER, "--recurring", "0 0 3 * * *", "--run-name", "nightly"]) == 0
    [job] = kfp_api.state.recurring.values()
    assert job["display_name"] == "nightly"
    assert job["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * *"
    assert job["max_concurrency"] == "1" or job["max_concurrency"] == 1
    assert job["runtime_config"]["parameters"]["nodes"] == 2
    assert not kfp_api.state.runs
    assert f"/#/recurringrun/details/{job['recurring_run_id']}" in capsys.readouterr().out


def test_five_field_cron_is_refused(kfp_api, capsys):
    assert (
        pytest.raises(SystemExit, submit.main, ["--host", kfp_api.url, *CLUSTER, "--recurring", "0 3 * * *"]).value.code
        == 2
    )
    assert "6-field cron" in capsys.readouterr().err


@pytest.mark.parametrize("final, code", [("SUCCEEDED", 0), ("FAILED", 1)])
def test_wait_follows_the_run_fake_api(kfp_api, monkeypatch, final, code, capsys):
    import kfp

    kfp_api.state.final_state = final
    real = kfp.Client.wait_for_run_completion
    monkeypatch.setattr(
        kfp.Client,
        "wait_for_run_completion",
        lambda self, run_id, timeout, sleep_duration=0: real(self, run_id, timeout, sleep_duration=0),
    )
    assert submit.main(["--host", kfp_api.url, *CLUSTER, "--wait"]) == code
    assert f"run finished: {final}" in capsys.readouterr().out


def test_bad_parameters_upload_nothing_fake_api(kfp_api, capsys, tmp_path):
    local = tmp_path / "mine.jsonl"
    local.write_text("{}\n")
    with pytest.raises(SystemExit):
        submit.main(
            [
                "--host",
                kfp_api.url,
                "--param",
                "launcher=kubernetes",
                "--param",
                "deploy_backend=kubernetes",
                "--param",
                f"dataset_source={local}",
                "--param",
                "cleanup=sometimes",
                "--param",
                "lora_r=0",
            ]
        )
    err = capsys.readouterr().err
    assert "cluster cannot read" in err and "3 problems" in err
    assert "lora_r must be > 0" in err and "cleanup must be one of" in err
    assert not kfp_api.state.requests  # nothing was contacted


def test_dry_run_prints_valid_objects_without_secrets():
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.submit", "--dry-run", *CLUSTER, "--param", 'node_selector={"pool": "h100"}'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "AWS_SECRET_ACCESS_KEY": "topsecret-1", "HF_TOKEN": "hf_topsecret"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "topsecret" not in proc.stdout
    objs = list(yaml.safe_load_all(proc.stdout))
    assert [o["kind"] for o in objs] == ["PyTorchJob", "Deployment", "Service"]
    for o in objs:
        validate(o)
    assert objs[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    assert objs[0]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] == {"pool": "h100"}


@pytest.mark.parametrize("schedule", ["@every 1h", "@daily", "0 30 2 * * MON-FRI"])
def test_recurring_run_takes_every_schedule_form_kfp_accepts_fake_api(kfp_api, schedule):
    assert submit.main(["--host", kfp_api.url, *CLUSTER, "--recurring", schedule]) == 0
    [job] = kfp_api.state.recurring.values()
    assert job["trigger"]["cron_schedule"]["cron"] == schedule


def test_sweep_is_submitted_as_its_own_pipeline_fake_api(kfp_api, capsys):
    trials = '[{"lora_r": 8, "lora_alpha": 16, "learning_rate": 0.0002}, {"lora_r": 32, "lora_alpha": 64, "learning_rate": 0.0001}]'
    assert (
        submit.main(
            [
                "--host",
                kfp_api.url,
                "--pipeline",
                "sweep",
                "--parallelism",
                "3",
                "--param",
                "launcher=trainjob",
                "--param",
                "deploy_backend=kubernetes",
                "--param",
                f"trials={trials}",
                "--param",
                "min_gain=0.05",
            ]
        )
        == 0
    )
    [pipeline] = kfp_api.state.pipelines.values()
    assert pipeline["display_name"] == "llm-finetune-sweep"
    [run] = kfp_api.state.runs.values()
    assert run["display_name"] == "llm-finetune-sweep"  # the default run name follows the pipeline
    params = run["runtime_config"]["parameters"]
    assert params["trials"][1] == {"lora_r": 32, "lora_alpha": 64, "learning_rate": 0.0001}
    assert params["min_gain"] == 0.05 and "method" not in params  # the sweep's own signature
    uploaded = kfp_api.state.uploads[run["pipeline_version_reference"]["pipeline_version_id"]]
    assert b"llm-finetune-sweep" in uploaded
    assert b"parallelismLimit: 3" in uploaded and b"parallelismLimit: 2" not in uploaded  # --parallelism compiled in


def test_sweep_bad_trials_and_parallelism_upload_nothing_fake_api(kfp_api, capsys):
    with pytest.raises(SystemExit) as exit_info:
        submit.main(
            ["--host", kfp_api.url, "--pipeline", "sweep", "--parallelism", "-1", "--param", 'trials=[{"lora_r": 8}]']
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "3 problems" in err and "--parallelism -1" in err
    assert (
        "trials[0] must have exactly the keys" in err and "launcher=local" not in err and "deploy_backend=local" in err
    )
    assert not kfp_api.state.requests


def test_sweep_dry_run_prints_one_job_per_trial_and_the_winners_deployment():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.submit",
            "--dry-run",
            "--pipeline",
            "sweep",
            "--param",
            "launcher=pytorchjob",
            "--param",
            "deploy_backend=kubernetes",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    objs = list(yaml.safe_load_all(proc.stdout))
    assert [o["kind"] for o in objs] == ["PyTorchJob"] * 3 + ["Deployment", "Service"]
    for o in objs:
        validate(o)
    names = [o["metadata"]["name"] for o in objs[:3]]
    assert len(set(names)) == 3  # trials never share a job
    ranks = [
        next(
            a
            for a in o["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
            if a.startswith("--lora-r=")
        )
        for o in objs[:3]
    ]
    assert ranks == ["--lora-r=4", "--lora-r=16", "--lora-r=64"]  # the default trials, in order


def test_credentials_in_the_host_url_are_refused_and_never_printed(kfp_api, capsys):
    host = kfp_api.url.replace("http://", "http://bob:hunter2@")
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", host, *CLUSTER])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "hunter2" not in err and "bob" not in err
    assert "***@127.0.0.1" in err and "KFP_TOKEN" in err
    assert not kfp_api.state.requests
    with pytest.raises(SystemExit):  # no scheme: still user-info, still masked
        submit.main(["--host", "bob:hunter2@" + kfp_api.url.removeprefix("http://"), *CLUSTER])
    err = capsys.readouterr().err
    assert "hunter2" not in err and "***@127.0.0.1" in err


def test_wait_past_its_timeout_says_the_run_goes_on_without_a_traceback_fake_api(kfp_api, monkeypatch, capsys):
    import kfp

    kfp_api.state.final_state = "RUNNING"  # never finishes
    real = kfp.Client.wait_for_run_completion
    monkeypatch.setattr(
        kfp.Client,
        "wait_for_run_completion",
        lambda self, run_id, timeout, sleep_duration=0: real(self, run_id, timeout, sleep_duration=0.2),
    )
    assert submit.main(["--host", kfp_api.url, *CLUSTER, "--wait", "--timeout", "1"]) == 1
    [run] = kfp_api.state.runs.values()
    err = capsys.readouterr().err
    assert err.startswith("error: the run has not finished within --timeout 1s; it goes on in KFP: ")
    assert err.rstrip().endswith(f"/#/runs/details/{run['run_id']}")


def test_wait_with_recurring_is_refused_before_anything_is_contacted_fake_api(kfp_api, capsys):
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", kfp_api.url, *CLUSTER, "--wait", "--recurring", "@daily"])
    assert exit_info.value.code == 2 and "drop --wait" in capsys.readouterr().err
    assert not kfp_api.state.requests


def test_multi_user_kfp_gets_the_experiment_in_the_profile_namespace_fake_api(kfp_api, capsys):
    kfp_api.state.multi_user = True
    assert submit.main(["--host", kfp_api.url, *CLUSTER, "--param", "namespace=team-a"]) == 0
    [exp] = kfp_api.state.experiments.values()
    assert exp["namespace"] == "team-a"  # the namespace parameter, when --kfp-namespace is not given
    assert submit.main(["--host", kfp_api.url, *CLUSTER, "--kfp-namespace", "team-b"]) == 0
    assert sorted(e["namespace"] for e in kfp_api.state.experiments.values()) == ["team-a", "team-b"]
    assert len(kfp_api.state.runs) == 2
    with pytest.raises(SystemExit) as exit_info:  # the sweep's namespace parameter left empty: nothing to fall back on
        submit.main(
            [
                "--host",
                kfp_api.url,
                "--pipeline",
                "sweep",
                "--param",
                "launcher=trainjob",
                "--param",
                "deploy_backend=kubernetes",
            ]
        )
    assert exit_info.value.code == 2 and "pass --kfp-namespace" in capsys.readouterr().err


def test_multi_user_submit_checks_kserves_host_in_the_profile_namespace_fake_api(kfp_api, capsys):
    """namespace="" deploys into the run's namespace, the profile's: known here, so a too-long
    predictor host name is refused before the upload, not after training."""
    kfp_api.state.multi_user = True
    kserve = [
        *CLUSTER[:2],
        "--param",
        "deploy_backend=kserve",
        *CLUSTER[4:],
        "--param",
        f"served_model_name={'a' * 40}",
    ]
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", kfp_api.url, *kserve, "--kfp-namespace", "team-machine-learning-prod"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "predictor's host name" in err and "at most 26 characters" in err
    assert not kfp_api.state.calls("POST", "") and not kfp_api.state.runs
    assert submit.main(["--host", kfp_api.url, *kserve, "--kfp-namespace", "ml"]) == 0
    kfp_api.state.multi_user = False  # single-user: the runs' namespace is the cluster's business, checked at deploy
    assert submit.main(["--host", kfp_api.url, *kserve]) == 0
    assert len(kfp_api.state.runs) == 2


@pytest.mark.parametrize("pipeline, own", [("finetune", "lora_r = 64"), ("sweep", "trials = [")])
def test_list_params_shows_the_chosen_pipelines_parameters(pipeline, own, capsys):
    assert submit.main(["--pipeline", pipeline, "--list-params"]) == 0
    out = capsys.readouterr().out
    assert f"  {own}" in out and "served_model_name = " in out and "(no description)" not in out
    # the two defaults (run_local's) that a submitted run does not keep are said so
    assert "launcher = 'local'" in out or 'launcher = "local"' in out
    assert "submit: launcher not given is trainjob" in out and "deploy_backend must be given: kubernetes" in out


def test_a_login_page_instead_of_the_api_is_one_line_naming_the_token_fake_api(kfp_api, capsys):
    kfp_api.state.login_page = True
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", kfp_api.url, *CLUSTER])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "with a web page, not KFP's API" in err and "KFP_TOKEN" in err
    assert len(err.strip().splitlines()) == 1
    assert [r for r in kfp_api.state.requests if "healthz" not in str(r)] == []  # nothing uploaded


def test_dry_run_of_a_recurring_run_states_the_schedule_as_a_yaml_comment(capsys):
    assert submit.main(["--dry-run", *CLUSTER, "--recurring", "@every 6h", "--run-name", "nightly"]) == 0
    out = capsys.readouterr().out
    assert "# recurring run 'nightly' in experiment 'llm-finetune': schedule '@every 6h'" in out
    assert [o["kind"] for o in yaml.safe_load_all(out)] == ["PyTorchJob", "Deployment", "Service"]  # still YAML


def test_sweep_dry_run_with_deploy_all_trials_shows_the_side_by_side_server():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.submit",
            "--dry-run",
            "--pipeline",
            "sweep",
            "--param",
            "launcher=trainjob",
            "--param",
            "deploy_backend=kubernetes",
            "--param",
            "deploy_all_trials=true",
            "--param",
            "lora_train_embeddings=false",
            "--param",
            "served_model_name=bot",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    objs = list(yaml.safe_load_all(proc.stdout))
    assert [(o["kind"], o["metadata"]["name"]) for o in objs[3:]] == [
        ("Deployment", "bot"),
        ("Service", "bot"),
        ("Deployment", "bot-base"),
        ("Service", "bot-base"),
    ]
    for o in objs:
        validate(o)
    served = " ".join(objs[5]["spec"]["template"]["spec"]["containers"][0]["command"])
    assert all(f"bot-trial-{i}=" in served for i in range(3)) and "--max-lora-rank 64" in served


def test_the_token_is_never_printed_on_success_or_refusal_fake_api(kfp_api, monkeypatch, capsys):
    monkeypatch.setenv("KFP_TOKEN", "kfp-topsecret-token")
    assert submit.main(["--host", kfp_api.url, *CLUSTER]) == 0
    kfp_api.state.healthz_status = 403
    with pytest.raises(SystemExit):
        submit.main(["--host", kfp_api.url, *CLUSTER])
    out, err = capsys.readouterr()
    assert "topsecret" not in out + err and "HTTP 403" in err


def test_single_user_kfp_keeps_experiments_without_a_namespace_fake_api(kfp_api, capsys):
    assert submit.main(["--host", kfp_api.url, *CLUSTER, "--param", "namespace=team-a", "--kfp-namespace", "x"]) == 0
    [exp] = kfp_api.state.experiments.values()
    assert not exp.get("namespace") and "single-user: --kfp-namespace is not used" in capsys.readouterr().err


def test_unchanged_code_reuses_its_version_among_hundreds_fake_api(kfp_api, monkeypatch):
    monkeypatch.setattr(submit, "package", lambda d, pipeline: (_fake_package(d), "0123456789ab"))
    submit.main(["--host", kfp_api.url, *CLUSTER])  # the version of this code, then 250 newer ones
    [pid] = kfp_api.state.pipelines
    for i in range(250):  # the fake lists one page, newest first, as KFP does
        kfp_api.state.versions[pid].insert(
            0, {"pipeline_id": pid, "pipeline_version_id": f"v{i}", "display_name": f"llm-finetune-{i:012x}"}
        )
    submit.main(["--host", kfp_api.url, *CLUSTER])
    versions = {r["pipeline_version_reference"]["pipeline_version_id"] for r in kfp_api.state.runs.values()}
    assert len(kfp_api.state.runs) == 2 and len(versions) == 1 and len(kfp_api.state.versions[pid]) == 252


def test_kfp_going_away_after_healthz_is_one_line_fake_api(kfp_api, monkeypatch, capsys):
    real = submit.check_host

    def then_stop(host, token, timeout=submit.PROBE_TIMEOUT_S):
        answer = real(host, token, timeout)
        kfp_api.server.close()  # e.g. the port-forward ends between the probe and the upload
        return answer

    monkeypatch.setattr(submit, "check_host", then_stop)
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", kfp_api.url, *CLUSTER])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith(f"error: lost the connection to KFP at {kfp_api.url} (")
    assert "Traceback" not in err


def test_kfp_going_away_during_wait_says_the_run_goes_on_fake_api(kfp_api, monkeypatch, capsys):
    import kfp

    def stop_then_wait(self, run_id, timeout, sleep_duration=0):
        kfp_api.server.close()
        return real(self, run_id, timeout, sleep_duration=0)

    real = kfp.Client.wait_for_run_completion
    monkeypatch.setattr(kfp.Client, "wait_for_run_completion", stop_then_wait)
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", kfp_api.url, *CLUSTER, "--wait"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "lost the connection to KFP" in err and "the run goes on: " in err


def test_keep_serving_is_refused_for_a_cluster_run_fake_api(kfp_api, capsys):
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", kfp_api.url, *CLUSTER, "--param", "keep_serving=true"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "keep_serving=true keeps a server on the machine of a local run only" in err
    assert not kfp_api.state.requests


# --- local problems while packaging are named as local, not as KFP going away -----------------


@pytest.mark.parametrize("where", ["missing", "a-file"])
def test_an_unusable_temp_dir_while_compiling_is_named_as_local_not_as_kfp_fake_api(
    kfp_api, monkeypatch, capsys, tmp_path, where
):
    import tempfile

    bad = tmp_path / where
    if where == "a-file":
        bad.write_text("not a directory")
    monkeypatch.setattr(tempfile, "tempdir", str(bad))  # what TMPDIR=<bad> gives
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", kfp_api.url, *CLUSTER])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert "temporary directory" in err and str(bad) in err and "TMPDIR" in err
    assert "connection" not in err and "KFP at" not in err
    assert not kfp_api.state.pipelines and not kfp_api.state.runs


def test_the_compile_directory_is_removed_after_a_submit_fake_api(kfp_api, monkeypatch, tmp_path):
    import tempfile

    (tmp_path / "t").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "t"))
    assert submit.main(["--host", kfp_api.url, *CLUSTER]) == 0
    assert not list((tmp_path / "t").iterdir())


# --- --parallelism: KFP's ParallelFor meaning for both pipelines ------------------------------


def test_parallelism_zero_means_no_limit_and_the_finetune_pipeline_notes_it_does_not_apply_fake_api(kfp_api, capsys):
    assert submit.main(["--host", kfp_api.url, *CLUSTER, "--parallelism", "0"]) == 0
    assert "--parallelism 0 applies to --pipeline sweep only" in capsys.readouterr().err
    assert len(kfp_api.state.runs) == 1
    trials = '[{"lora_r": 8, "lora_alpha": 16, "learning_rate": 0.0002}]'
    assert (
        submit.main(
            [
                "--host",
                kfp_api.url,
                "--pipeline",
                "sweep",
                "--parallelism",
                "0",
                "--param",
                "launcher=trainjob",
                "--param",
                "deploy_backend=kubernetes",
                "--param",
                f"trials={trials}",
            ]
        )
        == 0
    )
    [sweep_pid] = [pid for pid, p in kfp_api.state.pipelines.items() if p["display_name"] == "llm-finetune-sweep"]
    uploaded = kfp_api.state.uploads[kfp_api.state.versions[sweep_pid][0]["pipeline_version_id"]]
    assert b"parallelismLimit" not in uploaded  # 0: ParallelFor unconstrained, as KFP defines it


@pytest.mark.parametrize("pipeline", ["finetune", "sweep"])
def test_negative_parallelism_is_refused_for_both_pipelines(pipeline, capsys):
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--dry-run", "--pipeline", pipeline, "--parallelism", "-3", *CLUSTER[:4]])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--parallelism -3" in err and "0 for all at once" in err


# --- recurring runs: schedule window, concurrency, catch-up, names ----------------------------


def test_recurring_run_passes_its_window_concurrency_and_catchup_to_kfp_fake_api(kfp_api, capsys):
    assert (
        submit.main(
            [
                "--host",
                kfp_api.url,
                *CLUSTER,
                "--recurring",
                "0 0 3 * * *",
                "--run-name",
                "nightly",
                "--start-time",
                "2099-01-01 03:00+01:00",
                "--end-time",
                "2099-12-31T00:00:00Z",
                "--max-concurrency",
                "3",
                "--catchup",
            ]
        )
        == 0
    )
    [job] = kfp_api.state.recurring.values()
    cron = job["trigger"]["cron_schedule"]
    # 03:00 at +01:00 is 02:00 UTC: the instant typed, sent in UTC (as KFP's UI shows it)
    assert (cron["start_time"], cron["end_time"]) == ("2099-01-01T02:00:00Z", "2099-12-31T00:00:00Z")
    assert str(job["max_concurrency"]) == "3" and job["no_catchup"] is False


def test_recurring_run_defaults_are_one_at_a_time_without_catchup_fake_api(kfp_api):
    assert submit.main(["--host", kfp_api.url, *CLUSTER, "--recurring", "@every 6h"]) == 0
    [job] = kfp_api.state.recurring.values()
    assert str(job["max_concurrency"]) == "1" and job["no_catchup"] is True
    assert "start_time" not in job["trigger"]["cron_schedule"] or not job["trigger"]["cron_schedule"]["start_time"]


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--end-time", "2020-01-01T00:00:00Z"], ["--end-time 2020-01-01T00:00:00Z is in the past", "never start"]),
        (["--start-time", "2099-06-01T00:00:00Z", "--end-time", "2099-01-01T00:00:00Z"], ["is not after --start-time"]),
        (["--start-time", "2099-06-01 03:00"], ["has no time zone", "e.g. 2099-06-01T03:00:00Z for UTC"]),
        (
            ["--start-time", "2099-06-01"],
            ["has no time zone", "e.g. 2099-06-01T00:00:00Z for UTC or 2099-06-01T00:00:00+01:00"],
        ),
        (["--start-time", "tomorrow"], ["'tomorrow' is not a date and time", "RFC 3339"]),
        (["--max-concurrency", "0"], ["--max-concurrency 0", "1 to 10"]),
        (["--max-concurrency", "11"], ["--max-concurrency 11", "1 to 10"]),
    ],
)
def test_recurring_run_schedule_mistakes_are_refused_before_anything_is_contacted_fake_api(
    kfp_api, capsys, extra, needles
):
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", kfp_api.url, *CLUSTER, "--recurring", "@daily", *extra])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    for needle in needles:
        assert needle in err
    assert not kfp_api.state.requests


@pytest.mark.parametrize("raw", ["2099-06-01", "2099-06-01 03:00", "2099-06-01T03:00:07.5"])
def test_the_time_suggested_for_a_time_without_zone_is_accepted(raw):
    import re
    from datetime import datetime, timedelta, timezone

    problems: list[str] = []
    assert submit._time(raw, "--start-time", problems) is None
    [utc, plus_one] = re.search(r"e\.g\. (\S+) for UTC or (\S+)$", problems[0]).groups()
    for suggested, hours in ((utc, 0), (plus_one, 1)):
        again: list[str] = []
        when = submit._time(suggested, "--start-time", again)
        assert again == [] and when.replace(tzinfo=None) == datetime.fromisoformat(raw)
        assert when.utcoffset() == timezone(timedelta(hours=hours)).utcoffset(None)


def test_schedule_options_without_recurring_are_refused_all_in_one_message(capsys):
    with pytest.raises(SystemExit) as exit_info:
        submit.main(
            [
                "--dry-run",
                *CLUSTER,
                "--start-time",
                "2099-01-01T00:00:00Z",
                "--max-concurrency",
                "2",
                "--catchup",
                "--param",
                "eval_max_rows=0",
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert (
        "--start-time, --max-concurrency, --catchup set(s) a recurring run's schedule, but there is no --recurring"
        in err
        and "eval_max_rows must be >= 1" in err
    )


def test_a_past_start_time_says_what_kfp_will_do_with_and_without_catchup(capsys):
    from datetime import datetime, timedelta, timezone

    # 1 am three days ago: @daily has run at the last three midnights since, whatever the time of day now
    midnight = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    start = (midnight - timedelta(days=3) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    args = [*CLUSTER, "--dry-run", "--recurring", "@daily", "--start-time", start]
    assert submit.main(args) == 0
    assert "the first run is the next scheduled time from now (no catch-up" in capsys.readouterr().err
    assert submit.main([*args, "--catchup", "--max-concurrency", "2"]) == 0
    err = capsys.readouterr().err
    assert "KFP starts the 3 run(s) scheduled since then, 2 at a time" in err


def test_missed_runs_counts_cron_descriptor_and_every_schedules():
    from datetime import datetime, timezone

    start, now = datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 1, 8, 12, tzinfo=timezone.utc)
    assert submit.missed_runs("0 0 3 * * *", start, now) == 8  # Jan 1..8 at 03:00
    assert submit.missed_runs("@daily", start, now) == 7  # midnights Jan 2..8
    assert submit.missed_runs("@every 12h", start, now) == 15
    assert submit.missed_runs("@every 1s", start, now, cap=100) == 100


def test_a_recurring_run_name_already_in_the_experiment_is_refused_fake_api(kfp_api, capsys):
    argv = ["--host", kfp_api.url, *CLUSTER, "--recurring", "@daily", "--run-name", "nightly"]
    assert submit.main(argv) == 0
    [first] = kfp_api.state.recurring
    with pytest.raises(SystemExit) as exit_info:
        submit.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "already has a recurring run named 'nightly'" in err
    assert f"/#/recurringrun/details/{first}" in err and "another --run-name" in err
    assert list(kfp_api.state.recurring) == [first]
    # the same name in another experiment, or another name, is fine
    assert submit.main([*argv, "--experiment", "other"]) == 0
    assert submit.main([*argv[:-1], "weekly"]) == 0
    assert len(kfp_api.state.recurring) == 3
    # a disabled schedule of that name (paused, being replaced) does not block, and is mentioned
    kfp_api.state.recurring[first]["status"] = "DISABLED"
    capsys.readouterr()
    assert submit.main(argv) == 0
    assert "also has 1 disabled recurring run(s) named 'nightly'" in capsys.readouterr().err
    assert len(kfp_api.state.recurring) == 4


@pytest.mark.parametrize(
    "schedule, needle",
    [
        ("*/5 * * * * *", "starts a run every 5s: KFP's first cron field is seconds"),  # crontab's */5 + a field
        ("* 0 3 * * *", "starts a run every 1s"),
        ("@every 30s", "starts a run every 30s, before a pipeline run could end"),
        ("0 0 3 * * 7", "the day-of-week field '7' is out of range 0-6 (KFP's cron: Sunday is 0)"),  # croniter takes 7
        ("@every 1d", "Go durations stop at hours: '@every 24h' for a day"),
        ("@Daily", "write descriptors in lower case, e.g. '@daily'"),
        ("0 0 3 30 2 *", "never starts a run: no date matches its day-of-month, month and day-of-week"),  # February 30
        ("0 0 3 31 4,6 *", "never starts a run"),
    ],
)
def test_schedules_kfp_would_refuse_or_run_every_few_seconds_are_refused_fake_api(kfp_api, capsys, schedule, needle):
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", kfp_api.url, *CLUSTER, "--recurring", schedule])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and needle in err, err
    assert not kfp_api.state.requests


@pytest.mark.parametrize(
    "schedule", ["@every 1m", "0 */5 * * * *", "0 0 3 * * SUN", "0 0 3 1,15 JAN-MAR *", "0 0 3 ? * 1-5", "0 0 3 29 2 *"]
)  # Feb 29: leap years only
def test_schedules_at_least_a_minute_apart_pass(schedule):
    from trainer.k8s import rules

    assert rules.schedule(schedule, "--recurring") == []


def test_a_missing_host_is_reported_with_the_parameter_problems(monkeypatch, capsys):
    monkeypatch.delenv("KFP_HOST", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--param", "lora_r=0", "--param", "launcher=trainjob", "--param", "deploy_backend=kserve"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "(2 problems)" in err
    assert "no KFP host: pass --host URL or set KFP_HOST" in err and "lora_r must be > 0" in err
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", "  ", "--param", "launcher=trainjob", "--param", "deploy_backend=kserve"])
    assert exit_info.value.code == 2 and "no KFP host" in capsys.readouterr().err


def test_the_recurring_run_name_filter_uses_a_key_kfp_accepts_fake_api(kfp_api):
    """KFP answers HTTP 400 to a filter key its recurring runs lack (the fake holds KFP's list):
    a wrong key in existing_recurring_runs would fail every --recurring submit."""
    from urllib.parse import unquote_plus

    import kfp
    from kfp_server_api.exceptions import ApiException

    client = kfp.Client(host=kfp_api.url)
    kfp_api.state.recurring["j1"] = {"display_name": "nightly", "experiment_id": "e1", "recurring_run_id": "j1"}
    assert [job.recurring_run_id for job in submit.existing_recurring_runs(client, "e1", "nightly", None)] == ["j1"]
    [(_, path, _)] = kfp_api.state.calls("GET", "recurringruns")
    assert '"key": "display_name"' in unquote_plus(path)
    with pytest.raises(ApiException) as refused:
        client.list_recurring_runs(
            experiment_id="e1",
            filter=json.dumps({"predicates": [{"key": "title", "operation": "EQUALS", "string_value": "nightly"}]}),
        )
    assert refused.value.status == 400
