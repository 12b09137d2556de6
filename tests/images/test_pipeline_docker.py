"""`python -m pipelines.run_local --runner docker`: the finetune pipeline with every component in the image its
compiled spec names (FINETUNE_IMAGE; EVAL_IMAGE for evaluate and deploy), through KFP's own DockerRunner and
podman's Docker API, S3 = moto on the host's loopback: the demo's steps, table and verdict, the images in the record,
no container left behind."""

import os

import pytest

from pipelines import images

pytestmark = pytest.mark.images
STEPS = ("validate-params", "deliver-dataset", "deliver-model", "finetune", "evaluate", "merge-lora", "deploy")


def test_the_pipeline_runs_promoted_with_every_step_in_its_image(docker_run, venv_run):
    from trainer.core import settings

    console, record = docker_run["console"], docker_run["record"]
    assert docker_run["code"] == 0, console[-4000:]
    for step in STEPS:
        assert f"✓ {step}" in console, (step, console[-4000:])
    assert f"Found image '{settings.image()}'" in console and f"Found image '{settings.get('EVAL_IMAGE')}'" in console
    metrics = record["metrics"]
    assert record["status"] == "succeeded"
    ev, tr = metrics["evaluate"], metrics["finetune"]
    assert ev["promoted"] == 1 and tr["world_size"] == 2  # the finetune step's torchrun: 2 ranks in its container
    assert ev["tuned_fc_ast_accuracy"] > ev["base_fc_ast_accuracy"] + 0.5, ev
    assert metrics["deploy"]["smoke_ok"] == 1, metrics["deploy"]  # vLLM's CPU build in the eval image answered
    assert "== base vs tuned ==" in console and "smoke test passed" in console
    # the images the run ran, by ID, in its record
    assert {n: i.removeprefix("sha256:") for n, i in record["images"].items()} == {
        name: images.image_id(name) for name in (settings.image(), settings.get("EVAL_IMAGE"))
    }
    assert (docker_run["merged"] / "config.json").is_file()
    # the demo's figures: the same libraries in the image as in the venv train and score the same
    assert venv_run["code"] == 0, venv_run["console"][-3000:]
    venv = venv_run["record"]["metrics"]
    for step, name in [("finetune", "train_loss"), ("evaluate", "base_fc_ast_accuracy"),
                       ("evaluate", "tuned_fc_ast_accuracy"), ("evaluate", "tuned_fc_accuracy")]:  # fmt: skip
        assert metrics[step][name] == pytest.approx(venv[step][name], rel=1e-3, abs=1e-3), (step, name)
    table = lambda text: text[text.index("== base vs tuned ==") : text.index("training:")]  # noqa: E731
    assert table(console) == table(venv_run["console"])


def test_no_container_of_the_run_is_left(docker_run):
    from pipelines.container_runner import RUN_LABEL

    left = images.podman("ps", "--all", "--filter", f"label={RUN_LABEL}", "--format", "{{.Names}}").stdout.split()
    assert left == []


def test_a_missing_image_is_one_line_naming_make_images(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("S3_", "AWS_"))}
    env["FINETUNE_IMAGE"] = "localhost/llm-finetune-test/absent:1"
    argv = [sys.executable, "-m", "pipelines.run_local", "--runner", "docker", "--runs-dir", str(tmp_path / "runs")]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "image localhost/llm-finetune-test/absent:1 is not here: build the images first (make images)" in done.stderr
    assert not list((tmp_path / "runs").glob("*/run.json"))  # refused before a run began


def test_sigterm_stops_the_run_and_leaves_no_container_or_engine(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from pipelines.container_runner import RUN_LABEL

    env = {k: v for k, v in os.environ.items() if not k.startswith(("S3_", "AWS_", "FINETUNE_CACHE"))}
    argv = [sys.executable, "-m", "pipelines.run_local", "--runner", "docker", "--runs-dir", str(tmp_path / "runs"),
            "--output-dir", str(tmp_path / "out"), "--pipeline-root", str(tmp_path / "root")]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    seen = []
    deadline = time.monotonic() + 300
    for line in proc.stdout:  # until the finetune step's container is training
        seen.append(line)
        assert time.monotonic() < deadline, "".join(seen)
        if "train:" in line:
            break
    running = images.podman("ps", "--filter", f"label={RUN_LABEL}", "--format", "{{.Names}}").stdout.split()
    assert running, "".join(seen)
    engines = [p for p in psutil.process_iter(["cmdline"]) if "finetune-engine-" in " ".join(p.info["cmdline"] or [])]
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=180)
    assert proc.returncode == 143, "".join(seen) + rest
    assert "interrupted (SIGTERM)" in rest
    left = images.podman("ps", "--all", "--filter", f"label={RUN_LABEL}", "--format", "{{.Names}}").stdout.split()
    assert left == []
    assert engines and not [p for p in engines if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_a_step_failing_in_its_container_fails_the_run(tmp_path):
    """kfp.local's DockerRunner removes a container as it ends and then read its status as 0 when it was gone:
    a step that failed was SUCCESS (pipelines.kfp_local_patches.docker_exit_status reads it first)."""
    from kfp import dsl, local

    from pipelines import container_runner, kfp_local_patches
    from trainer.core import settings

    @dsl.component(base_image=settings.image(), install_kfp_package=False)
    def exits(code: int):
        import sys

        sys.exit(code)

    with container_runner.engine(tmp_path) as (client, base_url), kfp_local_patches.docker_exit_status():
        saved = os.environ.get("DOCKER_HOST")
        os.environ["DOCKER_HOST"] = base_url
        try:
            local.init(runner=container_runner.runner("exit-test", tmp_path / "root", [tmp_path / "tmp"]),
                       pipeline_root=str(tmp_path / "root"), raise_on_error=True)  # fmt: skip
            exits(code=0)  # a step that succeeds still does
            with pytest.raises(RuntimeError, match="FAILURE"):
                exits(code=2)
        finally:
            os.environ.pop("DOCKER_HOST") if saved is None else os.environ.update(DOCKER_HOST=saved)
            container_runner.stop_containers(client, "exit-test")


def test_the_sweep_runs_its_trials_in_the_images_and_deploys_the_best(tmp_path):
    """The sweep DAG under the DockerRunner: three LoRA trials side by side (kfp.local's ParallelFor, 2 at once),
    each trial's finetune and evaluate in their images, pick-best, then merge and deploy of the winner (~5.5 min)."""
    from tests.images.conftest import run_local

    run = run_local(tmp_path, "docker", "--pipeline", "sweep")
    record, console = run["record"], run["console"]
    assert run["code"] == 0 and record["status"] == "succeeded", console[-4000:]
    trials = [k for k in record["metrics"] if k.endswith(".finetune")]
    assert len(trials) == 3, record["metrics"].keys()
    assert record["summary"].startswith("deploying trial"), record["summary"]
    assert record["metrics"]["deploy"]["smoke_ok"] == 1
    assert "smoke test passed" in console and (run["merged"] / "config.json").is_file()
