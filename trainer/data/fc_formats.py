"""Readers for the function-calling datasets users name, each into chat rows with OpenAI `tools`,
assistant `tool_calls` and `tool` results (trainer.data.formats detects, converts and announces them;
this module imports nothing of it):

  glaive-function-calling-v2  `system` ("SYSTEM: <text> -" then one JSON object per function) and `chat`
                              ("USER: ...", "ASSISTANT: <functioncall> {"name", "arguments": '{...}'}
                              <|endoftext|>", "FUNCTION RESPONSE: ..."): the arguments are JSON text in
                              single quotes, which no JSON reader takes whole, so they are cut out and read
  hermes-function-calling-v1  ShareGPT (formats reads the turns) whose system turn holds <tools>[...]</tools>,
                              gpt turns <tool_call>{"name", "arguments"}</tool_call> (text around them is
                              kept) and tool turns <tool_response>...</tool_response>, one result each
  xLAM / APIGen               `query`, `tools` (a tool's `parameters` a flat {param: {"type": "int", ...}})
                              and `answers` ([{"name", "arguments"}], several = parallel calls)
  OpenAI fine-tuning          chat rows with `parallel_tool_calls`: false refuses a turn of several calls

Calls are numbered call_0, call_1, ... through the row and each result carries the id of the call it
answers, in order (as the built-in data and OpenAI's format write them). Readers return (the chat row,
[]) or (None, every problem, each with its fix).
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from typing import Any, cast

from trainer.chat.types import Message, RawRow, Row, Tool, ToolCall, WireCall
from trainer.core.jsontext import json_type, loads, repeats_hook, json_loads


def _twice(repeated: list[str]) -> str:
    keys = ", ".join(repr(k) for k in dict.fromkeys(repeated))
    return (
        f"repeats the key {keys} (a reader keeps only the last value, and the others would be dropped "
        "without a word): keep one"
    )


def _literal(text: str) -> tuple[Any, str | None, str | None]:
    """(value, None, None) for JSON text or a Python literal; (None, why the JSON did not parse, None)
    for neither; (None, None, the problem) for text that reads only by changing a value: a key an
    object repeats (a reader keeps the last value) or, in a Python literal, two strings with no comma
    between them (Python joins them into one). Hermes's data writes some tools and calls as Python
    reprs ({'name': ...}); literal_eval reads those and runs no code."""
    try:
        value, repeated = loads(text)
        return (None, None, _twice(repeated)) if repeated else (value, None, None)
    except json.JSONDecodeError as err:
        why = f"{err.msg} at character {err.pos}"
    except RecursionError:
        return None, "nested too deeply", None
    try:
        tree = ast.parse(text.strip(), mode="eval")
        value = ast.literal_eval(tree)
        if problem := _changed_by_reading(tree, text.strip()):
            return None, None, problem
        return json_loads(json.dumps(value)), None, None  # tuples as lists, as JSON has them
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None, why, None


_SKIPPED = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\}|[0-7]{1,3}|.)", re.S)
# The escapes Python's repr writes (a Python literal in the data was written by repr, or by hand): \\, quotes, \n \r
# \t, and \x / \u / \U for a character it cannot print; the others (\a \b \f \v, octal, \N{...}, \x41 for "A")
# are what a value written with single backslashes holds by accident
_REPR_ESCAPES = {"\\", "'", '"', "n", "r", "t"}


def _escape_problem(token: str) -> str | None:
    """Why a Python string literal reads as other text than it shows (None when it does not): an escape repr never
    writes, as a path or a pattern written with single backslashes has ("C:\\data\\file" would be trained with a
    form feed, "\\x41" as "A")."""
    prefix = token[: len(token) - len(token.lstrip("rRbBuUfF"))]
    if "r" in prefix.lower():
        return None
    for m in _ESCAPE.finditer(token[len(prefix) :]):
        esc = m.group(1)
        if esc in _REPR_ESCAPES or not (esc in "abfv" or esc[0] in "01234567xuUN"):
            continue  # what repr writes, or no escape at all (Python keeps "\\d" as it is)
        if esc[0] in "xuU" and len(esc) > 1 and not chr(int(esc[1:], 16)).isprintable():
            continue
        if esc[0] in "xuUN" and len(esc) == 1:
            continue  # "\\x" without its digits: no escape either (a SyntaxError, read as JSON's problem)
        return (
            f"reads {token[:60]} as {ast.literal_eval(token)[:40]!r}: the backslash in \\{esc} is an escape in a "
            "Python literal; write the value as JSON, or double the backslash"
        )
    return None


def _changed_by_reading(tree: ast.Expression, text: str) -> str | None:
    """What reading a Python literal would change, or None: a dict's repeated key (the last value is
    kept) or adjacent strings, which ast joins into one ("Bern" "Oslo" is "BernOslo"), so they are
    found in the tokens."""
    repeated: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            seen: list[Any] = []
            for key in node.keys:
                k = ast.literal_eval(key) if key is not None else None
                if k in seen:
                    repeated.append(str(k))
                seen.append(k)
    if repeated:
        return _twice(repeated)
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in _SKIPPED]
    for t in tokens:
        if t.type == tokenize.STRING and (problem := _escape_problem(t.string)):
            return problem
    for a, b in zip(tokens, tokens[1:]):
        if a.type == b.type == tokenize.STRING:
            joined = ast.literal_eval(a.string + " " + b.string)
            return (
                f"reads {a.string} {b.string} as one string {joined!r}: a comma is missing between two strings "
                "(Python joins strings written side by side); add the comma"
            )
    return None


def _arguments(args: Any) -> tuple[dict | None, str | None]:
    """A call's arguments as an object: JSON text read, none as {}; (None, why) otherwise (a key
    the JSON repeats is a why: a reader keeps only its last value)."""
    if args is None or (isinstance(args, str) and not args.strip()):
        return {}, None
    if isinstance(args, str):
        try:
            # control characters in strings: generated text has raw newlines
            args, repeated = loads(args, strict=False)
        except (json.JSONDecodeError, RecursionError) as err:
            return None, f"are not JSON ({getattr(err, 'msg', 'nested too deeply')})"
        if repeated:
            return None, _twice(repeated).replace("repeats", "repeat", 1)
    return (args, None) if isinstance(args, dict) else (None, f"are a {json_type(args)}, not a JSON object")


def _call(name: str, args: dict) -> WireCall:
    return WireCall(type="function", function={"name": name, "arguments": args})


def link_results(messages: list[Message], problems: list[str] | None = None) -> list[Message]:
    """Ids on the calls (call_0, call_1, ... through the row) and on each tool result the id of the
    first call of the latest call turn it has not answered yet: these datasets give results in the
    order of the calls, and without ids a result of parallel calls could answer either. A result
    with no call left to answer goes into `problems` (a result of nothing teaches nothing true)."""
    n, waiting = 0, list[str]()
    for i, m in enumerate(messages):
        if m.get("tool_calls"):
            m["tool_calls"] = [WireCall(**{"id": f"call_{n + j}", **c}) for j, c in enumerate(m["tool_calls"])]
            n, waiting = n + len(m["tool_calls"]), [c["id"] for c in m["tool_calls"]]
        elif m.get("role") == "tool" and m.get("tool_call_id") is None:
            if waiting:
                m["tool_call_id"] = waiting.pop(0)
            elif problems is not None:
                problems.append(
                    f"the tool result {str(m.get('content'))[:40]!r} (message {i + 1}) has no call left to "
                    "answer (each result answers one call made before it, in order): drop the extra "
                    "result, or the row"
                )
    return messages


# glaive-function-calling-v2 -------------------------------------------------------------------------

# A turn starts at its name at a line's start (the dataset separates turns by blank lines), so that "ASSISTANT:"
# inside a sentence stays text; a chat whose turns are not on lines of their own (some exports use a space) splits
# at the name after any white space.
_GLAIVE_LINE_TURN = re.compile(r"^[ \t]*(USER|ASSISTANT|FUNCTION RESPONSE):[ \t]*", re.M)
_GLAIVE_TURN = re.compile(r"(?<!\S)(USER|ASSISTANT|FUNCTION RESPONSE):[ \t]*")
_ENDED_THEN_MORE = re.compile(r"<\|endoftext\|>\s*\S")
_GLAIVE_ROLES = {"USER": "user", "ASSISTANT": "assistant", "FUNCTION RESPONSE": "tool"}
# {"name": "f", "arguments": '<JSON text>'}: everything between the first and the last single quote, so
# that an apostrophe inside the arguments ('{"note": "it's late"}') stays in them
_QUOTED_ARGS = re.compile(
    r"""\{\s*"name"\s*:\s*"(?P<name>[^"\\]*)"\s*,\s*"arguments"\s*:\s*'(?P<args>.*)'\s*\}""", re.S
)
_SPACE = re.compile(r"\s*")
_GLAIVE_CALL = 'glaive writes a call as <functioncall> {"name": "f", "arguments": \'{"a": 1}\'}'


