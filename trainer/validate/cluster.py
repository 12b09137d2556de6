"""Cluster settings against the Kubernetes API server's rules (trainer.k8s.rules through ClusterSpec),
and what only a cluster run needs."""

from __future__ import annotations

import os
from typing import Any

from trainer import deploy, launch
from trainer.core import settings
from trainer.config import sources
from trainer.chat import templates
from trainer.k8s import rules
from trainer.k8s.podspec import CLEANUP
from trainer.serving.args import served_name_problems
from trainer.validate.values import DEFAULTS


def cluster_problems(params: dict[str, Any]) -> list[str]:
    """Launcher and deploy backend names, and, when either runs on Kubernetes, every cluster
    setting against the API server's rules (trainer.k8s.rules, through ClusterSpec)."""
    problems = []
    if params["launcher"] not in launch.LAUNCHERS:
        problems.append(f"launcher must be one of {tuple(launch.LAUNCHERS)}, got {params['launcher']!r}")
    if params["deploy_backend"] not in deploy.BACKENDS:
        problems.append(
            f"deploy_backend must be 'local', 'kubernetes' (vLLM Deployment), 'kserve' "
            f"(InferenceService) or 'llmisvc' (LLMInferenceService), got {params['deploy_backend']!r}"
        )
    on_cluster = params["deploy_backend"] in deploy.CLUSTER_BACKENDS
    if params["cleanup"] not in CLEANUP:  # also for a local run, so that it and submit accept the same values
        problems.append(f"cleanup must be one of {CLEANUP}, got {params['cleanup']!r}")
    if params["launcher"] in launch.CLUSTER_LAUNCHERS or on_cluster:
        problems += launch.cluster_from_params(params).kubernetes_problems()  # topology is checked above
    problems += rules.non_negative_int(params["eval_gpus"], "eval_gpus")
    if params["eval_gpus"]:
        problems += rules.resource_name(params["eval_accelerator_type"], "eval_accelerator_type")
    problems += rules.node_selector(params["eval_node_selector"], "eval_node_selector")
    problems += rules.tolerations(params["eval_tolerations"], "eval_tolerations")
    address = params["registry_address"]
    if address and (not isinstance(address, str) or (bad := settings.url_problem(address))):
        problems.append(
            f"registry_address={address!r} must be an http:// or https:// URL"
            f"{f' ({bad})' if isinstance(address, str) else ''}, e.g. "
            "http://model-registry-service.kubeflow.svc.cluster.local:8080 (empty skips registration)"
        )
    # vllm_image with credentials is refused by type_problems and reset to the default by now
    problems += _image_problems(params["vllm_image"], "vllm_image", "vllm/vllm-openai:v0.32.0")
    problems += environment_image_problems()
    if on_cluster and not served_name_problems(params["served_model_name"]):  # else reported once, above
        # The objects' names: `<name>-base` beside adapters; KServe's predictor host adds the namespace.
        namespace = params["namespace"] if not rules.dns1123_label(params["namespace"], "namespace") else ""
        problems += rules.deploy_name(
            params["served_model_name"],
            params["deploy_backend"],
            namespace,
            params["serve_adapters"] is True or params["deploy_all_trials"] is True,
        )
    return problems


def environment_image_problems() -> list[str]:
    """FINETUNE_IMAGE and VLLM_IMAGE from the environment, which every pod spec we render takes as they are: the
    pipelines' validation and the CLIs that render pods (trainer launch-k8s, deploy-k8s) ask the same."""
    problems = []
    for variable in ("FINETUNE_IMAGE", "VLLM_IMAGE"):
        if os.environ.get(variable):
            problems += _image_problems(
                os.environ[variable], f"environment variable {variable}", settings.SETTING_DEFAULTS[variable]
            )
    return problems


def _image_problems(image: str, what: str, example: str) -> list[str]:
    """An image reference by the registry's grammar, then pinned by a tag that is not :latest ('' asks nothing)."""
    return rules.pinned_image(image, what, example) if image else []


