"""Function-calling checks in the style of BFCL's AST checker, reported per category.

A row is a chat row (`{"messages": [...], "tools": [...]}`, OpenAI format) scored on its
expected answer: the last assistant message (of weight 1; weight 0 marks a turn the data says
not to learn, `trainer.chat.turns.target_index`). The model's answer is what an OpenAI
client reads: `message.tool_calls` as `[{"name", "arguments"}]` (arguments a dict or JSON
text) and `message.content`.

Categories (BFCL's names, decided from the row alone, see `category`):
- `simple`: one tool offered, one call expected;
- `multiple`: several tools offered, one call expected;
- `parallel`: several calls expected in one answer (matched in any order);
- `irrelevance`: tools offered, a text answer expected (not after a tool result): any call is
  wrong, any text right;
- `multi_turn`: a text answer to a tool result (the turn after a `tool` message): right when it
  makes no call and its words overlap the expected answer's by ROUGE-L F1 >= TEXT_MATCH_MIN. A
  call turn after a tool result is `simple`, `multiple` or `parallel` by what it calls.
Rows with no tools and a text answer are plain chat (`chat`), not function calling: they count
in no `fc_` metric. A row with several assistant turns is scored once per turn by the evaluation
(`trainer.chat.turns.turn_rows`); each cut row is one of these categories.

Why ROUGE-L for the answer to a tool result: exact match fails every rewording of a right answer
(a model that reports "18 degrees and sunny in Paris" for "It is sunny and 18 degrees in Paris"),
and "any text" passes garbage (both models writing byte noise scored 100% here). ROUGE-L F1 is
the longest run of the expected answer's words, in order, that the answer holds, against both
lengths (Lin 2004; the standard summary measure): noise and an unrelated sentence score near 0, an
answer that repeats the result's values in the expected words scores high. 0.5 means half the
words in order; the number is the threshold, not a measured optimum.

A call is right (the AST check; BFCL `bfcl/eval_checker/ast_eval/ast_checker.py`,
`simple_function_checker` and helpers) when it names the expected function, gives every
parameter the schema requires, gives no parameter the schema does not declare, and each value
has the schema's JSON type (`integer` an integer, `number` any number so `2.0` passes for 2, a
bool never a number), is in the schema's `enum`, and equals the expected value: strings after
BFCL's `standardize_string` (case, white space and `,./-_*^` ignored) unless the schema has an
enum, numbers by value, arrays item by item in order, objects key by key with the same rules.
The expected value is the row's own call, so each parameter has one right value; two cleaner
allowances stand in for BFCL's lists of possible answers: an optional parameter left out, or
given, counts as its schema `default`. The exact check is today's: the same name and
JSON-equal arguments (2 == 2.0, but True is not 1), with no normalisation (and for an answer to a
tool result, the same words after `normalize_text`).
"""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Any, Callable

from trainer.core import metrics as names
from trainer.chat.calls import as_call
from trainer.chat.usertext import words
from trainer.chat.types import CategoryScore, Row, Summary, Tool, ToolCall, Verdict
from trainer.chat.turns import after_tool_result, expected_calls, expected_text, target_index

CATEGORIES = ("simple", "multiple", "parallel", "irrelevance", "multi_turn")
CHAT = "chat"  # no tools offered, text expected: not a function-calling row
TEXT_MATCH_MIN = 0.5  # ROUGE-L F1 a text answer to a tool result needs (the module docstring says why)

# BFCL's standardize_string: "April 1, 2024" == "april 1,2024" == "April 1 2024". It also reads
# ' as ", so a Python-ish repr inside a string matches its JSON spelling.
_IGNORED = re.compile(r"[\s,./\-_*^]")

_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}
# BFCL's own type names in its function docs (Python flavour), read as their JSON types.
_ALIASES = {"float": "number", "dict": "object", "tuple": "array"}


def normalize_text(text: str) -> str:
    """Case folded, punctuation dropped (ASCII's and every other script's: "。", "、", "«"), white space collapsed
    (SQuAD-style, without article removal)."""
    text = "".join(
        c for c in text.lower() if c not in string.punctuation and not unicodedata.category(c).startswith("P")
    )
    return " ".join(text.split())


