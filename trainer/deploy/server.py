"""The vLLM server every cluster backend runs: its image for the accelerator, its arguments (one function for local and
cluster serving, trainer.serving.args.vllm_args), KServe's shared names, and the last step of every cluster deploy
(the OpenAI smoke test where this process reaches the server)."""

from __future__ import annotations

import time
from typing import ContextManager

from trainer.chat.types import Message
from trainer.core import settings
from trainer.deploy.base import Deployed, ServeSpec
from trainer.k8s.podspec import accelerators
from trainer.serving import client
from trainer.serving.args import vllm_args

ROCM_RESOURCE = "amd.com/gpu"
KSERVE_SERVICE_ACCOUNT = (
    "llm-finetune-kserve"  # KServe's and LLMInferenceService's: carries the S3 Secret (pipelines.manifests)
)


def image(spec: ServeSpec) -> str:
    """The vLLM image for the accelerator: CUDA builds cannot drive AMD GPUs, and neither starts
    without a GPU (serve_gpus=0 or no accelerator_resource: vLLM's CPU build)."""
    if spec.vllm_image:
        return spec.vllm_image
    if not accelerators(spec.cluster, spec.gpus):
        return settings.get("VLLM_CPU_IMAGE")
    return settings.get("VLLM_ROCM_IMAGE" if spec.cluster.accelerator_resource == ROCM_RESOURCE else "VLLM_IMAGE")


# vLLM's CPU backend reserves --gpu-memory-utilization (0.92) of the NODE's memory for the KV cache, not of the
# pod's limit: on a node larger than the limit it is OOM-killed, on a busy one it refuses to start ("Available memory
# on node 0 ... is less than desired CPU memory utilization", seen in the CPU container, 2026-12-01). A CPU pod
# sizes the cache from its own limit instead: a quarter of it, at most vLLM's former CPU default of 4 GiB.
CPU_KV_CACHE_MAX = 4 << 30


def cpu_kv_cache_bytes(spec: ServeSpec) -> int:
    """The KV cache of a server on CPU (no accelerator), from the container's memory limit; 0 on an accelerator."""
    from kubernetes.utils import parse_quantity

    if accelerators(spec.cluster, spec.gpus):
        return 0
    return int(min(CPU_KV_CACHE_MAX, parse_quantity(spec.cluster.memory) / 4))


def server_args(
    spec: ServeSpec, served_name: str, model_path: str, port: int, adapters: dict[str, str] | None = None
) -> list[str]:
    """vLLM's arguments for this deploy, from trainer.serving.args.vllm_args: one function for local and
    cluster serving, so their flags (tool-call parser, LoRA, tensor parallelism) cannot drift."""
    return vllm_args(
        model_path,
        served_name,
        host="0.0.0.0",
        port=port,
        lora_modules=adapters or None,
        max_lora_rank=spec.max_lora_rank if adapters else 0,
        max_model_len=spec.max_model_len,
        tensor_parallel_size=max(spec.gpus, 1),
        tool_call_parser=spec.tool_call_parser,
        chat_template=f"{model_path}/chat_template.jinja" if spec.chat_template else "",
        kv_cache_bytes=cpu_kv_cache_bytes(spec),
    )


def split_args(
    spec: ServeSpec, served_name: str, model_path: str, port: int, adapters: dict[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """(what every deploy shares, what this deploy adds): the KServe runtime holds the first,
    the InferenceService the second. vllm_args puts what depends on the model and the deploy
    from --tool-call-parser on: one runtime serves a Llama and a Qwen model side by side."""
    full = server_args(spec, served_name, model_path, port, adapters)
    cut = full.index("--tool-call-parser")
    return full[:cut], full[cut:]


def smoke_reached(
    reached: ContextManager[str],
    url: str,
    access: str,
    spec: ServeSpec,
    messages: list[Message],
    tools: list | None,
    ready_timeout_s: float,
    t0: float,
    action: str,
) -> Deployed:
    """Every cluster backend's last step: smoke_all where this process reaches the server
    (`reached`: trainer.k8s.reach.service or .pod), then one line on where clients reach it: `url`
    from a pod of the cluster, `access` (a `kubectl port-forward` command) from the user's machine.
    Returns smoke_all's result with `url` as the endpoint, `access`, and the objects' `action` (created, replaced)."""
    with reached as here:
        out = smoke_all(here, spec, messages, tools, ready_timeout_s, t0)
    print(f"in the cluster: {url}/v1; from your machine: {access}", flush=True)
    out.endpoint, out.access, out.extra = f"{url}/v1", access, {"action": action}
    return out


def smoke_all(
    url: str, spec: ServeSpec, messages: list[Message], tools: list | None, ready_timeout_s: float, t0: float
) -> Deployed:
    """Wait for /v1/models, then the same OpenAI smoke test as locally for every served name: the
    tuned model (each adapter when there are some, else the model) must answer with a tool call."""
    print(
        f"waiting for {', '.join([spec.name, *spec.adapters])} on /v1/models (at most {ready_timeout_s:.0f} s)",
        flush=True,
    )
    client.wait_ready(url, timeout=ready_timeout_s)
    ready_s = time.monotonic() - t0
    names = [spec.name, *spec.adapters]
    tuned = set(spec.adapters) or {spec.name}
    results = {n: client.smoke_test(url, n, messages, tools, require_tool_call=n in tuned) for n in names}
    return Deployed(
        endpoint=f"{url}/v1",
        names=names,
        results=results,
        latency_s=max(r["latency_s"] for r in results.values()),
        reason="; ".join(f"{n}: {r['reason']}" for n, r in results.items() if not r["ok"]),
        ready_s=ready_s,
    )


def not_ready_lines(kind: str, name: str, namespace: str, timeout_s: float, resource: str, pod: str):
    """(the progress line, the failure message) of a KServe object's readiness wait, from its conditions."""

    def waiting(seconds: float, why: list[str]) -> str:
        return (
            f"  {kind} {namespace}/{name} not Ready after {seconds:.0f} s (limit {timeout_s:.0f} s): "
            f"{'; '.join(c for c in why if '=True' not in c) or 'no status yet'}"
        )

    def failed(why: list[str]) -> str:
        return (
            f"{kind} {namespace}/{name} not Ready after {timeout_s:.0f}s ({'; '.join(why) or 'no status yet'}); "
            f"see `kubectl -n {namespace} describe {resource}/{name}` and {pod}'s storage-initializer log"
        )

    return waiting, failed
