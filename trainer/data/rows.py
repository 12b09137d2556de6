"""Row checks: what a chat row must hold (roles, content, tools, tool calls and their arguments),
every problem with its row number, rows normalised (arguments as objects), and a file's rows
validated as one (every format converted, mixed formats refused). See trainer.data."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from typing import Any, Iterable, cast

from trainer.chat.calls import decode_arguments
from trainer.core.errors import collect
from trainer.chat.fc_check import check_call, parameters
from trainer.chat.types import RawRow, Row, ToolCall
from trainer.data.formats import QUIET, no_messages, part_types, announce, conversion_problems, convert, format_problems
from trainer.core.jsontext import ESCAPED_SURROGATE, json_type, loads, repeated_key, non_finite_paths, surrogate_problem


ROLES = {"system", "user", "assistant", "tool"}


# Other formats' names for ROLES (OpenAI's newer 'developer', ShareGPT's, Gemini's), named in the fix.
_ROLE_NAMES = {
    "developer": "system",
    "human": "user",
    "gpt": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "function": "tool",
    "ipython": "tool",
}


MAX_REPORTED = 20  # problems listed before "... and N more": enough to see a pattern


def _tool_name_problem(name: str) -> str | None:
    """What makes `name` a name no application can call: empty, or holding white space or control characters.
    Dots and other punctuation are real (BFCL's math.factorial) and kept; OpenAI's API itself takes only
    ^[a-zA-Z0-9_-]{1,64}$, which the serving side maps as it must."""
    if not name.strip():
        return "is empty: no application can call a tool without a name; name it, or drop the tool"
    if bad := sorted({repr(c) for c in name if c.isspace() or unicodedata.category(c).startswith("C")}):
        return (
            f"holds {', '.join(bad)} (white space or control characters): no tool-call parser reads it back; "
            "use letters, digits, '_', '-' or '.' (OpenAI's API takes ^[a-zA-Z0-9_-]{1,64}$)"
        )
    return None


_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def typed(schema: Any, value: Any) -> Any:
    """`value` in the type its JSON schema gives, where it says the same value in another spelling: "5" or 5.0 for an
    integer, "2.5" for a number, "true" for a boolean (datasets write numbers as text); anything else unchanged."""
    if not isinstance(schema, dict):
        return value
    kind = schema.get("type")
    kind = {"int": "integer", "float": "number", "bool": "boolean"}.get(kind, kind) if isinstance(kind, str) else None
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        return {k: typed(schema["properties"].get(k), v) for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [typed(schema["items"], v) for v in value]
    if isinstance(value, str) and kind in ("integer", "number") and _NUMBER.fullmatch(value):
        number = int(value) if _INTEGER.fullmatch(value) else float(value)
        return number if kind == "number" and math.isfinite(number) or isinstance(number, int) else value
    if isinstance(value, str) and kind == "boolean" and value in ("true", "false"):
        return value == "true"
    if isinstance(value, float) and kind == "integer" and value.is_integer():
        return int(value)
    return value


def schema_problems(row: dict[str, Any]) -> list[str]:
    """Why the calls of a checked, normalised row (nulls of columnar files dropped) break their tools' schemas (a
    type, an enum, an undeclared or a missing required parameter), read as `typed` reads them: the checker scores
    answers by the schema, so it would score an exact copy of such a call wrong."""
    return [
        problem
        for i, m in enumerate(row["messages"])
        for j, tc in enumerate(m.get("tool_calls") or [])
        if row.get("tools")
        and (
            problem := _schema_problem(
                row["tools"], tc["function"], f"messages[{i}].tool_calls[{j}].function.arguments"
            )
        )
    ]


def _schema_problem(tools: list, fn: dict[str, Any], at: str) -> str | None:
    name = fn["name"]
    call = ToolCall(name=name, arguments=typed(parameters(tools, name), fn.get("arguments", {})))
    if why := check_call(tools, call, call):
        return (
            f"{at} breaks its own tool's schema ({why.removeprefix(name + ': ')}): the evaluation would score an "
            "exact copy of this call as wrong, and training would teach it; fix the call's value or the tool's "
            "parameters"
        )
    return None


MAX_DEPTH = 64  # levels of nesting in a call's arguments or a row's tools: real ones have a handful


def _too_deep(value: Any) -> bool:
    """Whether a JSON value nests more than MAX_DEPTH levels (walked without recursion: the checks after this one
    recurse, and ~500 levels exhaust Python's stack)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > MAX_DEPTH:
                return True
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


def parameters_problems(schema: Any, at: str) -> list[str]:
    """Where a tool's parameter schema is not JSON Schema in the parts the checker and the templates read (`required`
    a list of names, `properties` an object of schemas, `type` a name, `enum` a list, `items` and `anyOf` schemas).
    A null is an absent key: Arrow gives one for every key another row has. Accepted before, `"required": 5`
    crashed the checker, and `"required": "city"` was read as the names 'c', 'i', 't', 'y'."""
    if schema is None or isinstance(schema, bool):  # absent; JSON Schema's true / false
        return []
    if not isinstance(schema, dict):
        return [f"{at} must be a JSON schema object, got {_shown(schema)}"]
    problems = []
    required = schema.get("required")  # a bool: JSON Schema draft 3's "this property is required" (MCP tools have it)
    if (
        required is not None
        and not isinstance(required, bool)
        and not (isinstance(required, list) and all(isinstance(k, str) for k in required))
    ):
        problems.append(f"{at}.required must be a list of parameter names, e.g. [\"city\"], got {_shown(required)}")
    kind = schema.get("type")
    if kind is not None and not (
        isinstance(kind, str) or isinstance(kind, list) and all(isinstance(t, str) for t in kind)
    ):
        problems.append(f"{at}.type must be a type name such as \"string\" (or a list of them), got {_shown(kind)}")
    if schema.get("enum") is not None and not isinstance(schema["enum"], list):
        problems.append(f"{at}.enum must be a list of the allowed values, got {_shown(schema['enum'])}")
    properties = schema.get("properties")
    if properties is not None and not isinstance(properties, dict):
        problems.append(f"{at}.properties must be an object of parameter name -> its schema, got {_shown(properties)}")
    elif properties:
        problems += [p for name, sub in properties.items() for p in parameters_problems(sub, f"{at}.properties.{name}")]
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), list) and key == "items":  # a tuple's schemas (JSON Schema before 2020-12)
            problems += [p for i, sub in enumerate(schema[key]) for p in parameters_problems(sub, f"{at}.{key}[{i}]")]
        else:
            problems += parameters_problems(schema.get(key), f"{at}.{key}")
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key) is not None and not isinstance(schema[key], list):
            problems.append(f"{at}.{key} must be a list of schemas, got {_shown(schema[key])}")
        else:
            problems += [
                p for i, sub in enumerate(schema.get(key) or []) for p in parameters_problems(sub, f"{at}.{key}[{i}]")
            ]
    return problems