def _glaive_tools(system: str, problems: list[str]) -> tuple[str, list[Tool]]:
    """(the system prompt's text, its function schemas as OpenAI tools)."""
    text = system.strip()
    text = text[len("SYSTEM:") :].strip() if text.upper().startswith("SYSTEM:") else text
    repeated: list[str] = []
    start, tools, decoder = text.find("{"), list[Tool](), json.JSONDecoder(object_pairs_hook=repeats_hook(repeated))
    if start < 0:  # "with no access to external functions": a prompt without tools
        return text, []
    pos = start
    while (pos := _SPACE.match(text, pos).end()) < len(text):  # type: ignore[union-attr]  # \s* always matches
        try:
            schema, pos = decoder.raw_decode(text, pos)
        except ValueError as err:  # JSONDecodeError, or a number past Python's digit limit
            problems.append(
                f"'system' holds {text[pos : pos + 40]!r}..., not a function's JSON schema "
                f"({getattr(err, 'msg', err)}): glaive's system is \"SYSTEM: <text> -\" then one JSON "
                "object per function; fix it, or drop the row"
            )
            return text, []
        if repeated:
            problems.append(f"'system' function {len(tools) + 1} {_twice(repeated)}, or drop the row")
            return text, []
        if not (isinstance(schema, dict) and isinstance(schema.get("name"), str)):
            problems.append(
                f"'system' function {len(tools) + 1} has no 'name': each function is a JSON schema "
                "{\"name\", \"description\", \"parameters\"}"
            )
        tools.append({"type": "function", "function": schema})
    # The prompt's own text stays: templates write the tools after the system text, where it reads on.
    return text[:start].strip(), tools


