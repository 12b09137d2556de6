"""Row formats: which format a row is in, and the formats converted to chat rows on load
(prompt-completion, ShareGPT, Alpaca, OpenAI legacy; the function-calling datasets of
trainer.data.fc_formats: glaive, Hermes, xLAM), announced once. See trainer.data."""

from __future__ import annotations

import contextlib
import contextvars
import json
from typing import Any, Iterable, cast

from trainer.data.fc_formats import from_glaive, from_openai, from_xlam, hermes_turns, is_hermes, link_results
from trainer.core.jsontext import json_type, json_loads, loads
from trainer.chat.types import Message, RawRow, Row, Tool, WireCall


# Other dataset formats, recognised by their keys, and what to do with each.
_OTHER_FORMATS = (
    ({"prompt", "completion"}, "each must be a string or a list of messages"),
    (
        {"text"},
        "plain 'text' rows are for pretraining, not chat: this trainer learns assistant turns; give "
        "'messages', or 'prompt' and 'completion'",
    ),
    ({"output"}, "Alpaca rows need 'instruction' and 'output' (and may have 'input', 'system')"),
    (
        {"chosen", "rejected"},
        "preference pairs (DPO) are not supervised fine-tuning data: train on 'chosen' as 'messages'",
    ),
    ({"query"}, "xLAM rows need 'query', 'tools' and 'answers' (a list of calls {\"name\", \"arguments\"})"),
)


def no_messages(row: dict[str, Any]) -> str:
    """Why a row without 'messages' is not chat, naming its keys and the format they suggest; for a
    row in a format converted whole (glaive, xLAM, Hermes), why its conversion failed."""
    if refused := conversion_problems(row):
        return "; ".join(refused)
    keys = sorted(map(str, row))
    shown = ", ".join(repr(k) for k in keys[:8]) + (", ..." if len(keys) > 8 else "")
    hint = next(
        (
            h
            for needed, h in _OTHER_FORMATS
            if needed & set(row) == needed or (needed == {"prompt", "completion"} and needed & set(row))
        ),
        None,
    )
    if hint is None:
        hint = "each row needs 'messages': [{role, content}, ...], or 'prompt' and 'completion' strings"
    if "messages" in row:
        return f"row has no 'messages' field (it is null); {hint}"
    if "prompt" in row or "completion" in row:
        kinds = {k: json_type(row[k]) if k in row else "missing" for k in ("prompt", "completion")}
        found = ", ".join(f"'{k}' is {'a ' + t if t not in ('null', 'missing') else t}" for k, t in kinds.items())
        return f"row has no 'messages' field, and of prompt/completion {found}: {hint}"
    return f"row has no 'messages' field (its keys: {shown or 'none'}); {hint}"


def part_types(parts: list) -> str:
    kinds = sorted({str(p.get("type")) if isinstance(p, dict) else json_type(p) for p in parts} - {"text"})
    return ", ".join(kinds) + " parts"


def _text_parts(content: Any) -> Any:
    """OpenAI content parts that are all text (`[{"type": "text", "text": ...}]`) as one string,
    as chat templates join them; anything else unchanged (row_problems names it)."""
    if (
        isinstance(content, list)
        and content
        and all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content)
    ):
        return "".join(p["text"] for p in content)
    return content


# ShareGPT's turn names (`from`), as axolotl and LLaMA-Factory write them, and the role each becomes.
# chatgpt, bing, bard: the assistant turns of the original ShareGPT dumps (FastChat's ShareGPT_Vicuna).
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "function_call": "assistant",
    "observation": "tool",
    "tool": "tool",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
}


FORMAT_NAMES = {
    "chat": "chat ('messages' of {role, content})",
    "prompt-completion": "prompt-completion",
    "sharegpt": "ShareGPT ('conversations' of {from, value})",
    "alpaca": "Alpaca (instruction, input, output)",
    "functions": "OpenAI legacy functions / function_call",
    "glaive": "glaive-function-calling-v2 (system, chat)",
    "hermes": "Hermes function calling (ShareGPT with <tools>, <tool_call>, <tool_response>)",
    "xlam": "xLAM / APIGen (query, tools, answers)",
    "openai": "OpenAI fine-tuning chat (messages, tools, parallel_tool_calls)",
}

