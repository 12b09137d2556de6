"""Evaluation: eval loss and function-calling accuracy, for the base and the tuned model.

Function-calling accuracy is exact match on a held-out split: the model's first tool
call must have the expected function name and JSON-equal arguments (key order and
whitespace do not matter). A row whose reference answer calls no tool counts as correct
when the model calls none.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from trainer import data

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


def parse_tool_call(text: str) -> dict[str, Any] | None:
    """The first tool call in a model's output, as {"name", "arguments"}, or None.

    Accepts `<tool_call>{...}</tool_call>` (our template, Qwen, Hermes) and a bare JSON
    object (Llama 3 style, which says "parameters" instead of "arguments").
    """
    m = _TOOL_CALL.search(text)
    candidate = m.group(1) if m else text.strip()
    start = candidate.find("{")
    if start < 0:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(candidate[start:])
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    return {"name": obj["name"], "arguments": args}


def expected_call(row: dict[str, Any]) -> dict[str, Any] | None:
    last = row["messages"][-1]
    calls = last.get("tool_calls") or []
    if last["role"] != "assistant" or not calls:
        return None
    fn = calls[0]["function"]
    return {"name": fn["name"], "arguments": fn.get("arguments") or {}}


def is_correct(predicted: dict[str, Any] | None, expected: dict[str, Any] | None) -> bool:
    if expected is None:
        return predicted is None
    return predicted is not None and predicted["name"] == expected["name"] \
        and predicted["arguments"] == expected["arguments"]


def eval_loss(model, examples: list[dict[str, list[int]]], pad_id: int, batch_size: int = 32) -> float:
    """Mean loss per assistant token over all examples (token-weighted, not batch-weighted)."""
    import torch

    device = next(model.parameters()).device
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            batch = {k: v.to(device) for k, v in data.collate(examples[i:i + batch_size], pad_id).items()}
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           use_cache=False).logits.float()
            labels = batch["labels"][:, 1:]
            losses = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100,
                reduction="sum")
            total += losses.item()
            count += int((labels != -100).sum())
    return total / max(count, 1)


def generate(model, tokenizer, rows: list[dict[str, Any]], batch_size: int = 32,
             max_new_tokens: int = 96) -> list[str]:
    """Greedy completions for each row's prompt (the conversation before its last turn)."""
    import torch

    device = next(model.parameters()).device
    tokenizer.padding_side = "left"  # decoder-only batched generation pads on the left
    outputs = []
    for i in range(0, len(rows), batch_size):
        chunk = rows[i:i + batch_size]
        prompts = [tokenizer.apply_chat_template(r["messages"][:-1], tools=r.get("tools") or None,
                                                 add_generation_prompt=True, tokenize=False) for r in chunk]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        outputs += tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=False)
    pad = tokenizer.pad_token or ""
    return [o.replace(pad, "").strip() for o in outputs]


def score(model, tokenizer, rows: list[dict[str, Any]], max_seq_len: int) -> tuple[dict[str, float], list[str]]:
    examples, _ = data.encode_all(rows, tokenizer, max_seq_len)
    outputs = generate(model, tokenizer, rows)
    correct = sum(is_correct(parse_tool_call(o), expected_call(r)) for o, r in zip(outputs, rows))
    return {"eval_loss": eval_loss(model, examples, tokenizer.pad_token_id),
            "fc_accuracy": correct / len(rows)}, outputs


def load(model_dir: Path, adapter_dir: Path | None = None):
    """Base model, or base + adapter (an output without adapter_config.json is a full model)."""
    import torch
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if adapter_dir is not None and not (adapter_dir / "adapter_config.json").exists():
        model_dir, adapter_dir = adapter_dir, None
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto").to(device)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir)
    return model.eval()


def evaluate(model_dir: Path, tuned_dir: Path, eval_path: Path, max_rows: int = 200,
             max_seq_len: int = 512, n_examples: int = 5) -> dict[str, Any]:
    """Metrics for base and tuned, plus a few side-by-side examples for the report."""
    from transformers import AutoTokenizer

    rows = data.read_jsonl(eval_path)[:max_rows]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    results, outputs = {}, {}
    for name, adapter in (("base", None), ("tuned", tuned_dir)):
        model = load(model_dir, adapter)
        results[name], outputs[name] = score(model, tokenizer, rows, max_seq_len)
        del model
    examples = [{"prompt": r["messages"][-2]["content"] if len(r["messages"]) > 1 else "",
                 "expected": expected_call(r), "base": outputs["base"][i], "tuned": outputs["tuned"][i]}
                for i, r in enumerate(rows[:n_examples])]
    return {"base": results["base"], "tuned": results["tuned"], "rows": len(rows), "examples": examples}
