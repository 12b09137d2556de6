"""python -m pipelines.manifests [--namespace llm-finetune] [--pipeline-sa kubeflow:pipeline-runner] > ns.yaml

Render the Kubernetes objects one namespace needs: MinIO (PVC + Deployment + Service), the
S3 credentials Secret template (in the training namespace and in the namespace where KFP
runs the pipeline's pods, because Secrets are namespaced), a ConfigMap there pointing the
pipeline's pods at this MinIO, KServe's S3 credentials (a ServiceAccount and a Secret carrying
KServe's S3 annotations, for deploy_backend=kserve), the ClusterTrainingRuntime
`llm-finetune-torch` (for launcher=trainjob with training_runtime=llm-finetune-torch), and RBAC
letting the pipeline's service account manage PyTorchJobs, TrainJobs, InferenceServices,
ServingRuntimes, Deployments and Services in that namespace only.

The Secret templates hold placeholders, never real keys: replace them before applying, or
create the Secrets with kubectl (see docs/cluster.md). MinIO refuses to start while
its password is the placeholder (or shorter than MinIO's 8 characters). Every pod runs under
restricted Pod Security. `make manifests` writes docker/manifests/namespace.yaml, which is
committed and kept fresh by a test.
"""

from __future__ import annotations

import argparse

from trainer.core import settings
from trainer.core.errors import collect, exit_on_user_error

MINIO_IMAGE = "minio/minio:RELEASE.2025-04-22T22-12-26Z"
CHECK_IMAGE = "python:3.11-slim-bookworm"  # the project image's base: small, has python
PLACEHOLDER = "REPLACE-ME-before-applying"
KSERVE_SA = "llm-finetune-kserve"  # trainer.deploy.server.KSERVE_SERVICE_ACCOUNT
KSERVE_SECRET = "llm-finetune-kserve-s3"
RUNTIME = "llm-finetune-torch"
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
# MinIO's image runs as root by default; as uid 1000 it writes to the volume through fsGroup.
RESTRICTED_POD = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "fsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}
# Refuse the template's placeholder (it would work if applied) and passwords MinIO itself rejects.
CHECK_PASSWORD = (
    "import os, sys\n"
    "p = os.environ['MINIO_ROOT_PASSWORD']\n"
    f"if p == {PLACEHOLDER!r} or len(p) < 8:\n"
    "    sys.exit('refusing to start MinIO: the Secret " + "{secret}" + " still holds the template placeholder (or a "
    "password under 8 characters); create it with kubectl create secret generic ... (docs/cluster.md)')\n"
)


def s3_secret(namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": settings.get("S3_SECRET_NAME"), "namespace": namespace},
        "stringData": {"accesskey": PLACEHOLDER, "secretkey": PLACEHOLDER},
    }


