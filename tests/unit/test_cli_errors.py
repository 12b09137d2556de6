"""Bad input fails before any work: one message naming the problem and the fix, exit 2,
no traceback. A few cases run the real entry points as a user would, in a new Python process
(`python -m pipelines.run_local`, `python -m pipelines.submit`, `python -m trainer train`): the exit
status and stderr end to end. The others call the same entry point's main() with the same
arguments in this process (`in_process`) and assert the same, without five seconds of imports each."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args, env=None):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)


def in_process(capsys, main, *args) -> subprocess.CompletedProcess:
    """`python -m <entry point> ARGS` as its `__main__` block runs it, `sys.exit(main(args))`, here:
    the exit status, stdout and stderr that run() would give. A traceback cannot print here; any
    exception but SystemExit fails the test instead."""
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exit_info:
        code = exit_info.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code or 0, out, err)


def without_s3_settings(monkeypatch, tmp_path) -> None:
    """The environment of a user with no S3 or AWS settings (run()'s `env` in a new process)."""
    monkeypatch.setenv("S3_ENDPOINT", "")  # put back after the test: run_local's start_s3 sets it
    for key in list(os.environ):
        if key.startswith(("AWS_", "S3_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture
def no_s3(monkeypatch):
    """run_local's throwaway S3 server, never started by a refused run (in a new process it would
    be gone with the process; here it would stay)."""
    from pipelines import run_local

    started = []
    monkeypatch.setattr(run_local, "start_s3", lambda *a: started.append(1))
    yield
    assert not started


@pytest.fixture(scope="module")
def bad_rows(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "rows.jsonl"
    path.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
        + "\n"
        + json.dumps({"prompt": "no messages here"})
        + "\n"
    )
    return path


@pytest.mark.parametrize(
    "params, needle",
    [
        (["model_source=builtin:gpt-9"], "unknown built-in model 'builtin:gpt-9'"),
        (["model_source=not a model!"], "unknown model source"),
        (["dataset_source=/nonexistent/train.jsonl"], "dataset path not found: /nonexistent/train.jsonl"),
        (["lora_r=0", "learning_rate=-1"], "2 problems"),
        (["max_stepz=3"], "unknown parameter 'max_stepz'"),
        (["max_steps=many"], "max_steps='many' is not a valid whole number"),
    ],
)
def test_run_local_rejects_bad_parameters(params, needle, tmp_path, capsys, no_s3):
    from pipelines import run_local

    proc = in_process(
        capsys, run_local.main, "--pipeline-root", str(tmp_path / "root"), *[a for p in params for a in ("--param", p)]
    )
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "root").exists()  # nothing started, nothing written


def test_row_without_messages_names_file_and_line(bad_rows, tmp_path):
    proc = run(
        "-m", "pipelines.run_local", "--pipeline-root", str(tmp_path / "root"), "--param", f"dataset_source={bad_rows}"
    )
    assert proc.returncode == 2
    assert f"{bad_rows}:2: row has no 'messages' field" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_trainer_cli_rejects_bad_config(capsys):
    from trainer.__main__ import main

    proc = in_process(
        capsys,
        main,
        "train",
        "--model-uri",
        "nope",
        "--dataset-uri",
        "s3://b/d",
        "--output-prefix",
        "r",
        "--lora-r",
        "0",
    )
    assert proc.returncode == 2
    assert "model_uri must be an s3:// URI" in proc.stderr and "lora_r must be > 0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_local_starts_its_own_s3_with_throwaway_credentials(monkeypatch):
    from pipelines.run_local import start_s3
    from trainer.core.storage import Store

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


def test_s3_endpoint_without_credentials_is_refused(tmp_path, capsys, monkeypatch):
    from pipelines import run_local

    without_s3_settings(monkeypatch, tmp_path)
    proc = in_process(
        capsys, run_local.main, "--s3-endpoint", "http://127.0.0.1:9", "--pipeline-root", str(tmp_path / "r")
    )
    assert proc.returncode == 2 and "--s3-endpoint=http://127.0.0.1:9 needs AWS_ACCESS_KEY_ID" in proc.stderr


def test_s3_endpoint_from_the_environment_without_credentials_names_the_variable(tmp_path, capsys, monkeypatch):
    """The user never typed --s3-endpoint: the message names S3_ENDPOINT, and how to do without it."""
    from pipelines import run_local

    without_s3_settings(monkeypatch, tmp_path)
    monkeypatch.setenv("S3_ENDPOINT", "http://127.0.0.1:9")
    proc = in_process(capsys, run_local.main, "--pipeline-root", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert "S3_ENDPOINT=http://127.0.0.1:9 needs AWS_ACCESS_KEY_ID" in proc.stderr
    assert "--s3-endpoint" not in proc.stderr and "unset S3_ENDPOINT" in proc.stderr


def test_trainer_cli_rejects_non_finite_floats_and_out_of_range_seed(capsys):
    """NaN passes every comparison and inf passed validation: the run trained to a NaN adapter."""
    from trainer.__main__ import main

    proc = in_process(
        capsys,
        main,
        "train",
        "--model-uri",
        "s3://b/m",
        "--dataset-uri",
        "s3://b/d",
        "--output-prefix",
        "runs/r",
        "--learning-rate",
        "inf",
        "--lora-dropout",
        "nan",
        "--weight-decay=-inf",
        "--seed",
        str(2**64 + 1),
    )
    assert proc.returncode == 2, proc.stderr
    for needle in (
        "learning_rate must be a finite number, got inf",
        "lora_dropout must be a finite number",
        "weight_decay must be a finite number",
        "seed must be between 0 and 4294967295",
    ):
        assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sweep_trial_with_a_quoted_number_names_the_fix(tmp_path, capsys, no_s3):
    from pipelines import run_local

    proc = in_process(
        capsys,
        run_local.main,
        "--pipeline",
        "sweep",
        "--pipeline-root",
        str(tmp_path / "root"),
        "--param",
        'trials=[{"lora_r": "16", "lora_alpha": null, "learning_rate": 0.001}]',
    )
    assert proc.returncode == 2, proc.stderr
    assert "trials[0].lora_r must be a whole number, got '16' (a string): write 16 without quotes" in proc.stderr
    assert "trials[0].lora_alpha must be a whole number, got null" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and not (tmp_path / "root").exists()


def test_unreachable_kfp_host_is_one_error_line(tmp_path):
    env = {**__import__("os").environ, "HOME": str(tmp_path)}
    proc = run(
        "-m",
        "pipelines.submit",
        "--host",
        "http://127.0.0.1:9",
        "--param",
        "launcher=kubernetes",
        "--param",
        "deploy_backend=kubernetes",
        "--param",
        "model_source=Qwen/Qwen2.5-0.5B-Instruct",
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: cannot reach KFP at http://127.0.0.1:9")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_deploy_k8s_refuses_names_and_counts_the_api_server_would(capsys):
    from trainer.__main__ import main

    proc = in_process(
        capsys,
        main,
        "deploy-k8s",
        "--dry-run",
        "--name",
        "My_Model",
        "--gpus",
        "-3",
        "--model-uri",
        "s3://bucket/models/sha256-x",
    )
    assert proc.returncode == 2, proc.stdout
    assert "'My_Model' is not a valid Kubernetes Service name" in proc.stderr and "-3" in proc.stderr
    assert "Traceback" not in proc.stderr and not proc.stdout.strip()  # nothing rendered


@pytest.mark.parametrize(
    "name, content, needle",
    [
        (
            "plain.jsonl",
            "".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(30)),
            "lines 1, 2, 3 and 27 more: row has no 'messages' field (its keys: 'text'); plain 'text' rows are for pretraining",
        ),
        ("latin1.csv", "prompt,completion\ncafé,oui\n".encode("latin-1"), "latin1.csv:2: not UTF-8 text (byte 0xe9)"),
        (
            "sharegpt.json",
            json.dumps([{"conversations": [{"from": "human", "value": "hi"}, {"from": "bot", "value": "yo"}]}] * 5),
            "rows 1, 2, 3 and 2 more: conversations[1] has unknown 'from' 'bot': ShareGPT turns are from human, user, gpt",
        ),
    ],
)
def test_a_dataset_in_another_shape_is_one_line_with_the_fix(tmp_path, capsys, no_s3, name, content, needle):
    from pipelines import run_local

    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    proc = in_process(
        capsys, run_local.main, "--pipeline-root", str(tmp_path / "root"), "--param", f"dataset_source={path}"
    )
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "(1 problem" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and not (tmp_path / "root").exists()


@pytest.mark.parametrize(
    "args, needles",
    [
        (["download", "notauri", "/tmp/x"], ["cannot download (2 problems)", "URI 'notauri' is not an s3:// URI"]),
        (
            ["evaluate", "--model-uri", "x", "--tuned-uri", "s3://b/t", "--dataset-uri", "s3://", "--max-rows", "0"],
            ["4 problems", "--model-uri 'x' is not an s3:// URI", "--dataset-uri 's3://'", "--max-rows 0: give"],
        ),
        (
            ["merge", "--model-uri", "s3://b/m", "--adapter-uri", "adapter/", "--out", "/tmp/x"],
            ["2 problems", "--adapter-uri 'adapter/' is not an s3:// URI"],
        ),
    ],
)
def test_s3_stages_name_every_bad_uri_with_the_missing_credentials(args, needles, tmp_path, capsys, monkeypatch):
    from trainer.__main__ import main

    without_s3_settings(monkeypatch, tmp_path)  # one more problem, same message
    proc = in_process(capsys, main, *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "S3 credentials missing" in proc.stderr
    for needle in needles:
        assert needle in proc.stderr


def compile_main(argv: list[str]) -> None:
    """`python -m pipelines.compile`'s main, which reads sys.argv itself."""
    from unittest import mock

    from pipelines import compile as compile_module

    with mock.patch.object(sys, "argv", ["python -m pipelines.compile", *argv]):
        compile_module.main()


def trainer_main(argv: list[str]) -> None:
    from trainer.__main__ import main

    main(argv)


@pytest.mark.parametrize(
    "main, args, message",
    [
        (trainer_main, ("build-tiny-model", "{out}"), "cannot write the tiny model to {out}: "),
        (compile_main, ("--out-dir", "{out}"), "cannot write to --out-dir {out}: "),
    ],
    ids=["trainer", "compile"],
)
def test_writing_into_an_unwritable_place_is_one_line(tmp_path, capsys, main, args, message):
    blocker = tmp_path / "file"  # a file where a directory must be created
    blocker.write_text("")
    out = str(blocker / "out")
    proc = in_process(capsys, main, *(a.format(out=out) for a in args))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: " + message.format(out=out))
    assert "pass a writable directory" in proc.stderr


def test_param_typos_name_the_fix_and_spaces_around_the_name_are_typing(capsys):
    from pipelines import submit

    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--dry-run", "--param", "=1", "--param", "max_stepz=3", "--param", "lora_r = 16"])
    err = capsys.readouterr().err
    assert (
        exit_info.value.code == 2 and "invalid pipeline parameters (3 problems)" in err
    )  # + deploy_backend (launcher: trainjob when not given)
    assert "--param '=1' has no name before '='" in err
    assert "unknown parameter 'max_stepz'; did you mean max_steps?" in err
    assert (
        submit.main(
            ["--dry-run", "--param", "launcher=trainjob", "--param", "deploy_backend=kserve", "--param", "lora_r = 16"]
        )
        == 0
    )
    assert "--lora-r=16" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["launch-k8s", "--model-uri", "s3://b/m", "--dataset-uri", "s3://b/d", "--output-prefix", "runs/r"],
        ["deploy-k8s", "--name", "my-model", "--model-uri", "s3://b/m"],
    ],
)
def test_an_unreachable_cluster_is_one_line_before_anything_is_created(tmp_path, capsys, monkeypatch, argv):
    from trainer.__main__ import main

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],  # nothing listens on port 9
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "kube-topsecret"}}],
            }
        )
    )
    without_s3_settings(monkeypatch, tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    # the kubernetes client reads KUBECONFIG once, at import
    monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    proc = in_process(capsys, main, *argv)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: cannot reach the Kubernetes API server at https://127.0.0.1:9 (")
    assert "kubectl get nodes" in proc.stderr and "topsecret" not in proc.stderr + proc.stdout


def test_a_finetune_parameter_given_to_the_sweep_says_so(capsys):
    from pipelines import submit

    with pytest.raises(SystemExit):
        submit.main(
            ["--pipeline", "sweep", "--dry-run", "--param", "registry_address=http://r:8080", "--param", "trials=[]"]
        )
    err = capsys.readouterr().err
    assert "parameter 'registry_address' belongs to llm-finetune, not to llm-finetune-sweep" in err
    with pytest.raises(SystemExit):
        submit.main(["--dry-run", "--param", "select_metric=eval_loss"])
    assert "parameter 'select_metric' belongs to llm-finetune-sweep, not to llm-finetune;" in capsys.readouterr().err


def test_a_silent_or_refusing_api_server_is_one_line_and_never_a_hang(tmp_path, monkeypatch):
    """A server that accepts the connection and never answers ends at the probe's limit (the
    kubernetes client ignores a float timeout); one that answers 401 (an expired token) is one
    line naming the credentials, not an ApiException traceback."""
    import http.server
    import socket
    import threading

    from trainer.__main__ import reach_cluster
    from trainer.core.errors import UserError

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"kind": "Status", "status": "Failure", "reason": "Unauthorized", "code": 401}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    refusing = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=refusing.serve_forever, daemon=True).start()
    try:
        for port, expected in (
            (silent.getsockname()[1], "cannot reach the Kubernetes API server"),
            (refusing.server_address[1], "refused the request (401"),
        ):
            kubeconfig = tmp_path / f"config-{port}"
            kubeconfig.write_text(
                json.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "Config",
                        "current-context": "c",
                        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                        "users": [{"name": "u", "user": {"token": "kube-topsecret"}}],
                    }
                )
            )
            # the kubernetes client reads KUBECONFIG once, at import
            monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
            monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
            outcome = []

            def probe():
                try:
                    reach_cluster(timeout=1.0)
                except UserError as err:
                    outcome.append(str(err))

            worker = threading.Thread(target=probe, daemon=True)
            worker.start()
            worker.join(60)
            assert not worker.is_alive(), f"the probe of port {port} did not end"
            assert len(outcome) == 1 and expected in outcome[0] and "topsecret" not in outcome[0], outcome
    finally:
        refusing.shutdown()
        silent.close()


