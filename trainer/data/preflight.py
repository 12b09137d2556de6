"""Checks of the rows before any training: they fit max_seq_len (refusals counted and shown),
within a time budget (a chat template is code); and the budget itself, which the template check
(trainer.parity.preflight) renders under too."""

from __future__ import annotations

import contextlib
import json

from trainer.chat.types import Row
from trainer.core.deadline import TEMPLATE_BUDGET_S, OverBudget, time_limit  # noqa: F401 - the checks' names
from trainer.data import mix
from trainer.data.encode import max_token_chars, text_chars


TEMPLATE_CHECK_ROWS = 1000  # ~2 s on 2 cores; such problems are systematic, and training checks every row
# A template is code: nested `range(99999)` loops never end. The checks before training render
# under TEMPLATE_BUDGET_S of wall-clock time (each check's rows together, the parity check included), 10-20x what
# real templates take for TEMPLATE_CHECK_ROWS rows on a busy 2-core machine (trainer.core.deadline).


def over_budget(tokenizer, where: str, template: str, what: str) -> str:
    with contextlib.suppress(AttributeError):  # the next check of this template would wait as long again
        tokenizer.over_budget = True
    return (
        f"{where}: the chat template{f' {template}' if template else ''} did not finish {what} within "
        f"{TEMPLATE_BUDGET_S:g} s (a template is code, and this one runs away: e.g. a loop like range(99999) "
        "inside another): fix the template, or give another with chat_template= (a built-in name or a .jinja "
        "file)"
    )


def length_problems(
    splits: dict[str, list[Row]],
    tokenizer,
    max_seq_len: int,
    context: int | None = None,
    eval_max_rows: int | None = None,
) -> list[str]:
    """A split none of whose (first TEMPLATE_CHECK_ROWS) rows fits max_seq_len: training would
    find no rows, or evaluation none to score, only after delivery and (for eval) training.
    `eval_max_rows`: the evaluate step scores only the eval split's first rows, so only those count."""
    from transformers.utils import logging as hf_logging

    if getattr(tokenizer, "over_budget", False):  # template_problems said so
        return []
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "sequence length is longer than ..." is what this check reports
    try:
        with time_limit(TEMPLATE_BUDGET_S):
            return _length_problems(splits, tokenizer, max_seq_len, context, eval_max_rows)
    except OverBudget:
        return [over_budget(tokenizer, "", "", "tokenizing the rows").removeprefix(": ")]
    finally:
        hf_logging.set_verbosity(verbosity)


def _length_problems(
    splits, tokenizer, max_seq_len: int, context: int | None, eval_max_rows: int | None = None
) -> list[str]:
    problems = []
    for split, rows in splits.items():
        # evaluate scores the eval split's first eval_max_rows: where that is no more than this check reads, only those
        scored = (
            split == "eval"
            and eval_max_rows is not None
            and eval_max_rows < len(rows)
            and eval_max_rows <= TEMPLATE_CHECK_ROWS
        )
        lengths, checked = [], rows[: eval_max_rows if scored else TEMPLATE_CHECK_ROWS]
        for row in checked:
            if text_chars(row) > max_seq_len * max_token_chars(tokenizer):
                continue  # certainly too long; not worth tokenizing
            try:
                lengths.append(
                    len(
                        tokenizer.apply_chat_template(
                            row["messages"], tools=row.get("tools") or None, tokenize=True, return_dict=True
                        )["input_ids"]
                    )
                )
            except Exception:  # noqa: BLE001 - reported by template_problems
                lengths.append(0)
        if checked and not any(n <= max_seq_len for n in lengths):
            shortest = f"the shortest has {min(lengths)} tokens" if lengths else "all are far longer"
            if context and max_seq_len >= context:
                fix = f"shorten the conversations, or use a model with a longer context (this one allows {context})"
            else:
                fix = (
                    "raise max_seq_len"
                    + (f" (the model allows {context})" if context else "")
                    + ", or shorten the conversations"
                )
            which = (
                f"of the first {len(checked)} (eval_max_rows={eval_max_rows}: the rows evaluate scores)"
                if scored
                else f"of the {len(checked)} checked"
            )
            problems.append(
                f"no {split} row {which} fits max_seq_len={max_seq_len} tokens ({shortest}): {fix}"
                + (", or raise eval_max_rows" if scored else "")
            )
    return problems


def conversation_key(row: Row) -> str:
    """A row's conversation and tools as text, without its place in a mix (the same row from two sources is one)."""
    return json.dumps({k: v for k, v in row.items() if k != mix.TAG}, sort_keys=True, ensure_ascii=False)


def eval_overlap(splits: dict[str, list[Row]]) -> str:
    """A warning when eval rows are also train rows (the same conversation and tools), '' otherwise: the tuned model
    is then scored on rows it trained on, and its accuracy reads higher than it is on new requests."""
    seen = {conversation_key(r) for r in splits.get("train", [])}
    both = sum(conversation_key(r) in seen for r in splits.get("eval", []))
    if not both:
        return ""
    return (
        f"{both} of {len(splits['eval'])} eval rows are also train rows: the tuned model is scored on rows it "
        "trained on, which flatters its accuracy; remove them from the eval split (or deduplicate the data before "
        "it is split)"
    )
