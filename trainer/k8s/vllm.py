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

import re
import time
from dataclasses import dataclass, field
from typing import Any, ContextManager

from trainer.chat.types import Message
from trainer.core import settings
from trainer.core.errors import collect
from trainer.k8s import reach, rules
from trainer.k8s.lifecycle import api_client, default_namespace, replace, wait_until
from trainer.k8s.podspec import (
    RUN_AS_USER,
    ClusterSpec,
    accelerators,
    container_security,
    labels as app_labels,
    pod_security,
    queue_labels,
    scheduling,
    secret_env,
)
from trainer.serving import client
from trainer.serving.args import parse_loras, vllm_args

PORT = 8000
ROCM_RESOURCE = "amd.com/gpu"
MODEL_DIR = "/models/model"
ADAPTER_DIR = "/models/adapters"


@dataclass
class ServeSpec:
    name: str  # Deployment / Service name, also the served model name
    model_uri: str
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    gpus: int = 1  # > 1: tensor parallelism over that many GPUs of one node
    replicas: int = 1
    vllm_image: str = ""  # empty: settings VLLM_IMAGE, VLLM_ROCM_IMAGE for amd.com/gpu, VLLM_CPU_IMAGE for no GPU
    adapters: dict[str, str] = field(default_factory=dict)  # served name -> s3:// adapter URI
    max_lora_rank: int = 16  # the largest adapter rank (vLLM refuses adapters above its limit)
    max_model_len: int = 0  # 0: the model's own context length
    rollout_timeout_s: int = 1800
    # The model's tool-call format (trainer.serving.args.stored_tool_call_parser reads it off the chat template).
    tool_call_parser: str = "hermes"
    # The tree carries chat_template.jinja (trainer.chat.templates): vLLM renders with that file, as training did.
    chat_template: bool = False

    def problems(self) -> list[str]:
        p = rules.served_model_name(self.name, "served_model_name")
        if not str(self.model_uri).startswith("s3://"):  # the pod's fetch step reads the bucket only
            p.append(
                f"model_uri={self.model_uri!r} must be an s3:// URI from deliver-model or merge, "
                "e.g. s3://llm-finetune/models/sha256-..."
            )
        p += rules.non_negative_int(self.gpus, "serve_gpus")
        p += rules.non_negative_int(self.replicas, "replicas", 1)
        for name, uri in self.adapters.items():
            # Served names and paths only, no Kubernetes object: a Service name's letters (they reach a
            # shell in the fetch step) without its 63-character limit, so `<name>-trial-11` of a
            # served_model_name that passed (`<name>-base` within 63) is fine too.
            p += rules.dns1035_label(name, "adapter name", max_len=rules.DNS1123_SUBDOMAIN_MAX)
            if not str(uri).startswith("s3://"):
                p.append(f"adapter {name!r}: {uri!r} must be an s3:// URI (deliver it first)")
        # vLLM's parser names: lower-case letters, digits, '_' and '-' (granite-20b-fc); a letter first, so
        # that the value is never read as a flag.
        if not re.fullmatch(r"[a-z][a-z0-9_-]*", str(self.tool_call_parser)):
            p.append(
                f"tool_call_parser={self.tool_call_parser!r} is not a vLLM tool-call parser name: e.g. hermes "
                "(<tool_call> format: the built-in model, Qwen), llama3_json (Llama 3.x), mistral"
            )
        if len(set(self.adapters) | {self.name}) != len(self.adapters) + 1:
            p.append(f"adapter names must differ from each other and from the served model name {self.name!r}")
        return p + self.cluster.kubernetes_problems()


def image(spec: ServeSpec) -> str:
    """The vLLM image for the accelerator: CUDA builds cannot drive AMD GPUs, and neither starts
    without a GPU (serve_gpus=0 or no accelerator_resource: vLLM's CPU build)."""
    if spec.vllm_image:
        return spec.vllm_image
    if not accelerators(spec.cluster, spec.gpus):
        return settings.get("VLLM_CPU_IMAGE")
    return settings.get("VLLM_ROCM_IMAGE" if spec.cluster.accelerator_resource == ROCM_RESOURCE else "VLLM_IMAGE")


# vLLM's CPU backend reserves --gpu-memory-utilization (0.92) of the NODE's memory for the KV cache, not of the
# pod's limit: on a node larger than the limit it is OOM-killed, on a busy one it refuses to start ("Available memory
# on node 0 ... is less than desired CPU memory utilization", seen in the CPU container, 2026-12-01). A CPU pod
# sizes the cache from its own limit instead: a quarter of it, at most vLLM's former CPU default of 4 GiB.
CPU_KV_CACHE_MAX = 4 << 30


def cpu_kv_cache_bytes(spec: ServeSpec) -> int:
    """The KV cache of a server on CPU (no accelerator), from the container's memory limit; 0 on an accelerator."""
    from kubernetes.utils import parse_quantity

    if accelerators(spec.cluster, spec.gpus):
        return 0
    return int(min(CPU_KV_CACHE_MAX, parse_quantity(spec.cluster.memory) / 4))


