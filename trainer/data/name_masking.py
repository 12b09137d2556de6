"""Name masking (pipeline parameter `name_masking`): training rows whose function and parameter names are random.

A model tuned on rows that call a handful of tools learns their names: `get_weather` is called for weather
whatever its description says, and a tool it never saw is declined or called by its name's look alone. Hammer
(MadeAgents/Hammer, train/data_processing.py) masks the names in 2/3 of its rows, calls included: function names
become random strings of 5-15 characters and parameter names of 4-10, the same in the row's tools, its calls and
its text, and the tool list is shuffled, so the model has to read the descriptions to choose a tool and to fill
its arguments. With random names, five schemas become thousands of distinct tools. Hammer2.1-0.5b, trained so,
keeps BFCL's irrelevance at 80.8% where xLAM-2-1b, without it, has 64.5% (BFCL v4 board), at a similar AST.

What is renamed, per row (one mapping for the whole row): each offered function's name; each of its top-level
parameters (the `properties` keys, `required`, and the keys of every call's arguments; nested objects keep theirs,
as Hammer's do); the calls' names and a tool result's `name`; and, in every text of the row (the turns, the
descriptions), a name written as an identifier (`get_weather`, `from_unit`, `getWeather`: with `_`, `.`, `-`, a
digit or an inner capital, so that a tool called `search` does not rewrite the word "search" in a request).
Descriptions, values and defaults stay as they are.

Which rows: `name_masking` of the train split's rows that offer tools, drawn with the seed, after the irrelevance
rows are made (trainer.data.masking), so an irrelevance copy may be renamed too. A row whose calls name a function
it does not offer, or give arguments that are not an object, is left as it is (its calls could not follow the
renaming). The eval split is never renamed: it measures the names the application will send.
"""

from __future__ import annotations

import copy
import keyword
import random
import re
import string
from typing import Any

from trainer.chat.types import Row, Tool
from trainer.core.errors import UserError
from trainer.data.formats import QUIET
from trainer.data.masking import is_fraction

FUNCTION_CHARS = (5, 15)  # Hammer's lengths
PARAMETER_CHARS = (4, 10)
_FIRST = string.ascii_lowercase
_REST = string.ascii_lowercase + string.digits
# A name written as an identifier in text: renamed there too; a plain lowercase word is left alone (it is English).
_IDENTIFIER_LIKE = re.compile(r"[_.\-0-9]|[a-z][A-Z]")


def share_problem(share: Any, name: str = "name_masking") -> str | None:
    """Why `share` is not a usable name-masking share (None when it is), with the fix."""
    if not is_fraction(share):
        return (
            f"{name} must be a number from 0 to 1 (the share of the training rows with tools whose function and "
            f"parameter names are replaced by random ones), got {share!r}: e.g. {name}=0.67, as Hammer trains"
        )
    return None


def data_problem(
    splits: dict[str, list[Row]], share: float, what: str = "the dataset", name: str = "name_masking"
) -> str | None:
    """The refusal of a share above 0 for data whose training rows offer no tool (None otherwise)."""
    if share <= 0 or any(renamable(r) for r in splits.get("train", [])):
        return None
    offering = [r for r in splits.get("train", []) if r.get("tools")]
    why = (
        "no training row offers tools"
        if not offering
        else f"each of its {len(offering)} training rows with tools calls a function it does not offer, or gives "
        "arguments that are not a JSON object"
    )
    return f"{name}={share:g}, but {what} has no row whose names can be masked: {why}; set {name}=0"


def _fn(tool: Any) -> dict[str, Any] | None:
    fn = tool.get("function") if isinstance(tool, dict) else None
    return fn if isinstance(fn, dict) and isinstance(fn.get("name"), str) else None


def renamable(row: Row) -> bool:
    """A row that offers tools with distinct names, whose every call names one of them with an object of arguments."""
    fns = [_fn(t) for t in row.get("tools") or []]
    if not fns or any(f is None for f in fns):
        return False
    names = [f["name"] for f in fns if f is not None]
    if len(set(names)) != len(names):
        return False
    for m in row["messages"]:
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            if fn.get("name") not in names or not isinstance(fn.get("arguments"), dict):
                return False
    return True


def identifier(rng: random.Random, chars: tuple[int, int], taken: set[str]) -> str:
    """A random name of `chars` characters (a letter, then letters and digits), none of `taken` and no Python
    keyword (a pythonic call format writes it as code)."""
    while True:
        n = rng.randint(*chars)
        name = rng.choice(_FIRST) + "".join(rng.choice(_REST) for _ in range(n - 1))
        if name not in taken and not keyword.iskeyword(name) and not keyword.issoftkeyword(name):
            taken.add(name)
            return name


def _properties(fn: dict[str, Any]) -> dict[str, Any]:
    params = fn.get("parameters")
    props = params.get("properties") if isinstance(params, dict) else None
    return props if isinstance(props, dict) else {}