def _glaive_call(text: str, where: str, problems: list[str]) -> WireCall | None:
    """The call after <functioncall>: JSON, or JSON but for its arguments in single quotes."""
    text, repeated = text.strip(), list[str]()
    try:
        call, end = json.JSONDecoder(object_pairs_hook=repeats_hook(repeated)).raw_decode(text)
        rest = text[end:].strip()
    except ValueError:
        m = _QUOTED_ARGS.match(text)
        call, rest = ({"name": m["name"], "arguments": m["args"]}, text[m.end() :].strip()) if m else (None, "")
        repeated = []  # of a call that did not parse whole: its arguments are read below
    if repeated:
        problems.append(f"{where}: the call {text[:80]!r} {_twice(repeated)}, or drop the row")
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        problems.append(
            f"{where}: the call {text[:80]!r} is not {{\"name\": ..., \"arguments\": ...}}: "
            f"{_GLAIVE_CALL}; fix it, or drop the row"
        )
        return None
    if rest:
        problems.append(
            f"{where}: text follows the call ({rest[:40]!r}): {_GLAIVE_CALL} <|endoftext|>, "
            "any text before it; move the text, or drop the row"
        )
        return None
    args, why = _arguments(call.get("arguments"))
    if why or args is None:
        problems.append(f"{where}: the arguments of {call['name']!r} {why}: {_GLAIVE_CALL}; fix them, or drop the row")
        return None
    return _call(call["name"], args)


