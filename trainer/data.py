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
    """Every reason `row` is not a valid chat row (empty list when it is valid).

    Field types are checked here, at delivery, because the chat template would fail on them
    only inside training: `tools` a list of functions, `content` a string (null only next to
    tool_calls), and tool calls naming a declared tool when the row declares `tools`.
    """
    if not isinstance(row, dict):
        return [f"row is a {type(row).__name__}, expected a JSON object with 'messages'"]
    messages = row.get("messages")
    if messages is None:
        return ["row has no 'messages' field; each row needs a list of {role, content} messages"]
    if not isinstance(messages, list) or not messages:
        return ["'messages' must be a non-empty list"]
    problems = []
    tools, declared = row.get("tools"), None
    if tools is not None:
        if not isinstance(tools, list):
            problems.append(f"'tools' must be a list of {{\"type\": \"function\", \"function\": {{\"name\": ...}}}} "
                            f"objects, got a {_json_type(tools)}; if it is a JSON string, store it parsed")
        else:
            declared = set()
            for k, t in enumerate(tools):
                fn = t.get("function", t) if isinstance(t, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    problems.append(f"tools[{k}] needs function.name (OpenAI tool format)")
                else:
                    declared.add(fn["name"])
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            problems.append(f"messages[{i}] is not an object")
            continue
        if m.get("role") not in ROLES:
            problems.append(f"messages[{i}] has unknown role {m.get('role')!r}; use one of {sorted(ROLES)}")
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            problems.append(f"messages[{i}].tool_calls must be a list, got a {_json_type(calls)}")
            calls = []
        content = m.get("content")
        if content is None and not calls:
            problems.append(f"messages[{i}].content is missing or null; it must be a string (null only in an "
                            "assistant message with tool_calls)")
        elif content is not None and not isinstance(content, str):
            problems.append(f"messages[{i}].content must be a string, got a {_json_type(content)}"
                            + ("; join the text parts into one string" if isinstance(content, list) else ""))
        for j, tc in enumerate(calls or []):
            fn = tc.get("function") if isinstance(tc, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                problems.append(f"messages[{i}].tool_calls[{j}] needs function.name")
                continue
            if declared is not None and fn["name"] not in declared:
                problems.append(f"messages[{i}].tool_calls[{j}] calls {fn['name']!r}, which is not in the row's "
                                f"tools {sorted(declared)}; declare it in 'tools' or fix the name")
            args = fn.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError as err:
                    problems.append(f"messages[{i}].tool_calls[{j}].function.arguments is not valid JSON ({err.msg})")
                    continue
                except RecursionError:
                    problems.append(f"messages[{i}].tool_calls[{j}].function.arguments is nested too deeply")
                    continue
            if not isinstance(args, dict):
                problems.append(f"messages[{i}].tool_calls[{j}].function.arguments must be a JSON object")
    if not any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages):
        problems.append("no assistant message: there is nothing to learn from this row")
    return problems


def _json_type(value: Any) -> str:
    return {str: "string", dict: "object", list: "list", bool: "boolean", int: "number", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__)


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
    """Read and validate a JSONL file; errors name the file, the line and the reason.

    UTF-8, with or without the byte-order mark some editors write. A file in another
    encoding, or not text at all, fails with one line saying so, not one per row.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"dataset file not found: {path}. Pass an existing .jsonl file or directory.")
    rows, problems = [], []
    with path.open("rb") as f:
        head = f.read(8)
        f.seek(0)
        if (kind := _binary_kind(head)) or b"\0" in f.read(1 << 16):
            raise UserError(f"{path} is not JSONL text ({kind or 'binary data'}): give a UTF-8 .jsonl file with "
                            "one JSON object per line")
        f.seek(0)
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise UserError(f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column "
                                f"{err.start + 1}); save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 "
                                f"{path.name} > fixed.jsonl`") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                problems.append(f"{path}:{lineno}: not valid JSON ({err.msg} at column {err.colno})")
                continue
            except RecursionError:
                problems.append(f"{path}:{lineno}: JSON nested too deeply for the parser (about 1000 levels or "
                                "more); a chat row needs a handful: check how the file was generated")
                continue
            problems += [f"{path}:{lineno}: {p}" for p in row_problems(row)]
            rows.append(row)
    if not rows and not problems:
        problems.append(f"{path}: file has no rows")
    _raise_capped(problems, str(path))
    return [normalise(r) for r in rows]


_MAGIC = {b"\x1f\x8b": "gzip-compressed", b"PK\x03\x04": "a zip archive", b"PAR1": "Parquet",
          b"\x28\xb5\x2f\xfd": "zstd-compressed", b"BZh": "bzip2-compressed", b"\xff\xfe": "UTF-16 text",
          b"\xfe\xff": "UTF-16 text", b"ARROW1": "Arrow"}


def _binary_kind(head: bytes) -> str | None:
    return next((kind for magic, kind in _MAGIC.items() if head.startswith(magic)), None)


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
    if text_chars(row) > max_seq_len * max_token_chars(tokenizer):
        return None  # certainly too long: skipped without tokenizing (a 50 MB row costs nothing)
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


def text_chars(row: dict[str, Any]) -> int:
    """Characters of message text in a row: a lower bound on what its chat template renders."""
    return sum(len(m["content"]) for m in row["messages"] if isinstance(m.get("content"), str))


def max_token_chars(tokenizer) -> int:
    """The longest token's length in characters: a row of C characters has at least
    C / this many tokens, so rows above max_seq_len x this are too long for certain."""
    cached = getattr(tokenizer, "_max_token_chars", None)
    if cached is None:
        cached = max((len(t) for t in tokenizer.get_vocab()), default=1) or 1
        try:
            tokenizer._max_token_chars = cached
        except AttributeError:  # a tokenizer that refuses new attributes is measured each time
            pass
    return cached


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
