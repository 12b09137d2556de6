"""deploy_backend=kubernetes: the merged model (or the base model with several LoRA adapters
side by side) behind vLLM's OpenAI-compatible server, as a Deployment and a Service.

  python -m trainer deploy-k8s --dry-run --model-uri s3://... --name my-model
  python -m trainer deploy-k8s --dry-run --model-uri s3://.../base --name cmp \\
      --adapter trial-a=s3://.../adapter-a --adapter trial-b=s3://.../adapter-b

Init container `fetch-model` runs the project image to download the model (and each adapter)
from MinIO into an emptyDir, verifying checksums; container `vllm` serves it. With adapters,
vLLM serves the base model as `name` and each adapter under its own name (`--enable-lora
--lora-modules`), so one endpoint answers for all of them by the request's `model`.
Re-deploying replaces the Deployment (exactly the new render: nothing of the previous deploy's
placement survives) and patches the Service, whose render depends on the name only; the rollout
is awaited, then the same OpenAI smoke test as locally runs against the Service: by its DNS name
from a pod, through the API server's service proxy from outside the cluster (trainer.k8s.reach),
which also prints the `kubectl port-forward` command that reaches it from the user's machine.
"""

from __future__ import annotations

import time
from typing import Any

from trainer.chat.types import Message
from trainer.core import settings
from trainer.core.errors import collect
from trainer.deploy.base import Deployed, ServeBackend, ServeSpec
from trainer.deploy.server import image, server_args, smoke_reached
from trainer.k8s import reach
from trainer.k8s.lifecycle import api_client, default_namespace, replace, wait_until
from trainer.k8s.podspec import (
    RUN_AS_USER,
    accelerators,
    container_security,
    labels as app_labels,
    pod_security,
    queue_labels,
    scheduling,
    secret_env,
)

PORT = 8000
MODEL_DIR = "/models/model"
ADAPTER_DIR = "/models/adapters"


def labels(spec: ServeSpec) -> dict[str, str]:
    return app_labels("server", **{"app.kubernetes.io/instance": spec.name})


def build(spec: ServeSpec):
    """(Deployment, Service) objects for `spec`, not yet sent anywhere."""
    from kubernetes import client as k

    collect(spec.problems(), what="invalid serving settings")
    c = spec.cluster
    gpus = accelerators(c, spec.gpus)
    mounts = [k.V1VolumeMount(name="model", mount_path="/models"), k.V1VolumeMount(name="dshm", mount_path="/dev/shm")]
    downloads = [(spec.model_uri, MODEL_DIR), *[(uri, f"{ADAPTER_DIR}/{n}") for n, uri in spec.adapters.items()]]
    script = " && ".join(f"python -m trainer download {uri} {path}" for uri, path in downloads)
    fetch = k.V1Container(
        name="fetch-model",
        image=c.image or settings.image(),
        command=["python", "-m", "trainer", "download", spec.model_uri, MODEL_DIR]
        if not spec.adapters
        else ["sh", "-c", script],
        env=[*secret_env(), k.V1EnvVar(name="FINETUNE_CACHE_DIR", value="/models/.cache")],
        resources=k.V1ResourceRequirements(requests={"cpu": "1", "memory": "2Gi"}, limits={"memory": "4Gi"}),
        security_context=container_security(),
        volume_mounts=mounts[:1],
    )
    probe = dict(http_get=k.V1HTTPGetAction(path="/v1/models", port=PORT))
    adapters = {n: f"{ADAPTER_DIR}/{n}" for n in spec.adapters}
    server = k.V1Container(
        name="vllm",
        image=image(spec),
        command=["vllm", "serve", *server_args(spec, spec.name, MODEL_DIR, PORT, adapters)],
        # vLLM's images run as root with HOME=/root; as a non-root user its caches go to /tmp.
        env=[
            k.V1EnvVar(name="HOME", value="/tmp"),
            k.V1EnvVar(name="HF_HOME", value="/tmp/hf"),
            k.V1EnvVar(name="HF_HUB_OFFLINE", value="1"),
        ],
        ports=[k.V1ContainerPort(container_port=PORT, name="http")],
        resources=k.V1ResourceRequirements(
            requests={"cpu": c.cpu, "memory": c.memory, **gpus}, limits={"memory": c.memory, **gpus}
        ),
        # /health says the process is up; /v1/models says the model is loaded and servable.
        startup_probe=k.V1Probe(**probe, period_seconds=10, failure_threshold=180),
        readiness_probe=k.V1Probe(**probe, period_seconds=10),
        liveness_probe=k.V1Probe(http_get=k.V1HTTPGetAction(path="/health", port=PORT), period_seconds=20),
        security_context=container_security(),
        volume_mounts=mounts,
    )
    meta = k.V1ObjectMeta(name=spec.name, namespace=c.namespace or None, labels={**labels(spec), **queue_labels(c)})
    deployment = k.V1Deployment(
        api_version="apps/v1",
        kind="Deployment",
        metadata=meta,
        spec=k.V1DeploymentSpec(
            replicas=spec.replicas,
            selector=k.V1LabelSelector(match_labels=labels(spec)),
            # Recreate: a GPU node rarely has room for old and new pods side by side.
            strategy=k.V1DeploymentStrategy(type="Recreate"),
            template=k.V1PodTemplateSpec(
                metadata=k.V1ObjectMeta(
                    labels={**labels(spec), **queue_labels(c)},
                    annotations={
                        "llm-finetune/model-uri": spec.model_uri,
                        **(
                            {"llm-finetune/adapters": ",".join(f"{n}={u}" for n, u in spec.adapters.items())}
                            if spec.adapters
                            else {}
                        ),
                    },
                ),
                spec=k.V1PodSpec(
                    init_containers=[fetch],
                    containers=[server],
                    service_account_name=c.service_account or None,
                    security_context=pod_security(RUN_AS_USER),
                    volumes=[
                        k.V1Volume(name="model", empty_dir=k.V1EmptyDirVolumeSource(size_limit=c.cache_size)),
                        k.V1Volume(
                            name="dshm", empty_dir=k.V1EmptyDirVolumeSource(medium="Memory", size_limit=c.shm_size)
                        ),
                    ],
                    **scheduling(c),
                ),
            ),
        ),
    )
    service = k.V1Service(
        api_version="v1",
        kind="Service",
        metadata=k.V1ObjectMeta(name=spec.name, namespace=c.namespace or None, labels=labels(spec)),
        spec=k.V1ServiceSpec(
            selector=labels(spec), ports=[k.V1ServicePort(name="http", port=PORT, target_port="http")]
        ),
    )
    return deployment, service


