"""KFP's own container runner for `python -m pipelines.run_local --runner docker`: every component runs in the
image its compiled spec names (FINETUNE_IMAGE, EVAL_IMAGE; make images builds them), as on a cluster.

- The engine: DOCKER_HOST when set (a Docker engine, or a podman socket of the user's), else podman's Docker API
  (`podman system service`) started on a socket in the run's temporary folder and stopped with the run.
- The network is the host's: the throwaway S3 server (moto) and an MLflow server on loopback are reachable as
  they are from the SubprocessRunner's tasks.
- kfp.local mounts the run's pipeline root (and its workspace) at the same paths; the run's temporary folder
  (TMPDIR: the model servers' logs, checkpoints on their way up) is mounted too. The images run as user 1000,
  as their pods do, so these folders are made writable for it.
- The environment: what the components read (S3, credentials, MLflow, the run's FINETUNE_* marks), handed over
  at run time as a Secret's keys are on a cluster; never baked into an image.
- Every container carries the run's label: they are all removed when the run ends, however it ends.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path
from typing import Iterator

from pipelines import images as images_mod
from trainer.core import settings
from trainer.core.errors import UserError

RUN_LABEL = "io.llm-finetune.run"
ENGINE_TIMEOUT_S = 60
# The components' environment from this process: exact names and prefixes (trainer.core.settings' names among them)
PASSED = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "HF_TOKEN", "HF_HUB_OFFLINE",
          "REGISTRY_TOKEN", "OMP_NUM_THREADS", "TMPDIR"}  # fmt: skip
PREFIXES = ("FINETUNE_", "MLFLOW_", "S3_")
# Paths of this machine that mean nothing inside an image (its own HOME=/tmp holds the cache)
NOT_PASSED = {"FINETUNE_CACHE_DIR"}
# /dev/shm as the rendered pods size it (a memory emptyDir): torch's DataLoader and gloo need more than 64 MB.
SHM_SIZE = "2g"


def container_env() -> dict[str, str]:
    """The variables a component reads, from this process's environment."""
    return {
        k: v
        for k, v in os.environ.items()
        if (k in PASSED or k.startswith(PREFIXES) or k in settings.SETTING_DEFAULTS) and k not in NOT_PASSED
    }


def image_problems(names: list[str], client) -> list[str]:
    import docker

    problems = []
    for name in names:
        try:
            client.images.get(name)
        except docker.errors.ImageNotFound:
            problems.append(f"image {name} is not here: build the images first (make images)")
    return problems


def _wait_for_engine(base_url: str, service: subprocess.Popen | None):
    import docker

    deadline = time.monotonic() + ENGINE_TIMEOUT_S
    while True:
        try:
            client = docker.DockerClient(base_url=base_url, timeout=600)
            client.ping()
            return client
        except docker.errors.DockerException as err:
            if service is not None and service.poll() is not None:
                raise UserError(f"podman's Docker API service exited ({service.returncode}): {err}") from None
            if time.monotonic() > deadline:
                raise UserError(
                    f"no container engine answers at {base_url} within {ENGINE_TIMEOUT_S} s: start one (Docker, or "
                    "podman system service) or unset DOCKER_HOST to let this command start podman's"
                ) from None
            time.sleep(0.5)


@contextlib.contextmanager
def engine(tmp: Path) -> Iterator[tuple[object, str]]:
    """(a docker-py client, DOCKER_HOST) for the run; podman's service is started here when DOCKER_HOST is unset."""
    service = None
    base_url = os.environ.get("DOCKER_HOST", "")
    if not base_url:
        if problem := images_mod.podman_problem():
            raise UserError(f"--runner docker: {problem}")
        socket = tmp / "podman.sock"
        base_url = f"unix://{socket}"
        log = open(tmp / "podman-service.log", "w")
        service = subprocess.Popen(
            ["podman", "system", "service", "--time=0", base_url],
            env=images_mod.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # our signals go to the containers first (stop_containers), then to it
        )
    try:
        client = _wait_for_engine(base_url, service)
        try:
            yield client, base_url
        finally:
            client.close()
    finally:
        if service is not None:
            service.terminate()
            try:
                service.wait(timeout=20)
            except subprocess.TimeoutExpired:
                service.kill()
                service.wait()


def stop_containers(client, run_id: str, signal: str | None = None) -> int:
    """Signal (or, without `signal`, remove) every container of run `run_id`; returns how many there were."""
    import docker

    found = client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"})
    for container in found:
        with contextlib.suppress(docker.errors.APIError):
            container.kill(signal=signal) if signal else container.remove(force=True)
    return len(found)


def runner(run_id: str, pipeline_root: Path, shared: list[Path]):
    """kfp.local's DockerRunner for run `run_id`: host network, the run's label, `shared` folders mounted (kfp.local
    mounts `pipeline_root` itself), both made writable for the images' user 1000, the components' environment."""
    from docker.types import Mount
    from kfp import local

    for folder in [pipeline_root, *shared]:
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o1777)  # as /tmp: the image's user writes, nobody removes another's files
    return local.DockerRunner(
        network_mode="host",
        environment=container_env(),
        labels={RUN_LABEL: run_id},
        mounts=[Mount(target=str(f), source=str(f), type="bind") for f in shared],
        shm_size=SHM_SIZE,
    )


def image_ids(client, names: list[str]) -> dict[str, str]:
    """{image name: its ID (sha256:...)}, for the run's record."""
    return {name: client.images.get(name).id for name in names}
