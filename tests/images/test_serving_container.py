"""The serving pods `trainer deploy-k8s --dry-run --gpus 0` renders, run as their pods would run, serving the model
the DockerRunner pipeline merged:
- deploy_backend=kubernetes: the Deployment's init container `fetch-model` (the project image) downloads the model
  from S3 into the pod's volume, then container `vllm` (VLLM_CPU_IMAGE, vLLM's CPU image; its stand-in here:
  docker/standins) serves it with exactly the rendered command, environment, user and security settings;
- deploy_backend=kserve: the predictor container KServe makes of the ServingRuntime's container and the
  InferenceService's model spec (KServe's merge: the model's image, env, resources and security settings over the
  runtime's, its args after the runtime's, `{{.Name}}` the InferenceService's name), with the model at
  /mnt/models, where KServe's storage initializer puts `storageUri` (here the project's `trainer download` does).
The probes' paths answer, and the OpenAI smoke test deploy runs passes."""

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
READY_LIMIT_S = 600  # the rendered startupProbe allows 180 x 10 s; vLLM's CPU build was up in ~20-60 s here


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


def causes(log) -> str:
    """The lines of a server log that say why it stopped (vLLM's tracebacks run to hundreds of lines)."""
    import re

    lines = log.read_text(errors="replace").splitlines()
    named = [line for line in lines if re.search(r"\w+(Error|Exception): ", line)]
    return "\n".join(dict.fromkeys(named[-6:])) + "\n...\n" + "\n".join(lines[-15:])


def rendered(backend: str, model_uri: str, s3_env) -> list[dict]:
    argv = [sys.executable, "-m", "trainer", "deploy-k8s", "--dry-run", "--backend", backend, "--name", NAME,
            "--model-uri", model_uri, "--gpus", "0", "--accelerator-resource", ""]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **s3_env}, timeout=120)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def deployment_pod(docs: list[dict], model_uri: str):
    """(download container, server container, pod spec, shared volume name)."""
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    (fetch,), (server,) = pod["initContainers"], pod["containers"]
    assert fetch["command"][-2:] == [model_uri, "/models/model"]
    return fetch, server, pod, "model"


def kserve_pod(docs: list[dict], model_uri: str):
    runtime = next(d for d in docs if d["kind"] == "ServingRuntime")["spec"]
    isvc = next(d for d in docs if d["kind"] == "InferenceService")
    predictor, model = isvc["spec"]["predictor"], isvc["spec"]["predictor"]["model"]
    (base,) = runtime["containers"]
    env = {e["name"]: e for e in base.get("env") or []} | {e["name"]: e for e in model.get("env") or []}
    args = [a.replace("{{.Name}}", isvc["metadata"]["name"]) for a in base.get("args", []) + model.get("args", [])]
    server = {**base, **{k: model[k] for k in ("image", "resources", "securityContext") if k in model},
              "args": args, "env": list(env.values()),
              "volumeMounts": [*base.get("volumeMounts", []), {"name": "kserve-provision-location",
                                                                "mountPath": "/mnt/models"}]}  # fmt: skip
    pod = {"securityContext": predictor.get("securityContext"),
           "volumes": [*runtime.get("volumes", []), {"name": "kserve-provision-location", "emptyDir": {}}]}  # fmt: skip
    assert model["storageUri"] == model_uri
    # KServe's storage initializer, played by the project image (S3 keys from the ServiceAccount's Secret)
    from trainer.core import settings

    # it writes the tree into the volume KServe mounts at /mnt/models (here: the folder `models` of the parent)
    pod["volumes"].append({"name": "provision-parent", "emptyDir": {}})
    fetch = {"image": settings.image(), "command": ["python", "-m", "trainer", "download", model_uri, "/mnt/models"],
             "env": [{"name": k, "value": os.environ[k]} for k in ("S3_ENDPOINT", "S3_BUCKET", "AWS_ACCESS_KEY_ID",
                                                                     "AWS_SECRET_ACCESS_KEY")],
             "securityContext": model["securityContext"],
             "volumeMounts": [{"name": "provision-parent", "mountPath": "/mnt"}]}  # fmt: skip
    return fetch, server, pod, "provision-parent"


@pytest.mark.parametrize("backend", ["kubernetes", "kserve"])
def test_the_rendered_vllm_container_serves_the_merged_model(backend, merged_uri, s3_env, builtin_uris, tmp_path):
    from trainer.core.storage import Store
    from trainer.data.readers import read_rows
    from trainer.serving import client

    docs = rendered(backend, merged_uri, s3_env)
    fetch, server, pod, volume_name = (deployment_pod if backend == "kubernetes" else kserve_pod)(docs, merged_uri)
    assert server["image"].endswith("vllm-cpu-release-repo:v0.32.0") and server["command"][:2] == ["vllm", "serve"]
    port = server["ports"][0]["containerPort"]
    assert probe(port, "/v1/models") == 0, f"port {port} is taken on this machine: the pod's port must be free"
    secrets = {("llm-finetune-s3", "accesskey"): s3_env["AWS_ACCESS_KEY_ID"],
               ("llm-finetune-s3", "secretkey"): s3_env["AWS_SECRET_ACCESS_KEY"]}  # fmt: skip
    volume = tmp_path / "volume"  # the pod's volume both containers mount, as an emptyDir
    volume.mkdir()
    shared = {volume_name: volume}
    init = pods.podman_args(fetch, pod, name=f"fetch-{backend}", secrets=secrets, shared=shared, work=tmp_path)
    fetched = subprocess.run(["podman", "run", *init], env=pods.images.env(), capture_output=True, text=True,
                             timeout=600)  # fmt: skip
    assert fetched.returncode == 0, fetched.stdout[-2000:] + fetched.stderr[-2000:]
    if backend == "kserve":  # the server's /mnt/models is the tree the download wrote
        shared["kserve-provision-location"] = volume / "models"
    log = tmp_path / "vllm.log"
    proc = pods.start(pods.podman_args(server, pod, name=f"vllm-{backend}", shared=shared, work=tmp_path), log)
    try:
        start = time.monotonic()
        startup = server.get("startupProbe") or server.get("readinessProbe") or {"httpGet": {"path": "/v1/models"}}
        while probe(port, startup["httpGet"]["path"]) != 200:
            assert proc.poll() is None, f"vLLM exited {proc.returncode}: {causes(log)}"
            assert time.monotonic() - start < READY_LIMIT_S, log.read_text()[-3000:]
            time.sleep(2)
        print(f"{backend}: vLLM container ready in {time.monotonic() - start:.0f} s")
        for kind, default in (("readinessProbe", "/v1/models"), ("livenessProbe", "/health")):
            path = (server.get(kind) or {"httpGet": {"path": default}})["httpGet"]["path"]
            assert probe(port, path) == 200, (kind, path)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            assert [m["id"] for m in json.load(r)["data"]] == [NAME]
        eval_rows = read_rows(Store.from_env().get_tree(builtin_uris[1]) / "eval.jsonl")
        messages, tools = client.smoke_request(eval_rows)
        result = client.smoke_test(f"http://127.0.0.1:{port}", NAME, messages, tools)
        assert result["ok"], result  # a well-formed OpenAI tool call, plain and streamed
    finally:
        pods.images.podman("stop", "--time=20", f"vllm-{backend}", check=False)
        proc.wait(timeout=60)
