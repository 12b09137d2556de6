"""The project's vocabulary for chat data, one name per shape (mypy checks them: `make lint`).

Rows stay plain JSON (they are read from and written to JSON Lines, sent to vLLM and shown in reports), so the
shapes are `TypedDict`s, not classes: a row read from a file *is* a `Row`, with no conversion to get wrong.

A tool call has one shape inside the project, `ToolCall` (`{"name", "arguments"}`, arguments decoded). In a
message it is written the OpenAI way, `WireCall` (`{"type": "function", "function": {"name", "arguments"}}`),
whose arguments are a JSON string on the wire and an object once a row is loaded (trainer.chat.calls converts).
"""

from __future__ import annotations

from typing import Any, Required, TypedDict


class ToolCall(TypedDict):
    """A call as the scorers, parsers and reports hold it: the function's name and its arguments (a JSON object;
    text that is not JSON stays text, so that no decoded call equals it)."""

    name: str
    arguments: Any


class WireFunction(TypedDict, total=False):
    name: Required[str]
    arguments: Any  # a JSON string on the wire, an object in a loaded row


class WireCall(TypedDict, total=False):
    """A call inside a message, as the OpenAI chat API writes it (`id` and `type` filled in when a row is sent)."""

    id: str
    type: str
    function: Required[WireFunction]


class Tool(TypedDict, total=False):
    """An offered tool: `{"type": "function", "function": <JSON schema with name, description, parameters>}`."""

    type: str
    function: Required[dict[str, Any]]


class Message(TypedDict, total=False):
    """One turn. `weight` 0 marks an assistant turn the data says not to learn (trainer.chat.turns)."""

    role: Required[str]
    content: str | None
    tool_calls: list[WireCall]
    tool_call_id: str
    name: str
    weight: int


class Row(TypedDict, total=False):
    """A chat row (OpenAI format): its turns and the tools it offers; readers of other formats produce these."""

    messages: Required[list[Message]]
    tools: list[Tool]
    mix_source: int  # a mixed dataset's row: its source's index in the mix (trainer.data.mix.TAG)


# A row as read from a file or a converter that keeps what it cannot read for the checks to name: not yet a `Row`
# (trainer.data.rows.row_problems says what stops it being one).
RawRow = dict[str, Any]


class Prediction(TypedDict):
    """A model's answer to one row, read as an app reads it (message.tool_calls, message.content), with the text it
    generated (`raw`, for the report)."""

    calls: list[ToolCall]
    content: str | None
    raw: str


class Outcome(TypedDict):
    """One answer's category and whether it was right: what the paired test counts (trainer.evaluate.paired), for
    the held-out rows (a `Verdict`) and BFCL's (trainer.evaluate.bfcl.verdicts)."""

    category: str
    ok: bool


class Verdict(Outcome):
    """One held-out answer scored (trainer.chat.fc_check.score): right by the AST check (`ok`), exactly (`exact`),
    and why not."""

    exact: bool
    reason: str


class CategoryScore(TypedDict):
    """A category's rows scored: how many, right by the AST check, exactly right, and the accuracy (None: no rows,
    not measured; never 0)."""

    rows: int
    correct: int
    exact: int
    accuracy: float | None


class Summary(TypedDict):
    """A split's verdicts summed (trainer.chat.fc_check.summarize): per category, and over every function-calling
    row (the primary AST accuracy and the exact one; None where the split has no function-calling row)."""

    categories: dict[str, CategoryScore]
    fc_rows: int
    fc_ast_accuracy: float | None
    fc_exact_accuracy: float | None
