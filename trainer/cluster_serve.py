"""Kubernetes deploy backend: the merged model behind vLLM's OpenAI-compatible server.

  python -m trainer deploy-k8s --dry-run --model-uri s3://... --name my-model

A Deployment (init container `fetch-model` runs the project image to download the model
from MinIO into an emptyDir, verifying checksums; container `vllm` serves it) and a
ClusterIP Service. Re-deploying patches both instead of failing; the rollout is awaited,
then the same OpenAI smoke test as locally runs against the Service.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from trainer import settings
from trainer.cluster import ClusterSpec, scheduling, secret_env
from trainer.errors import UserError

PORT = 8000


@dataclass
class ServeSpec:
    name: str  # Deployment / Service name, also the served model name
    model_uri: str
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    gpus: int = 1
    replicas: int = 1
    # hermes parses <tool_call>{...}</tool_call>, the format of our template and of Qwen/Hermes.
    extra_args: list[str] = field(default_factory=lambda: ["--enable-auto-tool-choice", "--tool-call-parser",
                                                           "hermes"])
    rollout_timeout_s: int = 1800


def labels(spec: ServeSpec) -> dict[str, str]:
    return {"app.kubernetes.io/name": "llm-finetune", "app.kubernetes.io/component": "server",
            "app.kubernetes.io/instance": spec.name}


def build(spec: ServeSpec):
    """(Deployment, Service) objects for `spec`, not yet sent anywhere."""
    from kubernetes import client as k

    c = spec.cluster
    gpus = {c.accelerator_resource: str(spec.gpus)} if c.accelerator_resource and spec.gpus else {}
    mounts = [k.V1VolumeMount(name="model", mount_path="/models"), k.V1VolumeMount(name="dshm", mount_path="/dev/shm")]
    fetch = k.V1Container(
        name="fetch-model", image=c.image or settings.image(),
        command=["python", "-m", "trainer", "download", spec.model_uri, "/models/model"],
        env=[*secret_env(), k.V1EnvVar(name="FINETUNE_CACHE_DIR", value="/models/.cache")],
        volume_mounts=mounts[:1])
    probe = dict(http_get=k.V1HTTPGetAction(path="/v1/models", port=PORT))
    server = k.V1Container(
        name="vllm", image=settings.get("VLLM_IMAGE"),
        command=["vllm", "serve", "/models/model", "--served-model-name", spec.name, "--host", "0.0.0.0",
                 "--port", str(PORT), *spec.extra_args],
        ports=[k.V1ContainerPort(container_port=PORT, name="http")],
        resources=k.V1ResourceRequirements(requests={"cpu": c.cpu, "memory": c.memory, **gpus},
                                           limits={"memory": c.memory, **gpus}),
        # /health says the process is up; /v1/models says the model is loaded and servable.
        startup_probe=k.V1Probe(**probe, period_seconds=10, failure_threshold=180),
        readiness_probe=k.V1Probe(**probe, period_seconds=10),
        liveness_probe=k.V1Probe(http_get=k.V1HTTPGetAction(path="/health", port=PORT), period_seconds=20),
        volume_mounts=mounts)
    meta = k.V1ObjectMeta(name=spec.name, namespace=c.namespace or None, labels=labels(spec))
    deployment = k.V1Deployment(
        api_version="apps/v1", kind="Deployment", metadata=meta,
        spec=k.V1DeploymentSpec(
            replicas=spec.replicas, selector=k.V1LabelSelector(match_labels=labels(spec)),
            # Recreate: a GPU node rarely has room for old and new pods side by side.
            strategy=k.V1DeploymentStrategy(type="Recreate"),
            template=k.V1PodTemplateSpec(
                metadata=k.V1ObjectMeta(labels=labels(spec), annotations={"llm-finetune/model-uri": spec.model_uri}),
                spec=k.V1PodSpec(
                    init_containers=[fetch], containers=[server], service_account_name=c.service_account or None,
                    volumes=[k.V1Volume(name="model", empty_dir=k.V1EmptyDirVolumeSource()),
                             k.V1Volume(name="dshm", empty_dir=k.V1EmptyDirVolumeSource(medium="Memory",
                                                                                      size_limit=c.shm_size))],
                    **scheduling(c)))))
    service = k.V1Service(
        api_version="v1", kind="Service", metadata=meta,
        spec=k.V1ServiceSpec(selector=labels(spec), ports=[k.V1ServicePort(name="http", port=PORT,
                                                                           target_port="http")]))
    return deployment, service


def apply(apps, core, deployment, service, namespace: str) -> str:
    """Create, or patch when they exist (idempotent re-deploy). Returns 'created' or 'patched'."""
    from kubernetes.client.exceptions import ApiException

    name = deployment.metadata.name
    try:
        apps.create_namespaced_deployment(namespace, deployment)
        core.create_namespaced_service(namespace, service)
        return "created"
    except ApiException as err:
        if err.status != 409:
            raise
    apps.patch_namespaced_deployment(name, namespace, deployment)
    try:
        core.patch_namespaced_service(name, namespace, service)
    except ApiException as err:
        if err.status != 404:
            raise
        core.create_namespaced_service(namespace, service)
    return "patched"


def wait_rollout(apps, name: str, namespace: str, timeout_s: float, poll_s: float = 5.0) -> None:
    """Until the newest generation's replicas are all updated and available."""
    deadline = time.monotonic() + timeout_s
    while True:
        d = apps.read_namespaced_deployment_status(name, namespace)
        st, want = d.status, d.spec.replicas
        if st and (st.observed_generation or 0) >= (d.metadata.generation or 0) \
                and (st.updated_replicas or 0) == want and (st.available_replicas or 0) == want:
            return
        if time.monotonic() > deadline:
            raise UserError(f"deployment {namespace}/{name} not rolled out after {timeout_s:.0f}s "
                            f"(updated={st.updated_replicas if st else 0}, available={st.available_replicas if st else 0}"
                            f", wanted={want}); see `kubectl -n {namespace} describe deploy/{name}`")
        time.sleep(poll_s)


def deploy(spec: ServeSpec, messages: list[dict[str, Any]], tools: list | None = None,
           client_configuration: Any = None, poll_s: float = 5.0) -> dict[str, Any]:
    """Apply, wait for rollout, smoke-test through the Service; returns endpoint and latency."""
    from kubeflow.training.utils import utils
    from kubernetes import client as k, config

    from trainer.serve import smoke_test, wait_ready

    if client_configuration is None:
        config.load_incluster_config() if utils.is_running_in_k8s() else config.load_kube_config()
    api = k.ApiClient(client_configuration)
    namespace = spec.cluster.namespace or utils.get_default_target_namespace()
    deployment, service = build(spec)
    action = apply(k.AppsV1Api(api), k.CoreV1Api(api), deployment, service, namespace)
    print(f"{action} Deployment and Service {namespace}/{spec.name}; waiting for rollout", flush=True)
    wait_rollout(k.AppsV1Api(api), spec.name, namespace, spec.rollout_timeout_s, poll_s)
    url = service_url(spec.name, namespace)
    wait_ready(url, timeout=300)
    return {**smoke_test(url, spec.name, messages, tools), "endpoint": f"{url}/v1", "action": action}


def service_url(name: str, namespace: str) -> str:
    return f"http://{name}.{namespace}.svc.cluster.local:{PORT}"