CONVERTED = ("sharegpt", "alpaca", "functions", "glaive", "hermes", "xlam")  # formats whose conversion is announced


def row_format(row: Any) -> str | None:
    """Which of FORMAT_NAMES a raw row is in (None: none of them; row_problems says why).

    ShareGPT turns under 'messages' (`{"messages": [{"from", "value"}]}`, as some Hub datasets
    store them) count as ShareGPT; ShareGPT turns holding Hermes's tags (<tools>, <tool_call>,
    <tool_response>) are Hermes."""
    if not isinstance(row, dict):
        return None
    messages = row.get("messages")
    if (
        isinstance(messages, list)
        and messages
        and all(isinstance(m, dict) and "from" in m and m.get("role") is None for m in messages)
    ):
        return "hermes" if is_hermes(messages, SHAREGPT_ROLES) else "sharegpt"
    if messages is not None:
        legacy = row.get("functions") is not None or (
            isinstance(messages, list)
            and any(
                isinstance(m, dict) and (m.get("function_call") is not None or m.get("role") == "function")
                for m in messages
            )
        )
        return "functions" if legacy else "openai" if row.get("parallel_tool_calls") is not None else "chat"
    if row.get("conversations") is not None:
        return "hermes" if is_hermes(_json_text(row["conversations"]), SHAREGPT_ROLES) else "sharegpt"
    if row.get("chat") is not None:
        return "glaive"
    if row.get("query") is not None and row.get("answers") is not None:
        return "xlam"
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


def _as_tools(tools: Any, problems: list[str]) -> list[Tool] | None:
    """A ShareGPT/legacy tool list (JSON text or a list; bare function schemas, as LLaMA-Factory
    and OpenAI's `functions` give them) as OpenAI tools `{"type": "function", "function": {...}}`."""
    tools = _json_text(tools)
    if tools is None or tools == "" or tools == []:
        return None
    if not isinstance(tools, list):
        problems.append(
            f"'tools' must be a list of function schemas (or that list as JSON text), got a {json_type(tools)}"
        )
        return None
    return [
        cast(Tool, t)
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
        else Tool(type="function", function=t)
        for t in tools
    ]


def _bare_schema(tool: Any) -> bool:
    """A tool given as its function schema alone, without OpenAI's {"type": "function", "function": ...}."""
    return isinstance(tool, dict) and "function" not in tool and isinstance(tool.get("name"), str)


def _blank(value: Any) -> bool:
    """No text at all: null, or a string of white space only."""
    return value is None or (isinstance(value, str) and not value.strip())


