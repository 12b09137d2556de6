"""Which turns of a chat row are trained and scored, and what the scored one expects.

A row is `{"messages": [...], "tools": [...]}` in OpenAI's format. Every assistant message is
trained unless it has `weight: 0` (a turn the data says not to learn); the row is scored on its
last trained assistant message, the conversation before it being the prompt.
"""

from __future__ import annotations

from typing import Any

from trainer.chat.calls import as_call, arguments_or_raw


def trained_turns(messages: list[dict[str, Any]]) -> list[int]:
    """Indexes of the assistant messages training learns (weight not 0)."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("weight") != 0]


def target_index(row: dict[str, Any]) -> int:
    """Index of the turn a row is scored on: its last assistant message of weight 1 (a weight-0
    answer is one the data says not to learn, so not one to score the model against)."""
    return max(trained_turns(row["messages"]))


def expected_calls(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls the row's expected answer makes, as `{"name", "arguments"}` (empty: text expected).

    Raises:
        ValueError: the row's own call is malformed (arguments that are not a JSON object).
    """
    calls = row["messages"][target_index(row)].get("tool_calls") or []
    return [as_call(c, f"the row's expected call {k}") for k, c in enumerate(calls)]


def expected_call(row: dict[str, Any]) -> dict[str, Any] | None:
    """The first tool call a row expects, or None when it expects text. Arguments that are not
    JSON are kept as text: no parsed call can equal them, so the row scores 0."""
    calls = row["messages"][target_index(row)].get("tool_calls") or []
    if not calls:
        return None
    fn = calls[0]["function"]
    return {"name": fn["name"], "arguments": arguments_or_raw(fn.get("arguments") or {})}


def expected_text(row: dict[str, Any]) -> str:
    return row["messages"][target_index(row)].get("content") or ""


def last_user_request(row: dict[str, Any]) -> str:
    """What the user last asked before the scored turn (not a tool result)."""
    before = row["messages"][:target_index(row)]
    return next((m.get("content") or "" for m in reversed(before) if m["role"] == "user"), "")


def prompt_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation before the scored turn: what the model is asked."""
    return row["messages"][:target_index(row)]