def apply(apps, core, deployment, service, namespace: str) -> str:
    """Create both, or when they exist replace the Deployment (lifecycle.replace: a patch would keep
    the old placement) and patch the Service. Returns 'created' or 'replaced'.

    A patch is exact for the Service because its render depends on the name only (selector, port),
    and it leaves alone what a PUT would have to copy or would drop: the allocated clusterIP, and
    what others add (a mesh's annotations)."""
    from kubernetes.client.exceptions import ApiException

    name = deployment.metadata.name
    try:
        apps.create_namespaced_deployment(namespace, deployment)
        core.create_namespaced_service(namespace, service)
        return "created"
    except ApiException as err:
        if err.status != 409:
            raise
    replace(
        lambda: apps.read_namespaced_deployment(name, namespace),
        lambda body: apps.replace_namespaced_deployment(name, namespace, body),
        deployment,
        f"Deployment {namespace}/{name}",
    )
    try:
        core.patch_namespaced_service(name, namespace, service)
    except ApiException as err:
        if err.status != 404:
            raise
        core.create_namespaced_service(namespace, service)
    return "replaced"


def wait_rollout(
    apps, name: str, namespace: str, timeout_s: float, poll_s: float = 5.0, progress_every_s: float = 30.0
) -> None:
    """Until the newest generation's replicas are all updated and available; a line of progress
    every `progress_every_s` (pulling a vLLM image and loading weights take minutes)."""

    def check() -> tuple[bool | None, tuple[int, int, int]]:
        d = apps.read_namespaced_deployment_status(name, namespace)
        st, want = d.status, d.spec.replicas
        updated, available = (st.updated_replicas or 0, st.available_replicas or 0) if st else (0, 0)
        done = st and (st.observed_generation or 0) >= (d.metadata.generation or 0) and updated == available == want
        return (True if done else None), (updated, available, want)

    wait_until(
        check,
        timeout_s,
        poll_s,
        progress_every_s,
        lambda s, n: (
            f"  rollout of {namespace}/{name}: {n[1]}/{n[2]} available after {s:.0f} s (limit {timeout_s:.0f} s)"
        ),
        lambda n: (
            f"deployment {namespace}/{name} not rolled out after {timeout_s:.0f}s (updated={n[0]}, "
            f"available={n[1]}, wanted={n[2]}); see `kubectl -n {namespace} describe deploy/{name}`"
        ),
    )


def service_url(name: str, namespace: str) -> str:
    """The Service's URL in the cluster (what the pipeline's `endpoint` output gives in-cluster clients)."""
    return reach.dns_url(name, namespace, PORT)


class Deployment(ServeBackend):
    """deploy_backend=kubernetes: a vLLM Deployment and Service."""

    def build(self, spec: ServeSpec) -> list:
        return list(build(spec))

    def deploy(
        self,
        spec: ServeSpec,
        messages: list[Message],
        tools: list | None = None,
        client_configuration: Any = None,
        poll_s: float = 5.0,
        ready_timeout_s: float = 300,
    ) -> Deployed:
        """Apply, wait for rollout, smoke-test through the Service (the base model and every adapter
        by name); the endpoint is the in-cluster URL, `access` the `kubectl port-forward` command for the user's
        machine."""
        from kubernetes import client as k

        deployment, service = build(spec)  # validates: bad settings are reported before the cluster is contacted
        api = api_client(client_configuration)
        namespace = spec.cluster.namespace or default_namespace()
        action = apply(k.AppsV1Api(api), k.CoreV1Api(api), deployment, service, namespace)
        print(
            f"{action} Deployment and Service {namespace}/{spec.name}; waiting for rollout "
            f"(at most {spec.rollout_timeout_s} s)",
            flush=True,
        )
        t0 = time.monotonic()
        wait_rollout(k.AppsV1Api(api), spec.name, namespace, spec.rollout_timeout_s, poll_s)
        # Outside the cluster the Service's DNS name does not resolve: through the API server (reach).
        return smoke_reached(
            reach.service(api, namespace, spec.name, PORT),
            service_url(spec.name, namespace),
            reach.port_forward(namespace, f"svc/{spec.name}", PORT),
            spec,
            messages,
            tools,
            ready_timeout_s,
            t0,
            action,
        )
