"""BFCL's AST checker (Berkeley Function Calling Leaderboard v4, bfcl-eval==2026.3.23) for one answer.

The rules are those of BFCL's `eval_checker/ast_eval/ast_checker.py` for Python, with the model taken as an
OpenAI-style FC model whose function names were served with `.` written as `_` (underscore_to_dot), and its
tool calls read as BFCL's FC handlers and eval_runner read them: each call's arguments decoded with
json.loads, a decode failure or arguments that are not a JSON object making the answer "no valid function
call". Its quirks are kept, since a score is only BFCL's if it is: accepted values compared with `==` after
string standardisation, `""` among them meaning the parameter may be omitted, an int accepted for a float,
parallel calls matched greedily in the answer's order (the first call that fits is taken), nested values
checked one level deep. tests/unit/test_bfcl_check.py compares these verdicts with BFCL's own checker.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, cast

from trainer.chat.calls import decode_arguments
from trainer.data.bfcl import BfclRow, served_name

# ast_checker.py PYTHON_TYPE_MAPPING: the Python type a parameter's value must have, by its Gorilla type.
PYTHON_TYPES = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
# Types whose items are type-checked too (one level deep).
NESTED_TYPES = ("array", "tuple")
# standardize_string: these characters are dropped before strings are compared ("April 1, 2024" = "april 1 2024").
_IGNORED = re.compile(r"[ ,./\-_*^]")
_SHOWN = 120


def _clip(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _short(value: Any) -> str:
    return _clip(repr(value))


def standardize(text: str) -> str:
    """BFCL's standardize_string: spaces and `,./-_*^` dropped, lower case, `'` read as `"`."""
    return _IGNORED.sub("", text).lower().replace("'", '"')


def _std(value: Any) -> Any:
    return standardize(value) if type(value) is str else value


def _answer_type(accepted: list) -> type | None:
    """The type of the first accepted value that is not `""` (None: only `""`)."""
    for value in accepted:
        if value != "":
            return type(value)
    return None


def _items_fit(value: list, accepted_item: Any, nested: type) -> bool:
    """type_checker's nested check against one accepted value: an accepted value that is not a list
    (`""`, a variable's name) lets any items through."""
    if type(accepted_item) is not list:
        return True
    answer_type = _answer_type(accepted_item)
    return all(type(v) is nested or (answer_type is not None and type(v) is answer_type) for v in value)


def _type_error(
    param: str, value: Any, accepted: list, kind: str, expected: type, nested: type | None
) -> tuple[str | None, bool]:
    """BFCL's type_checker: (the error or None, whether the value counts as a variable). The accepted values'
    own type, where it is not the declared one, marks them as variables' names, and a value of that type is
    then compared as it is, without standardisation."""
    answer_type = _answer_type(accepted)
    is_variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if nested is None or any(_items_fit(cast(list, value), a, nested) for a in accepted):  # expected is list
            return None, is_variable
        return (
            f"wrong item type in parameter {param!r}: expected {kind} items of type {nested.__name__}, got "
            f"{_short(value)}"
        ), False
    if answer_type is not None and type(value) is answer_type:
        return None, True
    return f"wrong type for parameter {param!r}: expected {kind}, got {type(value).__name__} {_short(value)}", False


def _accepted(values: list) -> str:
    shown = [v for v in values if v != ""]
    return _short(shown) + (" or omitted" if "" in values else "")


def _string_error(param: str, value: str, accepted: list) -> str | None:
    if standardize(value) not in [standardize(a) for a in accepted if type(a) is str]:
        return f"invalid value for parameter {param!r}: got {_short(value)}, expected one of {_accepted(accepted)}"
    return None


def _list_error(param: str, value: list, accepted: list) -> str | None:
    # list_checker standardises the strings one level deep; an accepted `""` becomes the empty list.
    if [_std(v) for v in value] not in [[_std(x) for x in a] for a in accepted]:
        return f"invalid value for parameter {param!r}: got {_short(value)}, expected one of {_accepted(accepted)}"
    return None