def _from_sharegpt(row: dict[str, Any]) -> tuple[Row | None, list[str]]:
    """(the chat row, []) or (None, every problem): see the module docstring for the mapping.

    A function_call right after a text answer joins it (one assistant turn: text, then the call).
    Empty values and unknown `from` names are refused, not skipped: dropping a turn would change
    who says what in the rest of the conversation. An empty system turn is the exception: it
    says nothing and nobody answers it, so it is skipped (as an empty 'system' field is)."""
    key = "conversations" if row.get("messages") is None else "messages"
    turns, problems, messages = _json_text(row.get(key)), list[str](), list[Message]()
    if not isinstance(turns, list) or not turns:
        return None, [f"'{key}' must be a non-empty list of ShareGPT turns {{\"from\": ..., \"value\": ...}}"]
    system = row.get("system")
    if system is not None and not isinstance(system, str):
        problems.append(f"'system' must be a string, got a {json_type(system)}")
    elif system and system.strip():
        if any(
            isinstance(t, dict) and str(t.get("from")).strip().lower() == "system" and not _blank(t.get("value"))
            for t in turns
        ):
            problems.append("has both a 'system' field and a system turn: keep one")
        messages.append({"role": "system", "content": system})
    for i, turn in enumerate(turns):
        where = f"{key}[{i}]"
        if not isinstance(turn, dict):
            problems.append(f"{where} is a {json_type(turn)}, expected a {{\"from\": ..., \"value\": ...}} object")
            continue
        who, value = turn.get("from"), turn.get("value")
        who = who.strip().lower() if isinstance(who, str) else who  # "Human", "GPT" as some exports write them
        if not isinstance(who, str) or who not in SHAREGPT_ROLES:
            problems.append(
                f"{where} has unknown 'from' {turn.get('from')!r}: ShareGPT turns are from "
                f"{', '.join(SHAREGPT_ROLES)}; rename it (or convert the row to 'messages')"
            )
            continue
        if who == "system" and _blank(value):  # an empty system prompt says nothing: skipped, as 'system' is
            continue
        if not isinstance(value, str) or not value.strip():
            got = (
                "an empty value"
                if isinstance(value, str)
                else ("no value" if value is None else f"a {json_type(value)} value")
            )
            problems.append(
                f"{where} (from {who!r}) has {got}: every turn needs its text as a string; fill it in, or drop the row"
            )
            continue
        if who == "function_call":
            calls = _json_text(value)
            calls = calls if isinstance(calls, list) else [calls]
            if not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
                problems.append(
                    f"{where} (function_call) must be JSON text of "
                    "{\"name\": ..., \"arguments\": {...}} (or a list of them)"
                )
                continue
            tool_calls = [
                WireCall(type="function", function={"name": c["name"], "arguments": c.get("arguments", {})})
                for c in calls
            ]
            if messages and messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls"):
                messages[-1] = {**messages[-1], "tool_calls": tool_calls}
                continue
            message = Message(role="assistant", content="", tool_calls=tool_calls)
        else:
            message = Message(role=SHAREGPT_ROLES[who], content=value)
        # axolotl's per-turn weight (row_problems checks it). Exports such as SlimOrca weigh every turn
        # (human 0, system null): only an assistant turn is ever trained, so the others' weights are dropped.
        if turn.get("weight") is not None and message["role"] == "assistant":
            message["weight"] = turn["weight"]
        messages.append(message)
    out = Row(messages=messages)
    if (tools := _as_tools(row.get("tools"), problems)) is not None:
        out["tools"] = tools
    return (None, problems) if problems else (out, [])


def _from_hermes(row: dict[str, Any]) -> tuple[Row | None, list[str]]:
    """NousResearch's hermes-function-calling-v1: ShareGPT, read by _from_sharegpt (whose checks run on
    the turns as given, so that they name them as given), with the tools, calls and results that its
    tags hold made real (fc_formats.hermes_turns). The <tools> block leaves the system prompt (the
    chat template writes the tools); the rest of the prompt stays."""
    if problems := _from_sharegpt(row)[1]:
        return None, problems
    key = "conversations" if row.get("messages") is None else "messages"
    given = _as_tools(row.get("tools"), [])
    turns, tools, problems = hermes_turns(_json_text(row[key]), key, SHAREGPT_ROLES, offered=bool(given))
    if tools and given:
        problems.append("has tools both in 'tools' and in the system turn's <tools>: keep one")
    if problems:
        return None, problems
    out, problems = _from_sharegpt({**row, key: turns, **({"tools": tools} if tools else {})})
    if out is None:
        return None, problems
    out["messages"] = link_results(out["messages"], problems)
    return (None if problems else out), problems