def text_tokens(text: str) -> list[str]:
    """A text's words as the contamination guard splits them (trainer.chat.usertext.words: NFKC, punctuation as
    spaces, each character of a script written without spaces its own word): split at spaces alone, a whole Chinese
    answer was one word, and a right one that differed by its final "。" scored 0."""
    return words(text)


def rouge_l(got: str, want: str) -> float:
    """ROUGE-L F1 of two texts over their tokens (`text_tokens`): the longest common subsequence against
    both lengths (1.0 for equal texts, 0.0 when either is empty). A dynamic programme over the
    tokens, O(len(got) * len(want)): answers here are sentences, not documents."""
    a, b = text_tokens(got), text_tokens(want)
    if not a or not b:
        return float(a == b)
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    if not lcs:
        return 0.0
    precision, recall = lcs / len(a), lcs / len(b)
    return 2 * precision * recall / (precision + recall)


def standardize_string(text: str) -> str:
    """BFCL's normalisation of a string value before comparing it."""
    return _IGNORED.sub("", text).lower().replace("'", '"')


def category(row: Row) -> str:
    """The row's category: one of CATEGORIES, or CHAT for a row with no tools and a text answer."""
    n_calls = len(row["messages"][target_index(row)].get("tool_calls") or [])
    tools = row.get("tools") or []
    if n_calls > 1:
        return "parallel"
    if n_calls == 1:
        return "simple" if len(tools) <= 1 else "multiple"
    if after_tool_result(row):
        return "multi_turn"
    return "irrelevance" if tools else CHAT


def parameters(tools: list[Tool], name: str) -> dict[str, Any]:
    """The JSON schema of a tool's parameters; {} (anything goes) when the tools do not declare it."""
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            return fn.get("parameters") or {}
    return {}


def _json_type(value: Any) -> str:
    return next((t for t, is_t in _JSON_TYPES.items() if t != "number" and is_t(value)), "number")


def _is_number(value: Any) -> bool:
    return _JSON_TYPES["number"](value)


def json_equal(a: Any, b: Any) -> bool:
    """Equal as JSON values: numbers by value (2 == 2.0), a bool only equal to the same bool."""
    if _is_number(a) and _is_number(b):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return a == b


def _check_value(schema: dict[str, Any], expected: Any, got: Any, path: str) -> str | None:
    """Why `got` is not a right value for `schema` given the `expected` one, or None when it is."""
    if not isinstance(schema, dict):
        schema = {}
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(alternatives, list) and alternatives:
        problems = [_check_value(alt, expected, got, path) for alt in alternatives]
        return None if None in problems else problems[0]
    types = schema.get("type")
    types = [types] if isinstance(types, str) else types if isinstance(types, list) else []
    known = [_ALIASES.get(t, t) for t in types if _ALIASES.get(t, t) in _JSON_TYPES]
    nullable = got is None and schema.get("nullable") is True  # OpenAPI's (and Gemini's) spelling of "or null"
    if known and len(known) == len(types) and not nullable and not any(_JSON_TYPES[t](got) for t in known):
        return f"{path}: expected type {'/'.join(types)}, got {_json_type(got)} {got!r}"
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(json_equal(got, e) for e in enum):
        return f"{path}: {got!r} is not one of the schema's enum {enum}"
    if isinstance(got, dict) and isinstance(expected, dict):
        return _check_object(schema, expected, got, path)
    if isinstance(got, list) and isinstance(expected, list):
        if len(got) != len(expected):
            return f"{path}: expected {len(expected)} items {expected!r}, got {len(got)} {got!r}"
        items = schema["items"] if isinstance(schema.get("items"), dict) else {}
        for k, (e, g) in enumerate(zip(expected, got)):
            problem = _check_value(items, e, g, f"{path}[{k}]")
            if problem:
                return problem
        return None
    if isinstance(got, str) and isinstance(expected, str) and not isinstance(enum, list):
        same = standardize_string(got) == standardize_string(expected)
    else:
        same = json_equal(got, expected)
    return None if same else f"{path}: expected {expected!r}, got {got!r}"


