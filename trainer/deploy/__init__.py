"""One way to serve a model, whatever the backend: `deploy(backend, spec, store, ...) -> Deployed`.

Every backend is a `trainer.deploy.base.ServeBackend` (build its objects; deploy and smoke-test), one module each,
named in the `BACKENDS` table and chosen by name in `backend`:

  local       vLLM on loopback from downloaded copies (local.py over trainer.serving.local; run_local only)
  kubernetes  a vLLM Deployment and Service (deployment.py)
  kserve      an InferenceService on the project's vLLM ServingRuntime (kserve.py)
  llmisvc     KServe's LLMInferenceService, adapters under spec.model.lora (llmisvc.py)

The backend is chosen here and nowhere else (`backend`: the deploy and deploy-all-trials steps, `python -m
trainer deploy-k8s`, `submit`'s rendering); `deploy` also takes a ServeBackend itself (a test's fake). Every backend serves `spec.name` (the model, or the base beside
`spec.adapters`), with the flags trainer.serving.args.vllm_args builds from the stored model (its chat
template, the tool-call parser read off it, --max-lora-rank from the adapters' configs), waits until
it answers /v1/models, and runs the same OpenAI smoke test on every served name (trainer.serving.client).

The pieces every backend shares are trainer.serving's, which imports no backend: args (the server's
arguments and what is read off the model for them) and client (readiness polling, requests, the
smoke test); what the cluster ones share beyond that is server.py's (the image, the smoke test through a reached
pod) and trainer.k8s's (pod specs, the API calls). This package sits above trainer.serving and trainer.k8s.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from trainer import data
from trainer.chat.types import Message
from trainer.core.errors import UserError
from trainer.deploy.base import Deployed, ServeBackend, ServeSpec
from trainer.deploy.deployment import Deployment
from trainer.deploy.kserve import KServe
from trainer.deploy.llmisvc import LLMInferenceService
from trainer.deploy.local import LocalBackend
from trainer.serving.args import lora_rank, stored_has_template, stored_tool_call_parser
from trainer.serving.client import smoke_outcome, smoke_request

BACKENDS: dict[str, type[ServeBackend]] = {
    "local": LocalBackend,
    "kubernetes": Deployment,
    "kserve": KServe,
    "llmisvc": LLMInferenceService,
}
CLUSTER_BACKENDS = tuple(name for name, kind in BACKENDS.items() if kind.on_cluster)


def backend(name: str, store: Any = None, keep_serving: bool = False) -> ServeBackend:
    """The backend called `name` (BACKENDS): the one place that chooses. The local one serves the store's copies."""
    if name not in BACKENDS:
        raise UserError(f"deploy backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    return BACKENDS[name](store=store, keep_serving=keep_serving)


def deploy(
    serve_with: str | ServeBackend,
    spec: ServeSpec,
    store,
    messages: list[Message],
    tools: list | None = None,
    *,
    keep_serving: bool = False,
    client_configuration: Any = None,
    poll_s: float = 5.0,
) -> Deployed:
    """Serve `spec` (spec.model_uri as spec.name, each of spec.adapters beside it by its own name) with `serve_with`
    (a name in BACKENDS, or a ServeBackend) and smoke-test every served name. The settings read off the stored model
    and adapters (rank, tool-call parser, chat template) are filled in here, for all backends alike; with no `store`
    (deploy-k8s, a cluster backend) they are the spec's as given. `keep_serving` leaves a local server running
    (cluster servers stay anyway)."""
    chosen = backend(serve_with, store, keep_serving) if isinstance(serve_with, str) else serve_with
    if store is not None:
        dirs = {n: store.get_tree(uri) for n, uri in spec.adapters.items()}  # adapters are small
        spec.max_lora_rank = max([lora_rank(d) for d in dirs.values()] or [16])  # vLLM refuses adapters above it
        spec.tool_call_parser = stored_tool_call_parser(store, spec.model_uri)
        spec.chat_template = stored_has_template(store, spec.model_uri)
    return chosen.deploy(spec, messages, tools, client_configuration, poll_s)


def smoke_checked(
    backend: str, spec: ServeSpec, store, eval_path: Path, keep_serving: bool = False
) -> tuple[Deployed, dict[str, Any]]:
    """`deploy` with the smoke request read from the eval split at `eval_path` (its first row that expects a tool
    call, trainer.serving.client.smoke_request), and the verdict on the answers (smoke_outcome): what the deploy
    and deploy-all-trials steps both do."""
    messages, tools = smoke_request(data.read_delivered(eval_path))  # the delivered rows, read as training reads them
    out = deploy(backend, spec, store, messages, tools, keep_serving=keep_serving)
    return out, smoke_outcome(out.results)


def smoke_metrics(out: Deployed, outcome: dict[str, Any]) -> dict[str, float]:
    """The steps' smoke metrics: smoke_ok (1 only when every served name answered a well-formed tool call),
    smoke_server_ok (1 when the server kept to the OpenAI protocol: smoke_ok 0 beside it is the model's answer,
    undertrained), smoke_latency_s, and vllm_ready_s where the backend measured it."""
    metrics = {
        "smoke_ok": float(outcome["smoke_ok"]),
        "smoke_server_ok": float(outcome["server_ok"]),
        "smoke_latency_s": out.latency_s,
    }
    if out.ready_s is not None:
        metrics["vllm_ready_s"] = out.ready_s
    return metrics


def smoke_end(out: Deployed, outcome: dict[str, Any], step: str) -> None:
    """The steps' last lines: how to stop a server left running, the verdict's warning; a server that broke the
    OpenAI protocol is no deployment: exit 1 naming `step` (after the metrics were logged)."""
    if out.pgid:
        print(f"still serving; stop with: kill -- -{out.pgid}  (log: {out.log})")
    if outcome["warning"]:
        print(outcome["warning"], flush=True)
    if outcome["error"]:
        print(f"error: {step}: {outcome['error']}", file=sys.stderr, flush=True)
        sys.exit(1)
