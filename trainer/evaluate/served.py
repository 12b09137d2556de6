"""Evaluation through vLLM's OpenAI server, started as deploy starts it: which engine answers
(`choose_engine`), which servers answer for base and tuned (`server_plans`), and their answers
and losses (`served_predictions`)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from trainer.chat.types import Prediction, Row, ToolCall
from trainer.chat.calls import arguments_or_raw
from trainer.chat.messages import openai_messages
from trainer.chat.turns import target_index
from trainer.data.bfcl import BfclRow
from trainer.evaluate import bfcl, generation, losses
from trainer.serving import client, local


ENGINES = ("auto", "vllm", "hf")


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
    url: str, model: str, rows: list[Row], budgets: list[int], desc: str, concurrency: int = losses.CONCURRENCY
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


def served_predictions(
    model_dir: Path,
    tuned_dir: Path | None,
    rows: list[Row],
    examples: list[dict[str, list[int]]],
    tokenizer,
    max_seq_len: int,
    context: int | None = None,
    names: tuple[str, ...] = ("base", "tuned"),
    suite: tuple[list[BfclRow], list[int]] | None = None,
) -> dict[str, dict[str, list]]:
    """The answers of `names` (base, tuned) through vLLM's OpenAI server, started as deploy starts
    it (the same argument builder, the delivered chat template, the tool-call parser read off it),
    on the servers of `server_plans`; a server that would answer for none of `names` is not
    started (tuned_dir None: the base alone). Every server is stopped before this returns.

    Returns {"base"/"tuned": {"predictions": per row, "losses": `served_nll` per example}}: the
    losses of `examples` (the rows' encodings) from the same server, so no model is loaded here.
    `suite`: more rows (BFCL's, trainer.evaluate.bfcl) with their prompt lengths, asked on the same
    servers with bfcl.ANSWER_TOKENS each where the context leaves room ({"suite": answers, None for a
    row not asked}); the server's context then fits their longest prompt and answer too."""
    budgets = [generation.answer_budget(tokenizer, [r]) for r in rows]
    # the KV cache for the longest prompt plus its answer (a row fits max_seq_len), within the context
    max_model_len = max_seq_len + max(budgets, default=0)
    suite_rows, suite_prompts = suite if suite is not None else ([], [])
    suite_budgets = bfcl.budgets(suite_prompts, context)
    if suite_rows:
        max_model_len = max(
            max_model_len, max((p + b for p, b in zip(suite_prompts, suite_budgets) if b >= 1), default=0)
        )
    max_model_len = min(max_model_len, context) if context else max_model_len
    prompts = [
        len(
            tokenizer.apply_chat_template(
                r["messages"][: target_index(r)],
                tools=r.get("tools") or None,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )["input_ids"]
        )
        for r in rows
    ]
    budgets = [max(1, min(b, max_model_len - p)) for b, p in zip(budgets, prompts)]  # vLLM refuses more
    answers: dict[str, dict[str, list]] = {}
    with tempfile.TemporaryDirectory(prefix="eval-merged-") as tmp:
        plans = server_plans(model_dir, tuned_dir) if tuned_dir is not None else [(model_dir, {}, ("base",))]
        for served_dir, loras, serves in plans:
            if not set(serves) & set(names):
                continue
            if tuned_dir is not None and serves == ("tuned",) and (Path(served_dir) / "adapter_config.json").is_file():
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
                for name in (n for n in serves if n in names):
                    if suite_rows:
                        asked = [i for i, b in enumerate(suite_budgets) if b >= 1]
                        got = ask(
                            server.url,
                            name,
                            [suite_rows[i] for i in asked],
                            [suite_budgets[i] for i in asked],
                            desc=f"BFCL {name} (vLLM)",
                            concurrency=bfcl.IN_FLIGHT,
                        )
                        answers.setdefault(name, {})["suite"] = [None] * len(suite_rows)
                        for i, g in zip(asked, got):
                            answers[name]["suite"][i] = g
                    if not rows:
                        continue
                    answers.setdefault(name, {}).update(
                        {
                            "predictions": ask(server.url, name, rows, budgets, desc=f"evaluate {name} (vLLM)"),
                            # Beside an adapter on the CPU build, one at a time: its
                            # LoRA logits path (punica_cpu) sizes a batch by requests,
                            # not tokens (server_plans); the GPU's maps tokens.
                            "losses": losses.served_losses(
                                server.url,
                                name,
                                examples,
                                desc=f"eval loss {name} (vLLM)",
                                concurrency=1 if loras and vllm_cpu_build() else losses.CONCURRENCY,
                            ),
                        }
                    )
            finally:
                server.stop()
    return answers