def from_glaive(row: RawRow) -> tuple[Row | None, list[str]]:
    """glaive-function-calling-v2's `system` and `chat` as a chat row (see the module docstring)."""
    system, chat, problems = row.get("system"), row.get("chat"), list[str]()
    if not isinstance(chat, str) or not chat.strip():
        problems.append(
            "'chat' must be glaive's conversation as text (\"USER: ...\\n\\nASSISTANT: ...\"), got "
            + (f"a {json_type(chat)}" if chat is not None and not isinstance(chat, str) else "none")
        )
    if system is not None and not isinstance(system, str):
        problems.append(f"'system' must be text (\"SYSTEM: ...\" then the functions' JSON), got a {json_type(system)}")
    if problems or not isinstance(chat, str):  # (the second: to say so to mypy)
        return None, problems
    prompt, tools = _glaive_tools(system or "", problems)
    messages = [Message(role="system", content=prompt)] if prompt else []
    before, *turns = _GLAIVE_LINE_TURN.split(chat)
    if len(turns) < 4 or any(_ENDED_THEN_MORE.search(text) for text in turns[1::2]):
        # fewer than two turns on lines of their own, or a turn going on after its end: turns separated by spaces
        before, *turns = _GLAIVE_TURN.split(chat)
    if before.strip():
        problems.append(
            f"'chat' starts with {before.strip()[:40]!r}, not a turn: glaive's turns start with "
            "USER:, ASSISTANT: or FUNCTION RESPONSE:"
        )
    for n, (who, text) in enumerate(zip(turns[::2], turns[1::2]), 1):
        text, where = text.replace("<|endoftext|>", "").strip(), f"'chat' turn {n} ({who})"
        if who == "ASSISTANT" and text.count("<functioncall>") > 1:
            problems.append(
                f"{where} holds {text.count('<functioncall>')} <functioncall>s: glaive makes one call "
                "per turn, and the reader cannot tell where the first one ends; split the turn, or drop "
                "the row"
            )
        elif who == "ASSISTANT" and "<functioncall>" in text:
            said, _, call = text.partition("<functioncall>")
            if (call := _glaive_call(call, where, problems)) and not tools:
                problems.append(
                    f"{where} calls {call['function']['name']!r}, but 'system' lists no function (a call "
                    "to a tool never offered): add the function's JSON schema to 'system' (glaive's system "
                    "is \"SYSTEM: <text> -\" then one JSON object per function), or drop the row"
                )
            elif call:
                messages.append(Message(role="assistant", content=said.strip(), tool_calls=[call]))
        elif not text:
            problems.append(f"{where} is empty: every turn needs its text; fill it in, or drop the row")
        else:
            messages.append(Message(role=_GLAIVE_ROLES[who], content=text))
    messages = link_results(messages, problems)
    if problems:
        return None, problems
    return (Row(messages=messages, tools=tools) if tools else Row(messages=messages)), []


# hermes-function-calling-v1 ---------------------------------------------------------------------------

_TAGGED = {tag: re.compile(rf"<{tag}>(.*?)</{tag}>", re.S) for tag in ("tools", "tool_call", "tool_response")}


def is_hermes(turns: Any, roles: dict[str, str]) -> bool:
    """ShareGPT turns that hold Hermes's tags: <tools> around something in a system turn (its prose
    names the tags too), <tool_call> in an assistant's, <tool_response> in a tool's (`roles`:
    ShareGPT's names to roles). An unclosed tag counts: the reader names it."""

    def tagged(turn: Any) -> bool:
        role = roles.get(turn["from"].strip().lower())
        if role == "system":
            return any(body.strip() for body in _TAGGED["tools"].findall(turn["value"]))
        return (role == "assistant" and "<tool_call>" in turn["value"]) or (
            role == "tool" and "<tool_response>" in turn["value"]
        )

    return isinstance(turns, list) and any(
        isinstance(t, dict) and isinstance(t.get("value"), str) and isinstance(t.get("from"), str) and tagged(t)
        for t in turns
    )


