"""The Deployment `trainer deploy-k8s --dry-run --gpus 0` renders, run as its pod would run: the init container
`fetch-model` (the project image) downloads the merged model from S3 into the pod's volume, then container `vllm`
(VLLM_CPU_IMAGE, vLLM's CPU image; its stand-in here: docker/standins) serves it with exactly the rendered command,
environment, user and security settings. Its probes' paths answer, and the OpenAI smoke test deploy runs passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from tests.images import pods

pytestmark = pytest.mark.images
NAME = "smoke-served"
READY_LIMIT_S = 600  # the rendered startupProbe allows 180 x 10 s; vLLM's CPU build is up in ~1-2 min here


def probe(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status
    except OSError:
        return 0


@pytest.fixture(scope="module")
def merged_uri(docker_run, s3_env):
    """The model the DockerRunner pipeline merged (and promoted), in this test's S3."""
    from trainer.core.storage import Store

    assert docker_run["merged"].is_dir(), docker_run["console"][-3000:]
    return Store.from_env().put_tree(docker_run["merged"], "models")[0]


def test_the_rendered_vllm_container_serves_the_merged_model(merged_uri, s3_env, builtin_uris, tmp_path):
    from trainer.core.storage import Store
    from trainer.data.readers import read_rows
    from trainer.serving import client

    argv = [sys.executable, "-m", "trainer", "deploy-k8s", "--dry-run", "--name", NAME, "--model-uri", merged_uri,
            "--gpus", "0", "--accelerator-resource", ""]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **s3_env}, timeout=120)
    assert done.returncode == 0, done.stderr
    deployment = next(d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (fetch,), (server,) = pod["initContainers"], pod["containers"]
    assert server["image"].endswith("vllm-cpu-release-repo:v0.32.0") and server["command"][:2] == ["vllm", "serve"]
    port = server["ports"][0]["containerPort"]
    assert probe(port, "/health") == 0, f"port {port} is taken on this machine: the pod's port must be free"
    secrets = {("llm-finetune-s3", "accesskey"): s3_env["AWS_ACCESS_KEY_ID"],
               ("llm-finetune-s3", "secretkey"): s3_env["AWS_SECRET_ACCESS_KEY"]}  # fmt: skip
    # the pod's volume `model`, shared by both containers as an emptyDir is
    volume = tmp_path / "model"
    volume.mkdir()
    os.chmod(volume, 0o1777)
    shared = {"model": volume}
    init = pods.podman_args(fetch, pod, name="fetch-model", secrets=secrets, shared=shared, work=tmp_path)
    fetched = subprocess.run(["podman", "run", *init], env=pods.images.env(), capture_output=True, text=True,
                             timeout=600)  # fmt: skip
    assert fetched.returncode == 0, fetched.stdout[-2000:] + fetched.stderr[-2000:]
    assert (volume / "model" / "config.json").is_file()
    log = tmp_path / "vllm.log"
    proc = pods.start(pods.podman_args(server, pod, name="vllm", shared=shared, work=tmp_path), log)
    try:
        start = time.monotonic()
        startup = server["startupProbe"]["httpGet"]["path"]
        while probe(port, startup) != 200:
            assert proc.poll() is None, f"vLLM exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() - start < READY_LIMIT_S, log.read_text()[-3000:]
            time.sleep(2)
        ready_s = time.monotonic() - start
        print(f"vLLM container ready in {ready_s:.0f} s")
        assert probe(port, server["readinessProbe"]["httpGet"]["path"]) == 200
        assert probe(port, server["livenessProbe"]["httpGet"]["path"]) == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            assert [m["id"] for m in json.load(r)["data"]] == [NAME]
        eval_rows = read_rows(Store.from_env().get_tree(builtin_uris[1]) / "eval.jsonl")
        messages, tools = client.smoke_request(eval_rows)
        result = client.smoke_test(f"http://127.0.0.1:{port}", NAME, messages, tools)
        assert result["ok"], result  # a well-formed OpenAI tool call, plain and streamed
    finally:
        pods.images.podman("stop", "--time=20", "vllm", check=False)
        proc.wait(timeout=60)