def kserve_credentials(namespace: str) -> list[dict]:
    """KServe's S3 convention: the predictor's ServiceAccount lists a Secret whose annotations
    say where S3 is; the storage initializer reads AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY from it."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": KSERVE_SECRET,
            "namespace": namespace,
            "annotations": {
                "serving.kserve.io/s3-endpoint": f"minio.{namespace}.svc.cluster.local:9000",
                "serving.kserve.io/s3-usehttps": "0",
                "serving.kserve.io/s3-verifyssl": "0",
                "serving.kserve.io/s3-region": settings.get("S3_REGION"),
                "serving.kserve.io/s3-useanoncredential": "false",
            },
        },
        "stringData": {"AWS_ACCESS_KEY_ID": PLACEHOLDER, "AWS_SECRET_ACCESS_KEY": PLACEHOLDER},
    }
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": KSERVE_SA, "namespace": namespace},
        "secrets": [{"name": KSERVE_SECRET}],
    }
    return [secret, account]


def training_runtime() -> dict:
    """Trainer's torch-distributed runtime plus what a TrainJob cannot set itself: exit codes
    2 (bad input) and 3 (non-finite loss) fail the job at once, other failures (137 OOM-kill,
    143 preemption, 1 crash) restart the JobSet up to 3 times, resuming from the checkpoint."""
    from trainer.launch.pytorchjob import PERMANENT_EXIT_CODES

    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": RUNTIME, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "failurePolicy": {
                        "maxRestarts": 3,
                        "rules": [
                            {
                                "name": "permanentExitCode",
                                "action": "FailJobSet",
                                "onJobFailureReasons": ["PodFailurePolicy"],
                            }
                        ],
                    },
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                "spec": {
                                    "backoffLimit": 0,
                                    "podFailurePolicy": {
                                        "rules": [
                                            {
                                                "action": "FailJob",
                                                "onExitCodes": {
                                                    "containerName": "node",
                                                    "operator": "In",
                                                    "values": list(PERMANENT_EXIT_CODES),
                                                },
                                            }
                                        ]
                                    },
                                    "template": {
                                        "spec": {
                                            "restartPolicy": "Never",
                                            "containers": [{"name": "node", "image": settings.image()}],
                                        }
                                    },
                                },
                            },
                        }
                    ],
                }
            },
        },
    }


def render(namespace: str, pipeline_sa: str, storage: str = "100Gi") -> list[dict]:
    sa_ns, _, sa_name = pipeline_sa.partition(":")
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        s3_secret(namespace),
        # pipeline pods read the endpoint (and, in another namespace, the Secret) in their namespace
        *([s3_secret(sa_ns)] if sa_ns != namespace else []),
        s3_config(namespace, sa_ns),
        *kserve_credentials(namespace),
        *minio(namespace, storage),
        training_runtime(),
        *pipeline_rbac(namespace, sa_ns, sa_name),
    ]


def s3_config(namespace: str, sa_ns: str) -> dict:
    """The ConfigMap the pipeline's pods read the S3 endpoint and bucket from, in their own namespace."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": settings.get("CONFIG_MAP_NAME"), "namespace": sa_ns},
        "data": {
            "S3_ENDPOINT": f"http://minio.{namespace}.svc.cluster.local:9000",
            "S3_BUCKET": settings.get("S3_BUCKET"),
        },
    }


def minio(namespace: str, storage: str) -> list[dict]:
    """MinIO: its volume, Deployment (credentials checked by an init container) and Service."""
    labels = {"app.kubernetes.io/name": "minio", "app.kubernetes.io/part-of": "llm-finetune"}
    secret_ref = lambda key: {"secretKeyRef": {"name": settings.get("S3_SECRET_NAME"), "key": key}}  # noqa: E731
    credentials = [
        {"name": "MINIO_ROOT_USER", "valueFrom": secret_ref("accesskey")},
        {"name": "MINIO_ROOT_PASSWORD", "valueFrom": secret_ref("secretkey")},
    ]
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "minio-data", "namespace": namespace, "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "minio", "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "securityContext": RESTRICTED_POD,
                        "initContainers": [
                            {
                                "name": "check-credentials",
                                "image": CHECK_IMAGE,
                                "command": [
                                    "python",
                                    "-c",
                                    CHECK_PASSWORD.replace("{secret}", settings.get("S3_SECRET_NAME")),
                                ],
                                "env": credentials[1:],
                                "securityContext": RESTRICTED_CONTAINER,
                                "resources": {
                                    "requests": {"cpu": "50m", "memory": "32Mi"},
                                    "limits": {"memory": "64Mi"},
                                },
                            }
                        ],
                        "containers": [
                            {
                                "name": "minio",
                                "image": MINIO_IMAGE,
                                "args": ["server", "/data", "--console-address", ":9001"],
                                "env": credentials,
                                "ports": [
                                    {"name": "api", "containerPort": 9000},
                                    {"name": "console", "containerPort": 9001},
                                ],
                                "readinessProbe": {"httpGet": {"path": "/minio/health/ready", "port": 9000}},
                                "livenessProbe": {"httpGet": {"path": "/minio/health/live", "port": 9000}},
                                "resources": {
                                    "requests": {"cpu": "500m", "memory": "1Gi"},
                                    "limits": {"memory": "4Gi"},
                                },
                                "securityContext": RESTRICTED_CONTAINER,
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            }
                        ],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "minio-data"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "minio", "namespace": namespace, "labels": labels},
            "spec": {
                "selector": labels,
                "ports": [
                    {"name": "api", "port": 9000, "targetPort": "api"},
                    {"name": "console", "port": 9001, "targetPort": "console"},
                ],
            },
        },
    ]


