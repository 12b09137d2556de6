"""One way to serve a model, whatever the backend: `deploy(backend, spec, store, ...) -> Deployed`.

Every backend is a `ServeBackend` (build its objects; deploy and smoke-test), chosen by name in `backend`:

  local       vLLM on loopback from downloaded copies (trainer.serving.local; run_local only)
  kubernetes  a vLLM Deployment and Service (trainer.k8s.vllm)
  kserve      an InferenceService on the project's vLLM ServingRuntime (trainer.k8s.kserve)
  llmisvc     KServe's LLMInferenceService, adapters under spec.model.lora (trainer.k8s.llmisvc)

The backend is chosen here and nowhere else (`backend`: the deploy and deploy-all-trials steps, `python -m
trainer deploy-k8s`, `submit`'s rendering); `deploy` also takes a ServeBackend itself (a test's fake). Every backend serves `spec.name` (the model, or the base beside
`spec.adapters`), with the flags trainer.serving.args.vllm_args builds from the stored model (its chat
template, the tool-call parser read off it, --max-lora-rank from the adapters' configs), waits until
it answers /v1/models, and runs the same OpenAI smoke test on every served name (trainer.serving.client).

The pieces every backend shares are trainer.serving's, which imports no backend: args (the server's
arguments and what is read off the model for them) and client (readiness polling, requests, the
smoke test). This module sits above trainer.serving and trainer.k8s and imports both.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from trainer.chat.types import Message
from trainer.core.errors import UserError
from trainer.k8s import kserve, llmisvc, vllm
from trainer.k8s.vllm import ServeSpec
from trainer.serving.args import lora_rank, stored_has_template, stored_tool_call_parser
from trainer.serving import local
from trainer.serving.client import smoke_outcome, smoke_request

BACKENDS = ("local", "kubernetes", "kserve", "llmisvc")
CLUSTER_BACKENDS = BACKENDS[1:]


@dataclass
class Deployed:
    """What a deploy gives back, the same for every backend."""

    endpoint: str  # the OpenAI base URL (…/v1): in-cluster for the cluster backends
    names: list[str]  # served model names, base first
    results: dict[str, dict[str, Any]]  # per name: ok, reason, reply, latency_s (trainer.serving.client.smoke_test)
    latency_s: float  # the slowest name's smoke-test answer
    reason: str = ""  # the failures, "name: why; ..."
    ready_s: float | None = None  # start (or rollout) until /v1/models answered
    log: str = ""  # the local server's log
    pgid: int | None = None  # a local server left running (keep_serving): stop with kill -- -PGID
    access: str = ""  # cluster backends: the kubectl port-forward command for the user's machine
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def smoke_ok(self) -> bool:
        return all(r["ok"] for r in self.results.values())

    def as_dict(self) -> dict[str, Any]:
        """The result as the cluster backends return it, keys in their order (what `python -m trainer
        deploy-k8s` prints): smoke_ok among them, `log` and `access` only when set."""
        return {
            "endpoint": self.endpoint,
            "names": self.names,
            "ready_s": self.ready_s,
            "smoke_ok": self.smoke_ok,
            "reason": self.reason,
            "latency_s": self.latency_s,
            "results": self.results,
            "pgid": self.pgid,
            **({"log": self.log} if self.log else {}),
            **({"access": self.access} if self.access else {}),
            **self.extra,
        }

    @classmethod
    def from_backend(cls, out: dict[str, Any]) -> Deployed:
        known = {"endpoint", "names", "results", "latency_s", "reason", "ready_s", "log", "pgid", "access"}
        return cls(
            **{k: out[k] for k in known if k in out},
            extra={k: v for k, v in out.items() if k not in known and k != "smoke_ok"},
        )


class ServeBackend(Protocol):
    """What serves a model: `build` renders the objects it would create (nothing contacted: dry runs, `submit`),
    `deploy` serves `spec` and smoke-tests every served name, returning trainer.serving.local.deploy_local's keys
    (endpoint, names, results, latency_s, reason, ...). trainer.k8s.vllm, .kserve and .llmisvc are ones (modules),
    `LocalBackend` another."""

    def build(self, spec: ServeSpec) -> Any: ...

    def deploy(
        self,
        spec: ServeSpec,
        messages: list[Message],
        tools: list | None = None,
        client_configuration: Any = None,
        poll_s: float = 5.0,
    ) -> dict[str, Any]: ...


@dataclass
class LocalBackend:
    """vLLM on loopback from the store's copies of the model and adapters (run_local)."""

    store: Any  # trainer.core.storage.Store
    keep_serving: bool = False  # leave the server running (its pgid in the result)

    def build(self, spec: ServeSpec) -> list:
        return []  # a process on this machine: no objects to render

    def deploy(
        self,
        spec: ServeSpec,
        messages: list[Message],
        tools: list | None = None,
        client_configuration: Any = None,
        poll_s: float = 5.0,
    ) -> dict[str, Any]:
        adapters = {n: str(self.store.get_tree(uri)) for n, uri in spec.adapters.items()}
        return local.deploy_local(
            self.store.get_tree(spec.model_uri),
            spec.name,
            messages,
            tools,
            lora_modules=adapters,
            keep_serving=self.keep_serving,
        )


