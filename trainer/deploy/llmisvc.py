"""deploy_backend=llmisvc: KServe's LLMInferenceService (serving.kserve.io/v1alpha2, KServe v0.20.0),
its current API for generative models, with the model -- or the base and LoRA adapters -- from the bucket.

  python -m trainer deploy-k8s --backend llmisvc --dry-run --model-uri s3://... --name my-model \\
      [--adapter my-model=s3://.../adapter]

`spec.model.uri` is the model's s3:// tree and `spec.model.name` the name clients ask for; adapters go
to `spec.model.lora.adapters` (name + s3:// URI each, `maxRank` from their configs, `maxAdapters` their
count), which KServe downloads and turns into vLLM's LoRA flags itself: one base, many adapters, no
merged copy (serve_adapters=true, and the sweep's deploy_all_trials). KServe's storage initializer
reads the bucket with the ServiceAccount `llm-finetune-kserve` (its Secret carries KServe's S3
annotations, rendered by pipelines.manifests). The vLLM container `main` of `spec.template` gets the
image for the accelerator, the resources, the restricted security context, and in
VLLM_ADDITIONAL_ARGS the flags of the one argument builder that KServe does not set itself (the
tool-call parser read off the chat template, the delivered chat template, the context length);
tensor parallelism is `spec.parallelism.tensor`. Re-deploying replaces the object (lifecycle.replace),
Ready is its `Ready` condition of the newest generation, and the same OpenAI smoke test as every
backend runs on every served name: at the workload Service from a pod, through the API server's proxy
to a workload pod from outside the cluster (trainer.k8s.reach).
"""

from __future__ import annotations

import shlex
import time
from typing import Any

from trainer.chat.types import Message
from trainer.core.errors import collect
from trainer.k8s import reach
from trainer.k8s.lifecycle import api_client, default_namespace, ready_condition, replace, to_dict, wait_until
from trainer.k8s.podspec import (
    RUN_AS_USER,
    accelerators,
    container_security,
    labels as app_labels,
    pod_security,
    queue_labels,
    tolerations,
)
from trainer.deploy.base import Deployed, ServeBackend, ServeSpec
from trainer.deploy.server import KSERVE_SERVICE_ACCOUNT, image, not_ready_lines, server_args, smoke_reached

GROUP, VERSION, PLURAL, KIND = "serving.kserve.io", "v1alpha2", "llminferenceservices", "LLMInferenceService"
PORT = 8000  # vLLM in the workload pod; KServe's workload Service serves it on the same port
MOUNT = "/mnt/models"  # where KServe's storage initializer puts spec.model.uri
WORKLOAD_LABELS = "app.kubernetes.io/name={name},kserve.io/component=workload"
# Flags KServe sets itself from the object (model path and name, listening address, LoRA from
# spec.model.lora, tensor parallelism from spec.parallelism): left out of VLLM_ADDITIONAL_ARGS.
_KSERVE_OWNS = {
    "--model": 1,
    "--served-model-name": 1,
    "--host": 1,
    "--port": 1,
    "--enable-lora": 0,
    "--max-loras": 1,
    "--lora-modules": -1,
    "--max-lora-rank": 1,
    "--tensor-parallel-size": 1,
}


def _full_args(spec: ServeSpec) -> list[str]:
    return server_args(spec, spec.name, MOUNT, PORT, {n: n for n in spec.adapters})


def _flag(args: list[str], flag: str) -> int:
    return int(args[args.index(flag) + 1])


def additional_args(spec: ServeSpec) -> list[str]:
    """trainer.serving.args.vllm_args for this deploy, less what KServe sets from the object itself."""
    full, out, i = _full_args(spec), [], 0
    while i < len(full):
        takes = _KSERVE_OWNS.get(full[i])
        if takes is None:
            out.append(full[i])
            i += 1
        elif takes == -1:  # --lora-modules NAME=PATH ...: every value up to the next flag
            i += 1
            while i < len(full) and not full[i].startswith("--"):
                i += 1
        else:
            i += 1 + takes
    return out


def llm_inference_service(spec: ServeSpec) -> dict:
    c = spec.cluster
    gpus = accelerators(c, spec.gpus)
    model: dict[str, Any] = {"uri": spec.model_uri, "name": spec.name}
    if spec.adapters:
        # KServe passes these to vLLM as they are: the builder's values (the rank rounded up to one vLLM accepts)
        full = _full_args(spec)
        model["lora"] = {
            "adapters": [{"name": n, "uri": uri} for n, uri in spec.adapters.items()],
            "maxRank": _flag(full, "--max-lora-rank"),
            "maxAdapters": _flag(full, "--max-loras"),
        }
    container = {
        "name": "main",
        "image": image(spec),
        "env": [
            {"name": "VLLM_ADDITIONAL_ARGS", "value": shlex.join(additional_args(spec))},
            {"name": "HF_HUB_OFFLINE", "value": "1"},
        ],
        "resources": {"requests": {"cpu": c.cpu, "memory": c.memory, **gpus}, "limits": {"memory": c.memory, **gpus}},
        "securityContext": to_dict(container_security()),
    }
    template: dict[str, Any] = {
        "serviceAccountName": c.service_account or KSERVE_SERVICE_ACCOUNT,
        "securityContext": to_dict(pod_security(RUN_AS_USER)),
        "containers": [container],
        **({"nodeSelector": c.node_selector} if c.node_selector else {}),
        **({"tolerations": tolerations(c)} if c.tolerations else {}),
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": spec.name,
            **({"namespace": c.namespace} if c.namespace else {}),
            "labels": {**app_labels("server", **{"app.kubernetes.io/instance": spec.name}), **queue_labels(c)},
            "annotations": {"llm-finetune/model-uri": spec.model_uri},
        },
        # KServe copies spec.labels (not the object's) onto the workload pods, where Kueue looks.
        "spec": {
            "model": model,
            "replicas": spec.replicas,
            "template": template,
            **({"labels": queue_labels(c)} if queue_labels(c) else {}),
            **({"parallelism": {"tensor": spec.gpus}} if spec.gpus > 1 else {}),
        },
    }


