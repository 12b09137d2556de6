"""The held-out split as an evaluation suite (`HeldOut`): the rows scored (the first max_rows that fit max_seq_len,
`prepared`), every trained assistant turn of each asked after the gold turns before it, one model's metrics
(`metrics_of`) and both models' part of the result (the counts, categories, examples, failures, paired counts).

Every trained assistant turn of a scored row is asked (trainer.chat.turns.split_turns: the row cut after the turn,
the gold turns before it as the prompt), so a glaive or Hermes row's call is scored as a call and its answer to the
tool result as text; the accuracies and category counts are over these turns, the eval losses over the rows (each
row's encoding once)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from trainer import data
from trainer.chat import fc_check
from trainer.chat.turns import (
    after_tool_result,
    expected_call,
    expected_text,
    last_user_request,
    split_turns,
    trained_turns,
)
from trainer.chat.types import Prediction, Row
from trainer.core.errors import UserError
from trainer.evaluate.base import Answers, Asked, Suite
from trainer.evaluate.generation import (
    answer_budget,
    context_length,
    fitting_rows,
    fix_for_length,
    length_limit,
    long_rows_problem,
    prompt_lengths,
)
from trainer.evaluate.losses import mean_loss
from trainer.evaluate.paired import heldout_counts
from trainer.evaluate.scoring import category_rows, failures, row_counts, score_predictions, source_rows

# Below this many rows one row moves accuracy by more than 2 points: say so.
MIN_RELIABLE_ROWS = 50
# What a base's stored answers were scored as: base scores made before every turn was asked are of other items.
SCORING = "every-turn"


def metrics_of(
    turns: list[Row],
    predictions: list[Prediction],
    losses: list[tuple[float, int]],
    loss_rows: list[Row],
    special_tokens: tuple[str, ...] = (),
) -> dict[str, float]:
    """All metrics of one model: its predictions ({"calls", "content", "raw"} per turn of `turns`) scored
    (trainer.evaluate.scoring.score_predictions), and the eval losses, token-weighted, from its (summed loss, tokens)
    per row of `loss_rows` (the rows those turns were cut from): eval_loss over all, text_eval_loss over the rows
    whose scored turn is text."""
    text = [expected_call(r) is None for r in loss_rows]
    return {
        "eval_loss": mean_loss(losses),
        "text_eval_loss": mean_loss([p for p, t in zip(losses, text) if t]),
        **score_predictions(turns, predictions, special_tokens),
    }


def warnings_for(
    rows: list[Row], skipped: int = 0, max_seq_len: int = 512, context: int | None = None, split_rows: int = 0
) -> list[str]:
    """What makes these numbers weak, in words for the log and the report (`rows`: those scored; `split_rows`: the
    eval split's, when max_rows took fewer)."""
    out = []
    if skipped:
        out.append(
            f"{skipped} of {len(rows) + skipped} eval rows are longer than {length_limit(max_seq_len, context)} "
            f"and were not scored (no loss, no accuracy): {fix_for_length(max_seq_len, context)}, or shorten them"
        )
    if len(rows) < MIN_RELIABLE_ROWS and split_rows > len(rows) + skipped:  # eval_max_rows took these few
        out.append(
            f"only {len(rows)} eval rows scored (< {MIN_RELIABLE_ROWS}; the split has {split_rows}): one row "
            f"moves accuracy by {1 / max(len(rows), 1):.0%}; raise eval_max_rows"
        )
    elif len(rows) < MIN_RELIABLE_ROWS:
        out.append(
            f"the eval split has only {len(rows)} rows (< {MIN_RELIABLE_ROWS}): one row moves accuracy by "
            f"{1 / max(len(rows), 1):.0%}; raise eval_fraction or add eval rows"
        )
    return out


@dataclass(frozen=True)
class Prepared:
    """What scoring any model on the eval split starts from (`prepared`)."""

    rows: list[Row]  # the split's first max_rows
    scored: list[Row]  # those that fit max_seq_len
    turns: list[Row]  # the scored rows cut at each trained assistant turn (trainer.chat.turns.split_turns)
    examples: list[dict[str, list[int]]]  # the scored rows' encodings, for the eval loss
    tokenizer: Any
    context: int | None
    warnings: list[str]


def prepared(model_dir: Path, eval_path: Path | None, max_rows: int, max_seq_len: int) -> Prepared:
    """What scoring any model on the eval split starts from: the rows scored (the first `max_rows` that fit
    `max_seq_len`), their encodings, the warnings (printed). `eval_path` None: the held-out suite is not scored (no
    rows); the tokenizer and the context are read all the same (BFCL asks with them).

    Raises:
        UserError: every row is too long, found before any model loads.
    """
    from transformers import AutoConfig, AutoTokenizer

    split = data.read_delivered(eval_path) if eval_path is not None else []
    rows = split[:max_rows]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    context = context_length(AutoConfig.from_pretrained(model_dir))
    kept, examples = fitting_rows(rows, tokenizer, max_seq_len, context) if rows else ([], [])
    if rows and not kept:
        raise UserError(long_rows_problem(len(rows), max_seq_len, context))
    scored = [rows[i] for i in kept]
    warnings = warnings_for(scored, len(rows) - len(scored), max_seq_len, context, len(split)) if rows else []
    for w in warnings:
        print(f"WARNING: {w}", flush=True)
    return Prepared(rows, scored, split_turns(scored), examples, tokenizer, context, warnings)


def turn_label(row: Row) -> str:
    """Which assistant turn a cut row asks, and after what: "turn 2, after a tool result"."""
    n = len(trained_turns(row["messages"]))
    return f"turn {n}" + (", after a tool result" if after_tool_result(row) else "")


def example_turns(turns: list[Row], n: int) -> list[int]:
    """The turns the report shows side by side: the first of each category present, then the first turns in
    order, `n` in all (at least one per category): a glaive split shows a call turn and a text turn."""
    first: dict[str, int] = {}
    for i, t in enumerate(turns):
        first.setdefault(fc_check.category(t), i)
    chosen = sorted(first.values())
    chosen += [i for i in range(len(turns)) if i not in first.values()][: max(0, n - len(chosen))]
    return sorted(chosen)


class HeldOut(Suite):
    """The eval split's turns (`prep`), each asked with its expected answer's length plus slack in new tokens
    (generation.answer_budget, within the context), and the rows' eval loss; `engine`: the engine's name, part of
    what base answers are valid for; `n_examples`: the turns the report shows side by side."""

    name = "heldout"

    def __init__(self, prep: Prepared, max_seq_len: int, engine: str, n_examples: int = 5) -> None:
        self.prep, self.max_seq_len, self.engine, self.n_examples = prep, max_seq_len, engine, n_examples
        self.warnings = list(prep.warnings)
        prompts = prompt_lengths(prep.tokenizer, prep.turns)
        budgets = [answer_budget(prep.tokenizer, [r]) for r in prep.turns]
        if prep.context:  # a row fits the context whole (fitting_rows), so its prompt leaves room for one token
            budgets = [max(1, min(b, prep.context - p)) for b, p in zip(budgets, prompts)]
        self.asked = Asked(prep.turns, prompts, budgets, prep.examples, label="evaluate")

    def key(self) -> dict[str, Any]:
        """The same rows scored (their content), the same length limit and engine: the base's answers are greedy, so
        on these they are the same in every trial."""
        digest = hashlib.sha256(json.dumps(self.prep.scored, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        return {
            "rows_sha256": digest,
            "rows": len(self.prep.scored),
            "max_seq_len": self.max_seq_len,
            "engine": self.engine,
            "scoring": SCORING,
        }

    def scored(self, answers: Answers) -> dict[str, Any]:
        """{"metrics": `metrics_of`, "predictions": per turn}: every turn is asked (its budget is at least 1)."""
        predictions = cast(list[Prediction], answers.predictions)
        special = tuple(self.prep.tokenizer.all_special_tokens)
        return {
            "metrics": metrics_of(self.prep.turns, predictions, answers.losses, self.prep.scored, special),
            "predictions": predictions,
        }

    def result(self, base: dict[str, Any] | None, tuned: dict[str, Any] | None) -> dict[str, Any]:
        """The held-out part of `evaluate()`'s result: both models' metrics, the counts (of the rows and turns scored:
        the accuracies' denominators; rows too long for max_seq_len counted apart), categories, a mix's rows per
        source, a few wrong turns per category, examples side by side, and the rows tuning lost and won."""
        turns = self.prep.turns
        outputs = {"base": base["predictions"], "tuned": tuned["predictions"]} if turns and base and tuned else {}
        return {
            "base": base["metrics"] if base else {},
            "tuned": tuned["metrics"] if tuned else {},
            "rows": len(self.prep.scored),
            "turns": len(turns),
            **row_counts(turns),
            "categories": category_rows(turns),
            "sources": source_rows(turns),
            "failures": failures(turns, outputs) if outputs else {},
            "skipped_long_rows": len(self.prep.rows) - len(self.prep.scored),
            "examples": self._examples(outputs) if outputs else [],
            "paired": heldout_counts(turns, outputs) if outputs else {},  # fc_<category>_lost / _won: the gate's
        }

    def _examples(self, outputs: dict[str, list[Prediction]]) -> list[dict[str, Any]]:
        """A few turns side by side for the report: the request, what was expected, each model's raw answer."""
        turns = self.prep.turns
        return [
            {
                "prompt": last_user_request(turns[i]),
                "turn": turn_label(turns[i]),
                "expected": expected_call(turns[i]) or expected_text(turns[i]),
                "base": outputs["base"][i]["raw"],
                "tuned": outputs["tuned"][i]["raw"],
            }
            for i in example_turns(turns, self.n_examples)
        ]