def _check_object(schema: dict[str, Any], expected: dict[str, Any], got: dict[str, Any], path: str) -> str | None:
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else None
    extra = schema.get("additionalProperties")
    # Parameters beyond `properties` are allowed when the schema says so ({} and true: any), or may be declared where
    # this checker does not look (allOf, $ref, patternProperties).
    open_ = extra is True or isinstance(extra, dict) or any(k in schema for k in ("allOf", "$ref", "patternProperties"))

    def sub(key: str) -> dict[str, Any]:
        value = props.get(key) if props is not None and key in props else extra
        return value if isinstance(value, dict) else {}  # true (anything) or null (absent): nothing to check

    def is_default(key: str, value: Any) -> bool:
        return "default" in sub(key) and json_equal(value, sub(key)["default"])

    required = schema.get("required")  # a list of names; draft 3's `"required": true` on a property is not read
    for key in required if isinstance(required, list) else []:
        if key not in got:
            return f"{path}: missing required parameter {key!r}"
    for key, value in got.items():
        if props is not None and key not in props and not open_:
            return f"{path}: parameter {key!r} is not declared by the schema"
        if key not in expected:
            if is_default(key, value):
                continue
            return f"{path}: unexpected parameter {key!r}={value!r} (the expected call does not give it)"
        problem = _check_value(sub(key), expected[key], value, f"{path}.{key}")
        if problem:
            return problem
    for key, value in expected.items():
        if key not in got and not is_default(key, value):
            return f"{path}: missing parameter {key!r} (expected {value!r})"
    return None


def check_call(tools: list[Tool], expected: ToolCall, got: ToolCall) -> str | None:
    """Why the call `got` is not the `expected` one under the offered tools' schemas, or None when it is."""
    if got["name"] != expected["name"]:
        return f"called {got['name']!r}, expected {expected['name']!r}"
    return _check_value(parameters(tools, expected["name"]), expected["arguments"], got["arguments"], got["name"])


def _text_answer(got: list[ToolCall], content: str | None) -> tuple[bool, str]:
    if got:
        return False, f"expected a text answer, got a call to {', '.join(c['name'] for c in got)}"
    if not (content or "").strip():
        return False, "expected a text answer, got an empty message"
    return True, "text answer, no call"


def _compare(
    row: Row,
    predicted_calls: list[Any] | None,
    predicted_content: str | None,
    fits: Callable[[ToolCall, ToolCall], str | None],
) -> tuple[bool, str]:
    """Shared by `check` and `exact`: `fits(expected, got)` gives why one call does not fit, or None."""
    try:
        want = expected_calls(row)
    except ValueError as err:
        return False, f"cannot score this row: {err}"
    try:
        got = [as_call(c, f"predicted call {k}") for k, c in enumerate(predicted_calls or [])]
    except ValueError as err:
        return False, str(err)
    if not want:
        ok, why = _text_answer(got, predicted_content)
        if ok and after_tool_result(row):  # multi_turn: the answer must report the result, not just be text
            overlap = rouge_l(predicted_content or "", expected_text(row))
            ok = overlap >= TEXT_MATCH_MIN
            why = (
                f"answer to the tool result: ROUGE-L {overlap:.2f} "
                f"{'>=' if ok else '<'} {TEXT_MATCH_MIN} against the expected {expected_text(row)[:120]!r}"
            )
        return ok, why
    if len(got) != len(want):
        return False, (
            f"expected {len(want)} call(s) ({', '.join(c['name'] for c in want)}), got {len(got)}"
            + (f" ({', '.join(c['name'] for c in got)})" if got else "")
        )
    if len(want) == 1:
        problem = fits(want[0], got[0])
        return (False, problem) if problem else (True, "call matched")
    # BFCL's parallel_function_checker_no_order: each expected call takes the first predicted call
    # left that fits it. Taking the first is enough: with one right value per parameter, calls that
    # fit one expected call fit each other.
    free = list(range(len(got)))
    for i, e in enumerate(want):
        misfits = {j: fits(e, got[j]) for j in free}
        j = next((j for j in free if misfits[j] is None), None)
        if j is None:
            return False, (
                f"no predicted call left fits expected call {i} ({e['name']}): "
                + "; ".join(f"[{j}] {w}" for j, w in misfits.items())
            )
        free.remove(j)
    return True, "every expected call matched"


