"""Row formats and row checks: what a chat row must hold, the formats converted to it on load
(prompt-completion, ShareGPT, Alpaca, OpenAI legacy), and the JSON text inside rows (tool-call
arguments) read strictly: repeated keys, NaN and lone surrogates refused. See trainer.data."""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import re
import sys
from typing import Any, Iterable

from trainer.chat.calls import decode_arguments
from trainer.errors import collect


ROLES = {"system", "user", "assistant", "tool"}
# Other formats' names for ROLES (OpenAI's newer 'developer', ShareGPT's, Gemini's), named in the fix.
_ROLE_NAMES = {"developer": "system", "human": "user", "gpt": "assistant", "model": "assistant", "bot": "assistant",
               "function": "tool", "ipython": "tool"}
MAX_REPORTED = 20  # problems listed before "... and N more": enough to see a pattern


def row_problems(row: Any) -> list[str]:
    """Every reason `row` is not a valid chat row (empty list when it is valid).

    Field types are checked here, at delivery, because the chat template would fail on them
    only inside training: `tools` a list of functions, `content` a string (null only next to
    tool_calls), and tool calls naming a declared tool when the row declares `tools`.
    """
    if not isinstance(row, dict):
        return [f"row is {'null' if row is None else 'a ' + _json_type(row)}, expected a JSON object with 'messages'"]
    fmt = row_format(row)
    if fmt in ("sharegpt", "alpaca"):  # to_chat converts such rows unless they are broken: say how
        return CONVERTERS[fmt](row)[1]
    messages = row.get("messages")
    if messages is None:
        return [_no_messages(row)]
    if isinstance(messages, str):  # JSON text that did not parse (to_chat parses the text that does)
        repr_like = messages.lstrip().startswith(("[{'", "[ {'"))
        return ["'messages' is text that is not a JSON list of messages"
                + ("; it looks like a Python repr (single quotes): write the column with json.dumps"
                   if repr_like else "; store the list itself, or valid JSON text")]
    if not isinstance(messages, list) or not messages:
        return ["'messages' must be a non-empty list"]
    problems = []
    if row.get("functions") is not None:  # left by to_chat: not a list, or beside 'tools'
        problems.append("'functions' (OpenAI's legacy format) must be a list of function schemas, and not given "
                        "beside 'tools': keep one of them")
    tools, declared = row.get("tools"), None
    if tools is not None:
        if not isinstance(tools, list):
            problems.append(f"'tools' must be a list of {{\"type\": \"function\", \"function\": {{\"name\": ...}}}} "
                            f"objects (or that list as JSON text), got a {_json_type(tools)}")
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
            same = _ROLE_NAMES.get(str(m.get("role")).lower())
            problems.append(f"messages[{i}] has unknown role {m.get('role')!r}; use one of {sorted(ROLES)}"
                            + (f" ({m.get('role')!r} is {same!r} here)" if same else ""))
        weight = m.get("weight")
        if weight is not None and m.get("role") != "assistant":
            problems.append(f"messages[{i}] has a weight, which only assistant messages take (OpenAI's format): "
                            "remove it")
        elif weight is not None and (isinstance(weight, bool) or weight not in (0, 1)):
            problems.append(f"messages[{i}].weight must be 0 (do not train on this message) or 1, got {weight!r}")
        if m.get("function_call") is not None:  # left by to_chat when it is not {name, arguments}
            problems.append(f"messages[{i}].function_call must be {{\"name\": ..., \"arguments\": ...}} "
                            "(OpenAI's legacy format), or give tool_calls")
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
                            + (f"; only text parts can be trained on, and this one has "
                               f"{_part_types(content)}" if isinstance(content, list) else ""))
        for j, tc in enumerate(calls or []):
            fn = tc.get("function") if isinstance(tc, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                problems.append(f"messages[{i}].tool_calls[{j}] needs function.name")
                continue
            if declared is not None and fn["name"] not in declared:
                problems.append(f"messages[{i}].tool_calls[{j}] calls {fn['name']!r}, which is not in the row's "
                                f"tools {sorted(declared)}; declare it in 'tools' or fix the name")
            args, at = fn.get("arguments", {}), f"messages[{i}].tool_calls[{j}].function.arguments"
            if isinstance(args, str):
                try:
                    args, repeated = _loads(args)
                except json.JSONDecodeError as err:
                    problems.append(f"{at} is not valid JSON ({err.msg})")
                    continue
                except RecursionError:
                    problems.append(f"{at} is nested too deeply")
                    continue
                problems += [f"{at} {_repeated(k)}" for k in dict.fromkeys(repeated)]
                if _ESCAPED_SURROGATE.search(fn["arguments"]) and (problem := surrogate_problem(args, at)):
                    problems.append(problem)
            if not isinstance(args, dict):
                problems.append(f"{at} must be a JSON object")
            elif bad := non_finite_paths(args, at):
                # json reads NaN and 1e999; the model would learn to write what no tool parser reads
                problems.append(f"{', '.join(bad[:3])} must be a finite number, not NaN or Infinity (not JSON, "
                                "and no tool-call parser reads it back): give a real number, a string or null")
    answers = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    if not answers:
        problems.append("no assistant message: there is nothing to learn from this row")
    elif all(m.get("weight") == 0 for m in answers):
        problems.append("every assistant message has weight 0: there is nothing to learn from this row; set "
                        "weight 1 on the turns to learn, or drop the row")
    elif not any(m.get("tool_calls") or not isinstance(m.get("content"), (str, type(None)))
                 or (m["content"] or "").strip() for m in answers):  # (content of another type is named above)
        problems.append("every assistant message is empty (no content, no tool_calls): there is nothing to learn "
                        "from this row but an end-of-turn token; fill them in, or drop the row")
    return problems


_SURROGATE = re.compile("[\ud800-\udfff]")
# How a lone surrogate gets into a str: a JSON escape (UTF-8 bytes cannot encode one, and Arrow
# strings are UTF-8), so only rows whose JSON text has one are searched.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def lone_surrogate(value: Any, path: str) -> tuple[str, str] | None:
    """(where, which) of the first lone surrogate in a JSON value, or None: json reads the escape
    `"\\ud800"`, and Python a command-line argument that is not UTF-8, into a str that no UTF-8
    writer accepts (a delivery, a log line or the KFP API would fail on it)."""
    try:
        json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")
        return None
    except UnicodeEncodeError:
        pass

    def find(v: Any, at: str) -> tuple[str, str] | None:
        if isinstance(v, str):
            return (at, m[0]) if (m := _SURROGATE.search(v)) else None
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, item in items:
            if isinstance(k, str) and (m := _SURROGATE.search(k)):
                return f"{at} (a key)", m[0]
            if found := find(item, (f"{at}.{k}" if at else k) if isinstance(v, dict) else f"{at}[{k}]"):
                return found
        return None

    return find(value, path) or (path, "?")


def surrogate_problem(row: Any, path: str) -> str | None:
    """A row's lone surrogate, as a problem with its fix (None when it has none)."""
    if not (found := lone_surrogate(row, path)):
        return None
    return (f"{found[0] or 'the row'} holds a lone surrogate ({found[1]!a}, half of a UTF-16 pair written as a "
            "\\u escape), which is not text and cannot be stored as UTF-8: fix the escape (a pair such as "
            "\\ud83d\\ude00 is one character) or drop the row")


def non_finite_paths(value: Any, path: str) -> list[str]:
    """Paths of NaN and infinity anywhere inside a JSON value (json reads NaN, Infinity, 1e999)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite_paths(v, f"{path}[{k!r}]")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in non_finite_paths(v, f"{path}[{i}]")]
    return []


# Other dataset formats, recognised by their keys, and what to do with each.
_OTHER_FORMATS = (
    ({"prompt", "completion"}, "each must be a string or a list of messages"),
    ({"text"}, "plain 'text' rows are for pretraining, not chat: this trainer learns assistant turns; give "
               "'messages', or 'prompt' and 'completion'"),
    ({"output"}, "Alpaca rows need 'instruction' and 'output' (and may have 'input', 'system')"),
    ({"chosen", "rejected"}, "preference pairs (DPO) are not supervised fine-tuning data: train on 'chosen' as "
                             "'messages'"),
)


def _no_messages(row: dict[str, Any]) -> str:
    """Why a row without 'messages' is not chat, naming its keys and the format they suggest."""
    keys = sorted(map(str, row))
    shown = ", ".join(repr(k) for k in keys[:8]) + (", ..." if len(keys) > 8 else "")
    hint = next((h for needed, h in _OTHER_FORMATS if needed & set(row) == needed
                 or (needed == {"prompt", "completion"} and needed & set(row))), None)
    if hint is None:
        hint = "each row needs 'messages': [{role, content}, ...], or 'prompt' and 'completion' strings"
    if "messages" in row:
        return f"row has no 'messages' field (it is null); {hint}"
    if "prompt" in row or "completion" in row:
        kinds = {k: _json_type(row[k]) if k in row else "missing" for k in ("prompt", "completion")}
        found = ", ".join(f"'{k}' is {'a ' + t if t not in ('null', 'missing') else t}" for k, t in kinds.items())
        return f"row has no 'messages' field, and of prompt/completion {found}: {hint}"
    return f"row has no 'messages' field (its keys: {shown or 'none'}); {hint}"


def _part_types(parts: list) -> str:
    kinds = sorted({str(p.get("type")) if isinstance(p, dict) else _json_type(p) for p in parts} - {"text"})
    return ", ".join(kinds) + " parts"


def _text_parts(content: Any) -> Any:
    """OpenAI content parts that are all text (`[{"type": "text", "text": ...}]`) as one string,
    as chat templates join them; anything else unchanged (row_problems names it)."""
    if isinstance(content, list) and content and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    return content


# ShareGPT's turn names (`from`), as axolotl and LLaMA-Factory write them, and the role each becomes.
# chatgpt, bing, bard: the assistant turns of the original ShareGPT dumps (FastChat's ShareGPT_Vicuna).
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
                  "function_call": "assistant", "observation": "tool", "tool": "tool", "chatgpt": "assistant",
                  "bing": "assistant", "bard": "assistant"}
FORMAT_NAMES = {"chat": "chat ('messages' of {role, content})", "prompt-completion": "prompt-completion",
                "sharegpt": "ShareGPT ('conversations' of {from, value})",
                "alpaca": "Alpaca (instruction, input, output)",
                "functions": "OpenAI legacy functions / function_call"}
CONVERTED = ("sharegpt", "alpaca", "functions")  # formats whose conversion is announced


def row_format(row: Any) -> str | None:
    """Which of FORMAT_NAMES a raw row is in (None: none of them; row_problems says why).

    ShareGPT turns under 'messages' (`{"messages": [{"from", "value"}]}`, as some Hub datasets
    store them) count as ShareGPT."""
    if not isinstance(row, dict):
        return None
    messages = row.get("messages")
    if isinstance(messages, list) and messages and all(
            isinstance(m, dict) and "from" in m and m.get("role") is None for m in messages):
        return "sharegpt"
    if messages is not None:
        legacy = row.get("functions") is not None or (isinstance(messages, list) and any(
            isinstance(m, dict) and (m.get("function_call") is not None or m.get("role") == "function")
            for m in messages))
        return "functions" if legacy else "chat"
    if row.get("conversations") is not None:
        return "sharegpt"
    if row.get("prompt") is not None or row.get("completion") is not None:
        return "prompt-completion"
    if row.get("instruction") is not None:
        return "alpaca"
    return None


def _json_text(value: Any) -> Any:
    """JSON text (a CSV or Parquet cell) parsed when it parses; anything else unchanged."""
    if isinstance(value, str):
        try:
            return json_loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    return value


def _as_tools(tools: Any, problems: list[str]) -> list | None:
    """A ShareGPT/legacy tool list (JSON text or a list; bare function schemas, as LLaMA-Factory
    and OpenAI's `functions` give them) as OpenAI tools `{"type": "function", "function": {...}}`."""
    tools = _json_text(tools)
    if tools is None or tools == "" or tools == []:
        return None
    if not isinstance(tools, list):
        problems.append(f"'tools' must be a list of function schemas (or that list as JSON text), got a "
                        f"{_json_type(tools)}")
        return None
    return [t if isinstance(t, dict) and isinstance(t.get("function"), dict) else {"type": "function", "function": t}
            for t in tools]


def _blank(value: Any) -> bool:
    """No text at all: null, or a string of white space only."""
    return value is None or (isinstance(value, str) and not value.strip())


def _from_sharegpt(row: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """(the chat row, []) or (None, every problem): see the module docstring for the mapping.

    A function_call right after a text answer joins it (one assistant turn: text, then the call).
    Empty values and unknown `from` names are refused, not skipped: dropping a turn would change
    who says what in the rest of the conversation. An empty system turn is the exception: it
    says nothing and nobody answers it, so it is skipped (as an empty 'system' field is)."""
    key = "conversations" if row.get("messages") is None else "messages"
    turns, problems, messages = _json_text(row.get(key)), [], []
    if not isinstance(turns, list) or not turns:
        return None, [f"'{key}' must be a non-empty list of ShareGPT turns {{\"from\": ..., \"value\": ...}}"]
    system = row.get("system")
    if system is not None and not isinstance(system, str):
        problems.append(f"'system' must be a string, got a {_json_type(system)}")
    elif system and system.strip():
        if any(isinstance(t, dict) and str(t.get("from")).strip().lower() == "system" and not _blank(t.get("value"))
               for t in turns):
            problems.append("has both a 'system' field and a system turn: keep one")
        messages.append({"role": "system", "content": system})
    for i, turn in enumerate(turns):
        where = f"{key}[{i}]"
        if not isinstance(turn, dict):
            problems.append(f"{where} is a {_json_type(turn)}, expected a {{\"from\": ..., \"value\": ...}} object")
            continue
        who, value = turn.get("from"), turn.get("value")
        who = who.strip().lower() if isinstance(who, str) else who  # "Human", "GPT" as some exports write them
        if not isinstance(who, str) or who not in SHAREGPT_ROLES:
            problems.append(f"{where} has unknown 'from' {turn.get('from')!r}: ShareGPT turns are from "
                            f"{', '.join(SHAREGPT_ROLES)}; rename it (or convert the row to 'messages')")
            continue
        if who == "system" and _blank(value):  # an empty system prompt says nothing: skipped, as 'system' is
            continue
        if not isinstance(value, str) or not value.strip():
            got = "an empty value" if isinstance(value, str) else (
                "no value" if value is None else f"a {_json_type(value)} value")
            problems.append(f"{where} (from {who!r}) has {got}: every turn needs its text as a string; fill it in, "
                            "or drop the row")
            continue
        if who == "function_call":
            calls = _json_text(value)
            calls = calls if isinstance(calls, list) else [calls]
            if not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
                problems.append(f"{where} (function_call) must be JSON text of "
                                "{\"name\": ..., \"arguments\": {...}} (or a list of them)")
                continue
            tool_calls = [{"type": "function", "function": {"name": c["name"], "arguments": c.get("arguments", {})}}
                          for c in calls]
            if messages and messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls"):
                messages[-1] = {**messages[-1], "tool_calls": tool_calls}
                continue
            message = {"role": "assistant", "content": "", "tool_calls": tool_calls}
        else:
            message = {"role": SHAREGPT_ROLES[who], "content": value}
        # axolotl's per-turn weight (row_problems checks it). Exports such as SlimOrca weigh every turn
        # (human 0, system null): only an assistant turn is ever trained, so the others' weights are dropped.
        if turn.get("weight") is not None and message["role"] == "assistant":
            message["weight"] = turn["weight"]
        messages.append(message)
    out = {"messages": messages}
    if (tools := _as_tools(row.get("tools"), problems)) is not None:
        out["tools"] = tools
    return (None, problems) if problems else (out, [])


def _from_alpaca(row: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """(the chat row, []) or (None, every problem): [system], history pairs, then the user turn
    (instruction, a newline, input; either alone when the other is empty) and the output."""
    problems = []

    def text(key: str) -> str:
        value = row.get(key)
        if value is None:
            return ""
        if isinstance(value, str):
            return value
        fix = f' (write it as text: "{value}")' if _json_type(value) == "number" else ""
        problems.append(f"'{key}' must be a string, got a {_json_type(value)}{fix}")
        return ""

    instruction, given, output, system = text("instruction"), text("input"), text("output"), text("system")
    if "output" not in row:  # e.g. Dolly's instruction/context/response: say which keys there are
        keys = ", ".join(map(repr, sorted(map(str, row))[:8]))
        problems.append(f"Alpaca row has no 'output' (its keys: {keys}): give the answer to learn as 'output' (and "
                        "any context as 'input')")
    elif not problems and not output.strip():
        problems.append("'output' is empty: there is nothing to learn from this row; fill it in, or drop the row")
    if not problems and not (instruction.strip() or given.strip()):
        problems.append("'instruction' and 'input' are both empty: there is no request to answer")
    messages = [{"role": "system", "content": system}] if system.strip() else []
    history = _json_text(row.get("history"))
    for k, pair in enumerate(history or []):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            problems.append(f"history[{k}] must be a [request, answer] pair of strings (LLaMA-Factory's format)")
            continue
        messages += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
    if history is not None and not isinstance(history, list):
        problems.append(f"'history' must be a list of [request, answer] pairs, got a {_json_type(history)}")
    request = "\n".join(t for t in (instruction, given) if t.strip())
    messages += [{"role": "user", "content": request}, {"role": "assistant", "content": output}]
    return (None, problems) if problems else ({"messages": messages}, [])


def _from_functions(row: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """OpenAI's legacy function calling as tools: `functions` -> `tools`, an assistant's
    `function_call` -> one tool call, role `function` -> `tool`. Parts that are not in that
    shape stay, for row_problems to name."""
    messages, out = [], {k: v for k, v in row.items() if k != "functions"}
    for m in row["messages"] if isinstance(row["messages"], list) else []:
        call = m.get("function_call") if isinstance(m, dict) else None
        if isinstance(call, dict) and isinstance(call.get("name"), str) and not m.get("tool_calls"):
            m = {**{k: v for k, v in m.items() if k != "function_call"}, "content": m.get("content") or "",
                 "tool_calls": [{"type": "function", "function": {"name": call["name"],
                                                                  "arguments": call.get("arguments", {})}}]}
        if isinstance(m, dict) and m.get("role") == "function":
            m = {**m, "role": "tool"}
        messages.append(m)
    out["messages"] = messages if isinstance(row["messages"], list) else row["messages"]
    if row.get("functions") is not None:
        problems: list[str] = []
        tools = _as_tools(row["functions"], problems)
        if problems or row.get("tools") is not None:
            out["functions"] = row["functions"]  # not a list, or beside 'tools': row_problems names it
        elif tools is not None:
            out["tools"] = tools
    return out, []


def _from_prompt_completion(row: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """`prompt` / `completion` as strings (a user turn and an assistant turn) or message lists (TRL's
    conversational prompt-completion); a `system` string becomes the first message, `tools` is kept.
    Other shapes are not converted (None), for row_problems to name."""
    prompt, completion = row.get("prompt"), row.get("completion")
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    if isinstance(completion, str):
        completion = [{"role": "assistant", "content": completion}]
    if not (isinstance(prompt, list) and isinstance(completion, list)):
        return None, []
    system = row.get("system")
    out = {"messages": ([{"role": "system", "content": system}] if isinstance(system, str) and system else [])
           + prompt + completion}
    if row.get("tools") is not None:
        out["tools"] = row["tools"]
    return out, []


# Every format converted on load, by row_format's name: row -> (the chat row or None, problems),
# None or problems leaving the row as it was for row_problems to name.
CONVERTERS = {"sharegpt": _from_sharegpt, "alpaca": _from_alpaca, "functions": _from_functions,
              "prompt-completion": _from_prompt_completion}


def to_chat(row: Any) -> Any:
    """`convert(row)` without the format name."""
    return convert(row)[0]


def convert(row: Any) -> tuple[Any, str | None]:
    """(the row as a chat row, the format it was in: see FORMAT_NAMES); a row this cannot turn
    into messages is returned as it is, for `row_problems` to name.

    `prompt` / `completion` are strings (a user turn and an assistant turn) or message lists
    (TRL's conversational prompt-completion); a `system` string becomes the first message,
    `tools` is kept. ShareGPT, Alpaca and OpenAI's legacy functions are converted as the module
    docstring says. `tools` and `messages` as JSON text (how CSV, Parquet and Hub datasets often
    store them: one column type for every tool schema) are parsed, and content given as text
    parts is joined.
    """
    for key in ("tools", "messages"):  # JSON text in a column, as CSV and Parquet often hold them
        if isinstance(row, dict) and isinstance(row.get(key), str):
            try:
                value = json_loads(row[key])
            except (json.JSONDecodeError, RecursionError):
                value = None
            if isinstance(value, list):
                row = {**row, key: value}
            elif key == "tools" and (value is None and row[key].strip() in ("", "null")):
                row = {k: v for k, v in row.items() if k != "tools"}  # a row without tools, as JSON text
    fmt = row_format(row)
    if fmt in CONVERTERS:
        converted, problems = CONVERTERS[fmt](row)
        if problems or converted is None:
            return row, fmt
        row = converted
    if isinstance(row, dict) and isinstance(row.get("messages"), list) and any(
            isinstance(m, dict) and isinstance(m.get("content"), list) for m in row["messages"]):
        row = {**row, "messages": [{**m, "content": _text_parts(m["content"])} if isinstance(m, dict) and
                                   isinstance(m.get("content"), list) else m for m in row["messages"]]}
    return row, fmt


def _json_type(value: Any) -> str:
    return {str: "string", dict: "object", list: "list", bool: "boolean", int: "number", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__)


def normalise(row: dict[str, Any], columnar: bool = False) -> dict[str, Any]:
    """Tool-call arguments as dicts (chat templates render them with `tojson`); null fields
    dropped (Parquet and `datasets` give every message every column, null where absent, and
    templates test `'tool_calls' in message`).

    `columnar`: rows from Arrow (Parquet, `datasets`), where one struct type spans every row,
    so each tool call's arguments and each tool schema hold every other row's keys as nulls
    (`{"city": "Paris", "amount": null, ...}`); those nulls are dropped, or the model would
    learn to write them. (Arguments stored as JSON text keep their own nulls.)
    """
    if row.get("tools") is None:
        row.pop("tools", None)
    elif columnar:
        row["tools"] = _drop_nulls(row["tools"])
    row["messages"] = [{k: v for k, v in m.items() if v is not None or k == "content"} for m in row["messages"]]
    for m in row["messages"]:
        for tc in m.get("tool_calls") or []:
            if isinstance(tc["function"].get("arguments"), str):  # checked above: JSON text
                tc["function"]["arguments"] = decode_arguments(tc["function"]["arguments"])
            elif columnar:
                tc["function"]["arguments"] = _drop_nulls(tc["function"].get("arguments", {}))
    return row


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def validate_rows(rows: Iterable[Any], where: str, columnar: bool = False) -> list[dict[str, Any]]:
    """Check every row; raise one UserError naming each bad row, else return them normalised
    (`columnar`: rows from Arrow; see `normalise`)."""
    rows, formats = zip(*map(convert, rows)) if rows else ((), ())
    problems = [(i + 1, p) for i, row in enumerate(rows) for p in row_problems(row)]
    if not columnar:  # JSON or CSV cells; Arrow strings are UTF-8, without surrogates
        problems += [(i + 1, p) for i, row in enumerate(rows) if (p := surrogate_problem(row, ""))]
    problems += format_problems(list(enumerate(formats, 1)))
    if not rows:
        problems.append((None, "has no rows"))
    _raise_grouped(problems, where, "row")
    announce(formats, where)
    return [normalise(r, columnar) for r in rows]


def _family(fmt: str | None) -> str | None:
    """ShareGPT, Alpaca, or the OpenAI/TRL family (chat, prompt-completion, legacy functions)."""
    return fmt if fmt in ("sharegpt", "alpaca", None) else "chat"


def format_problems(formats: list[tuple[int, str | None]]) -> list[tuple[int, str]]:
    """A file mixing ShareGPT or Alpaca rows with rows of another format: each row outside the
    file's most common format, named. (Usually files appended by mistake; and a converted file
    must mean one thing, since the conversion is silent row by row.)"""
    counts: dict[str, int] = {}
    for _, fmt in formats:
        if _family(fmt):
            counts[_family(fmt)] = counts.get(_family(fmt), 0) + 1
    if len(counts) < 2:
        return []
    major = max(counts, key=counts.get)
    names = {**FORMAT_NAMES, "chat": "chat ('messages') or prompt-completion"}
    return [(at, f"row is {names[_family(fmt)]}, but {counts[major]} of the file's {sum(counts.values())} rows are "
                 f"{names[major]}: a file holds one format; convert this row to it, or remove it")
            for at, fmt in formats if _family(fmt) and _family(fmt) != major]


_QUIET = contextvars.ContextVar("quiet_conversions", default=False)


@contextlib.contextmanager
def quiet_conversions():
    """A context in which reading a dataset says nothing of its conversion: for checks that read
    it only to validate it (run_local's before the run, validate-params), so that a run says it
    once, from the step that converts (deliver-dataset), instead of three times."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


def announce(formats: Iterable[str | None], where: str) -> None:
    """One line per converted format, so that a run's log says what the trainer made of the file."""
    if _QUIET.get():
        return
    formats = list(formats)
    for fmt in CONVERTED:
        if n := formats.count(fmt):
            print(f"{where}: {n} {FORMAT_NAMES[fmt]} row{'s' if n > 1 else ''} converted to chat messages", flush=True)


def _loads(text: str) -> tuple[Any, list[str]]:
    """json.loads, and the keys that an object repeats: json keeps only the last value of
    `{"prompt": "a", "prompt": "b"}`, so one of them would be dropped without a word."""
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        if len(out) < len(items):
            seen: set[str] = set()
            repeated.extend(k for k, _ in items if k in seen or seen.add(k))
        return out

    return json_loads(text, object_pairs_hook=pairs), repeated


def json_loads(text: str, **kwargs: Any) -> Any:
    """json.loads, with a whole number longer than Python's int limit (4300 digits) as a
    JSONDecodeError at its place, as any other malformed JSON, instead of a bare ValueError."""
    try:
        return json.loads(text, **kwargs)
    except json.JSONDecodeError:
        raise
    except ValueError as err:
        limit = sys.get_int_max_str_digits()
        if "integer string conversion" not in str(err) or not isinstance(text, str):
            raise
        at = re.search(r"\d{%d,}" % (limit + 1), text)
        raise json.JSONDecodeError(f"a number of more than {limit} digits (Python reads at most {limit})", text,
                                   at.start() if at else 0) from None


def _repeated(key: str) -> str:
    return f"has the key {key!r} twice (a JSON reader keeps only the last value): keep one"


def _raise_grouped(problems: list[tuple[int | None, str]], where: str, unit: str) -> None:
    """One UserError for (line or row number, problem) pairs: the same problem on many rows
    is one line naming the first few ("lines 1, 2, 3 and 37 more"), so a file in another
    format says so once; different problems are capped at MAX_REPORTED."""
    groups: dict[str, list[int | None]] = {}
    for at, text in problems:
        groups.setdefault(text, []).append(at)
    lines = []
    for text, ats in groups.items():
        if ats == [None]:
            lines.append(f"{where}: {text}")
        elif len(ats) == 1:
            lines.append(f"{where}:{ats[0]}: {text}" if unit == "line" else f"{where} {unit} {ats[0]}: {text}")
        else:
            shown = ", ".join(map(str, ats[:3])) + (f" and {len(ats) - 3} more" if len(ats) > 3 else "")
            lines.append(f"{where} {unit}s {shown}: {text}")
    if len(lines) > MAX_REPORTED:
        lines = lines[:MAX_REPORTED] + [f"... and {len(lines) - MAX_REPORTED} more"]
    collect(lines, what=f"bad dataset {where}")
