"""The images' tier (make test-images; make images builds what it runs): podman must work here, and the images be
built. The pipeline runs once under KFP's DockerRunner; the serving test serves the model that run merged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import images
from tests.images import pods


@pytest.fixture(scope="session", autouse=True)
def podman_and_images():
    """No skip: a missing podman or image is a failure that names the fix."""
    problem = images.podman_problem()
    assert not problem, problem
    from trainer.core import settings

    missing = [n for n in (settings.image(), settings.get("EVAL_IMAGE")) if not images.image_exists(n)]
    assert not missing, f"{missing} not built: make images"
    yield
    pods.remove_test_containers()


def run_local(root: Path, runner: str, *extra: str) -> dict:
    """`python -m pipelines.run_local --runner RUNNER` with the demo's defaults, on its own throwaway S3 (the
    S3_* / AWS_* settings of other fixtures left out): its exit status, console, record and folders."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("S3_", "AWS_", "FINETUNE_CACHE"))}
    argv = [sys.executable, "-m", "pipelines.run_local", "--runner", runner, "--runs-dir", str(root / "runs"),
            "--output-dir", str(root / "out"), "--pipeline-root", str(root / "root"), *extra]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    records = sorted((root / "runs").glob("*/run.json"))
    return {
        "code": done.returncode,
        "console": done.stdout + done.stderr,
        "record": json.loads(records[-1].read_text()) if records else {},
        "merged": root / "out" / "merged-model",
        "root": root,
    }


@pytest.fixture(scope="session")
def docker_run(tmp_path_factory) -> dict:
    """The demo with every component in its image (KFP's DockerRunner)."""
    return run_local(tmp_path_factory.mktemp("docker-run"), "docker")


@pytest.fixture(scope="session")
def venv_run(tmp_path_factory) -> dict:
    """The demo as make demo runs it (each component a process of this checkout's Python): the figures to match."""
    return run_local(tmp_path_factory.mktemp("venv-run"), "subprocess")


@pytest.fixture(scope="session")
def repo() -> Path:
    return images.REPO
