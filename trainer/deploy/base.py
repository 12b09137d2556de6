"""The serving contract: what every backend implements (`ServeBackend`), what it is given (`ServeSpec`) and what
it gives back (`Deployed`, the smoke test's result per served name).

One module per backend beside this one (local, deployment, kserve, llmisvc); trainer.deploy.BACKENDS names them.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trainer.chat.types import Message
from trainer.core.errors import collect
from trainer.k8s import rules
from trainer.k8s.podspec import ClusterSpec
from trainer.serving.args import parse_loras


@dataclass
class ServeSpec:
    name: str  # Deployment / Service name, also the served model name
    model_uri: str
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    gpus: int = 1  # > 1: tensor parallelism over that many GPUs of one node
    replicas: int = 1
    vllm_image: str = ""  # empty: settings VLLM_IMAGE, VLLM_ROCM_IMAGE for amd.com/gpu, VLLM_CPU_IMAGE for no GPU
    adapters: dict[str, str] = field(default_factory=dict)  # served name -> s3:// adapter URI
    max_lora_rank: int = 16  # the largest adapter rank (vLLM refuses adapters above its limit)
    max_model_len: int = 0  # 0: the model's own context length
    rollout_timeout_s: int = 1800
    # The model's tool-call format (trainer.serving.args.stored_tool_call_parser reads it off the chat template).
    tool_call_parser: str = "hermes"
    # The tree carries chat_template.jinja (trainer.chat.templates): vLLM renders with that file, as training did.
    chat_template: bool = False

    def problems(self) -> list[str]:
        p = rules.served_model_name(self.name, "served_model_name")
        if not str(self.model_uri).startswith("s3://"):  # the pod's fetch step reads the bucket only
            p.append(
                f"model_uri={self.model_uri!r} must be an s3:// URI from deliver-model or merge, "
                "e.g. s3://llm-finetune/models/sha256-..."
            )
        p += rules.non_negative_int(self.gpus, "serve_gpus")
        p += rules.non_negative_int(self.replicas, "replicas", 1)
        for name, uri in self.adapters.items():
            # Served names and paths only, no Kubernetes object: a Service name's letters (they reach a
            # shell in the fetch step) without its 63-character limit, so `<name>-trial-11` of a
            # served_model_name that passed (`<name>-base` within 63) is fine too.
            p += rules.dns1035_label(name, "adapter name", max_len=rules.DNS1123_SUBDOMAIN_MAX)
            if not str(uri).startswith("s3://"):
                p.append(f"adapter {name!r}: {uri!r} must be an s3:// URI (deliver it first)")
        # vLLM's parser names: lower-case letters, digits, '_' and '-' (granite-20b-fc); a letter first, so
        # that the value is never read as a flag.
        if not re.fullmatch(r"[a-z][a-z0-9_-]*", str(self.tool_call_parser)):
            p.append(
                f"tool_call_parser={self.tool_call_parser!r} is not a vLLM tool-call parser name: e.g. hermes "
                "(<tool_call> format: the built-in model, Qwen), llama3_json (Llama 3.x), mistral"
            )
        if len(set(self.adapters) | {self.name}) != len(self.adapters) + 1:
            p.append(f"adapter names must differ from each other and from the served model name {self.name!r}")
        return p + self.cluster.kubernetes_problems()


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
    stopped: bool = False  # the server ended with the deploy (a local one not kept): its endpoint answers no more
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. a cluster backend's `action` (created / replaced)

    @property
    def smoke_ok(self) -> bool:
        return all(r["ok"] for r in self.results.values())

    def as_dict(self) -> dict[str, Any]:
        """The result as `python -m trainer deploy-k8s` prints it, keys in this order: smoke_ok among them, `log`
        and `access` only when set."""
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
    def from_dict(cls, out: dict[str, Any]) -> Deployed:
        """From trainer.serving.local.deploy_local's keys (serving/ sits below this package and returns a dict)."""
        known = {"endpoint", "names", "results", "latency_s", "reason", "ready_s", "log", "pgid", "access"}
        return cls(
            **{k: out[k] for k in known if k in out},
            extra={k: v for k, v in out.items() if k not in known and k != "smoke_ok"},
        )


@dataclass
class ServeBackend(ABC):
    """What serves a model: `build` renders the objects it would create (nothing contacted: dry runs, `submit`),
    `deploy` serves `spec` and smoke-tests every served name."""

    on_cluster: ClassVar[bool] = True  # it creates Kubernetes objects: the cluster settings must pass the API rules
    store: Any = None  # trainer.core.storage.Store: the local backend serves its downloaded copies
    keep_serving: bool = False  # the local backend leaves its server running (cluster servers stay anyway)

    @abstractmethod
    def build(self, spec: ServeSpec) -> list:
        """The objects a deploy of `spec` creates, not yet sent anywhere (validates `spec` first)."""

    @abstractmethod
    def deploy(
        self,
        spec: ServeSpec,
        messages: list[Message],
        tools: list | None = None,
        client_configuration: Any = None,
        poll_s: float = 5.0,
    ) -> Deployed:
        """Serve `spec` (spec.model_uri as spec.name, each of spec.adapters beside it by its name), wait until it
        answers /v1/models and smoke-test every served name with `messages` and `tools`."""


def parse_adapters(pairs: list[str]) -> dict[str, str]:
    """`NAME=s3://...` strings -> {name: uri}; every malformed one reported at once."""
    out, problems = parse_loras(pairs, "--adapter", "NAME=s3://bucket/adapters/... (e.g. trial-a=s3://...)")
    collect(problems, what="invalid --adapter")
    return out


def trial_adapters(name: str, uris: list[str]) -> dict[str, str]:
    """Served names for a sweep's adapters, in trial order: `name`-trial-0, `name`-trial-1, ..."""
    return {f"{name}-trial-{i}": uri for i, uri in enumerate(uris)}
