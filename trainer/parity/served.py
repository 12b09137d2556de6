"""A running server's own rendering of the prompts against the training encoder's: vLLM's /tokenize
(messages + tools + add_generation_prompt, the path chat completions render through) beside the
token ids training used, for each served model name."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Sequence
from typing import Any

from trainer.chat.types import Row
from trainer.chat.messages import openai_messages
from trainer.chat.turns import target_index
from trainer.data.encode import encode


def prompt_ids(row: Row, tokenizer, max_seq_len: int) -> list[int] | None:
    """The training encoder's prompt for a row's scored turn: its token ids before that turn's first trained label
    (trainer.data.encode, as the trainer encodes the row), or None for a row the trainer skips as too long."""
    enc = encode(row, tokenizer, max_seq_len)
    if enc is None:
        return None
    trained = [label != -100 for label in enc["labels"]]
    end = max(i for i, t in enumerate(trained) if t)  # the scored turn is the last run of trained tokens
    start = end
    while start > 0 and trained[start - 1]:
        start -= 1
    return enc["input_ids"][:start]


def served_prompts(
    base_url: str, tokenizer, rows: list[Row], models: Sequence[str], max_seq_len: int, timeout_s: float = 60.0
) -> dict[str, Any]:
    """vLLM's own rendering of each row's conversation before its scored turn, with the row's tools (a running
    server's /tokenize endpoint: messages + tools + add_generation_prompt, the path chat completions render
    through), beside the training encoder's prompt ids, for each served model name. Returns the (row, model)
    pairs compared, how many were equal, and the first difference decoded (None when all were equal)."""
    root = base_url.removesuffix("/").removesuffix("/v1")
    out: dict[str, Any] = {"rows": 0, "equal": 0, "first_difference": None}
    for model in models:
        for row in rows:
            want = prompt_ids(row, tokenizer, max_seq_len)
            if want is None:
                continue
            body = {
                "model": model,
                "messages": openai_messages(row["messages"][: target_index(row)]),
                "tools": row.get("tools"),
                "add_generation_prompt": True,
            }
            req = urllib.request.Request(
                f"{root}/tokenize", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                got = json.loads(resp.read())["tokens"]
            out["rows"] += 1
            if got == want:
                out["equal"] += 1
            elif out["first_difference"] is None:
                at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                out["first_difference"] = {
                    "model": model,
                    "token": at,
                    "vllm": tokenizer.decode(got[at : at + 12]),
                    "training": tokenizer.decode(want[at : at + 12]),
                }
    return out
