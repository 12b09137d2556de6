"""deploy_backend=kserve: the merged model as a KServe InferenceService on a vLLM
ServingRuntime the project ships (`serving.kserve.io`, validated against the v0.20.0 CRDs).

  python -m trainer deploy-k8s --backend kserve --dry-run --model-uri s3://... --name my-model

The ServingRuntime `llm-finetune-vllm` holds the vLLM flags every model shares with the
Deployment backend (trainer.serving.args.vllm_args: auto tool choice, the served model name = the
InferenceService name through KServe's `{{.Name}}`); the InferenceService adds what varies per
model and deploy (the image for its accelerator, the tool-call parser its chat template calls
for, tensor parallelism, LoRA adapters), the accelerator resource and placement: one runtime
serves every deploy in the namespace.
KServe's storage initializer downloads `storageUri` (s3://) into /mnt/models, with the S3
credentials of the ServiceAccount `llm-finetune-kserve`, whose Secret carries KServe's S3
annotations (rendered by pipelines.manifests). Adapters side by side use `storageUris`, one
mount per adapter. Re-deploying replaces both objects (lifecycle.replace: exactly the new render,
nothing of the previous deploy's storage fields or placement kept); the service is ready when
the InferenceService says Ready and its predictor answers /v1/models, then the same OpenAI
smoke test as every other backend runs: at the predictor's URL from a pod, through the API
server's pod proxy from outside the cluster (trainer.k8s.reach), which also prints the
`kubectl port-forward` command that reaches it from the user's machine.
"""

from __future__ import annotations

import time
from typing import Any

from trainer.chat.types import Message
from trainer.core import settings
from trainer.core.errors import collect
from trainer.k8s import reach, rules
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
from trainer.deploy.server import KSERVE_SERVICE_ACCOUNT as SERVICE_ACCOUNT
from trainer.deploy.server import image, not_ready_lines, smoke_reached, split_args

GROUP = "serving.kserve.io"
RUNTIME_NAME = "llm-finetune-vllm"
MODEL_FORMAT = "vllm"
PORT = 8080  # KServe's default container port
ISVC_LABEL = "serving.kserve.io/inferenceservice"  # on the predictor's pods
MOUNT = "/mnt/models"
ADAPTERS = "/mnt/adapters"


def serving_runtime(spec: ServeSpec) -> dict:
    """The ServingRuntime: vLLM's image and the shared flags; the model name is KServe's `{{.Name}}`."""
    c = spec.cluster
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": {
            "name": RUNTIME_NAME,
            **({"namespace": c.namespace} if c.namespace else {}),
            "labels": app_labels("server"),
        },
        "spec": {
            "supportedModelFormats": [{"name": MODEL_FORMAT, "version": "1", "autoSelect": True}],
            "protocolVersions": ["v1"],
            "containers": [
                {
                    # Each InferenceService names its own image (CUDA, ROCm or CPU build): the runtime is
                    # shared by every deploy in the namespace, and the last one would set it for all.
                    "name": "kserve-container",
                    "image": settings.get("VLLM_IMAGE"),
                    "command": ["vllm", "serve"],
                    "args": split_args(spec, "{{.Name}}", MOUNT, PORT)[0],
                    "env": [
                        {"name": "HOME", "value": "/tmp"},
                        {"name": "HF_HOME", "value": "/tmp/hf"},
                        {"name": "HF_HUB_OFFLINE", "value": "1"},
                    ],
                    "ports": [{"containerPort": PORT, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}},
                    "securityContext": to_dict(container_security()),
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                }
            ],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": c.shm_size}}],
        },
    }


def inference_service(spec: ServeSpec) -> dict:
    c = spec.cluster
    gpus = accelerators(c, spec.gpus)
    adapters = {n: f"{ADAPTERS}/{n}" for n in spec.adapters}
    model: dict[str, Any] = {
        "modelFormat": {"name": MODEL_FORMAT},
        "runtime": RUNTIME_NAME,
        "image": image(spec),
        "args": split_args(spec, "{{.Name}}", MOUNT, PORT, adapters)[1],
        "resources": {"requests": {"cpu": c.cpu, "memory": c.memory, **gpus}, "limits": {"memory": c.memory, **gpus}},
        "securityContext": to_dict(container_security()),
    }
    predictor: dict[str, Any] = {
        "serviceAccountName": c.service_account or SERVICE_ACCOUNT,
        "minReplicas": spec.replicas,
        "securityContext": to_dict(pod_security(RUN_AS_USER)),
        "model": model,
        **({"nodeSelector": c.node_selector} if c.node_selector else {}),
        **({"tolerations": tolerations(c)} if c.tolerations else {}),
    }
    if spec.adapters:
        predictor["storageUris"] = [
            {"uri": spec.model_uri, "mountPath": MOUNT},
            *[{"uri": uri, "mountPath": adapters[n]} for n, uri in spec.adapters.items()],
        ]
    else:
        model["storageUri"] = spec.model_uri
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": spec.name,
            **({"namespace": c.namespace} if c.namespace else {}),
            "labels": {**app_labels("server", **{"app.kubernetes.io/instance": spec.name}), **queue_labels(c)},
            "annotations": {"llm-finetune/model-uri": spec.model_uri},
        },
        "spec": {"predictor": predictor},
    }


