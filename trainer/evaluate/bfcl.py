"""BFCL as an evaluation suite: the rows asked (a seeded sample per category of trainer.data.bfcl's), how
many new tokens each may take, and the scores by BFCL's rules (trainer.evaluate.bfcl_check) per category,
with BFCL's own aggregates.

Rows are asked as BFCL asks an OpenAI-style FC model, through the same engine as the held-out rows
(trainer.evaluate.served: the served endpoint, its chat template and tool parser; or HF generate, read with
that parser), greedy. A row whose prompt leaves no room to answer in the served context is not asked: it
counts as wrong in its category and is reported (`bfcl_<category>_too_long`), never dropped from the
denominator.

Metrics of one model: `bfcl_<category>_accuracy` for every category sampled; `bfcl_non_live_ast_accuracy`
(BFCL's non-live AST summary: the unweighted mean of simple_python, multiple, parallel and
parallel_multiple), `bfcl_live_ast_accuracy` (its live AST summary: the live categories' rows pooled), and
`bfcl_hallucination_accuracy` (irrelevance and live_irrelevance, unweighted, as its hallucination
measurement); each aggregate only where every category it averages was measured. Of both, paired:
`bfcl_<category>_lost` / `_won`, the rows the tuned model got wrong where the base was right and the reverse
(`counts`), on which the promotion gate tests a category's drop.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from trainer.chat.types import Message, Outcome, Prediction
from trainer.core import metrics as names
from trainer.data import bfcl as bfcl_data
from trainer.data.bfcl import BfclRow
from trainer.evaluate import bfcl_check
from trainer.evaluate.base import Answers, Asked, Suite
from trainer.evaluate.generation import prompt_ids
from trainer.evaluate.paired import paired_counts

# New tokens per answer: BFCL's longest expected answers (parallel_multiple: four calls with their
# arguments) take ~250 tokens as <tool_call> JSON; a model still writing past this is wrong anyway.
ANSWER_TOKENS = 384

# Requests in flight to the server: vLLM batches the decoding of all of them, and BFCL's answers run long (a base
# model writes code where a call is wanted). SmolLM2-135M on vLLM's CPU build, 2 cores, 30 rows: 32 in flight
# answered in 55 s, 8 in 82 s (benchmarks/bfcl_speed.py, 2026-11-27); its KV cache holds what it can and queues the rest.
IN_FLIGHT = 32

# The placeholder turn a BFCL row is asked before: the evaluation asks for the turn at target_index.
_ASKED = Message(role="assistant", content="")


def rows(tree: Path, per_category: int, seed: int) -> list[BfclRow]:
    """Every category's rows to ask (`per_category` drawn with `seed`; 0: all), with the turn to answer."""
    out = []
    for category in bfcl_data.CATEGORIES:
        for row in bfcl_data.sample(bfcl_data.read(tree, category), per_category, seed):
            asked = BfclRow(**row)  # a copy: the row read stays as it was
            asked["messages"] = [*row["messages"], Message(**_ASKED)]
            out.append(asked)
    return out


def prompt_lengths(tokenizer, asked: list[BfclRow]) -> list[int]:
    """Each row's prompt in tokens, as the chat template renders it with its tools (the turn to answer left out)."""
    return [len(prompt_ids(tokenizer, r["messages"][:-1], r["tools"])) for r in asked]


def budgets(prompts: list[int], context: int | None) -> list[int]:
    """New tokens per row: ANSWER_TOKENS, within what the context leaves after the prompt (< 1: not asked)."""
    return [min(ANSWER_TOKENS, context - p) if context else ANSWER_TOKENS for p in prompts]


def _verdict(row: BfclRow, prediction: Prediction) -> tuple[bool, str]:
    """bfcl_check.check on a prediction as trainer.evaluate reads replies: arguments already decoded once from
    the wire (or kept as text that did not decode). BFCL decodes once, so text left over (not JSON, or JSON
    of a string: double-encoded) is no JSON object: passed on encoded, never decoded a second time."""
    calls = [
        {**c, "arguments": json.dumps(c["arguments"]) if isinstance(c.get("arguments"), str) else c.get("arguments")}
        for c in prediction["calls"]
    ]
    return bfcl_check.check(row, calls, prediction["content"])


def score(asked: list[BfclRow], predictions: list[Prediction | None]) -> dict[str, float]:
    """One model's metrics from its predictions ({"calls", "content"} per row, None for a row not asked)."""
    per: dict[str, list[bool]] = {}
    for v in verdicts(asked, predictions):
        per.setdefault(v["category"], []).append(v["ok"])
    acc = {c: sum(v) / len(v) for c, v in per.items()}
    out = {names.accuracy("bfcl", c): a for c, a in acc.items()}
    if all(c in acc for c in bfcl_data.NON_LIVE_AST):
        out[names.accuracy("bfcl", "non_live_ast")] = sum(acc[c] for c in bfcl_data.NON_LIVE_AST) / len(
            bfcl_data.NON_LIVE_AST
        )
    live = [ok for c in bfcl_data.LIVE_AST if c in per for ok in per[c]]
    if all(c in per for c in bfcl_data.LIVE_AST):
        out[names.accuracy("bfcl", "live_ast")] = sum(live) / len(live)
    if all(c in acc for c in bfcl_data.IRRELEVANCE):
        out[names.accuracy("bfcl", "hallucination")] = sum(acc[c] for c in bfcl_data.IRRELEVANCE) / len(
            bfcl_data.IRRELEVANCE
        )
    return out