def _cut(value: str, tag: str, where: str, problems: list[str]) -> tuple[list[str], str]:
    """(the bodies of value's <tag>...</tag> blocks, the text around them, a line each). A blank <tools> body
    stays in the text: Hermes's system prompt names the tags in prose ("within <tools> </tools> XML tags");
    a blank call or result is a problem."""
    bodies, pieces, at = [], [], 0
    for m in _TAGGED[tag].finditer(value):
        if tag != "tools" and not m[1].strip():  # outside a system prompt's prose, a blank block is a broken one
            problems.append(f"{where} has an empty <{tag}></{tag}>: fill it in or remove it, or drop the row")
        if m[1].strip():
            bodies.append(m[1].strip())
            pieces.append(value[at : m.start()])
            at = m.end()
    rest = "\n".join(p.strip() for p in [*pieces, value[at:]] if p.strip())
    if tag != "tools" and f"<{tag}>" in _TAGGED[tag].sub("", rest):
        problems.append(f"{where} has a <{tag}> without its </{tag}>: close it, or drop the row")
    return bodies, rest


def hermes_turns(
    turns: list, key: str, roles: dict[str, str], offered: bool = False
) -> tuple[list, list[Tool], list[str]]:
    """(ShareGPT turns with Hermes's tags made real, the tools, problems): a call becomes a
    `function_call` turn (which ShareGPT's reader joins to the text before it), each result a tool
    turn of its own; problems name the turns as given. A call with no tool offered (no system turn's
    <tools>, and not `offered` by the row's own 'tools') is a problem: the model would learn to call a
    tool it was never given."""
    out: list[Any] = []
    tools: list[Tool] = []
    problems: list[str] = []
    called: list[tuple[str, str]] = []  # (where, the function's name)
    misplaced = None
    for i, turn in enumerate(turns):
        who = turn.get("from") if isinstance(turn, dict) else None
        role = roles.get(who.strip().lower()) if isinstance(who, str) else None
        value, where = turn.get("value") if isinstance(turn, dict) else None, f"{key}[{i}]"
        if (
            not isinstance(value, str)
            or role not in ("system", "assistant", "tool")
            or str(who).strip().lower() == "function_call"
        ):  # already a call, as ShareGPT writes one
            out.append(turn)
        elif role == "system":
            bodies, rest = _cut(value, "tools", where, problems)
            for body in bodies:
                found, why, refused = _literal(body)
                if refused:
                    problems.append(f"{where}: <tools> {refused}, or drop the row")
                elif why or not isinstance(found, (list, dict)):
                    problems.append(
                        f"{where}: <tools> holds {body[:60]!r}, not a JSON list of function schemas "
                        f"({why or 'a ' + json_type(found)}); fix it, or drop the row"
                    )
                else:
                    tools += found if isinstance(found, list) else [cast(Tool, found)]
            out.append({**turn, "value": rest} if bodies else turn)
        elif role == "assistant":
            bodies, rest = _cut(value, "tool_call", where, problems)
            calls: list[ToolCall] = []
            for body in bodies:
                call, why, refused = _literal(body)
                if refused:
                    problems.append(f"{where}: <tool_call> {body[:60]!r} {refused}, or drop the row")
                elif why or not isinstance(call, dict) or not isinstance(call.get("name"), str):
                    problems.append(
                        f"{where}: <tool_call> holds {body[:60]!r}, not {{\"name\": ..., \"arguments\": "
                        f"{{...}}}}{' (' + why + ')' if why else ''}; fix it, or drop the row"
                    )
                elif (args := _arguments(call.get("arguments")))[1]:
                    problems.append(f"{where}: the arguments of {call['name']!r} {args[1]}; fix them, or drop the row")
                else:
                    calls.append(ToolCall(name=call["name"], arguments=args[0]))
                    called.append((where, call["name"]))
            # The text around the calls is the turn's text, before them (templates write text, then calls).
            out += [{**turn, "value": rest}] if rest or not bodies else []
            if calls:
                weight = {"weight": turn["weight"]} if not rest and turn.get("weight") is not None else {}
                out.append({"from": "function_call", "value": json.dumps(calls), **weight})
        else:
            bodies, rest = _cut(value, "tool_response", where, problems)
            if bodies and rest:
                problems.append(
                    f"{where} has text outside its <tool_response> blocks ({rest[:40]!r}): a tool turn "
                    "holds results only; move it, or drop the row"
                )
            out += [{"from": who, "value": body} for body in bodies] if bodies else [turn]
        if (
            misplaced is None
            and role not in ("system", None)
            and isinstance(value, str)
            and any(body.strip() for body in _TAGGED["tools"].findall(value))
        ):
            misplaced = where
    if called and not tools and not offered:
        where, name = called[0]
        problems.append(
            f"{where} calls {name!r}, but no system turn offers a tool in <tools>[...]</tools> (a call to a "
            "tool never offered)"
            + (f"; the <tools> in {misplaced} is not read there, only in the system turn" if misplaced else "")
            + ": add the tool's schema to the system turn's <tools> list, or drop the row"
        )
    return out, tools, problems


