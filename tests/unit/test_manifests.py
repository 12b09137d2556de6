"""Namespace manifests: committed file fresh, every object strictly valid, RBAC namespaced,
no credentials (placeholders only), restricted Pod Security, a MinIO that refuses the placeholder."""

import os
import subprocess
import sys

import pytest
import yaml

from pipelines import manifests
from tests.schemas import assert_restricted, validate
from tests.unit.test_compile import ROOT


def test_committed_manifests_are_fresh(capsys, default_settings):
    manifests.main([])
    assert capsys.readouterr().out == (ROOT / "docker/manifests/namespace.yaml").read_text(), (
        "run `make manifests` and commit docker/manifests/namespace.yaml"
    )


def test_every_object_is_valid_and_rbac_is_namespaced():
    objs = manifests.render("team-ml", "kubeflow:pipeline-runner")
    for obj in objs:
        validate(obj)
    kinds = [o["kind"] for o in objs]
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds
    [role] = [o for o in objs if o["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "team-ml"
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert {
        "pytorchjobs",
        "trainjobs",
        "inferenceservices",
        "servingruntimes",
        "deployments",
        "services",
        "pods/log",
    } <= resources
    assert "secrets" not in resources
    [binding] = [o for o in objs if o["kind"] == "RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": "kubeflow"}]
    secrets = [o for o in objs if o["kind"] == "Secret"]
    assert {s["metadata"]["namespace"] for s in secrets} == {"team-ml", "kubeflow"}
    assert all(set(s["stringData"].values()) == {manifests.PLACEHOLDER} for s in secrets)
    [kserve_secret] = [s for s in secrets if s["metadata"]["name"] == manifests.KSERVE_SECRET]
    assert (
        kserve_secret["metadata"]["annotations"]["serving.kserve.io/s3-endpoint"]
        == "minio.team-ml.svc.cluster.local:9000"
    )
    assert set(kserve_secret["stringData"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    [sa] = [o for o in objs if o["kind"] == "ServiceAccount"]
    from trainer.deploy import kserve

    assert sa["metadata"]["name"] == kserve.SERVICE_ACCOUNT and sa["secrets"] == [{"name": manifests.KSERVE_SECRET}]
    [minio] = [o for o in objs if o["kind"] == "Deployment"]
    assert_restricted(minio)
    [config] = [o for o in objs if o["kind"] == "ConfigMap"]
    assert config["metadata"]["namespace"] == "kubeflow"
    assert config["data"]["S3_ENDPOINT"] == "http://minio.team-ml.svc.cluster.local:9000"
    [svc] = [o for o in objs if o["kind"] == "Service"]
    assert svc["metadata"]["name"] == "minio" and svc["spec"]["ports"][0]["port"] == 9000


def test_minio_image_is_pinned():
    [dep] = [
        o
        for o in yaml.safe_load_all((ROOT / "docker/manifests/namespace.yaml").read_text())
        if o["kind"] == "Deployment"
    ]
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert ":" in image and not image.endswith(":latest")


def test_shipped_training_runtime_never_retries_permanent_exit_codes():
    [runtime] = [
        o for o in manifests.render("team-ml", "kubeflow:pipeline-runner") if o["kind"] == "ClusterTrainingRuntime"
    ]
    validate(runtime)  # Trainer v2.3.0 CRD, strict
    spec = runtime["spec"]["template"]["spec"]
    [node] = spec["replicatedJobs"]
    [rule] = node["template"]["spec"]["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == [2, 3]
    assert spec["failurePolicy"]["rules"][0] == {
        "name": "permanentExitCode",
        "action": "FailJobSet",
        "onJobFailureReasons": ["PodFailurePolicy"],
    }
    assert spec["failurePolicy"]["maxRestarts"] == 3
    assert node["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"  # podFailurePolicy needs it


@pytest.mark.parametrize(
    "password, refused", [(manifests.PLACEHOLDER, True), ("short", True), ("a-real-long-password", False)]
)
def test_minio_refuses_the_template_password(password, refused):
    """The init container's own script, run as it runs in the pod."""
    [minio] = [o for o in manifests.render("team-ml", "kubeflow:pipeline-runner") if o["kind"] == "Deployment"]
    [check] = minio["spec"]["template"]["spec"]["initContainers"]
    proc = subprocess.run(
        [sys.executable, *check["command"][1:]],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "MINIO_ROOT_PASSWORD": password},
    )
    assert (proc.returncode != 0) == refused
    if refused:
        assert "refusing to start MinIO" in proc.stderr and "kubectl create secret" in proc.stderr


@pytest.mark.parametrize(
    "args, fix",
    [
        (["--namespace", "Bad_NS"], "--namespace='Bad_NS' is not a valid"),
        (["--pipeline-sa", "kubeflow:"], "must be namespace:name"),
        (["--storage", "lots"], "--storage='lots' is not a size; give the MinIO"),
        (["--storage", "0"], "less than a mebibyte"),
        (["--storage", "500m"], "e.g. --storage 100Gi"),
    ],
)
def test_bad_arguments_exit_2_with_the_fix(args, fix, capsys):
    with pytest.raises(SystemExit) as exit_:
        manifests.main(args)
    assert exit_.value.code == 2 and fix in capsys.readouterr().err