def verdicts(asked: list[BfclRow], predictions: list[Prediction | None]) -> list[Outcome]:
    """One model's verdict per row, `{"category", "ok"}` (a row not asked is wrong): what `score` counts, and
    what trainer.evaluate.paired pairs with the other model's."""
    return [
        Outcome(category=row["category"], ok=p is not None and _verdict(row, p)[0])
        for row, p in zip(asked, predictions)
    ]


def counts(
    asked: list[BfclRow], too_long: list[bool], outputs: dict[str, list[Prediction | None]] | None = None
) -> dict[str, float]:
    """Rows per category (the accuracies' denominators) and those too long to ask: the same for both models.
    With both models' `outputs`, also the rows the tuned model lost and won against the base per category
    (`bfcl_<category>_lost` / `_won`: trainer.evaluate.paired), which the promotion gate tests a drop on."""
    out: dict[str, float] = {}
    for row, long in zip(asked, too_long):
        rows, longer = (names.count("bfcl", row["category"], kind) for kind in ("rows", "too_long"))
        out[rows] = out.get(rows, 0) + 1
        out[longer] = out.get(longer, 0) + long
    if outputs is not None:
        out.update(paired_counts(verdicts(asked, outputs["base"]), verdicts(asked, outputs["tuned"]), "bfcl"))
    return out


def failures(
    asked: list[BfclRow], outputs: dict[str, list[Prediction | None]], per_category: int = 3
) -> dict[str, list[dict[str, Any]]]:
    """A few rows per category the tuned model got wrong, with the checker's reason and both raw answers."""
    out: dict[str, list[dict[str, Any]]] = {}
    for i, row in enumerate(asked):
        tuned = outputs["tuned"][i]
        ok, why = (
            _verdict(row, tuned)
            if tuned is not None
            else (False, "not asked: the prompt leaves no room to answer in the served context")
        )
        shown = out.setdefault(row["category"], [])
        if not ok and len(shown) < per_category:
            base = outputs["base"][i]
            shown.append(
                {
                    "id": row["id"],
                    "prompt": row["messages"][-2].get("content", ""),
                    "why": why,
                    "base": base["raw"] if base else "",
                    "tuned": tuned["raw"] if tuned else "",
                }
            )
    return {c: v for c, v in out.items() if v}


def answers(asked: list[BfclRow], outputs: dict[str, list[Prediction | None]]) -> list[dict[str, Any]]:
    """Every row's answers as JSON lines: BFCL's id and category, and per model the calls and text read off the
    reply, BFCL's verdict and why (None: not asked, its prompt too long). What the evaluate step writes out
    (bfcl_answers), and what tests/unit/test_bfcl_check.py's recorded answers are taken from."""
    out = []
    for i, row in enumerate(asked):
        line: dict[str, Any] = {"id": row["id"], "category": row["category"]}
        for name, got in outputs.items():
            p = got[i]
            ok, why = _verdict(row, p) if p is not None else (False, "not asked: its prompt is too long")
            line[name] = None if p is None else {"calls": p["calls"], "content": p["content"], "right": ok, "why": why}
        out.append(line)
    return out


class Bfcl(Suite):
    """BFCL's rows delivered at `tree` (trainer.data.bfcl), `per_category` drawn with `seed` per category, each asked
    with ANSWER_TOKENS new tokens within the model's `context` (a prompt that leaves no room is not asked: wrong, and
    said in `warnings`), IN_FLIGHT at a time to a server; its part of the result is "bfcl"."""

    name = "bfcl"

    def __init__(self, tree: Path, per_category: int, seed: int, tokenizer, context: int | None) -> None:
        self.rows = rows(tree, per_category, seed)
        prompts = prompt_lengths(tokenizer, self.rows)
        self.asked = Asked(self.rows, prompts, budgets(prompts, context), label="BFCL", in_flight=IN_FLIGHT)
        self.version, self.per_category, self.seed = bfcl_data.version(tree), per_category, seed
        self.too_long = [b < 1 for b in self.asked.budgets]
        self.warnings = (
            [
                f"{sum(self.too_long)} BFCL rows have prompts longer than the model's context "
                f"({context} tokens) leaves room to answer in: counted as wrong "
                "(bfcl_<category>_too_long); use a model with a longer context"
            ]
            if any(self.too_long)
            else []
        )

    def key(self) -> dict[str, Any]:
        """The rows asked (content, ids included) and how they were drawn."""
        asked = self.asked.rows
        digest = hashlib.sha256(json.dumps(asked, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        return {
            "rows_sha256": digest,
            "ids": [r.get("id") for r in asked],
            "version": self.version,
            "rows_per_category": self.per_category,
            "seed": self.seed,
        }

    def scored(self, answers: Answers) -> dict[str, Any]:
        """{"answers": per row, None for a row not asked}: what `score`, `counts`, `failures` and `answers` take."""
        return {"answers": answers.predictions}

    def result(self, base: dict[str, Any] | None, tuned: dict[str, Any] | None) -> dict[str, Any]:
        """{"bfcl": both models' scores by BFCL's rules, the counts, failures and every row's answers}."""
        asked = self.rows
        outputs = {"base": (base or {})["answers"], "tuned": (tuned or {})["answers"]}
        return {
            self.name: {
                "version": self.version,
                "rows_per_category": self.per_category,
                "seed": self.seed,
                "base": score(asked, outputs["base"]),
                "tuned": score(asked, outputs["tuned"]),
                "counts": counts(asked, self.too_long, outputs),
                "failures": failures(asked, outputs),
                "answers": answers(asked, outputs),
            }
        }