def _one_dict_error(param: str, value: dict, answer: dict) -> str | None:
    for key, got in value.items():
        if key not in answer:
            return f"unexpected key {key!r} in parameter {param!r}"
        if _std(got) not in [_std(a) for a in answer[key]]:
            return (
                f"invalid value for key {key!r} of parameter {param!r}: got {_short(got)}, expected one of "
                f"{_accepted(answer[key])}"
            )
    for key, values in answer.items():
        if key not in value and "" not in values:
            return f"missing key {key!r} in parameter {param!r}"
    return None


def _dict_error(param: str, value: dict, accepted: list) -> str | None:
    """BFCL's dict_checker: some accepted dict (each key's accepted values) fits, its values compared one level
    deep."""
    error: str | None = f"invalid value for parameter {param!r}: got {_short(value)}, expected it omitted"
    for answer in accepted:
        if answer == "":
            continue
        error = _one_dict_error(param, value, answer)
        if error is None:
            return None
    return error


def _list_dict_error(param: str, value: list, accepted: list) -> str | None:
    """BFCL's list_dict_checker: some accepted list of dicts fits item by item, in order."""
    error: str | None = (
        f"invalid value for parameter {param!r}: got {_short(value)}, expected one of {_accepted(accepted)}"
    )
    for answer in accepted:
        if len(value) != len(answer):
            error = f"wrong number of items in parameter {param!r}: got {len(value)}, expected {len(answer)}"
            continue
        for i, (item, want) in enumerate(zip(value, answer)):
            if type(item) is not dict:
                # Reached only where an accepted `""` let the items' type check pass; BFCL's checker raises
                # AttributeError there (its whole run stops), an answer cannot be right that way.
                error = f"item {i} of parameter {param!r} is not an object: {_short(item)}"
            else:
                error = _dict_error(f"{param}[{i}]", item, [want])
            if error is not None:
                break
        else:
            return None
    return error


def _param_error(param: str, value: Any, accepted: list, spec: dict) -> str | None:
    kind = spec["type"]
    expected = PYTHON_TYPES[kind]
    nested = PYTHON_TYPES[spec["items"]["type"]] if kind in NESTED_TYPES else None
    if kind == "float" and type(value) is int:
        value = float(value)  # Python's own int -> float promotion, which BFCL allows
    error, is_variable = _type_error(param, value, accepted, kind, expected, nested)
    if error is not None:
        return error
    if not is_variable:
        if expected is dict:
            return _dict_error(param, value, accepted)
        if expected is list and nested is dict:
            return _list_dict_error(param, value, accepted)
        if expected is str:
            return _string_error(param, value, accepted)
        if expected is list:
            return _list_error(param, value, accepted)
    if value not in accepted:
        return f"invalid value for parameter {param!r}: got {_short(value)}, expected one of {_accepted(accepted)}"
    return None


def _call_error(function: dict, call: tuple[str, dict], answer: dict) -> str | None:
    """BFCL's simple_function_checker: one decoded call (name, arguments) against one possible answer
    ({function name: {parameter: accepted values}}) of `function` (its original document)."""
    accepted = next(iter(answer.values()))
    name, args = call
    want = served_name(function["name"])
    if name != want:
        return f"wrong function name: got {name!r}, expected {want!r}"
    props = function["parameters"]["properties"]
    for param in function["parameters"]["required"]:
        if param not in args:
            return f"missing required parameter {param!r} of {want}"
    for param, value in args.items():
        if param not in props or param not in accepted:
            return f"unexpected parameter {param!r} in {want}"
        error = _param_error(param, value, accepted[param], props[param])
        if error is not None:
            return error
    for param, values in accepted.items():
        if param not in args and "" not in values:
            return f"missing parameter {param!r} of {want} (BFCL's answer needs it)"
    return None