# xLAM / APIGen ----------------------------------------------------------------------------------------

# Python's type names as xLAM writes them ("int", "List[int]", "str, optional") and JSON schema's
_TYPES = {
    "str": "string",
    "string": "string",
    "int": "integer",
    "integer": "integer",
    "float": "number",
    "number": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "list": "array",
    "tuple": "array",
    "set": "array",
    "sequence": "array",
    "array": "array",
    "dict": "object",
    "mapping": "object",
    "object": "object",
    "none": "null",
}
_TYPE = re.compile(r"\s*(\w+)\s*(?:\[(.*)\])?\s*")
_OPTIONAL = re.compile(r",\s*optional\s*$")  # "str, optional"


def _schema(text: str) -> dict[str, Any]:
    """A Python type's JSON schema. A type JSON schema has no word for (Callable, datetime), or says
    only as a list of types (Union[int, str]), is left open, not guessed: the parameter's description
    still says what it is."""
    m = _TYPE.fullmatch(text)
    base, inner = (m[1].lower(), m[2]) if m else ("", None)
    if base == "union" and inner and "[" not in inner:  # one type when the members say one (None: nullable)
        kinds = {_schema(t).get("type") for t in inner.split(",")} - {"null"}
        kinds = {"number"} if kinds == {"integer", "number"} else kinds
        return {"type": kinds.pop()} if len(kinds) == 1 and None not in kinds else {}
    if base not in _TYPES:
        return {}
    items = _schema(inner) if inner and _TYPES[base] == "array" and "," not in inner else {}
    return {"type": _TYPES[base], **({"items": items} if items else {})}


def _xlam_parameters(params: Any, where: str, problems: list[str]) -> dict[str, Any]:
    """xLAM's {param: {"type", "description", "default"?}} as a JSON schema object: a parameter is
    required unless it has a default or its type says optional. A JSON schema is kept as it is."""
    if isinstance(params, dict) and params.get("type") == "object":
        return params
    if params is None:
        params = {}
    if not isinstance(params, dict) or not all(isinstance(p, dict) for p in params.values()):
        problems.append(
            f"{where}.parameters must be {{param: {{\"type\": ..., \"description\": ...}}}} (xLAM) or a "
            "JSON schema; fix it, or drop the row"
        )
        return {}
    properties, required = {}, []
    for name, p in params.items():
        kind = p.get("type")
        optional = isinstance(kind, str) and bool(_OPTIONAL.search(kind) or kind.startswith("Optional["))
        if isinstance(kind, str):  # Python's type text; a JSON schema's type (a list, say) is kept as it is
            kind = _OPTIONAL.sub("", kind)
            kind = kind[len("Optional[") : -1] if kind.startswith("Optional[") and kind.endswith("]") else kind
            p = {**_schema(kind), **{k: v for k, v in p.items() if k != "type"}}
        properties[name] = p
        if not optional and "default" not in p:
            required.append(name)
    return {"type": "object", "properties": properties, "required": required}


def _listed(value: Any, key: str, shape: str, problems: list[str]) -> list | None:
    """A list given as itself or as JSON text (the dataset's columns are text)."""
    if isinstance(value, str):
        try:
            value, repeated = loads(value)
        except (json.JSONDecodeError, RecursionError) as err:
            problems.append(
                f"'{key}' is text that is not JSON ({getattr(err, 'msg', 'nested too deeply')}): give "
                f"{shape}, or it as JSON text"
            )
            return None
        if repeated:
            problems.append(f"'{key}' {_twice(repeated)}, or drop the row")
            return None
    if not isinstance(value, list):
        problems.append(
            f"'{key}' must be {shape} (or it as JSON text), got {'none' if value is None else 'a ' + json_type(value)}"
        )
        return None
    return value