def _from_alpaca(row: dict[str, Any]) -> tuple[Row | None, list[str]]:
    """(the chat row, []) or (None, every problem): [system], history pairs, then the user turn
    (instruction, a newline, input; either alone when the other is empty) and the output."""
    problems: list[str] = []

    def text(key: str) -> str:
        value = row.get(key)
        if value is None:
            return ""
        if isinstance(value, str):
            return value
        fix = f' (write it as text: "{value}")' if json_type(value) == "number" else ""
        problems.append(f"'{key}' must be a string, got a {json_type(value)}{fix}")
        return ""

    instruction, given, output, system = text("instruction"), text("input"), text("output"), text("system")
    if "output" not in row:  # e.g. Dolly's instruction/context/response: say which keys there are
        keys = ", ".join(map(repr, sorted(map(str, row))[:8]))
        problems.append(
            f"Alpaca row has no 'output' (its keys: {keys}): give the answer to learn as 'output' (and "
            "any context as 'input')"
        )
    elif not problems and not output.strip():
        problems.append("'output' is empty: there is nothing to learn from this row; fill it in, or drop the row")
    if not problems and not (instruction.strip() or given.strip()):
        problems.append("'instruction' and 'input' are both empty: there is no request to answer")
    messages = [Message(role="system", content=system)] if system.strip() else []
    history = _json_text(row.get("history"))
    for k, pair in enumerate(history or []):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            problems.append(f"history[{k}] must be a [request, answer] pair of strings (LLaMA-Factory's format)")
            continue
        messages += [Message(role="user", content=pair[0]), Message(role="assistant", content=pair[1])]
    if history is not None and not isinstance(history, list):
        problems.append(f"'history' must be a list of [request, answer] pairs, got a {json_type(history)}")
    request = "\n".join(t for t in (instruction, given) if t.strip())
    messages += [Message(role="user", content=request), Message(role="assistant", content=output)]
    return (None, problems) if problems else (Row(messages=messages), [])


def _from_functions(row: RawRow) -> tuple[RawRow, list[str]]:
    """OpenAI's legacy function calling as tools: `functions` -> `tools`, an assistant's
    `function_call` -> one tool call, role `function` -> `tool`. Parts that are not in that
    shape stay, for row_problems to name."""
    messages, out = [], {k: v for k, v in row.items() if k != "functions"}
    for m in row["messages"] if isinstance(row["messages"], list) else []:
        call = m.get("function_call") if isinstance(m, dict) else None
        if isinstance(call, dict) and isinstance(call.get("name"), str) and not m.get("tool_calls"):
            m = {
                **{k: v for k, v in m.items() if k != "function_call"},
                "content": m.get("content") or "",
                "tool_calls": [
                    {"type": "function", "function": {"name": call["name"], "arguments": call.get("arguments", {})}}
                ],
            }
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


def _from_prompt_completion(row: RawRow) -> tuple[RawRow | None, list[str]]:
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
    out: RawRow = {
        "messages": ([{"role": "system", "content": system}] if isinstance(system, str) and system else [])
        + prompt
        + completion
    }
    if row.get("tools") is not None:
        out["tools"] = row["tools"]
    return out, []


# Every format converted on load, by row_format's name: row -> (the chat row or None, problems),
# None or problems leaving the row as it was for row_problems to name.
CONVERTERS = {
    "sharegpt": _from_sharegpt,
    "alpaca": _from_alpaca,
    "functions": _from_functions,
    "prompt-completion": _from_prompt_completion,
    "glaive": from_glaive,
    "hermes": _from_hermes,
    "xlam": from_xlam,
    "openai": from_openai,
}

# Formats whose converter refuses a row whole: a row of them that was not converted is named by its
# converter's problems, not checked as chat (its turns are not messages, or a setting of it forbids them).
REFUSED_WHOLE = ("sharegpt", "alpaca", "glaive", "hermes", "xlam", "openai")


def conversion_problems(row: Any) -> list[str] | None:
    """Why a row of REFUSED_WHOLE's formats is not converted (an empty list: it is), or None when its
    messages are to be checked as chat: what row_problems reports first."""
    fmt = row_format(row)
    if fmt not in REFUSED_WHOLE:
        return None
    problems = CONVERTERS[fmt](row)[1]
    return (problems or None) if fmt == "openai" else problems  # an OpenAI row converted is checked as chat


