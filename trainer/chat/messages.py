"""Rows as the OpenAI chat API takes them."""

from __future__ import annotations

import json
from collections.abc import Sequence

from trainer.chat.types import Message, WireCall, WireFunction


def openai_messages(messages: Sequence[Message]) -> list[Message]:
    """Dataset messages as the OpenAI API takes them: an earlier turn's tool call carries its
    `arguments` as a JSON string (rows hold them as objects once loaded), an `id` and `type`,
    and a tool message the `tool_call_id` it answers (vLLM refuses the request otherwise)."""
    out: list[Message] = []
    last_ids: list[str] = []
    for i, message in enumerate(messages):
        m = Message(**message)  # a copy: the row is not changed
        if m.get("tool_calls"):
            calls: list[WireCall] = []
            for j, tc in enumerate(m["tool_calls"]):
                fn = WireFunction(**tc["function"])
                if not isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.dumps(fn.get("arguments") or {})
                calls.append({**tc, "id": tc.get("id") or f"call_{i}_{j}", "type": "function", "function": fn})
            m["tool_calls"], last_ids = calls, [c["id"] for c in calls]
        elif m.get("role") == "tool" and not m.get("tool_call_id") and last_ids:
            m["tool_call_id"] = last_ids.pop(0)
        out.append(m)
    return out
