"""Evaluation through vLLM's OpenAI server, started as deploy starts it, an evaluation engine (`VllmEngine`): which
engine answers (`choose_engine`), which servers answer for base and tuned (`server_plans`), and their answers and
losses."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from trainer.chat.types import Prediction, Row, ToolCall
from trainer.chat.calls import arguments_or_raw
from trainer.chat.messages import openai_messages
from trainer.chat.turns import target_index
from trainer.evaluate import losses
from trainer.evaluate.base import CONCURRENCY, Answers, Asked, Engine
from trainer.serving import client, local


# eval_engine=auto serves through vLLM from this many parameters up: below it HF generate on the
# demo's 0.9M-parameter model takes seconds, less than a vLLM server's start (~35 s on 2 cores).
VLLM_FROM_PARAMS = 20_000_000


def vllm_cpu_build() -> bool:
    """The installed vLLM is its CPU build (vllm-cpu: run_local's)."""
    import importlib.metadata

    try:
        importlib.metadata.distribution("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def vllm_runs_here() -> bool:
    """vLLM is installed and can start here: its CPU build, or the CUDA build (the evaluate
    image, docker/Dockerfile.eval) with a GPU."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    if vllm_cpu_build():
        return True
    import torch

    return torch.cuda.is_available()


def choose_engine(engine: str, model_dir: Path) -> str:
    """`auto` -> vllm where vLLM can run (`vllm_runs_here`) and the model is not tiny, else hf."""
    if engine != "auto":
        return engine
    if not vllm_runs_here():
        return "hf"
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    hidden, layers = getattr(config, "hidden_size", 0) or 0, getattr(config, "num_hidden_layers", 0) or 0
    vocab = getattr(config, "vocab_size", 0) or 0
    approx = 12 * layers * hidden * hidden + vocab * hidden  # decoder blocks + embedding
    return "vllm" if approx >= VLLM_FROM_PARAMS else "hf"


def _served_lora(tuned_dir: Path) -> bool:
    """vLLM loads this output as a LoRA adapter beside its base (not a full model, no trained
    embeddings: vLLM refuses modules_to_save; not DoRA, which vLLM refuses; not QLoRA, whose base
    is the de-quantized one, not the base vLLM would load)."""
    from trainer.models.model import BASE_QUANTIZATION  # imports torch: here, as in generation.load

    config = Path(tuned_dir) / "adapter_config.json"
    if not config.is_file() or (Path(tuned_dir) / BASE_QUANTIZATION).is_file():
        return False
    settings = json.loads(config.read_text())
    return not settings.get("modules_to_save") and not settings.get("use_dora")


def server_plans(model_dir: Path, tuned_dir: Path) -> list[tuple[Path, dict[str, str], tuple[str, ...]]]:
    """The vLLM servers that answer for base and tuned, one after the other: (model directory,
    {served name: adapter directory}, the names it answers for). One server with the adapter
    beside the base where vLLM can load it; else, and on vLLM's CPU build, the base alone, then
    the tuned model merged. The CPU build's LoRA path reads prompt log-probabilities (the eval
    loss) one request at a time -- a batch of them kills its engine (bgmv_shrink sizes by
    requests, not tokens; vLLM 0.32) -- and at ~4 s a 520-token row against ~1 s for the base
    (SmolLM2-135M, 2 cores): a second server start and a merge cost less."""
    if _served_lora(tuned_dir) and not vllm_cpu_build():
        return [(model_dir, {"tuned": str(tuned_dir)}, ("base", "tuned"))]
    return [(model_dir, {}, ("base",)), (tuned_dir, {}, ("tuned",))]


def _reply(resp: dict[str, Any]) -> Prediction:
    message = (resp.get("choices") or [{}])[0].get("message") or {}
    calls: list[ToolCall] = []
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function") or {}
        # text that is not JSON kept as text: no expected call equals it
        # a call without a name stays so: scoring names it ("predicted call 0 has no function name")
        calls.append(ToolCall(name=fn.get("name"), arguments=arguments_or_raw(fn.get("arguments"))))  # type: ignore[typeddict-item]
    content = message.get("content")
    raw = "".join(f"<tool_call>{json.dumps(c, ensure_ascii=False)}</tool_call>" for c in calls) or (content or "")
    return Prediction(calls=calls, content=content, raw=raw)


def ask(
    url: str, model: str, rows: list[Row], budgets: list[int], desc: str, concurrency: int = CONCURRENCY
) -> list[Prediction]:
    """Each row's prompt (the conversation before its scored turn) with its tools through the
    OpenAI API, `concurrency` at a time; the reply as an app reads it."""

    def one(i: int) -> Prediction:
        row = rows[i]
        return _reply(
            client.chat(
                url,
                model,
                openai_messages(row["messages"][: target_index(row)]),
                row.get("tools") or None,
                max_tokens=budgets[i],
                timeout=600,
            )
        )

    return losses.each_batch(one, list(range(len(rows))), desc, concurrency)


class VllmEngine(Engine):
    """vLLM's OpenAI server, started as deploy starts it (the same argument builder, the delivered chat template, the
    tool-call parser read off it), on the servers of `server_plans`: every row through the OpenAI API as an app asks
    it, and the eval loss off the same server's prompt log-probabilities (`losses.served_losses`), so no model is
    loaded here. The server's context fits the longest prompt plus its answer and the longest example, within the
    model's `context`."""

    name = "vllm"
    description = "the vLLM server"

    def answer(
        self, model_dir: Path, tuned_dir: Path | None, models: tuple[str, ...], asked: dict[str, Asked]
    ) -> dict[str, dict[str, Answers]]:
        """A server that would answer for none of `models` is not started (tuned_dir None: the base alone); every
        server is stopped before this returns."""
        asked = {suite: a for suite, a in asked.items() if a.rows}
        longest = max(
            [a.prompts[i] + a.budgets[i] for a in asked.values() for i in a.asked()]
            + [len(e["input_ids"]) for a in asked.values() for e in a.examples],
            default=1,
        )
        max_model_len = min(longest, self.context) if self.context else longest
        answers: dict[str, dict[str, Answers]] = {}
        with tempfile.TemporaryDirectory(prefix="eval-merged-") as tmp:
            plans = server_plans(model_dir, tuned_dir) if tuned_dir is not None else [(model_dir, {}, ("base",))]
            for served_dir, loras, serves in plans:
                if not set(serves) & set(models):
                    continue
                if (
                    tuned_dir is not None
                    and serves == ("tuned",)
                    and (Path(served_dir) / "adapter_config.json").is_file()
                ):
                    from trainer.models.merge import merge  # imports torch: here, as in generation.load

                    served_dir = merge(model_dir, tuned_dir, Path(tmp) / "merged")
                server = local.start(
                    served_dir,
                    serves[0],
                    lora_modules=loras,
                    max_model_len=max_model_len,
                    log_path=Path(tmp) / f"vllm-{serves[0]}.log",
                )
                try:
                    client.wait_ready(server.url, server, timeout=900)
                    # Beside an adapter on the CPU build, losses one at a time: its LoRA logits path (punica_cpu)
                    # sizes a batch by requests, not tokens (server_plans); the GPU's maps tokens.
                    one_at_a_time = bool(loras) and vllm_cpu_build()
                    for name in (n for n in serves if n in models):
                        answers[name] = {
                            suite: _answers(server.url, name, a, max_model_len, one_at_a_time)
                            for suite, a in asked.items()
                        }
                finally:
                    server.stop()
        return answers


def _answers(url: str, name: str, asked: Asked, max_model_len: int, one_at_a_time: bool) -> Answers:
    """One model's answers to one suite on a running server, and its examples' losses."""
    keep = asked.asked()
    got = ask(
        url,
        name,
        [asked.rows[i] for i in keep],
        [max(1, min(asked.budgets[i], max_model_len - asked.prompts[i])) for i in keep],  # vLLM refuses more
        desc=f"{asked.label} {name} (vLLM)",
        concurrency=asked.in_flight,
    )
    predictions: list[Prediction | None] = [None] * len(asked.rows)
    for i, p in zip(keep, got):
        predictions[i] = p
    parts = (
        losses.served_losses(
            url, name, asked.examples, desc=f"eval loss {name} (vLLM)", concurrency=1 if one_at_a_time else CONCURRENCY
        )
        if asked.examples
        else []
    )
    return Answers(predictions, parts)
