"""Kubeflow Model Registry: each trained model as a new version, with its lineage.

Used by the pipeline's register step (components/register.py, where `registry_address` is set),
after the promotion gate let the tuned model through.

The merged model is registered as version `version` (the KFP run name) of the registered
model `name`, its artifact the s3:// URI of the merged weights; the LoRA adapter, when there
is one, is a second artifact of the same version. The version's metadata holds what one needs
to compare runs and trace them back: base model source and revision, dataset URI, every
training and evaluation metric, the KFP run id (and the artifact's model_source_kind="kfp",
model_source_class="pipelinerun", model_source_id=<run id>).

Registering is idempotent: the same run registered again (a retried task) finds its version
and artifacts and changes nothing. A different run that happens to have the same name gets
`<run name>-<run id prefix>`, so two runs never overwrite each other.
The token (when the registry needs one) comes from the environment (REGISTRY_TOKEN, set from a
Kubernetes Secret), never from a parameter.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

from trainer.core import metrics as names
from trainer.core import settings
from trainer.core.errors import UserError, collect

MODEL_FORMAT = ("huggingface", "1")  # a transformers model directory (safetensors), as KServe names it
ADAPTER_FORMAT = ("peft-lora", "1")


@dataclass
class Registration:
    address: str  # http(s)://host[:port] of the registry's REST API
    name: str  # the registered model
    version: str  # the KFP run name
    model_uri: str  # merged weights, s3://
    run_id: str = ""  # KFP run id
    adapter_uri: str = ""
    author: str = "llm-finetune pipeline"
    description: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def problems(self) -> list[str]:
        p = []
        if bad := settings.url_problem(self.address):
            p.append(
                f"registry_address {self.address!r} must be an http:// or https:// URL ({bad}), e.g. "
                "http://model-registry-service.kubeflow.svc.cluster.local:8080"
            )
        if not self.name:
            p.append("the registered model name is empty (it is served_model_name)")
        if not self.version:
            p.append("the model version is empty (it is the KFP run name)")
        for what, uri in (("model", self.model_uri), ("adapter", self.adapter_uri)):
            if uri and not uri.startswith("s3://"):
                p.append(f"{what} URI {uri!r} must be s3://")
        return p


def lineage(
    base_source: str,
    base_revision: str,
    dataset_uri: str,
    train_metrics: dict[str, float],
    eval_metrics: dict[str, float],
    run_id: str,
    **extra: Any,
) -> dict[str, Any]:
    """Version metadata: flat str/int/float/bool values, as the registry's custom properties hold them.
    Non-finite metrics are left out (the registry stores doubles; NaN is not comparable)."""
    meta: dict[str, Any] = {
        "base_model_source": base_source,
        "base_model_revision": base_revision or "",
        "dataset_uri": dataset_uri,
        "kfp_run_id": run_id,
    }
    for stage, values in (("train", train_metrics), ("eval", eval_metrics)):
        meta.update(
            {
                names.registry(stage, k): float(v)
                for k, v in values.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            }
        )
    meta.update({k: v for k, v in extra.items() if isinstance(v, (str, int, float, bool))})
    return meta


# The registry's REST list of registered models: what every Kubeflow Model Registry answers (JSON).
PROBE_PATH = "/api/model_registry/v1alpha3/registered_models?pageSize=1"
PROBE_TIMEOUT_S = 10.0


def reach_problem(address: str, token: str | None = None, timeout: float | None = None) -> str | None:
    """One GET of the registry's model list, before any training: a registry found unreachable only
    after hours of training loses the run's registration. None when it answers as a Model Registry.

    A 401/403 without a token is an answer (the register step gets the token from its Secret)."""
    import http.client
    import json
    import urllib.error
    import urllib.request

    timeout = PROBE_TIMEOUT_S if timeout is None else timeout
    token = token if token is not None else os.environ.get("REGISTRY_TOKEN") or ""
    url = address.rstrip("/") + PROBE_PATH
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # connect and each read
            json.load(resp)
        return None
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            return (
                None
                if not token
                else (
                    f"the model registry at {address} refused the token ({err.code} {err.reason}): renew the token in "
                    "the registry Secret"
                )
            )
        return (
            f"registry_address={address!r} answered {err.code} {err.reason} to GET {PROBE_PATH}: not a Kubeflow "
            "Model Registry REST API there; check the address and port (e.g. http://model-registry-service."
            "kubeflow.svc.cluster.local:8080), or leave it empty to skip registration"
        )
    except (ValueError, http.client.HTTPException):
        return (
            f"registry_address={address!r} answered GET {PROBE_PATH} with something other than JSON: not a "
            "Kubeflow Model Registry REST API there; check the address and port"
        )
    except OSError as err:  # URLError, refused, DNS, timeouts
        reason = getattr(err, "reason", None) or err or "no answer"
        return (
            f"cannot reach the model registry at {address} within {timeout:.0f}s ({str(reason)[:200]}): check "
            "registry_address, or leave it empty to skip registration (it is checked now, not after training)"
        )


def plan(reg: Registration) -> list[str]:
    """The calls `register` makes, in words (what --dry-run prints)."""
    collect(reg.problems(), what="invalid model registration")
    lines = [
        f"model registry {reg.address}: find or create registered model {reg.name!r}",
        f"  create version {reg.version!r} (author {reg.author!r}) with {len(reg.metadata)} metadata "
        f"properties: {', '.join(sorted(reg.metadata))}",
        f"  add artifact {reg.name!r} uri={reg.model_uri} format={'/'.join(MODEL_FORMAT)} "
        f"source=kfp/pipelinerun/{reg.run_id or '<run id>'}",
    ]
    if reg.adapter_uri:
        lines.append(
            f"  add artifact {reg.name + '-adapter'!r} uri={reg.adapter_uri} format={'/'.join(ADAPTER_FORMAT)}"
        )
    return lines


def connect(address: str, author: str, token: str | None = None):
    """A model_registry.ModelRegistry client; unreachable or refusing registries become UserError."""
    from model_registry import ModelRegistry

    token = token if token is not None else os.environ.get("REGISTRY_TOKEN") or None
    try:
        with warnings.catch_warnings():  # "token missing": fine for a registry without auth; errors say so
            warnings.simplefilter("ignore", UserWarning)
            return ModelRegistry(address, author=author, user_token=token, log_level=logging.ERROR)
    except Exception as err:  # noqa: BLE001 - aiohttp / client errors; the message names the fix
        raise UserError(
            f"cannot use the model registry at {address}: {type(err).__name__}: {err}; check "
            f"registry_address (and the token in the registry Secret when the registry needs one)"
        ) from None


def register(reg: Registration, client=None) -> dict[str, Any]:
    """Register (or find, when this run already did) the model version and its artifacts.

    Returns {"action": "registered" | "already registered", "name", "version", "version_id"}.
    """
    from model_registry.types import ModelArtifact

    collect(reg.problems(), what="invalid model registration")
    client = client or connect(reg.address, reg.author)
    known = client.get_registered_model(reg.name) is not None
    version = reg.version
    mv = client.get_model_version(reg.name, version) if known else None
    if mv is not None and (mv.custom_properties or {}).get("kfp_run_id") != reg.run_id:
        version = f"{reg.version}-{reg.run_id[:8]}"  # another run with the same name: keep both
        mv = client.get_model_version(reg.name, version)
    source = dict(
        model_source_kind="kfp",
        model_source_class="pipelinerun",
        model_source_id=reg.run_id or None,
        model_source_name=reg.version,
    )
    action = "registered"
    if mv is None:
        client.register_model(
            reg.name,
            reg.model_uri,
            model_format_name=MODEL_FORMAT[0],
            model_format_version=MODEL_FORMAT[1],
            version=version,
            author=reg.author,
            version_description=reg.description or None,
            metadata=reg.metadata,
            **source,
        )
        mv = client.get_model_version(reg.name, version)
    elif (art := client.get_model_artifact(reg.name, version)) is None:  # an interrupted registration
        client.async_runner(
            client._api.upsert_model_version_artifact(
                ModelArtifact(
                    name=reg.name,
                    uri=reg.model_uri,
                    model_format_name=MODEL_FORMAT[0],
                    model_format_version=MODEL_FORMAT[1],
                    **source,
                ),
                mv.id,
            )
        )
    elif art.uri != reg.model_uri:
        raise UserError(
            f"version {version!r} of {reg.name!r} already holds {art.uri}, not {reg.model_uri}; "
            "registry versions are immutable: give the run another name"
        )
    else:
        action = "already registered"
    _add_adapter(client, reg, mv.id, ModelArtifact)
    return {"action": action, "name": reg.name, "version": version, "version_id": mv.id}


def _add_adapter(client, reg: Registration, version_id: str, artifact_type) -> None:
    """The adapter as a second artifact of the same version, unless this run already added it (a
    retried task): the registry creates an artifact for a body without an id, and a second one of
    the same name in a version is a conflict, so it is looked up by name first."""
    if not reg.adapter_uri:
        return
    name = f"{reg.name}-adapter"
    existing = client.async_runner(client._api.get_model_artifact_by_params(name, version_id))
    if existing is not None:
        if existing.uri != reg.adapter_uri:
            raise UserError(
                f"version {reg.version!r} of {reg.name!r} already holds adapter {existing.uri}, not "
                f"{reg.adapter_uri}; registry versions are immutable: give the run another name"
            )
        return
    client.async_runner(
        client._api.upsert_model_version_artifact(
            artifact_type(
                name=name,
                uri=reg.adapter_uri,
                model_format_name=ADAPTER_FORMAT[0],
                model_format_version=ADAPTER_FORMAT[1],
                model_source_kind="kfp",
                model_source_class="pipelinerun",
                model_source_id=reg.run_id or None,
                model_source_name=reg.version,
            ),
            version_id,
        )
    )
