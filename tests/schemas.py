"""Validators for rendered Kubernetes objects: core kinds with kubernetes-validate (strict),
PyTorchJobs against the Training Operator v1.9 CRD, made strict (unknown fields rejected)."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import jsonschema
import yaml

# The Training Operator v1.9 CRD: the workspace's reference copy beside the checkout when there
# is one (CI), else the copy vendored in tests/data (any fresh clone, e.g. a laptop).
_SHARED = Path(__file__).resolve().parents[2] / "shared" / "schemas" / "kubeflow.org_pytorchjobs.yaml"
CRD = _SHARED if _SHARED.exists() else Path(__file__).resolve().parent / "data" / "kubeflow.org_pytorchjobs.yaml"
K8S_VERSION = "1.33.0"


def _strict(schema):
    """Reject unknown fields wherever the CRD lists the known ones (the API server prunes them silently)."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_strict(s) for s in schema]
    return schema


@functools.lru_cache
def pytorchjob_schema() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))


def validate(obj: dict) -> None:
    """Raise if `obj` is not a valid object of its kind."""
    if obj["kind"] == "PyTorchJob":
        jsonschema.validate(obj, pytorchjob_schema())
    else:
        import kubernetes_validate

        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
