"""Which turns of a chat row are trained and scored, and what the scored one expects.

A row is `{"messages": [...], "tools": [...]}` in OpenAI's format. Every assistant message is
trained unless it has `weight: 0` (a turn the data says not to learn). The functions below read a
row's last trained assistant message, the conversation before it being the prompt; the evaluation
scores every trained turn by cutting the row after each one (`turn_rows`), as BFCL's multi-turn
scoring asks each turn with the gold conversation before it.
"""

from __future__ import annotations

from trainer.chat.calls import as_call, arguments_or_raw
from trainer.chat.types import Message, Row, ToolCall


def trained_turns(messages: list[Message]) -> list[int]:
    """Indexes of the assistant messages training learns (weight not 0)."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("weight") != 0]


def turn_rows(row: Row) -> list[Row]:
    """One row per trained assistant turn: the conversation up to and including that turn, the
    row's other fields kept, so each turn is asked with the gold turns before it (tool results
    included). A glaive or Hermes row (call, tool result, text answer) gives its call turn and its
    text turn; a row with one trained turn (or none) is itself."""
    turns = trained_turns(row["messages"])
    if len(turns) <= 1:
        return [row]
    return [{**row, "messages": row["messages"][: i + 1]} for i in turns]


def split_turns(rows: list[Row]) -> list[Row]:
    """`turn_rows` of every row, in order: what evaluate asks of a split's scored rows."""
    return [turn for row in rows for turn in turn_rows(row)]


def after_tool_result(row: Row) -> bool:
    """The scored turn answers a tool result: the message just before it is a tool message."""
    target = target_index(row)
    return target > 0 and row["messages"][target - 1].get("role") == "tool"


def target_index(row: Row) -> int:
    """Index of the turn a row is scored on: its last assistant message of weight 1 (a weight-0
    answer is one the data says not to learn, so not one to score the model against)."""
    return max(trained_turns(row["messages"]))


def expected_calls(row: Row) -> list[ToolCall]:
    """The calls the row's expected answer makes, as `{"name", "arguments"}` (empty: text expected).

    Raises:
        ValueError: the row's own call is malformed (arguments that are not a JSON object).
    """
    calls = row["messages"][target_index(row)].get("tool_calls") or []
    return [as_call(c, f"the row's expected call {k}") for k, c in enumerate(calls)]


def expected_call(row: Row) -> ToolCall | None:
    """The first tool call a row expects, or None when it expects text. Arguments that are not
    JSON are kept as text: no parsed call can equal them, so the row scores 0."""
    calls = row["messages"][target_index(row)].get("tool_calls") or []
    if not calls:
        return None
    fn = calls[0]["function"]
    return {"name": fn["name"], "arguments": arguments_or_raw(fn.get("arguments") or {})}


def expected_text(row: Row) -> str:
    return row["messages"][target_index(row)].get("content") or ""


def last_user_request(row: Row) -> str:
    """What the user last asked before the scored turn (not a tool result)."""
    before = row["messages"][: target_index(row)]
    return next((m.get("content") or "" for m in reversed(before) if m["role"] == "user"), "")
