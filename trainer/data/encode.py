"""Rows to token ids with the assistant-only loss mask the chat template's generation marks give."""

from __future__ import annotations


from trainer.chat.types import Message, Row
from trainer.core.errors import collect
from trainer.chat.templates import BUILTIN, has_generation_block


def encode(row: Row, tokenizer, max_seq_len: int) -> dict[str, list[int]] | None:
    """Token ids and labels (-100 outside assistant turns) for one row, or None if too long.

    Uses the chat template's `{% generation %}` mask when it has one (in any whitespace-control
    spelling, `{%- generation -%}` too; exact, all assistant turns). Otherwise the last assistant
    turn is found by rendering the conversation without it: a common approximation for templates
    (e.g. Llama 3's) that lack the mask.
    Assistant messages with `"weight": 0` are not trained on (with the mask: their tokens
    are masked; without it: the last assistant turn of weight 1 is the one trained).
    """
    if text_chars(row) > max_seq_len * max_token_chars(tokenizer):
        return None  # certainly too long: skipped without tokenizing (a 50 MB row costs nothing)
    tools = row.get("tools") or None
    messages = row["messages"]
    if has_generation_block(tokenizer.chat_template):
        enc = tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids, mask = list(enc["input_ids"]), list(enc["assistant_masks"])
        if any(m["role"] == "assistant" and m.get("weight") == 0 for m in messages):
            mask = _unweighted(mask, messages, tokenizer, tools)
    else:
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("weight") != 0)
        prompt = tokenizer.apply_chat_template(
            messages[:last], tools=tools, tokenize=True, return_dict=True, add_generation_prompt=True
        )["input_ids"]
        ids = list(
            tokenizer.apply_chat_template(messages[: last + 1], tools=tools, tokenize=True, return_dict=True)[
                "input_ids"
            ]
        )
        mask = [0] * len(prompt) + [1] * (len(ids) - len(prompt))
    if len(ids) > max_seq_len:
        return None
    return {"input_ids": ids, "labels": [t if m else -100 for t, m in zip(ids, mask)]}


def _unweighted(mask: list[int], messages: list[Message], tokenizer, tools) -> list[int]:
    """The generation mask without the tokens of weight-0 assistant messages. Each assistant
    message is one run of masked tokens when the runs and messages are as many; otherwise (two
    assistant messages in a row render as one run) a message's tokens are found by rendering
    the conversation up to it."""
    runs = [i for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1])]
    ends = [i + 1 for i, m in enumerate(mask) if m and (i + 1 == len(mask) or not mask[i + 1])]
    answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if len(runs) == len(answers):
        spans = list(zip(runs, ends))
    else:

        def length(upto: int) -> int:
            return len(
                tokenizer.apply_chat_template(messages[:upto], tools=tools, tokenize=True, return_dict=True)[
                    "input_ids"
                ]
            )

        spans = [(length(i), length(i + 1)) for i in answers]  # header included: it is the message's too
    mask = mask[:]
    for (start, end), i in zip(spans, answers):
        if messages[i].get("weight") == 0:
            mask[start:end] = [0] * (end - start)
    return mask


def text_chars(row: Row) -> int:
    """Characters of message text in a row: a lower bound on what its chat template renders."""
    return sum(len(text) for m in row["messages"] if isinstance(text := m.get("content"), str))


def max_token_chars(tokenizer) -> int:
    """The longest token's length in characters: a row of C characters has at least
    C / this many tokens, so rows above max_seq_len x this are too long for certain."""
    cached = getattr(tokenizer, "_max_token_chars", None)
    if cached is None:
        cached = max((len(t) for t in tokenizer.get_vocab()), default=1) or 1
        try:
            tokenizer._max_token_chars = cached
        except AttributeError:  # a tokenizer that refuses new attributes is measured each time
            pass
    return cached


def encode_rows(
    rows: list[Row], tokenizer, max_seq_len: int, what: str = "the dataset"
) -> list[dict[str, list[int]] | None]:
    """`encode` of every row (None for one over max_seq_len). Rows the chat template refuses
    raise one UserError naming them, after every row was tried (exit 2: a restart cannot help)."""
    out: list[dict[str, list[int]] | None] = []
    refused: dict[str, list[Row]] = {}
    for row in rows:
        try:
            out.append(encode(row, tokenizer, max_seq_len))
        except Exception as err:  # noqa: BLE001 - a template is code: TypeError on content null is a refusal too
            refused.setdefault(refusal_reason(err), []).append(row)
    collect(refusal_lines(refused, len(rows)), what=f"the model's chat template cannot render {what}")
    return out


def encode_all(rows: list[Row], tokenizer, max_seq_len: int) -> tuple[list[dict[str, list[int]]], int]:
    """Encode rows; over-long rows are dropped (policy: skip, counted in the metrics)."""
    encoded = encode_rows(rows, tokenizer, max_seq_len)
    kept = [e for e in encoded if e is not None]
    return kept, len(encoded) - len(kept)


def refusal_reason(err: Exception) -> str:
    from jinja2 import TemplateError

    text = str(err)[:200]
    return text if isinstance(err, TemplateError) else f"{type(err).__name__}: {text}"


def refusal_lines(refused: dict[str, list[Row]], total: int, template: str = "") -> list[str]:
    """One line per reason; `template` names a chat_template the user gave, whose fix is theirs."""
    who = f"chat_template {template!r}" if template else "the model's chat template"
    other = (
        "use a model whose template accepts them, or give one with chat_template="
        if not template
        else "give another with chat_template="
        if template in BUILTIN
        else "fix the template, or give another with chat_template="
    )
    lines = []
    for reason, rows in refused.items():
        first = rows[0]["messages"][0]
        lines.append(
            f"{who} refuses {len(rows)} of {total} rows ({reason}; e.g. the row whose first message is "
            f"{first.get('role')}: {str(first.get('content'))[:60]!r}): change those rows (e.g. fold a "
            f"system message into the first user turn), or {other} (a built-in name or a .jinja file)"
        )
    return lines
