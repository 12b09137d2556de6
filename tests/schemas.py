"""Validators for rendered Kubernetes objects: core kinds with kubernetes-validate (strict),
custom resources against their CRDs, made strict (unknown fields rejected): PyTorchJob
(Training Operator v1.9), TrainJob and ClusterTrainingRuntime (Kubeflow Trainer v2.3.0),
InferenceService and ServingRuntime (KServe v0.20.0). Also restricted Pod Security for every
pod template an object carries."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import jsonschema
import yaml

# The workspace's reference copies beside the checkout when there are some (CI), else the
# copies vendored in tests/data (any fresh clone, e.g. a laptop).
_SHARED = Path(__file__).resolve().parents[2] / "shared" / "schemas"
_VENDORED = Path(__file__).resolve().parent / "data"
K8S_VERSION = "1.33.0"
CRDS = {  # kind -> (file, version)
    "PyTorchJob": ("kubeflow.org_pytorchjobs.yaml", "v1"),
    "TrainJob": ("trainer.kubeflow.org_trainjobs.yaml", "v1alpha1"),
    "ClusterTrainingRuntime": ("trainer.kubeflow.org_clustertrainingruntimes.yaml", "v1alpha1"),
    "InferenceService": ("serving.kserve.io_inferenceservices.yaml", "v1beta1"),
    "ServingRuntime": ("serving.kserve.io_servingruntimes.yaml", "v1alpha1"),
    "LLMInferenceService": ("serving.kserve.io_llminferenceservices.yaml", "v1alpha2"),
}


def schema_file(name: str) -> Path:
    return _SHARED / name if (_SHARED / name).exists() else _VENDORED / name


CRD = schema_file("kubeflow.org_pytorchjobs.yaml")


def _strict(schema):
    """Reject unknown fields wherever the CRD lists the known ones (the API server prunes them silently)."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_strict(s) for s in schema]
    return schema


@functools.lru_cache
def crd_schema(kind: str) -> dict:
    name, version = CRDS[kind]
    crd = yaml.load(schema_file(name).read_text(), Loader=yaml.CSafeLoader)
    [v] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return _strict(copy.deepcopy(v["schema"]["openAPIV3Schema"]))


def pytorchjob_schema() -> dict:
    return crd_schema("PyTorchJob")


@functools.cache
def crd_validator(kind: str) -> jsonschema.protocols.Validator:
    """The CRD's schema checked once (seconds for InferenceService's; jsonschema.validate checked
    it again on every call) and compiled into a validator that every later object of the kind reuses."""
    schema = crd_schema(kind)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate(obj: dict) -> None:
    """Raise if `obj` is not a valid object of its kind."""
    if obj["kind"] in CRDS:
        # what jsonschema.validate raises, the schema check aside: the most relevant error
        error = jsonschema.exceptions.best_match(crd_validator(obj["kind"]).iter_errors(obj))
        if error is not None:
            raise error
        if obj["kind"] == "LLMInferenceService":
            # The CRD leaves spec.model.lora.adapters unchecked (x-kubernetes-preserve-unknown-fields); each
            # is a model spec (KServe's LLMModelSpec: name, uri), checked as one, strictly.
            model = crd_schema("LLMInferenceService")["properties"]["spec"]["properties"]["model"]
            for adapter in ((obj["spec"].get("model") or {}).get("lora") or {}).get("adapters") or []:
                jsonschema.validate(adapter, model)
                if not adapter.get("name"):
                    raise jsonschema.ValidationError(f"a LoRA adapter needs its name: {adapter}")
    else:
        import kubernetes_validate

        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def pod_specs(obj: dict) -> list[dict]:
    """Every pod spec an object defines (Deployments, jobs, runtimes, InferenceService predictors)."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "containers" in node and isinstance(node["containers"], list):
                found.append(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    if obj["kind"] == "InferenceService":  # the predictor is a pod spec whose container is `model`
        predictor = obj["spec"]["predictor"]
        return [{**predictor, "containers": [{"name": "kserve-container", **predictor["model"]}]}]
    walk(obj.get("spec", {}))
    return found


def assert_restricted(obj: dict) -> None:
    """Restricted Pod Security (https://kubernetes.io/docs/concepts/security/pod-security-standards/):
    non-root, no privilege escalation, all capabilities dropped, RuntimeDefault seccomp, and
    resources on every container (init containers included); every emptyDir size-limited."""
    specs = pod_specs(obj)
    assert specs, f"{obj['kind']} has no pod spec"
    for pod in specs:
        pod_sc = pod.get("securityContext", {})
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            sc = c.get("securityContext", {})
            where = f"{obj['kind']}/{obj['metadata']['name']} container {c['name']}"
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, where
            assert (sc.get("seccompProfile") or pod_sc.get("seccompProfile", {})).get("type") == "RuntimeDefault", where
            if "image" in c:  # a whole container (a runtime patch names only what it changes)
                assert c.get("resources", {}).get("limits", {}).get("memory"), f"{where} has no memory limit"
        for v in pod.get("volumes", []):
            if "emptyDir" in v:
                assert v["emptyDir"].get("sizeLimit"), f"emptyDir {v['name']} has no sizeLimit"