def from_xlam(row: RawRow) -> tuple[Row | None, list[str]]:
    """xLAM / APIGen's `query`, `tools` and `answers` as a user turn and an assistant turn of calls."""
    problems, query = list[str](), row.get("query")
    if not isinstance(query, str) or not query.strip():
        problems.append("'query' must be the user's request as text")
        query = ""
    tools = _listed(row.get("tools"), "tools", "a list of {\"name\", \"description\", \"parameters\"}", problems)
    answers = _listed(row.get("answers"), "answers", "a list of calls {\"name\", \"arguments\"}", problems)
    out_tools: list[Tool] = []
    calls: list[WireCall] = []
    for k, tool in enumerate(tools or []):
        fn = tool.get("function", tool) if isinstance(tool, dict) else None  # formats wraps bare schemas already
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            problems.append(f"tools[{k}] needs a 'name' (xLAM: {{\"name\", \"description\", \"parameters\"}})")
            continue
        params = _xlam_parameters(fn.get("parameters"), f"tools[{k}]", problems)
        out_tools.append(Tool(type="function", function={**fn, "parameters": params}))
    if answers == []:
        # No call and no text to learn instead: inventing a refusal would teach one canned sentence. Rows
        # where no tool fits (Hammer's irrelevance rows) are chat rows with a text answer.
        problems.append(
            "'answers' is empty: an xLAM row teaches the calls that answer its query, and this one has "
            "none and no text answer to learn instead; for a request no tool fits, write the row as "
            "{\"messages\": [{\"role\": \"user\", ...}, {\"role\": \"assistant\", \"content\": "
            "<the answer>}], \"tools\": [...]}, or drop it"
        )
    for k, answer in enumerate(answers or []):
        if not isinstance(answer, dict) or not isinstance(answer.get("name"), str):
            problems.append(f"answers[{k}] must be a call {{\"name\": ..., \"arguments\": {{...}}}}")
        elif (args := _arguments(answer.get("arguments")))[0] is None:
            problems.append(f"answers[{k}]: the arguments of {answer['name']!r} {args[1]}")
        else:
            calls.append(_call(answer["name"], args[0]))
    if problems:
        return None, problems
    # 'tools' even when empty: the row checks then refuse a call to a tool the row does not offer
    messages = [Message(role="user", content=query), Message(role="assistant", content="", tool_calls=calls)]
    return Row(messages=link_results(messages), tools=out_tools), []


# OpenAI's fine-tuning format ----------------------------------------------------------------------------


def from_openai(row: RawRow) -> tuple[RawRow | None, list[str]]:
    """OpenAI's fine-tuning chat rows with `parallel_tool_calls`, checked and then dropped: it is a
    setting of the request the row stands for, and the row's calls are what the model learns.
    (Assistant `weight` 0/1 is the chat rows' own: trainer.data.encode honours it.)"""
    flag, messages = row.get("parallel_tool_calls"), row.get("messages")
    if not isinstance(flag, bool):
        return None, [f"'parallel_tool_calls' must be true or false (OpenAI's fine-tuning format), got {flag!r}"]
    several = [
        (i, len(m["tool_calls"]))
        for i, m in enumerate(messages if isinstance(messages, list) else [])
        if isinstance(m, dict) and isinstance(m.get("tool_calls"), list) and len(m["tool_calls"]) > 1
    ]
    if not flag and several:
        i, n = several[0]
        return None, [
            f"'parallel_tool_calls' is false, but messages[{i}] makes {n} calls at once"
            + (f" (and {len(several) - 1} more turns do)" if len(several) > 1 else "")
            + ": the model would learn calls its requests forbid; set parallel_tool_calls to true, or "
            "give each call its own turn"
        ]
    return {k: v for k, v in row.items() if k != "parallel_tool_calls"}, []