def build(spec: ServeSpec) -> list[dict]:
    """(ServingRuntime, InferenceService) for `spec`, not yet sent anywhere."""
    problems = spec.problems()
    if not rules.served_model_name(spec.name):  # else reported once, above
        problems += rules.kserve_name(spec.name, spec.cluster.namespace)
    collect(problems, what="invalid serving settings")
    return [serving_runtime(spec), inference_service(spec)]


def apply(custom, objects: list[dict], namespace: str) -> str:
    """Create each object, or replace it when it exists. Returns 'created' or 'replaced' (the InferenceService)."""
    from kubernetes.client.exceptions import ApiException

    action = "created"
    for obj in objects:
        version, plural = obj["apiVersion"].split("/")[1], obj["kind"].lower() + "s"
        try:
            custom.create_namespaced_custom_object(GROUP, version, namespace, plural, obj)
            action = "created"
        except ApiException as err:
            if err.status != 409:
                raise
            # Not a patch: the client's JSON merge patch keeps every map key the new render lacks (the
            # other mode's storageUri / storageUris, old node selector keys and accelerator resource).
            name = obj["metadata"]["name"]
            replace(
                lambda: custom.get_namespaced_custom_object(GROUP, version, namespace, plural, name),
                lambda body: custom.replace_namespaced_custom_object(GROUP, version, namespace, plural, name, body),
                obj,
                f"{obj['kind']} {namespace}/{name}",
            )
            action = "replaced"
    return action


def wait_ready(
    custom, name: str, namespace: str, timeout_s: float, poll_s: float = 5.0, progress_every_s: float = 30.0
) -> str:
    """Until the newest generation is Ready; returns the predictor's in-cluster URL. A line of
    progress (the conditions not yet True) every `progress_every_s`."""

    def check() -> tuple[str | None, list[str]]:
        obj = custom.get_namespaced_custom_object(GROUP, "v1beta1", namespace, "inferenceservices", name)
        ready, why = ready_condition(obj)
        st = obj.get("status") or {}
        url = (
            ((st.get("address") or {}).get("url") or st.get("url") or reach.dns_url(f"{name}-predictor", namespace, 80))
            if ready
            else None
        )
        return url, why

    return wait_until(
        check,
        timeout_s,
        poll_s,
        progress_every_s,
        *not_ready_lines("InferenceService", name, namespace, timeout_s, "inferenceservice", "the predictor pod"),
    )


class KServe(ServeBackend):
    """deploy_backend=kserve: an InferenceService on the project's vLLM ServingRuntime."""

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
        """Apply, wait for Ready and /v1/models, smoke-test every served name; the endpoint is the predictor's
        in-cluster URL, `access` the `kubectl port-forward` command for the user's machine."""
        from kubernetes import client as k

        objects = build(spec)  # validates: bad settings are reported before the cluster is contacted
        api = api_client(client_configuration)
        custom = k.CustomObjectsApi(api)
        namespace = spec.cluster.namespace or default_namespace()
        collect(rules.kserve_name(spec.name, namespace), what="invalid serving settings")  # the namespace is known now
        action = apply(custom, objects, namespace)
        print(
            f"{action} InferenceService {namespace}/{spec.name} (runtime {RUNTIME_NAME}); waiting until Ready "
            f"(at most {spec.rollout_timeout_s} s)",
            flush=True,
        )
        t0 = time.monotonic()
        url = wait_ready(custom, spec.name, namespace, spec.rollout_timeout_s, poll_s).rstrip("/")
        # The predictor's URL resolves only in the cluster, and in Serverless mode its Service is an
        # ExternalName (to Knative's gateway) that the API server cannot proxy: the pod it can. KServe
        # labels the predictor's pods with the InferenceService's name: valid in either KServe mode.
        selector = f"{ISVC_LABEL}={spec.name}"
        return smoke_reached(
            reach.pod(api, namespace, url, PORT, selector, f"InferenceService {namespace}/{spec.name}", "predictor"),
            url,
            reach.port_forward(namespace, reach.newest_pod(namespace, selector), PORT),
            spec,
            messages,
            tools,
            ready_timeout_s,
            t0,
            action,
        )