def on_cluster_problems(params: dict[str, Any]) -> list[str]:
    """What a run on this machine accepts but a run on a cluster cannot use (submit, and the
    validate-params step when it runs in a cluster pod)."""
    problems = []
    for what in ("model", "dataset"):
        source = params.get(f"{what}_source", DEFAULTS[f"{what}_source"])
        names = sources.dataset_parts(source) if what == "dataset" else [source] if isinstance(source, str) else []
        for name in names:
            if name.strip() and sources.looks_local(name):  # empty: said on its own
                problems.append(
                    f"{what}_source {name!r} is a path on this machine, which the cluster cannot read: "
                    f"deliver it first (python -m trainer deliver-{what} ... with S3_ENDPOINT at the "
                    "cluster's MinIO) and pass the printed s3:// URI"
                )
    template = params.get("chat_template", templates.MODEL)
    if isinstance(template, str) and templates.is_local(template) and not templates.spec_problems(template, False):
        problems.append(
            f"chat_template {template!r} is a file on this machine, which the cluster cannot read: upload "
            "it to the run's bucket (mc cp FILE minio/BUCKET/templates/) and pass its s3:// URI"
        )
    bfcl_source = params.get("bfcl_source") or ""
    if isinstance(bfcl_source, str) and bfcl_source.strip() and not bfcl_source.strip().startswith("s3://"):
        problems.append(
            f"bfcl_source {bfcl_source.strip()!r} is a path on this machine, which the cluster cannot "
            "read: upload the wheel to the run's bucket (mc cp bfcl_eval-....whl minio/BUCKET/uploads/) "
            "and pass its s3:// URI, or leave bfcl_source empty to fetch the wheel from the package index"
        )
    if params.get("eval_engine") == "vllm" and (
        not params.get("eval_gpus")
        or params.get("eval_accelerator_type", DEFAULTS["eval_accelerator_type"]) != "nvidia.com/gpu"
    ):
        problems.append(
            "eval_engine=vllm serves the models inside the evaluate pod with the CUDA vLLM of its image "
            "(docker/Dockerfile.eval), which needs an NVIDIA GPU: set eval_gpus=1 (eval_accelerator_type "
            "nvidia.com/gpu), or use eval_engine=auto or hf (HF generate, calls read with the serving parser)"
        )
    if params.get("launcher", DEFAULTS["launcher"]) == "local":
        problems.append(
            "launcher=local would train inside one pipeline pod; use launcher=trainjob (Kubeflow Trainer v2) "
            "or launcher=pytorchjob (Training Operator v1) on a cluster"
        )
    if params.get("deploy_backend", DEFAULTS["deploy_backend"]) == "local":  # the default, for run_local
        problems.append(
            "deploy_backend=local serves inside the deploy step's own pod, on its CPU, and the server ends with "
            "the step: no endpoint would be left after training; on a cluster use deploy_backend=kubernetes (a vLLM "
            "Deployment and Service), kserve (an InferenceService) or llmisvc (an LLMInferenceService)"
        )
    if params.get("keep_serving") is True:  # the local server would end with its pod
        problems.append(
            "keep_serving=true keeps a server on the machine of a local run only; on a cluster use "
            "deploy_backend=kubernetes, kserve or llmisvc for a server that stays up"
        )
    # In a pod (the validate-params step) the run's own namespace is known: see run_namespace_problems.
    return problems + run_namespace_problems(params, rules.pod_namespace())


def run_namespace_problems(params: dict[str, Any], run_namespace: str) -> list[str]:
    """KServe's predictor host name in `run_namespace` ('' when unknown: no problem), for
    namespace="": such a deploy goes into the run's own namespace (the profile's), which the
    validate-params pod and a multi-user submit know, but pipeline_problems does not."""
    name = params.get("served_model_name", DEFAULTS["served_model_name"])
    side_by_side = params.get("serve_adapters") is True or params.get("deploy_all_trials") is True
    if (
        not run_namespace
        or params.get("deploy_backend") != "kserve"
        or params.get("namespace")
        or rules.deploy_name(name, "kserve", "", side_by_side)
    ):  # the last: cluster_problems said it
        return []
    return rules.deploy_name(name, "kserve", run_namespace, side_by_side)
