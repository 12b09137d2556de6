"""python -m pipelines.manifests [--namespace llm-finetune] [--pipeline-sa kubeflow:pipeline-runner] > ns.yaml

Render the Kubernetes objects one namespace needs: MinIO (PVC + Deployment + Service), the
S3 credentials Secret template (in the training namespace and in the namespace where KFP
runs the pipeline's pods, because Secrets are namespaced), a ConfigMap there pointing the
pipeline's pods at this MinIO, and RBAC letting the pipeline's
service account manage PyTorchJobs, Deployments and Services in that namespace only.

The Secret template holds placeholders, never real keys: replace them before applying,
or create the Secret with kubectl (see README "Run on a cluster"). `make manifests` writes
docker/manifests/namespace.yaml, which is committed and kept fresh by a test.
"""

from __future__ import annotations

import argparse
import sys

from trainer import settings

MINIO_IMAGE = "minio/minio:RELEASE.2025-04-22T22-12-26Z"
PLACEHOLDER = "REPLACE-ME-before-applying"


def s3_secret(namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": settings.get("S3_SECRET_NAME"), "namespace": namespace},
            "stringData": {"accesskey": PLACEHOLDER, "secretkey": PLACEHOLDER}}


def render(namespace: str, pipeline_sa: str, storage: str = "100Gi") -> list[dict]:
    sa_ns, _, sa_name = pipeline_sa.partition(":")
    labels = {"app.kubernetes.io/name": "minio", "app.kubernetes.io/part-of": "llm-finetune"}
    secret_ref = lambda key: {"secretKeyRef": {"name": settings.get("S3_SECRET_NAME"), "key": key}}  # noqa: E731
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        s3_secret(namespace),
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "minio-data", "namespace": namespace, "labels": labels},
         "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "minio", "namespace": namespace,
                                                                     "labels": labels},
         "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "containers": [{
                          "name": "minio", "image": MINIO_IMAGE,
                          "args": ["server", "/data", "--console-address", ":9001"],
                          "env": [{"name": "MINIO_ROOT_USER", "valueFrom": secret_ref("accesskey")},
                                  {"name": "MINIO_ROOT_PASSWORD", "valueFrom": secret_ref("secretkey")}],
                          "ports": [{"name": "api", "containerPort": 9000}, {"name": "console", "containerPort": 9001}],
                          "readinessProbe": {"httpGet": {"path": "/minio/health/ready", "port": 9000}},
                          "livenessProbe": {"httpGet": {"path": "/minio/health/live", "port": 9000}},
                          "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                          "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                      "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "minio-data"}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "minio", "namespace": namespace, "labels": labels},
         "spec": {"selector": labels, "ports": [{"name": "api", "port": 9000, "targetPort": "api"},
                                                {"name": "console", "port": 9001, "targetPort": "console"}]}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "llm-finetune-pipeline", "namespace": namespace},
         "rules": [
             {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"],
              "verbs": ["create", "get", "list", "watch", "delete"]},
             {"apiGroups": ["apps"], "resources": ["deployments"],
              "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"]},
             {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["get"]},
             {"apiGroups": [""], "resources": ["services"],
              "verbs": ["create", "get", "list", "patch", "update", "delete"]},
             # read-only: the launcher streams logs and reports pod phases and events on failure
             {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": ["get", "list", "watch"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "llm-finetune-pipeline", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "llm-finetune-pipeline"},
         "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_ns}]},
    ]
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": settings.get("CONFIG_MAP_NAME"), "namespace": sa_ns},
              "data": {"S3_ENDPOINT": f"http://minio.{namespace}.svc.cluster.local:9000",
                       "S3_BUCKET": settings.get("S3_BUCKET")}}
    objects.insert(2, config)  # pipeline pods read the endpoint (and below, the Secret) in their namespace
    if sa_ns != namespace:
        objects.insert(2, s3_secret(sa_ns))
    return objects


def main(argv: list[str] | None = None) -> None:
    import yaml

    parser = argparse.ArgumentParser(prog="python -m pipelines.manifests", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namespace", default="llm-finetune", help="where jobs, MinIO and vLLM run")
    parser.add_argument("--pipeline-sa", default="kubeflow:pipeline-runner",
                        help="NAMESPACE:NAME of the service account KFP runs pipeline pods as")
    parser.add_argument("--storage", default="100Gi", help="MinIO volume size")
    args = parser.parse_args(argv)
    if ":" not in args.pipeline_sa:
        sys.exit("error: --pipeline-sa must be NAMESPACE:NAME, e.g. kubeflow:pipeline-runner")
    print(f"# rendered by: python -m pipelines.manifests --namespace {args.namespace} "
          f"--pipeline-sa {args.pipeline_sa} --storage {args.storage}")
    print(yaml.safe_dump_all(render(args.namespace, args.pipeline_sa, args.storage), sort_keys=False), end="")


if __name__ == "__main__":
    main()
