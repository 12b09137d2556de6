"""`chat_template=auto`: the model's own template where it passes the train/serve check on tool rows, else the
built-in template of its tokenizer's family (trainer.chat.templates.BUILTIN, picked by vocabulary), and why.

Decided once, at delivery (deliver-model writes the chosen template into the tree) and at validation (the same
choice on the source's tokenizer), on PROBE_ROWS: a call, two calls in one turn, a tool result answered in text,
and a text answer, with tools offered, the shapes every function-calling dataset holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainer.chat import templates
from trainer.chat.types import Row, Tool, WireCall
from trainer.chat.parsers import tool_call_parser
from trainer.core.errors import UserError
from trainer.core.deadline import TEMPLATE_BUDGET_S, OverBudget, time_limit
from trainer.parity.check import check

_TOOLS: list[Tool] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
_CALL = WireCall(type="function", function={"name": "get_weather", "arguments": {"city": "Paris"}})
PROBE_ROWS: list[Row] = [
    {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [_CALL]},
        ],
        "tools": _TOOLS,
    },
    {
        "messages": [
            {"role": "user", "content": "Weather in Paris and Oslo?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    _CALL,
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
                ],
            },
        ],
        "tools": _TOOLS,
    },
    {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [WireCall(id="call_0", **_CALL)]},
            {"role": "tool", "tool_call_id": "call_0", "content": "{\"temperature\": 18}"},
            {"role": "assistant", "content": "It is 18 degrees in Paris."},
        ],
        "tools": _TOOLS,
    },
    {
        "messages": [
            {"role": "user", "content": "Tell me a joke."},
            {"role": "assistant", "content": "None of the available tools can do that."},
        ],
        "tools": _TOOLS,
    },
]


def choose(tokenizer, eos_ids: Sequence[int] = ()) -> tuple[str, str]:
    """(the chat_template value `auto` stands for: `model` or a built-in name, why). Raises UserError when the
    model's own template fails and its vocabulary fits no built-in template."""
    failed = "has none"
    if tokenizer.chat_template:
        parser = "hermes"
        try:  # the budget every other template check has: a template that loops on tools hung validation silently
            with time_limit(TEMPLATE_BUDGET_S):
                parser = tool_call_parser(tokenizer.chat_template, list(tokenizer.get_added_vocab()))
                verdict = check(PROBE_ROWS, tokenizer, parser, eos_ids)
        except RuntimeError as err:  # a template Jinja stops (the sandbox's range limit, a recursion) fails the check
            verdict = None
            failed = f"fails to render tool rows ({type(err).__name__}: {str(err)[:80]})"
        except OverBudget:
            verdict = None
            failed = (
                f"did not render {len(PROBE_ROWS)} short tool rows within {TEMPLATE_BUDGET_S:g} s (a loop in the "
                "template)"
            )
        if verdict is not None and verdict.ok:
            return templates.MODEL, (
                f"the model's own template renders tools, calls and tool results as vLLM's "
                f"{parser!r} parser reads them back"
            )
        elif verdict is not None:
            failed = f"fails the train/serve check ({', '.join(verdict.problems)} with the {parser!r} parser)"
    vocab = tokenizer.get_vocab()
    family = templates.family_template(vocab)
    if family is None:
        raise UserError(
            f"chat_template=auto: the model's own chat template {failed}, and its vocabulary holds the "
            f"turn tokens of no built-in template ({_families()}): give chat_template=FILE.jinja, a "
            "template in the model's own turn format that renders tools and tool calls"
        )
    markers = ", ".join(templates.BUILTIN[family].markers)
    return family, f"the model's own chat template {failed}; its vocabulary holds {markers}: the built-in {family}"


def _families() -> str:
    return "; ".join(f"{name}: {' '.join(b.markers)}" for name, b in templates.BUILTIN.items())