def build(spec: ServeSpec) -> list[dict]:
    """[LLMInferenceService] for `spec`, not yet sent anywhere."""
    # KServe shortens the names of the objects it creates (knative's ChildName) and routes by path:
    # served_model_name's own rules (spec.problems) are the only limit.
    collect(spec.problems(), what="invalid serving settings")
    return [llm_inference_service(spec)]


def apply(custom, obj: dict, namespace: str) -> str:
    """Create the object, or replace it when it exists (exactly the new render: a JSON merge patch
    would keep the previous deploy's adapters and placement keys). Returns 'created' or 'replaced'."""
    from kubernetes.client.exceptions import ApiException

    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, obj)
        return "created"
    except ApiException as err:
        if err.status != 409:
            raise
    name = obj["metadata"]["name"]
    replace(
        lambda: custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
        lambda body: custom.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body),
        obj,
        f"{KIND} {namespace}/{name}",
    )
    return "replaced"


def wait_ready(
    custom, name: str, namespace: str, timeout_s: float, poll_s: float = 5.0, progress_every_s: float = 30.0
) -> str:
    """Until the newest generation is Ready; returns its URL (status.url, else the first address,
    else the workload Service). A line of progress (the conditions not yet True) every `progress_every_s`."""

    def check() -> tuple[str | None, list[str]]:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        ready, why = ready_condition(obj)
        st = obj.get("status") or {}
        return (served_url(st, name, namespace) if ready else None), why

    return wait_until(
        check,
        timeout_s,
        poll_s,
        progress_every_s,
        *not_ready_lines(KIND, name, namespace, timeout_s, "llminferenceservice", "the workload pod"),
    )


def workload_url(name: str, namespace: str, scheme: str = "http") -> str:
    """KServe's per-service workload Service (gateway-independent), on vLLM's port; plain HTTP unless
    the cluster turned enableLLMInferenceServiceTLS on."""
    return f"{scheme}://{name}-kserve-workload-svc.{namespace}.svc.cluster.local:{PORT}"


def served_url(status: dict, name: str, namespace: str) -> str:
    """Where the service answers. Without spec.router (ours) KServe sets no status.url and publishes
    the workload Service as status.addresses[0].url, without a port, while the Service listens on
    vLLM's only: the port is added; the scheme (TLS on or off) is KServe's."""
    if status.get("url"):
        return status["url"]
    from urllib.parse import urlsplit

    address = next((a["url"] for a in status.get("addresses") or [] if a.get("url")), "")
    if not address:
        return workload_url(name, namespace)
    parts = urlsplit(address)
    return f"{parts.scheme}://{parts.hostname}:{parts.port or PORT}{parts.path.rstrip('/')}"


class LLMInferenceService(ServeBackend):
    """deploy_backend=llmisvc: KServe's LLMInferenceService, adapters under spec.model.lora."""

    def build(self, spec: ServeSpec) -> list:
        return build(spec)

    def deploy(
        self,
        spec: ServeSpec,
        messages: list[Message],
        tools: list | None = None,
        client_configuration: Any = None,
        poll_s: float = 5.0,
        ready_timeout_s: float = 300,
    ) -> Deployed:
        """Apply, wait for Ready and /v1/models, smoke-test every served name; the same result as the
        other backends, with `access`, the `kubectl port-forward` command."""
        from kubernetes import client as k

        [obj] = build(spec)  # validates: bad settings are reported before the cluster is contacted
        api = api_client(client_configuration)
        custom = k.CustomObjectsApi(api)
        namespace = spec.cluster.namespace or default_namespace()
        action = apply(custom, obj, namespace)
        print(
            f"{action} {KIND} {namespace}/{spec.name}; waiting until Ready (at most {spec.rollout_timeout_s} s)",
            flush=True,
        )
        t0 = time.monotonic()
        url = wait_ready(custom, spec.name, namespace, spec.rollout_timeout_s, poll_s).rstrip("/")
        # Outside the cluster the Service's name does not resolve, and KServe's TLS certificate (when the
        # cluster turned it on) is its own: the API server's proxy to a workload pod reaches it either way.
        selector = WORKLOAD_LABELS.format(name=spec.name)
        return smoke_reached(
            reach.pod(
                api,
                namespace,
                url,
                PORT,
                selector,
                f"{KIND} {namespace}/{spec.name}",
                "workload",
                tls=url.split("://", 1)[0] != "http",
            ),
            url,
            reach.port_forward(namespace, reach.newest_pod(namespace, selector), PORT),
            spec,
            messages,
            tools,
            ready_timeout_s,
            t0,
            action,
        )
