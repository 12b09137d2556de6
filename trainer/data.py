"""Chat data: read and validate JSONL rows, tokenize with an assistant-only loss mask.

Row format (OpenAI / Hugging Face chat): `{"messages": [{"role", "content",
"tool_calls"?}, ...], "tools"?: [...]}`. A tool call's `arguments` may be a dict or a
JSON string (OpenAI's wire format); it is normalised to a dict on load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from trainer.batching import collate, collate_packed, real_tokens  # noqa: F401 - moved there, importable here
from trainer.errors import UserError, collect

ROLES = {"system", "user", "assistant", "tool"}
MAX_REPORTED = 20  # problems listed before "... and N more": enough to see a pattern


def row_problems(row: Any) -> list[str]:
    """Every reason `row` is not a valid chat row (empty list when it is valid)."""
    if not isinstance(row, dict):
        return [f"row is a {type(row).__name__}, expected a JSON object with 'messages'"]
    messages = row.get("messages")
    if messages is None:
        return ["row has no 'messages' field; each row needs a list of {role, content} messages"]
    if not isinstance(messages, list) or not messages:
        return ["'messages' must be a non-empty list"]
    problems = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            problems.append(f"messages[{i}] is not an object")
            continue
        if m.get("role") not in ROLES:
            problems.append(f"messages[{i}] has unknown role {m.get('role')!r}; use one of {sorted(ROLES)}")
        for j, tc in enumerate(m.get("tool_calls") or []):
            fn = tc.get("function") if isinstance(tc, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                problems.append(f"messages[{i}].tool_calls[{j}] needs function.name")
                continue
            args = fn.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError as err:
                    problems.append(f"messages[{i}].tool_calls[{j}].function.arguments is not valid JSON ({err.msg})")
                    continue
            if not isinstance(args, dict):
                problems.append(f"messages[{i}].tool_calls[{j}].function.arguments must be a JSON object")
    if not any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages):
        problems.append("no assistant message: there is nothing to learn from this row")
    return problems


def normalise(row: dict[str, Any]) -> dict[str, Any]:
    """Tool-call arguments as dicts (chat templates render them with `tojson`)."""
    for m in row["messages"]:
        for tc in m.get("tool_calls") or []:
            if isinstance(tc["function"].get("arguments"), str):
                tc["function"]["arguments"] = json.loads(tc["function"]["arguments"])
    return row


def validate_rows(rows: Iterable[Any], where: str) -> list[dict[str, Any]]:
    """Check every row; raise one UserError naming each bad row, else return them normalised."""
    rows = list(rows)
    problems = [f"{where} row {i + 1}: {p}" for i, row in enumerate(rows) for p in row_problems(row)]
    if not rows:
        problems.append(f"{where} has no rows")
    _raise_capped(problems, where)
    return [normalise(r) for r in rows]


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a JSONL file; errors name the file, the line and the reason."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"dataset file not found: {path}. Pass an existing .jsonl file or directory.")
    rows, problems = [], []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                problems.append(f"{path}:{lineno}: not valid JSON ({err.msg} at column {err.colno})")
                continue
            problems += [f"{path}:{lineno}: {p}" for p in row_problems(row)]
            rows.append(row)
    if not rows and not problems:
        problems.append(f"{path}: file has no rows")
    _raise_capped(problems, str(path))
    return [normalise(r) for r in rows]


def _raise_capped(problems: list[str], where: str) -> None:
    if len(problems) > MAX_REPORTED:
        problems = problems[:MAX_REPORTED] + [f"... and {len(problems) - MAX_REPORTED} more"]
    collect(problems, what=f"bad dataset {where}")


def write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> int:
    """Write rows as JSONL; returns the row count."""
    n = 0
    with Path(path).open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def encode(row: dict[str, Any], tokenizer, max_seq_len: int) -> dict[str, list[int]] | None:
    """Token ids and labels (-100 outside assistant turns) for one row, or None if too long.

    Uses the chat template's `{% generation %}` mask when it has one (exact, all assistant
    turns). Otherwise the last assistant turn is found by rendering the conversation
    without it: a common approximation for templates (e.g. Llama 3's) that lack the mask.
    """
    tools = row.get("tools") or None
    messages = row["messages"]
    if "{% generation %}" in (tokenizer.chat_template or ""):
        enc = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
        ids, mask = list(enc["input_ids"]), list(enc["assistant_masks"])
    else:
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        prompt = tokenizer.apply_chat_template(messages[:last], tools=tools, tokenize=True, return_dict=True,
                                               add_generation_prompt=True)["input_ids"]
        ids = list(tokenizer.apply_chat_template(messages[: last + 1], tools=tools, tokenize=True,
                                                 return_dict=True)["input_ids"])
        mask = [0] * len(prompt) + [1] * (len(ids) - len(prompt))
    if len(ids) > max_seq_len:
        return None
    return {"input_ids": ids, "labels": [t if m else -100 for t, m in zip(ids, mask)]}


def encode_all(rows: list[dict[str, Any]], tokenizer, max_seq_len: int) -> tuple[list[dict[str, list[int]]], int]:
    """Encode rows; over-long rows are dropped (policy: skip, counted in the metrics)."""
    out, dropped = [], 0
    for row in rows:
        enc = encode(row, tokenizer, max_seq_len)
        if enc is None:
            dropped += 1
        else:
            out.append(enc)
    return out, dropped