def _described(functions: list[dict], name: str) -> dict:
    return next(f for f in functions if f["name"] == name)


def _parallel_error(functions: list[dict], calls: list[tuple[str, dict]], answers: list[dict]) -> str | None:
    """BFCL's parallel_function_checker_no_order: each expected call, in the answer's order, takes the first
    call not yet taken that fits it (greedy: no search for another assignment)."""
    # Only for the reason: calls to other functions than expected can never all be matched.
    wanted = Counter(served_name(next(iter(answer))) for answer in answers)
    got = Counter(name for name, _ in calls)
    taken: set[int] = set()
    for i, answer in enumerate(answers):
        expected = next(iter(answer))
        function = _described(functions, expected)
        errors = []
        for j, call in enumerate(calls):
            if j in taken:
                continue
            error = _call_error(function, call, answer)
            if error is None:
                taken.add(j)
                break
            if call[0] == served_name(expected):
                errors.append(error)
        else:
            if wanted != got:
                why = (
                    f"calls to {sorted((got - wanted).elements())} where BFCL expects "
                    f"{sorted((wanted - got).elements())}"
                )
            else:
                why = errors[0] if errors else f"no call to {served_name(expected)!r} left"
            return f"no call matches expected call {i + 1} of {len(answers)} ({served_name(expected)}): {why}"
    return None


def _decoded(calls: list[dict]) -> tuple[list[tuple[Any, dict]], str | None]:
    """The calls as (name, arguments) and the reason BFCL's FC decoding would find no valid function call:
    arguments that are not JSON (decode_ast fails) or not a JSON object (is_function_calling_format_output)."""
    out: list[tuple[Any, dict]] = []  # a name as the model wrote it: None where it wrote none
    for n, call in enumerate(calls, 1):
        name = call.get("name")
        try:
            args = decode_arguments(call.get("arguments"))
        except json.JSONDecodeError as err:
            return [], f"call {n} ({name}): arguments are not valid JSON ({err.msg})"
        if not isinstance(args, dict):
            return [], f"call {n} ({name}): arguments are not a JSON object: {_short(args)}"
        out.append((name, args))
    return out, None


def check(row: BfclRow, calls: list[dict], content: str | None = None) -> tuple[bool, str]:
    """BFCL's verdict on one answer. `row`: a row from trainer.data.bfcl.read. `calls`: the model's tool calls
    as an OpenAI client reads them: [{"name": str, "arguments": dict or JSON text}] with the served names
    (dots written as `_`). `content`: the answer's text, which BFCL ignores (it only words the reason).
    Returns (right, reason): reason "" when right, else one short line saying why."""
    category = row["category"]
    decoded, invalid = _decoded(calls)
    # eval_runner's rules by category name, as BFCL tests them (substrings).
    if "irrelevance" in category:
        if invalid or not decoded:
            return True, ""
        name, args = decoded[0]
        return False, f"a call where none was wanted: {name}({_clip(json.dumps(args, ensure_ascii=False))})"
    if invalid:
        return False, invalid
    answers = row["ground_truth"]
    # A simple category wants one call whatever its answer lists; the others one per expected call.
    wanted = len(answers) if "parallel" in category or "multiple" in category else 1
    if len(decoded) != wanted:
        if not decoded:
            said = " (answered in text)" if content and content.strip() else ""
            return False, f"no function call{said}, expected {wanted}"
        return False, f"wrong number of calls: got {len(decoded)}, expected {wanted}"
    functions = row["functions"]
    if "parallel" in category:
        error = _parallel_error(functions, decoded, answers)
    elif "multiple" in category:
        error = _call_error(_described(functions, next(iter(answers[0]))), decoded[0], answers[0])
    else:
        # simple: BFCL checks against the row's first (only) function document.
        error = _call_error(functions[0], decoded[0], answers[0])
    return (True, "") if error is None else (False, error)