def convert(row: Any) -> tuple[Any, str | None]:
    """(the row as a chat row, the format it was in: see FORMAT_NAMES); a row this cannot turn
    into messages is returned as it is, for `row_problems` to name.

    `prompt` / `completion` are strings (a user turn and an assistant turn) or message lists
    (TRL's conversational prompt-completion); a `system` string becomes the first message,
    `tools` is kept. ShareGPT, Alpaca and OpenAI's legacy functions are converted as the module
    docstring says; glaive, Hermes and xLAM rows as trainer.data.fc_formats says, and an OpenAI
    fine-tuning row's `parallel_tool_calls` is checked against its calls. `tools` and `messages`
    as JSON text (how CSV, Parquet and Hub datasets often store them: one column type for every
    tool schema) are parsed, and content given as text parts is joined.
    """
    for key in ("tools", "messages"):  # JSON text in a column, as CSV and Parquet often hold them
        if isinstance(row, dict) and isinstance(row.get(key), str):
            try:
                value, repeated = loads(row[key])
            except (json.JSONDecodeError, RecursionError):
                value, repeated = None, []
            if repeated:  # left as text, for the row's own check to name the key (parsed, only its last copy stayed)
                continue
            if isinstance(value, list):
                row = {**row, key: value}
            elif key == "tools" and (value is None and row[key].strip() in ("", "null")):
                row = {k: v for k, v in row.items() if k != "tools"}  # a row without tools, as JSON text
    if isinstance(row, dict) and isinstance(row.get("tools"), list) and any(map(_bare_schema, row["tools"])):
        # bare function schemas ({"name", "description", "parameters"}, a common shape) read as OpenAI tools, so
        # that every later step (the template check, training, evaluation) sees one shape
        row = {**row, "tools": [{"type": "function", "function": t} if _bare_schema(t) else t for t in row["tools"]]}
    fmt = row_format(row)
    if fmt in CONVERTERS:
        converted, problems = CONVERTERS[fmt](row)
        if problems or converted is None:
            return row, fmt
        row = converted
    if (
        isinstance(row, dict)
        and isinstance(row.get("messages"), list)
        and any(isinstance(m, dict) and isinstance(m.get("content"), list) for m in row["messages"])
    ):
        row = {
            **row,
            "messages": [
                {**m, "content": _text_parts(m["content"])}
                if isinstance(m, dict) and isinstance(m.get("content"), list)
                else m
                for m in row["messages"]
            ],
        }
    return row, fmt


def _family(fmt: str | None) -> str | None:
    """ShareGPT (Hermes's rows are ShareGPT: a file of them may have rows without tools), Alpaca,
    glaive, xLAM, or the OpenAI/TRL family (chat, prompt-completion, legacy functions, fine-tuning)."""
    fmt = "sharegpt" if fmt == "hermes" else fmt
    return fmt if fmt in ("sharegpt", "alpaca", "glaive", "xlam", None) else "chat"


def format_problems(formats: list[tuple[int, str | None]]) -> list[tuple[int | None, str]]:
    """A file mixing ShareGPT, Alpaca, glaive or xLAM rows with rows of another format: each row
    outside the file's most common format, named. (Usually files appended by mistake; and a converted file
    must mean one thing, since the conversion is silent row by row.)"""
    counts: dict[str, int] = {}
    for _, fmt in formats:
        if family := _family(fmt):
            counts[family] = counts.get(family, 0) + 1
    if len(counts) < 2:
        return []
    major = max(counts, key=lambda family: counts[family])
    names = {**FORMAT_NAMES, "chat": "chat ('messages') or prompt-completion"}
    return [
        (
            at,
            f"row is {names[family]}, but {counts[major]} of the file's {sum(counts.values())} rows are "
            f"{names[major]}: a file holds one format; convert this row to it, or remove it",
        )
        for at, fmt in formats
        if (family := _family(fmt)) and family != major
    ]


QUIET = contextvars.ContextVar("quiet_conversions", default=False)


@contextlib.contextmanager
def quiet_conversions():
    """A context in which reading a dataset says nothing of its conversion: for checks that read
    it only to validate it (run_local's before the run, validate-params), so that a run says it
    once, from the step that converts (deliver-dataset), instead of three times."""
    token = QUIET.set(True)
    try:
        yield
    finally:
        QUIET.reset(token)


def announce(formats: Iterable[str | None], where: str) -> None:
    """One line per converted format, so that a run's log says what the trainer made of the file."""
    if QUIET.get():
        return
    formats = list(formats)
    for fmt in CONVERTED:
        if n := formats.count(fmt):
            print(f"{where}: {n} {FORMAT_NAMES[fmt]} row{'s' if n > 1 else ''} converted to chat messages", flush=True)