def _repeated_in(text: str) -> str | None:
    """The first key a JSON text repeats at any depth, or None (also for text that is not JSON)."""
    try:
        found = loads(text)[1]
        return found[0] if found else None
    except (ValueError, RecursionError):
        return None


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def row_problems(row: Any) -> list[str]:
    """Every reason `row` is not a valid chat row (empty list when it is valid).

    Field types are checked here, at delivery, because the chat template would fail on them
    only inside training: `tools` a list of functions, `content` a string (null only next to
    tool_calls), and tool calls naming a tool the row declares in `tools` (a row without `tools`
    refuses its calls as `tools: []` does).
    """
    if not isinstance(row, dict):
        return [f"row is {'null' if row is None else 'a ' + json_type(row)}, expected a JSON object with 'messages'"]
    if (refused := conversion_problems(row)) is not None:  # convert converts such rows unless they are broken
        return refused
    messages = row.get("messages")
    if messages is None:
        return [no_messages(row)]
    if isinstance(messages, str):  # JSON text that did not parse (convert parses the text that does)
        repr_like = messages.lstrip().startswith(("[{'", "[ {'"))
        return [
            "'messages' is text that is not a JSON list of messages"
            + (
                "; it looks like a Python repr (single quotes): write the column with json.dumps"
                if repr_like
                else "; store the list itself, or valid JSON text"
            )
        ]
    if not isinstance(messages, list) or not messages:
        return ["'messages' must be a non-empty list"]
    problems = []
    if row.get("functions") is not None:  # left by convert: not a list, or beside 'tools'
        problems.append(
            "'functions' (OpenAI's legacy format) must be a list of function schemas, and not given "
            "beside 'tools': keep one of them"
        )
    tools, declared = row.get("tools"), None
    if tools is not None:
        if isinstance(tools, str) and (twice := _repeated_in(tools)):  # left as text by convert: a key twice
            problems.append(
                f"'tools' (JSON text) has the key {twice!r} twice (a JSON reader keeps only the last value): keep one"
            )
        elif not isinstance(tools, list):
            problems.append(
                f"'tools' must be a list of {{\"type\": \"function\", \"function\": {{\"name\": ...}}}} "
                f"objects (or that list as JSON text), got a {json_type(tools)}"
            )
        else:
            declared, deep = set(), _too_deep(tools)
            for k, t in enumerate(tools):
                fn = t.get("function", t) if isinstance(t, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    problems.append(f"tools[{k}] needs function.name (OpenAI tool format)")
                elif problem := _tool_name_problem(fn["name"]):
                    problems.append(f"tools[{k}].function.name {fn['name']!r} {problem}")
                elif fn["name"] in declared:
                    problems.append(
                        f"tools[{k}].function.name {fn['name']!r} is declared twice in the row: a call "
                        "could not say which it means; give each tool its own name"
                    )
                else:
                    declared.add(fn["name"])
                if isinstance(fn, dict) and not deep:
                    problems += parameters_problems(fn.get("parameters"), f"tools[{k}].function.parameters")
            if deep:
                problems.append(
                    f"'tools' is nested more than {MAX_DEPTH} levels deep; a tool's schema needs a handful: "
                    "check how the data was generated"
                )
            elif bad := non_finite_paths(tools, "tools"):  # json reads NaN and 1e999 in a schema's default or enum
                problems.append(
                    f"{', '.join(bad[:3])} must be a finite number, not NaN or Infinity (not JSON: the "
                    "delivered file would not read back): give a real number, a string or null"
                )
    call_ids: set[str] = set()  # the ids of the calls made so far: what a tool result answers
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            problems.append(f"messages[{i}] is not an object")
            continue
        answered = m.get("tool_call_id")
        if m.get("role") == "tool" and isinstance(answered, str) and call_ids and answered not in call_ids:
            problems.append(
                f"messages[{i}].tool_call_id {answered!r} answers no call made before it (the calls' "
                f"ids: {sorted(call_ids)}); fix the id, or the result belongs to another row"
            )
        if not isinstance(m.get("role"), str) or m["role"] not in ROLES:
            same = _ROLE_NAMES.get(str(m.get("role")).lower())
            problems.append(
                f"messages[{i}] has unknown role {m.get('role')!r}; use one of {sorted(ROLES)}"
                + (f" ({m.get('role')!r} is {same!r} here)" if same else "")
            )
        weight = m.get("weight")
        if weight is not None and m.get("role") != "assistant":
            problems.append(
                f"messages[{i}] has a weight, which only assistant messages take (OpenAI's format): remove it"
            )
        elif weight is not None and (isinstance(weight, bool) or weight not in (0, 1)):
            problems.append(f"messages[{i}].weight must be 0 (do not train on this message) or 1, got {weight!r}")
        if m.get("function_call") is not None:  # left by convert when it is not {name, arguments}
            problems.append(
                f"messages[{i}].function_call must be {{\"name\": ..., \"arguments\": ...}} "
                "(OpenAI's legacy format), or give tool_calls"
            )
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            problems.append(f"messages[{i}].tool_calls must be a list, got a {json_type(calls)}")
            calls = []
        content = m.get("content")
        if content is None and not calls:
            problems.append(
                f"messages[{i}].content is missing or null; it must be a string (null only in an "
                "assistant message with tool_calls)"
            )
        elif content is not None and not isinstance(content, str):
            problems.append(
                f"messages[{i}].content must be a string, got a {json_type(content)}"
                + (
                    f"; only text parts can be trained on, and this one has {part_types(content)}"
                    if isinstance(content, list)
                    else ""
                )
            )
        for j, tc in enumerate(calls or []):
            if isinstance(tc, dict) and isinstance(tc.get("id"), str):
                call_ids.add(tc["id"])
            fn = tc.get("function") if isinstance(tc, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                problems.append(f"messages[{i}].tool_calls[{j}] needs function.name")
                continue
            if problem := _tool_name_problem(fn["name"]):
                problems.append(f"messages[{i}].tool_calls[{j}] calls {fn['name']!r}, which {problem}")
                continue
            if declared is not None and fn["name"] not in declared:
                problems.append(
                    f"messages[{i}].tool_calls[{j}] calls {fn['name']!r}, which is not in the row's "
                    f"tools {sorted(declared)}; declare it in 'tools' or fix the name"
                )
            elif tools is None:  # as `tools: []`: the model would learn to call a tool it was never offered
                problems.append(
                    f"messages[{i}].tool_calls[{j}] calls {fn['name']!r}, but the row has no 'tools' (a "
                    "call to a tool never offered): add the tool's schema to the row's 'tools' ({\"type\": "
                    "\"function\", \"function\": {\"name\", \"description\", \"parameters\"}}), or drop "
                    "the row"
                )
            args, at = fn.get("arguments", {}), f"messages[{i}].tool_calls[{j}].function.arguments"
            if isinstance(args, str):
                try:
                    args, repeated = loads(args)
                except json.JSONDecodeError as err:
                    problems.append(f"{at} is not valid JSON ({err.msg})")
                    continue
                except RecursionError:
                    problems.append(f"{at} is nested too deeply")
                    continue
                problems += [f"{at} {repeated_key(k)}" for k in dict.fromkeys(repeated)]
                if ESCAPED_SURROGATE.search(fn["arguments"]) and (problem := surrogate_problem(args, at)):
                    problems.append(problem)
            if not isinstance(args, dict):
                problems.append(f"{at} must be a JSON object")
            elif _too_deep(args):
                problems.append(
                    f"{at} is nested more than {MAX_DEPTH} levels deep; no tool takes that: check how the "
                    "data was generated"
                )
            elif bad := non_finite_paths(args, at):
                # json reads NaN and 1e999; the model would learn to write what no tool parser reads
                problems.append(
                    f"{', '.join(bad[:3])} must be a finite number, not NaN or Infinity (not JSON, "
                    "and no tool-call parser reads it back): give a real number, a string or null"
                )
    answers = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    if not answers:
        problems.append("no assistant message: there is nothing to learn from this row")
    elif all(m.get("weight") == 0 for m in answers):
        problems.append(
            "every assistant message has weight 0: there is nothing to learn from this row; set "
            "weight 1 on the turns to learn, or drop the row"
        )
    elif not any(
        m.get("tool_calls") or not isinstance(m.get("content"), (str, type(None))) or (m.get("content") or "").strip()
        for m in answers
    ):  # (content of another type is named above)
        problems.append(
            "every assistant message is empty (no content, no tool_calls): there is nothing to learn "
            "from this row but an end-of-turn token; fill them in, or drop the row"
        )
    return problems


def normalise(row: dict[str, Any], columnar: bool = False) -> dict[str, Any]:
    """Tool-call arguments as dicts (chat templates render them with `tojson`), {} where a call has none; null fields
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
            # a call without arguments (row_problems reads it as {}) written as {}: chat templates render
            # `function.arguments` and failed on it with a TypeError whose fix was about the template
            tc["function"].setdefault("arguments", {})
            if isinstance(tc["function"].get("arguments"), str):  # checked above: JSON text
                tc["function"]["arguments"] = decode_arguments(tc["function"]["arguments"])
            elif columnar:
                tc["function"]["arguments"] = _drop_nulls(tc["function"].get("arguments", {}))
    return row


def _without_filler(row: Any) -> Any:
    """A columnar row's structured `tools` and xLAM `answers` without Arrow's filler nulls: an xLAM parameter read a
    filler `"default": null` as optional, and a parameter of another row's tool as its own (JSON text columns, as
    the published datasets store them, are read as written)."""
    if not isinstance(row, dict):
        return row
    return {
        k: _drop_nulls(v) if k in ("tools", "answers") and isinstance(v, (list, dict)) else v for k, v in row.items()
    }


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def validate_rows(rows: Iterable[Any], where: str, columnar: bool = False) -> list[Row]:
    """Check every row; raise one UserError naming each bad row, else return them normalised
    (`columnar`: rows from Arrow; see `normalise`)."""
    if columnar:  # Arrow gives every struct every key some row has, null where absent: before a conversion reads them
        rows = [_without_filler(r) for r in rows]
    rows, formats = zip(*map(convert, rows)) if rows else ((), ())
    problems: list[tuple[int | None, str]] = [(i + 1, p) for i, row in enumerate(rows) for p in row_problems(row)]
    if not columnar:  # JSON or CSV cells; Arrow strings are UTF-8, without surrogates
        problems += [(i + 1, p) for i, row in enumerate(rows) if (p := surrogate_problem(row, ""))]
    problems += format_problems(list(enumerate(formats, 1)))
    if not rows:
        problems.append((None, "has no rows"))
    return checked_rows(list(rows), range(1, len(rows) + 1), problems, formats, where, "row", columnar)


def checked_rows(
    rows: list[RawRow],
    ats: Iterable[int],
    problems: list[tuple[int | None, str]],
    formats: Iterable[str | None],
    where: str,
    unit: str,
    columnar: bool = False,
) -> list[Row]:
    """The end of every reader: rows without a problem normalised, their calls checked against their own tools'
    schemas, one UserError for all problems (rows numbered `ats`, by `unit`: "row" or "line"), else the rows with
    their conversion said and their arguments read as the schemas' types."""
    ats = list(ats)
    bad = {at for at, _ in problems}
    rows = [r if at in bad else normalise(r, columnar) for at, r in zip(ats, rows)]
    problems = problems + [(at, p) for at, r in zip(ats, rows) if at not in bad for p in schema_problems(r)]
    _raise_grouped(problems, where, unit)
    checked = cast(list[Row], rows)  # every row passed row_problems and schema_problems: each is a Row
    announce(formats, where)
    _retype(checked, where)
    return checked


def _retype(rows: list[Row], where: str) -> None:
    """Call arguments spelled in another type than their schema's ("5" for an integer) read as the schema's type
    (`typed`), in place, said once with a count and an example: the model learns the type the server's callers get."""
    changed, example = 0, ""
    for n, row in enumerate(rows, 1):
        for m in row["messages"]:
            for tc in m.get("tool_calls") or []:
                fn = tc["function"]
                if not row.get("tools") or not isinstance(fn.get("arguments"), dict):
                    continue
                new = typed(parameters(row["tools"], fn["name"]), fn["arguments"])
                if json.dumps(new) != json.dumps(fn["arguments"]):
                    changed += 1
                    example = example or f"row {n}: {json.dumps(fn['arguments'])} -> {json.dumps(new)}"
                    fn["arguments"] = new
    if changed and not QUIET.get():
        print(
            f"{where}: {changed} call{'s' if changed > 1 else ''} gave values in another spelling than their tool's "
            f"schema types (text for a number or a boolean, 2.0 for an integer), read as the schema's type; e.g. "
            f"{example}",
            flush=True,
        )


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