def pipeline_rbac(namespace: str, sa_ns: str, sa_name: str) -> list[dict]:
    """The Role the pipeline's ServiceAccount needs in `namespace` (jobs, serving objects, pods' logs), bound to it."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "llm-finetune-pipeline", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": ["kubeflow.org"],
                    "resources": ["pytorchjobs"],
                    "verbs": ["create", "get", "list", "watch", "delete"],
                },
                {
                    "apiGroups": ["trainer.kubeflow.org"],
                    "resources": ["trainjobs"],
                    "verbs": ["create", "get", "list", "watch", "delete"],
                },
                {
                    "apiGroups": ["serving.kserve.io"],
                    "resources": ["inferenceservices", "servingruntimes", "llminferenceservices"],
                    "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"],
                },
                {
                    "apiGroups": ["apps"],
                    "resources": ["deployments"],
                    "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"],
                },
                {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["get"]},
                {
                    "apiGroups": [""],
                    "resources": ["services"],
                    "verbs": ["create", "get", "list", "patch", "update", "delete"],
                },
                # read-only: the launcher streams logs and reports pod phases and events on failure
                {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": ["get", "list", "watch"]},
                # the smoke test of an LLMInferenceService served over KServe's TLS: through the API server
                {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get", "create"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "llm-finetune-pipeline", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "llm-finetune-pipeline"},
            "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_ns}],
        },
    ]


def problems(namespace: str, pipeline_sa: str, storage: str) -> list[str]:
    """The API server's rules for the three inputs (trainer.k8s.rules), before anything is rendered."""
    from trainer.k8s import rules

    return (
        rules.namespace(namespace, "--namespace")
        + rules.service_account_ref(pipeline_sa, "--pipeline-sa")
        + storage_problems(storage)
    )


def storage_problems(storage: str) -> list[str]:
    """A PVC size: a quantity the API server takes, and more than nothing (it refuses a zero request)."""
    from kubernetes.utils import parse_quantity

    from trainer.k8s import rules

    fix = "give the MinIO volume size with a unit, e.g. --storage 100Gi"
    if rules.quantity(storage, "--storage"):
        return [f"--storage={storage!r} is not a size; {fix}"]
    if parse_quantity(storage) < 1024**2:  # '0', or '500m' read as half a byte
        return [f"--storage={storage!r} is less than a mebibyte, no room for models or datasets; {fix}"]
    return []


def main(argv: list[str] | None = None) -> None:
    import yaml

    parser = argparse.ArgumentParser(
        prog="python -m pipelines.manifests", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--namespace", default="llm-finetune", help="where jobs, MinIO and vLLM run")
    parser.add_argument(
        "--pipeline-sa",
        default="kubeflow:pipeline-runner",
        help="NAMESPACE:NAME of the service account KFP runs pipeline pods as",
    )
    parser.add_argument("--storage", default="100Gi", help="MinIO volume size")
    args = parser.parse_args(argv)
    with exit_on_user_error():
        collect(problems(args.namespace, args.pipeline_sa, args.storage), what="invalid manifest settings")
    print(
        f"# rendered by: python -m pipelines.manifests --namespace {args.namespace} "
        f"--pipeline-sa {args.pipeline_sa} --storage {args.storage}"
    )
    print(yaml.safe_dump_all(render(args.namespace, args.pipeline_sa, args.storage), sort_keys=False), end="")


if __name__ == "__main__":
    main()
