"""Tool calls: their arguments decoded by one decoder, and calls read into `{"name", "arguments"}`.

The OpenAI wire format carries a call's arguments as a JSON string; rows, once loaded, hold them
as objects. `decode_arguments` is the one place that turns the first into the second; its
callers decide what text that is not JSON means (an error, or text kept as it is).
"""

from __future__ import annotations

import json
from typing import Any

from trainer.chat.types import Message, ToolCall


def decode_arguments(raw: Any) -> Any:
    """A call's arguments as a value: JSON text decoded, anything else as it is.

    Raises:
        ValueError (json.JSONDecodeError): text that is not JSON.
    """
    return json.loads(raw) if isinstance(raw, str) else raw


def arguments_or_raw(raw: Any) -> Any:
    """decode_arguments, with text that is not JSON kept as text (then no decoded call equals it)."""
    try:
        return decode_arguments(raw)
    except ValueError:
        return raw


def as_call(call: Any, where: str) -> ToolCall:
    """`{"name", "arguments": dict}` from a call as a client or a row holds it.

    Raises:
        ValueError: no function name, or arguments that are not a JSON object (`where` names it).
    """
    if isinstance(call, dict) and isinstance(call.get("function"), dict):
        call = call["function"]  # the OpenAI wire shape {"type": "function", "function": {...}}
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ValueError(f"{where} has no function name")
    args = call.get("arguments")
    if args is None or (isinstance(args, str) and not args.strip()):
        args = {}  # some servers send "" for a call without arguments
    try:
        args = decode_arguments(args)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where} ({call['name']}): arguments are not valid JSON ({err.msg})") from None
    if not isinstance(args, dict):
        raise ValueError(f"{where} ({call['name']}): arguments are not a JSON object")
    return {"name": call["name"], "arguments": args}


def message_calls(message: Message) -> list[ToolCall]:
    """A message's `tool_calls` as `{"name", "arguments"}`, arguments decoded where they are JSON."""
    return [
        {"name": c["function"]["name"], "arguments": arguments_or_raw(c["function"].get("arguments"))}
        for c in message.get("tool_calls") or []
    ]


def same_calls(got: list[ToolCall], want: list[ToolCall]) -> bool:
    """The same calls, in any order (parallel calls have none)."""
    key = lambda c: json.dumps(c, sort_keys=True)  # noqa: E731
    return sorted(map(key, got)) == sorted(map(key, want))