_CLUSTER: dict[str, ServeBackend] = {"kubernetes": vllm, "kserve": kserve, "llmisvc": llmisvc}


def backend(name: str, store: Any = None, keep_serving: bool = False) -> ServeBackend:
    """The backend called `name` (BACKENDS): the one place that chooses. The local one serves the store's copies."""
    if name == "local":
        if store is None:
            raise ValueError("the local backend serves downloaded copies: it needs the store")
        return LocalBackend(store, keep_serving)
    if name in _CLUSTER:
        return _CLUSTER[name]
    raise UserError(f"deploy backend must be one of {', '.join(BACKENDS)}, got {name!r}")


def deploy(
    serve_with: str | ServeBackend,
    spec,
    store,
    messages: list[Message],
    tools: list | None = None,
    *,
    keep_serving: bool = False,
    client_configuration: Any = None,
    poll_s: float = 5.0,
) -> Deployed:
    """Serve `spec` (a trainer.k8s.vllm.ServeSpec: spec.model_uri as spec.name, each of spec.adapters
    beside it by its own name) with `serve_with` (a name in BACKENDS, or a ServeBackend) and smoke-test every served
    name. The settings read off the stored model and adapters (rank, tool-call parser, chat template) are filled in
    here, for all backends alike; with no `store` (deploy-k8s, a cluster backend) they are the spec's as given.
    `keep_serving` leaves a local server running (cluster servers stay anyway)."""
    chosen = backend(serve_with, store, keep_serving) if isinstance(serve_with, str) else serve_with
    if store is not None:
        dirs = {n: store.get_tree(uri) for n, uri in spec.adapters.items()}  # adapters are small
        spec.max_lora_rank = max([lora_rank(d) for d in dirs.values()] or [16])  # vLLM refuses adapters above it
        spec.tool_call_parser = stored_tool_call_parser(store, spec.model_uri)
        spec.chat_template = stored_has_template(store, spec.model_uri)
    return Deployed.from_backend(chosen.deploy(spec, messages, tools, client_configuration, poll_s))


def smoke_checked(
    backend: str, spec: vllm.ServeSpec, store, eval_path: Path, keep_serving: bool = False
) -> tuple[Deployed, dict[str, Any]]:
    """`deploy` with the smoke request read from the eval split at `eval_path` (its first row that expects a tool
    call, trainer.serving.client.smoke_request), and the verdict on the answers (smoke_outcome): what the deploy
    and deploy-all-trials steps both do."""
    with open(eval_path, encoding="utf-8") as f:
        messages, tools = smoke_request([json.loads(line) for line in f if line.strip()])
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
