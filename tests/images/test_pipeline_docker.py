"""`python -m pipelines.run_local --runner docker`: the finetune pipeline with every component in the image its
compiled spec names (FINETUNE_IMAGE; EVAL_IMAGE for evaluate and deploy), through KFP's own DockerRunner and
podman's Docker API, S3 = moto on the host's loopback: the demo's steps, table and verdict, the images in the record,
no container left behind."""

from __future__ import annotations

import pytest

from pipelines import images

pytestmark = pytest.mark.images
STEPS = ("validate-params", "deliver-dataset", "deliver-model", "finetune", "evaluate", "merge-lora", "deploy")


def test_the_pipeline_runs_promoted_with_every_step_in_its_image(docker_run):
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
    assert record["images"] == {name: images.image_id(name) for name in (settings.image(), settings.get("EVAL_IMAGE"))}
    assert (docker_run["merged"] / "config.json").is_file()


def test_no_container_of_the_run_is_left(docker_run):
    from pipelines.container_runner import RUN_LABEL

    left = images.podman("ps", "--all", "--filter", f"label={RUN_LABEL}", "--format", "{{.Names}}").stdout.split()
    assert left == []
