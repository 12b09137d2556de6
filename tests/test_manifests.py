"""Namespace manifests: committed file fresh, every object strictly valid, RBAC namespaced,
no credentials (placeholders only)."""

import yaml

from pipelines import manifests
from tests.schemas import validate
from tests.test_compile import ROOT


def test_committed_manifests_are_fresh(capsys, default_settings):
    manifests.main([])
    assert capsys.readouterr().out == (ROOT / "docker/manifests/namespace.yaml").read_text(), \
        "run `make manifests` and commit docker/manifests/namespace.yaml"


def test_every_object_is_valid_and_rbac_is_namespaced():
    objs = manifests.render("team-ml", "kubeflow:pipeline-runner")
    for obj in objs:
        validate(obj)
    kinds = [o["kind"] for o in objs]
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds
    [role] = [o for o in objs if o["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "team-ml"
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert {"pytorchjobs", "deployments", "services", "pods/log"} <= resources
    assert "secrets" not in resources
    [binding] = [o for o in objs if o["kind"] == "RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": "kubeflow"}]
    secrets = [o for o in objs if o["kind"] == "Secret"]
    assert {s["metadata"]["namespace"] for s in secrets} == {"team-ml", "kubeflow"}
    assert all(set(s["stringData"].values()) == {manifests.PLACEHOLDER} for s in secrets)
    [config] = [o for o in objs if o["kind"] == "ConfigMap"]
    assert config["metadata"]["namespace"] == "kubeflow"
    assert config["data"]["S3_ENDPOINT"] == "http://minio.team-ml.svc.cluster.local:9000"
    [svc] = [o for o in objs if o["kind"] == "Service"]
    assert svc["metadata"]["name"] == "minio" and svc["spec"]["ports"][0]["port"] == 9000


def test_minio_image_is_pinned():
    [dep] = [o for o in yaml.safe_load_all((ROOT / "docker/manifests/namespace.yaml").read_text())
             if o["kind"] == "Deployment"]
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert ":" in image and not image.endswith(":latest")