def mapping(row: Row, rng: random.Random) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(function name -> new name, function name -> {parameter -> new parameter}) for one row."""
    fns = [f for t in row.get("tools") or [] if (f := _fn(t)) is not None]
    taken = {f["name"] for f in fns} | {p for f in fns for p in _properties(f)}
    functions = {f["name"]: identifier(rng, FUNCTION_CHARS, taken) for f in fns}
    parameters = {}
    for f in fns:
        mine: set[str] = set()  # parameter names are unique within their function; any may repeat across them
        parameters[f["name"]] = {p: identifier(rng, PARAMETER_CHARS, mine | taken) for p in _properties(f)}
    return functions, parameters


def _text_renamer(words: dict[str, str]):
    """A function that rewrites each identifier-like key of `words` written as a whole name in a text."""
    shown = {k: v for k, v in words.items() if _IDENTIFIER_LIKE.search(k)}
    if not shown:
        return lambda text: text
    pattern = re.compile(
        r"(?<![A-Za-z0-9_])("
        + "|".join(re.escape(k) for k in sorted(shown, key=len, reverse=True))
        + r")(?![A-Za-z0-9_])"
    )
    return lambda text: pattern.sub(lambda m: shown[m.group(1)], text) if isinstance(text, str) else text


def _renamed_tool(tool: Tool, new: str, params: dict[str, str], text) -> Tool:
    out = copy.deepcopy(tool)
    fn = out["function"]
    fn["name"] = new
    if isinstance(fn.get("description"), str):
        fn["description"] = text(fn["description"])
    schema = fn.get("parameters")
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        props = {}
        for p, s in schema["properties"].items():
            s = copy.deepcopy(s)
            if isinstance(s, dict) and isinstance(s.get("description"), str):
                s["description"] = text(s["description"])
            props[params.get(p, p)] = s
        schema["properties"] = props
        if isinstance(schema.get("required"), list):
            schema["required"] = [params.get(p, p) if isinstance(p, str) else p for p in schema["required"]]
    return out


def renamed(row: Row, rng: random.Random) -> tuple[Row, dict[str, str]]:
    """A copy of `row` (renamable) with its function and parameter names random (`mapping`), the same in its
    tools, calls and texts, and its tools shuffled; and the functions' new names."""
    functions, parameters = mapping(row, rng)
    words = {**{p: n for ps in parameters.values() for p, n in ps.items()}, **functions}
    text = _text_renamer(words)
    tools = [_renamed_tool(t, functions[f["name"]], parameters[f["name"]], text) for t in row["tools"] if (f := _fn(t))]
    rng.shuffle(tools)
    messages = copy.deepcopy(row["messages"])
    for m in messages:
        if isinstance(m.get("content"), str):
            m["content"] = text(m["content"])
        for tc in m.get("tool_calls") or []:
            fn = tc["function"]
            params = parameters[fn["name"]]
            fn["arguments"] = {params.get(k, k): v for k, v in fn["arguments"].items()}
            fn["name"] = functions[fn["name"]]
        if m.get("role") == "tool" and m.get("name") in functions:
            m["name"] = functions[m["name"]]
    out = copy.deepcopy({k: v for k, v in row.items() if k not in ("messages", "tools")})
    out["messages"] = messages
    out["tools"] = tools
    return out, functions  # type: ignore[return-value]


def mask_names(
    splits: dict[str, list[Row]], share: float, seed: int, what: str = "the dataset"
) -> tuple[dict[str, list[Row]], int]:
    """The splits with `share` of the train split's renamable rows renamed in place (`renamed`), drawn with
    `seed`; the eval split as it was; and how many were renamed, said in one line (unless the reading is quiet).

    Raises:
        UserError: the share is out of range, or above 0 for data with no row to rename.
    """
    if problem := share_problem(share) or data_problem(splits, share, what):
        raise UserError(problem)
    train = splits.get("train", [])
    candidates = [i for i, r in enumerate(train) if renamable(r)]
    n = round(len(candidates) * share)
    if not n:
        return splits, 0
    rng = random.Random(f"name-masking:{seed}")
    chosen = sorted(rng.sample(candidates, n))
    out = list(train)
    example: dict[str, str] = {}
    for i in chosen:  # each row its own names, from its own stream: a row's names do not depend on the others'
        out[i], names = renamed(train[i], random.Random(f"name-masking:{seed}:{i}"))
        example = example or names
    if not QUIET.get():
        shown = ", ".join(f"{a} -> {b}" for a, b in list(example.items())[:3])
        print(
            f"{n} of {len(train)} train rows renamed by name masking (name_masking={share:g} of the {len(candidates)} "
            f"that offer tools): their function and parameter names made random, the same in tools, calls and text, "
            f"the tools shuffled; the eval split keeps its names. E.g. {shown}",
            flush=True,
        )
    return {**splits, "train": out}, n