def server_args(
    spec: ServeSpec, served_name: str, model_path: str, port: int, adapters: dict[str, str] | None = None
) -> list[str]:
    """vLLM's arguments for this deploy, from trainer.serving.args.vllm_args: one function for local and
    cluster serving, so their flags (tool-call parser, LoRA, tensor parallelism) cannot drift."""
    return vllm_args(
        model_path,
        served_name,
        host="0.0.0.0",
        port=port,
        lora_modules=adapters or None,
        max_lora_rank=spec.max_lora_rank if adapters else 0,
        max_model_len=spec.max_model_len,
        tensor_parallel_size=max(spec.gpus, 1),
        tool_call_parser=spec.tool_call_parser,
        chat_template=f"{model_path}/chat_template.jinja" if spec.chat_template else "",
        kv_cache_bytes=cpu_kv_cache_bytes(spec),
    )


def split_args(
    spec: ServeSpec, served_name: str, model_path: str, port: int, adapters: dict[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """(what every deploy shares, what this deploy adds): the KServe runtime holds the first,
    the InferenceService the second. vllm_args puts what depends on the model and the deploy
    from --tool-call-parser on: one runtime serves a Llama and a Qwen model side by side."""
    full = server_args(spec, served_name, model_path, port, adapters)
    cut = full.index("--tool-call-parser")
    return full[:cut], full[cut:]


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


def deploy(
    spec: ServeSpec,
    messages: list[Message],
    tools: list | None = None,
    client_configuration: Any = None,
    poll_s: float = 5.0,
    ready_timeout_s: float = 300,
) -> dict[str, Any]:
    """Apply, wait for rollout, smoke-test through the Service (the base model and every adapter
    by name); returns what trainer.serving.local.deploy_local returns (endpoint: the in-cluster URL, names,
    smoke_ok, ...) plus `access`, the `kubectl port-forward` command for the user's machine."""
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
    out = smoke_reached(
        reach.service(api, namespace, spec.name, PORT),
        service_url(spec.name, namespace),
        reach.port_forward(namespace, f"svc/{spec.name}", PORT),
        spec,
        messages,
        tools,
        ready_timeout_s,
        t0,
    )
    return {**out, "action": action}


def smoke_reached(
    reached: ContextManager[str],
    url: str,
    access: str,
    spec: ServeSpec,
    messages: list[Message],
    tools: list | None,
    ready_timeout_s: float,
    t0: float,
) -> dict[str, Any]:
    """Every cluster backend's last step: smoke_all where this process reaches the server
    (`reached`: trainer.k8s.reach.service or .pod), then one line on where clients reach it: `url`
    from a pod of the cluster, `access` (a `kubectl port-forward` command) from the user's machine.
    Returns smoke_all's result with `url` as the endpoint, plus `access`."""
    with reached as here:
        out = smoke_all(here, spec, messages, tools, ready_timeout_s, t0)
    print(f"in the cluster: {url}/v1; from your machine: {access}", flush=True)
    return {**out, "endpoint": f"{url}/v1", "access": access}


def smoke_all(
    url: str, spec: ServeSpec, messages: list[Message], tools: list | None, ready_timeout_s: float, t0: float
) -> dict[str, Any]:
    """Wait for /v1/models, then the same OpenAI smoke test as locally for every served name: the
    tuned model (each adapter when there are some, else the model) must answer with a tool call."""
    print(
        f"waiting for {', '.join([spec.name, *spec.adapters])} on /v1/models (at most {ready_timeout_s:.0f} s)",
        flush=True,
    )
    client.wait_ready(url, timeout=ready_timeout_s)
    ready_s = time.monotonic() - t0
    names = [spec.name, *spec.adapters]
    tuned = set(spec.adapters) or {spec.name}
    results = {n: client.smoke_test(url, n, messages, tools, require_tool_call=n in tuned) for n in names}
    failed = [f"{n}: {r['reason']}" for n, r in results.items() if not r["ok"]]
    return {
        "endpoint": f"{url}/v1",
        "names": names,
        "ready_s": ready_s,
        "smoke_ok": not failed,
        "reason": "; ".join(failed),
        "latency_s": max(r["latency_s"] for r in results.values()),
        "results": results,
        "pgid": None,
    }


def service_url(name: str, namespace: str) -> str:
    """The Service's URL in the cluster (what the pipeline's `endpoint` output gives in-cluster clients)."""
    return reach.dns_url(name, namespace, PORT)


def parse_adapters(pairs: list[str]) -> dict[str, str]:
    """`NAME=s3://...` strings -> {name: uri}; every malformed one reported at once."""
    out, problems = parse_loras(pairs, "--adapter", "NAME=s3://bucket/adapters/... (e.g. trial-a=s3://...)")
    collect(problems, what="invalid --adapter")
    return out


def trial_adapters(name: str, uris: list[str]) -> dict[str, str]:
    """Served names for a sweep's adapters, in trial order: `name`-trial-0, `name`-trial-1, ..."""
    return {f"{name}-trial-{i}": uri for i, uri in enumerate(uris)}
