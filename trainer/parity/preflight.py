"""The chat template against the rows before any training: rows it refuses to render, a template that
does not compile, and the train/serve parity check on the rows it renders, all within the time
budget of trainer.data.preflight (read there, so that tests can shorten it)."""

from __future__ import annotations

from typing import Sequence


from trainer.chat.types import Row
from trainer.data import preflight as data_preflight
from trainer.data.encode import refusal_reason, refusal_lines, encode
from trainer.data.preflight import OverBudget, over_budget, time_limit
from trainer.parity.check import model_problems
from trainer.chat.templates import has_generation_block


def template_problems(
    rows: list[Row], tokenizer, where: str, eos_ids: Sequence[int] = (), template: str = ""
) -> list[str]:
    """Rows the model's chat template refuses to render (Gemma's refuses a system turn, some
    refuse tools or non-alternating roles; any exception counts: SmolLM2's raises TypeError on
    `content: null`), then the train/serve parity check (trainer.parity.check) on the rows it renders:
    tools and tool calls rendered, read back by the tool-call parser that will serve the model.
    The first TEMPLATE_CHECK_ROWS rows, before training, within TEMPLATE_BUDGET_S: one line per
    distinct problem. `template` names the template in the message when it runs out of time."""
    if syntax := _syntax_problem(tokenizer, where, template):
        return [syntax]  # every row would be "refused" for it, and the advice would be to change the rows
    rows = rows[: data_preflight.TEMPLATE_CHECK_ROWS]
    refused: dict[str, list[Row]] = {}
    rendered: list[Row] = []
    try:
        with time_limit(data_preflight.TEMPLATE_BUDGET_S):
            for row in rows:
                try:
                    tokenizer.apply_chat_template(row["messages"], tools=row.get("tools") or None, tokenize=False)
                except Exception as err:  # noqa: BLE001 - a template is code: whatever it raises, it refuses the row
                    refused.setdefault(refusal_reason(err), []).append(row)
                    continue
                rendered.append(row)
            parity_lines = model_problems(rendered, tokenizer, where, eos_ids, template)
            mask_lines = _mask_problems(rendered, tokenizer, where, template)
    except OverBudget:
        return [over_budget(tokenizer, where, template, f"rendering {len(rows)} rows")]
    return [f"{where}: {line}" for line in refusal_lines(refused, len(rows), template)] + mask_lines + parity_lines


def _mask_problems(rows: list[Row], tokenizer, where: str, template: str) -> list[str]:
    """A `{% generation %}` block that marks no token of the rows' assistant turns: the loss mask would cover
    nothing and every step train on a loss of 0.000, a green run that learned nothing."""
    if not has_generation_block(getattr(tokenizer, "chat_template", None)) or not rows:
        return []
    trained = [encode(r, tokenizer, 1 << 30) for r in rows if any(m.get("role") == "assistant" for m in r["messages"])]
    if not trained or any(e is not None and any(t != -100 for t in e["labels"]) for e in trained):
        return []
    what = f"chat_template {template!r}" if template else f"{where}: the model's chat template"
    return [
        f"{what} marks no token of the assistant turns as trained in any of {len(trained)} rows (its "
        "{% generation %} block renders nothing): every step would train on a loss of 0 and learn nothing; "
        "put the assistant's content inside {% generation %} ... {% endgeneration %}, or drop the block (then "
        "the last assistant turn is trained)"
    ]


def _syntax_problem(tokenizer, where: str, template: str) -> str | None:
    """A template that does not compile, said as such: compiled as apply_chat_template compiles
    it (transformers' sandboxed environment, with its `generation` tag), once."""
    from jinja2 import TemplateSyntaxError  # here: importing trainer.parity (validate, the CLIs) stays light

    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:  # another transformers: rendering the rows reports it, as a refusal
        return None
    text = getattr(tokenizer, "chat_template", None)
    if not isinstance(text, str):
        return None  # none, or named templates: rendering the rows reports what fails
    try:
        _compile_jinja_template(text)
    except TemplateSyntaxError as err:
        what = f"chat_template {template!r}" if template else f"{where}: the model's chat template"
        return f"{what} is not valid Jinja ({err.message}, line {err.lineno}): fix the template" + (
            "" if template else ", or give one with chat_template= (a built-in name or a .jinja file)"
        )
    return None