def check(row: Row, predicted_calls: list[Any] | None, predicted_content: str | None) -> tuple[bool, str]:
    """BFCL-style AST check of a model's answer to `row`: `(ok, reason)`.

    Args:
        row: a chat row; its last assistant message (weight 1) is the expected answer.
        predicted_calls: `[{"name", "arguments"}]` (arguments a dict or JSON text; OpenAI's
            `{"type": "function", "function": {...}}` shape is read too); None or [] for no call.
        predicted_content: the message's text (None when the model sent none).

    Returns:
        `(True, what matched)` or `(False, the first rule the answer breaks)`.
    """
    return _compare(row, predicted_calls, predicted_content, lambda e, g: check_call(row.get("tools") or [], e, g))


def exact(row: Row, predicted_calls: list[Any] | None, predicted_content: str | None) -> bool:
    """Today's exact match: each expected call made, same name and JSON-equal arguments (any order)."""

    def fits(e: ToolCall, g: ToolCall) -> str | None:
        same = e["name"] == g["name"] and json_equal(e["arguments"], g["arguments"])
        return None if same else "not equal"

    if not predicted_calls and category(row) == "multi_turn":  # exact: the expected answer's words
        return normalize_text(predicted_content or "") == normalize_text(expected_text(row))
    return _compare(row, predicted_calls, predicted_content, fits)[0]


def score(row: Row, predicted_calls: list[Any] | None, predicted_content: str | None) -> Verdict:
    """One row's result for `summarize`: `{"category", "ok", "reason", "exact"}`."""
    ok, reason = check(row, predicted_calls, predicted_content)
    return {
        "category": category(row),
        "ok": ok,
        "reason": reason,
        "exact": exact(row, predicted_calls, predicted_content),
    }


def summarize(results: list[Verdict]) -> Summary:
    """Per category `{rows, correct, exact, accuracy}` and the overall accuracies over every
    function-calling row (`chat` rows count in none).

    A category with no rows has accuracy None (not measured), never 0, and so does an overall
    accuracy with no function-calling rows. The overall accuracies are over rows (a micro
    average), so a category weighs by its row count; BFCL's overall is a mean of categories.
    """
    cats: dict[str, CategoryScore] = {}
    for name in CATEGORIES:
        mine = [r for r in results if r["category"] == name]
        correct, exact = sum(bool(r["ok"]) for r in mine), sum(bool(r["exact"]) for r in mine)
        cats[name] = {
            "rows": len(mine),
            "correct": correct,
            "exact": exact,
            "accuracy": correct / len(mine) if mine else None,
        }
    rows = sum(c["rows"] for c in cats.values())
    return {
        "categories": cats,
        "fc_rows": rows,
        "fc_ast_accuracy": sum(c["correct"] for c in cats.values()) / rows if rows else None,
        "fc_exact_accuracy": sum(c["exact"] for c in cats.values()) / rows if rows else None,
    }


def metrics(summary: Summary) -> dict[str, float]:
    """The summary as flat metrics with stable names (`fc_ast_accuracy`, `fc_exact_accuracy`,
    `fc_rows`, `fc_<category>_accuracy`, `fc_<category>_rows`) for KFP's Metrics and Compare.
    An accuracy not measured is left out (a metric is a number; its `_rows` of 0 says why)."""
    out: dict[str, float] = {"fc_rows": summary["fc_rows"]}
    for name, value in ((names.PRIMARY, summary["fc_ast_accuracy"]), (names.EXACT, summary["fc_exact_accuracy"])):
        if value is not None:
            out[name] = value
    for cat, c in summary["categories"].items():
        out[names.count("heldout", cat, "rows")] = c["rows"]
        if c["accuracy"] is not None:
            out[names.accuracy("heldout", cat)] = c["accuracy"]
    return out