# --- values typed into the KFP run form or --param: nothing silently reinterpreted ------------


def test_huge_whole_numbers_and_a_diverging_learning_rate_are_all_refused_in_one_message(capsys):
    from pipelines import submit

    huge = [
        "lora_r=1e30",
        "batch_size=1e30",
        "wait_timeout_s=1e30",
        "serve_gpus=1e30",
        "eval_max_rows=1e30",
        "learning_rate=12",
    ]
    with pytest.raises(SystemExit) as exit_info:
        submit.main(
            [
                "--dry-run",
                "--param",
                "launcher=trainjob",
                "--param",
                "deploy_backend=kubernetes",
                *[a for p in huge for a in ("--param", p)],
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "invalid pipeline parameters (6 problems)" in err, err
    for name in ("lora_r", "batch_size", "wait_timeout_s", "serve_gpus", "eval_max_rows"):
        assert f"{name}=1e+30 is out of range: whole-number parameters go up to 2,147,483,647" in err
    assert "learning_rate must be below 1, got 12" in err
    assert "Traceback" not in err


def test_the_largest_seed_and_a_32_bit_count_still_pass():
    from trainer.validate import pipeline_problems

    assert pipeline_problems({"seed": 2**32 - 1, "wait_timeout_s": 2**31 - 1}, check_local_files=False) == []
    assert pipeline_problems({"wait_timeout_s": 2**31}, check_local_files=False)


# Arabic-Indic and full-width digits: Python's int() reads them
@pytest.mark.parametrize("raw", ["١٢", "１６", "1６"])
def test_non_ascii_digits_are_not_read_as_numbers(raw, capsys):
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.cli_params import parse_params
    from trainer.core.errors import UserError

    for key in ("lora_r", "learning_rate"):
        with pytest.raises(UserError, match=f"parameter {key}='{raw}' is not a valid"):
            parse_params(finetune_pipeline, [f"{key}={raw}"])


def test_the_sweep_step_refuses_empty_trials_typed_in_the_ui(capsys):
    """The sweep's validate-params gets sweep=True: trials=[] is no finetune run in disguise."""
    from components.validate_params import validate_params

    with pytest.raises(SystemExit) as exit_info:
        validate_params.python_func(trials=[], select_metric="accuracy", min_gain=-1.0, sweep=True)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "invalid sweep parameters (3 problems)" in err
    assert "trials must be a non-empty JSON list" in err and "select_metric must be one of" in err
    assert "min_gain must be >= 0" in err
    validate_params.python_func()  # the finetune pipeline's call: no trials, no sweep
    assert "parameters OK" in capsys.readouterr().out


def test_run_local_parallelism_zero_is_accepted_and_noted_for_finetune(capsys):
    from pipelines import run_local

    assert run_local.main(["--parallelism", "0", "--list-params"]) == 0
    captured = capsys.readouterr()
    assert "--parallelism 0 applies to --pipeline sweep only" in captured.err and "max_steps" in captured.out


def test_sweep_min_gain_in_percent_and_one_trial_object_without_brackets_name_the_fix(capsys):
    from pipelines import submit

    with pytest.raises(SystemExit) as exit_info:
        submit.main(
            [
                "--dry-run",
                "--pipeline",
                "sweep",
                "--param",
                "launcher=trainjob",
                "--param",
                "deploy_backend=kubernetes",
                "--param",
                'trials={"lora_r": 16, "lora_alpha": 32, "learning_rate": 0.0002}',
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "for one object, wrap it in [ ] to make a list of one" in err
    with pytest.raises(SystemExit) as exit_info:
        submit.main(
            [
                "--dry-run",
                "--pipeline",
                "sweep",
                "--param",
                "launcher=trainjob",
                "--param",
                "min_gain=10",
                "--param",
                "deploy_backend=kubernetes",
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert "min_gain=10 can never be reached: the gain in function-calling accuracy" in err and "write 0.1" in err
    # in loss units a gain above 1 is possible
    assert (
        submit.main(
            [
                "--dry-run",
                "--pipeline",
                "sweep",
                "--param",
                "launcher=trainjob",
                "--param",
                "min_gain=10",
                "--param",
                "select_metric=eval_loss",
                "--param",
                "deploy_backend=kubernetes",
            ]
        )
        == 0
    )


def test_names_images_and_urls_with_spaces_at_their_ends_are_refused_naming_the_spaces(capsys):
    """Pasted into the KFP form: ' vllm/vllm-openai:v0.11.0' passed the tag rule and would reach Kubernetes."""
    from pipelines import submit

    padded = [
        "vllm_image= vllm/vllm-openai:v0.11.0",
        "registry_address=http://reg:8080 ",
        "cleanup=always\n",
        "namespace=\tteam-a",
    ]
    with pytest.raises(SystemExit) as exit_info:
        submit.main(
            [
                "--dry-run",
                "--param",
                "launcher=trainjob",
                "--param",
                "deploy_backend=kubernetes",
                *[a for p in padded for a in ("--param", p)],
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "(4 problems)" in err, err
    assert "vllm_image=' vllm/vllm-openai:v0.11.0' has spaces or line breaks at its start or end" in err
    assert "e.g. registry_address='http://reg:8080'" in err and "e.g. cleanup='always'" in err
    assert "e.g. namespace='team-a'" in err
    # sources keep being read stripped, as everywhere else
    assert (
        submit.main(
            [
                "--dry-run",
                "--param",
                "launcher=trainjob",
                "--param",
                "deploy_backend=kubernetes",
                "--param",
                "dataset_source= s3://llm-finetune/datasets/sha256-abc ",
            ]
        )
        == 0
    )


def test_bad_param_values_options_and_parameter_rules_come_in_one_message(capsys, tmp_path):
    """A value that does not parse used to stop the check: its fix revealed the next problem."""
    from pipelines import run_local, submit

    with pytest.raises(SystemExit) as exit_info:
        submit.main(
            [
                "--dry-run",
                "--param",
                "max_steps=many",
                "--param",
                "lora_r=0",
                "--param",
                "launcher=local",
                "--recurring",
                "0 3 * * *",
                "--max-concurrency",
                "0",
                "--experiment",
                " ",
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: invalid pipeline parameters (7 problems):")
    for needle in (
        "max_steps='many' is not a valid whole number",
        "--experiment is empty",
        "--max-concurrency 0",
        "lora_r must be > 0",
        "launcher=local would train",
        "has 5 field(s)",
        "deploy_backend=local serves",
    ):
        assert needle in err
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(["--pipeline-root", str(tmp_path / "r"), "--param", "eval_fraction=nan", "--param", "nodes=0"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "(2 problems)" in err
    assert "eval_fraction='nan' is not a finite number" in err and "nodes must be >= 1" in err
    assert "must be between 0 and 1, got nan" not in err  # the bad value is not checked again as NaN


def test_only_the_sweep_pipeline_tells_its_first_step_it_is_a_sweep(tmp_path):
    import yaml

    from pipelines.compile import compile_all

    for path in compile_all(tmp_path):
        spec = next(yaml.safe_load_all(path.read_text()))
        passed = spec["root"]["dag"]["tasks"]["validate-params"]["inputs"]["parameters"]
        if path.stem == "sweep":
            assert passed["sweep"] == {"runtimeValue": {"constant": True}}
        else:
            assert "sweep" not in passed  # the component's default, False


def test_a_huge_number_typed_into_the_kfp_form_arrives_as_a_float_and_gets_a_sane_example(capsys):
    """KFP hands the step JSON numbers: 1e30 typed for an int parameter is the float 1e+30."""
    from components.validate_params import validate_params

    with pytest.raises(SystemExit) as exit_info:
        validate_params.python_func(lora_r=1e30, nodes=-1e30, lora_alpha=16.0)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "(3 problems)" in err
    assert "lora_r must be a whole number, got 1e+30: use a whole number, e.g. 64" in err  # the default
    assert "nodes must be a whole number, got -1e+30: use a whole number, e.g. 2" in err  # the default
    assert "lora_alpha must be a whole number, got 16.0: use a whole number, e.g. 16" in err
    assert "100000000000000" not in err


def test_trainer_cli_refuses_too_few_rows_before_downloading_the_model(store, tmp_path):
    """27 rows (24 to train on), batch_size 32: refused from the delivered data alone, the model's weights never
    downloaded (only its tokenizer is read, for the chat template's check); a missing model is named first."""
    from trainer.store import delivery

    path = tmp_path / "few.jsonl"
    path.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": "yo"}]})
            + "\n"
            for i in range(27)
        )
    )
    data_uri, meta = delivery.deliver_dataset(str(path), "", store)
    model_uri, _ = delivery.deliver_model("builtin:tiny-llama", "", store)
    cache = tmp_path / "cache"
    args = [
        "-m",
        "trainer",
        "train",
        "--dataset-uri",
        data_uri,
        "--output-prefix",
        "runs/few",
        "--batch-tokens",
        "0",
        "--batch-size",
        "32",
    ]
    proc = run(*args, "--model-uri", model_uri, env={**os.environ, "FINETUNE_CACHE_DIR": str(cache)})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"only {meta['rows']['train']} training rows, fewer than batch_size x processes = 32 x 1" in proc.stderr
    assert "lower batch_size" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(cache.rglob("model.safetensors"))  # the data was read, the weights were not
    missing_model = "s3://test-bucket/models/sha256-" + "0" * 64
    proc = run(*args, "--model-uri", missing_model, env=dict(os.environ))
    assert proc.returncode == 2 and f"{missing_model} is incomplete or missing" in proc.stderr, proc.stderr[-2000:]


def test_submit_refuses_the_local_deploy_backend_naming_the_cluster_ones(capsys, monkeypatch):
    """deploy_backend=local (the default, for run_local) serves inside the deploy step's pod and ends with it: on a
    cluster it would train and then leave no endpoint. Refused by submit, and by validate-params in a pod."""
    from components.validate_params import validate_params
    from pipelines import submit

    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--dry-run", "--param", "launcher=trainjob"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "(1 problem)" in err, err
    assert "deploy_backend=local serves inside the deploy step's own pod, on its CPU, and the server ends with" in err
    assert "use deploy_backend=kubernetes" in err and "kserve (an InferenceService) or llmisvc" in err
    assert submit.main(["--dry-run", "--param", "launcher=trainjob", "--param", "deploy_backend=kserve"]) == 0
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # the step as it runs in a cluster pod
    with pytest.raises(SystemExit) as exit_info:
        validate_params.python_func(launcher="trainjob")
    assert exit_info.value.code == 2 and "deploy_backend=local serves" in capsys.readouterr().err


def test_finetune_step_refuses_too_few_delivered_rows_before_launching_a_job(tmp_path, capsys):
    """Hub data is counted only on delivery: the fine-tune step reads that count and refuses
    before a job (or a model download) starts, naming the fix."""
    from kfp.dsl import HTML, Dataset, Metrics, Model

    from components.finetune import finetune

    art = lambda cls, name, **meta: cls(name=name, uri=str(tmp_path / name), metadata=meta)  # noqa: E731
    with pytest.raises(SystemExit) as exit_info:
        finetune.python_func(
            base_model=art(Model, "m", uri="s3://nowhere/models/x"),
            dataset=art(Dataset, "d", uri="s3://nowhere/datasets/y", rows={"train": 27, "eval": 3}),
            run_id="few",
            adapter=art(Model, "a"),
            metrics=art(Metrics, "x"),
            report=art(HTML, "r"),
            launcher="trainjob",
            nodes=1,
            procs_per_node=2,
            batch_tokens=0,
            batch_size=16,
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert "only 27 training rows, fewer than batch_size x processes = 16 x 2; lower batch_size" in err


def test_a_value_holding_control_characters_is_echoed_escaped(capsys):
    """Issue 57 F7: run_local echoed a dataset path holding ESC and BEL raw in its error (the terminal cleared its
    screen and set its title); every message a command exits 2 with is written terminal-safe."""
    from pipelines.run_local import main

    with pytest.raises(SystemExit) as exit_:
        main(["--param", "dataset_source=/tmp/no\x1b[2Jsuch\x07.jsonl", "--param", "max_steps=1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "\x1b" not in err and "\x07" not in err
    assert "dataset path not found: /tmp/no\\x1b[2Jsuch\\x07.jsonl" in err
