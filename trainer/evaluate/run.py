"""The evaluation of base and tuned on the held-out split: the rows scored, every metric of each
model (`score`), the numbers the evaluate step logs, and a sweep's base scored once (`score_base`).

Every trained assistant turn of a scored row is asked (trainer.chat.turns.turn_rows: the row cut after
the turn, the gold turns before it as the prompt), so a glaive or Hermes row's call is scored as a call
and its answer to the tool result as text; the accuracies and category counts are over these turns,
the eval losses over the rows (each row's encoding once)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trainer import data
from trainer.chat import fc_check
from trainer.chat.parsers import tool_call_parser
from trainer.chat.turns import (
    after_tool_result,
    expected_call,
    expected_text,
    last_user_request,
    split_turns,
    trained_turns,
)
from trainer.chat.types import Prediction, Row
from trainer.core import metrics as names
from trainer.core.errors import UserError
from trainer.data import bfcl as bfcl_data
from trainer.data.bfcl import BfclRow
from trainer.evaluate import bfcl, generation, kept_base
from trainer.evaluate import losses as losses_mod
from trainer.evaluate import served as served_mod
from trainer.evaluate.paired import heldout_counts
from trainer.evaluate.generation import fix_for_length, length_limit, context_length, fitting_rows, long_rows_problem
from trainer.evaluate.scoring import category_rows, failures, parsed_outputs, row_counts, score_predictions, source_rows


# Below this many rows one row moves accuracy by more than 2 points: say so.
MIN_RELIABLE_ROWS = 50
# What a base's stored answers were scored as: base scores made before every turn was asked are of other items.
SCORING = "every-turn"


def score(
    model,
    tokenizer,
    rows: list[Row],
    examples: list[dict[str, list[int]]],
    desc: str = "evaluate",
    predictions: list[Prediction] | None = None,
    losses: list[tuple[float, int]] | None = None,
    loss_rows: list[Row] | None = None,
) -> tuple[dict[str, float], list[Prediction]]:
    """All metrics for one model on `rows` (the turns asked, `turn_rows`) and the encodings `examples`
    of `loss_rows` (the rows that fit, `fitting_rows`; None: `rows` themselves), and its predictions
    ({"calls", "content", "raw"} per row of `rows`). `predictions` and `losses` (per example,
    `served_nll`) from the served model (eval_engine=vllm; `model` is then not used); None generates
    here (HF generate, the texts read with the serving parser) and computes the losses with
    transformers."""

    text = [expected_call(r) is None for r in (rows if loss_rows is None else loss_rows)]
    if predictions is None:
        parser = tool_call_parser(tokenizer.chat_template, list(tokenizer.get_added_vocab()))
        predictions = parsed_outputs(generation.generate(model, tokenizer, rows, desc=desc), parser)
    if losses is None:
        losses_of = {
            "eval_loss": losses_mod.eval_loss(model, examples, tokenizer.pad_token_id),
            "text_eval_loss": losses_mod.eval_loss(
                model, [e for e, t in zip(examples, text) if t], tokenizer.pad_token_id
            ),
        }
    else:
        losses_of = {
            "eval_loss": losses_mod.mean_loss(losses),
            "text_eval_loss": losses_mod.mean_loss([p for p, t in zip(losses, text) if t]),
        }
    return {**losses_of, **score_predictions(rows, predictions, tuple(tokenizer.all_special_tokens))}, predictions


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


def logged_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The numbers the evaluate step logs from `evaluate()`'s result, under names that are the
    same in every run (KFP's Compare view lines runs up by name): base_* and tuned_* of each
    metric, fc_accuracy_gain, and the row counts. A kind of row the split lacks scores 0 in
    `score_predictions`; logged, that 0 would read as a measurement next to other runs, so such
    metrics are left out (blank in Compare) and the count of 0 rows says why."""
    unmeasured = set()
    if not result["fc_rows"]:
        unmeasured |= {"fc_accuracy"}
    if not result["text_rows"]:
        unmeasured |= {"text_match", "text_eval_loss"}
    out = names.both({m: {k: v for k, v in result[m].items() if k not in unmeasured} for m in names.MODELS})
    # The BFCL-style accuracies of the tuned model also under their plain names (fc_ast_accuracy,
    # fc_<category>_accuracy: what KFP Compare lines up), with each category's row count; an
    # accuracy a split cannot measure is absent (fc_check), never 0.
    plain = {names.PRIMARY, names.EXACT} | {
        n for c in fc_check.CATEGORIES for n in (names.accuracy("heldout", c), names.count("heldout", c, "rows"))
    }
    out.update({k: float(v) for k, v in result["tuned"].items() if k in plain})
    out.update({k: float(v) for k, v in result.get("categories", {}).items()})
    out.update({k: float(v) for k, v in result.get("paired", {}).items()})  # fc_<category>_lost / _won
    out.update({k: float(v) for k, v in result.get("sources", {}).items()})  # mix<k>_rows: a mix's rows per source
    if result["fc_rows"]:
        out["fc_accuracy_gain"] = result["tuned"]["fc_accuracy"] - result["base"]["fc_accuracy"]
    if "fc_ast_accuracy" in result["tuned"] and "fc_ast_accuracy" in result["base"]:
        out["fc_ast_accuracy_gain"] = result["tuned"]["fc_ast_accuracy"] - result["base"]["fc_ast_accuracy"]
    if "heldout" in result.get("suites", ("heldout",)):
        # fc_rows / text_rows: the call and text turns scored (one per row for rows of one assistant turn)
        out.update(
            {
                k: float(result[src])
                for k, src in (
                    ("eval_rows", "rows"),
                    ("eval_turns", "turns"),
                    ("fc_rows", "fc_rows"),
                    ("text_rows", "text_rows"),
                    ("skipped_long_rows", "skipped_long_rows"),
                )
                if src in result
            }
        )
    if "bfcl" in result:  # as the held-out ones: base_ and tuned_, the tuned model's also plain, and the counts
        suite = result["bfcl"]
        out.update(names.both(suite))
        out.update({k: float(v) for k, v in suite["tuned"].items()})
        out.update({k: float(v) for k, v in suite["counts"].items()})
        if (number := bfcl_data.version_number(suite["version"])) is not None:
            out["bfcl_version"] = number  # 2026.3.23 -> 20260323: Compare runs shows which data scored them
    return out


@dataclass(frozen=True)
class Prepared:
    """What scoring any model on the eval split starts from (`_prepared`)."""

    rows: list[Row]  # the split's first max_rows
    scored: list[Row]  # those that fit max_seq_len
    turns: list[Row]  # the scored rows cut at each trained assistant turn (trainer.chat.turns.split_turns)
    examples: list[dict[str, list[int]]]  # the scored rows' encodings, for the eval loss
    tokenizer: Any
    context: int | None
    warnings: list[str]
    engine: str


def _prepared(model_dir: Path, eval_path: Path | None, max_rows: int, max_seq_len: int, engine: str) -> Prepared:
    """What scoring any model on the eval split starts from: the rows scored (the first `max_rows`
    that fit `max_seq_len`), their encodings, the warnings (printed), the engine chosen. `eval_path`
    None: the held-out suite is not scored (no rows)."""
    from transformers import AutoConfig, AutoTokenizer

    split = data.read_delivered(eval_path) if eval_path is not None else []
    rows = split[:max_rows]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    context = context_length(AutoConfig.from_pretrained(model_dir))
    kept, examples = fitting_rows(rows, tokenizer, max_seq_len, context) if rows else ([], [])
    if rows and not kept:
        raise UserError(long_rows_problem(len(rows), max_seq_len, context))
    scored = [rows[i] for i in kept]
    turns = split_turns(scored)
    warnings = warnings_for(scored, len(rows) - len(scored), max_seq_len, context, len(split)) if rows else []
    for w in warnings:
        print(f"WARNING: {w}", flush=True)
    engine = served_mod.choose_engine(engine, model_dir)
    counts = row_counts(turns)
    print(
        f"evaluating {len(scored)} held-out rows, {len(turns)} assistant turns ({counts['fc_rows']} call turns, "
        f"{counts['text_rows']} text turns), with {'the vLLM server' if engine == 'vllm' else 'HF generate'} "
        f"(eval_engine={engine})",
        flush=True,
    )
    return Prepared(rows, scored, turns, examples, tokenizer, context, warnings, engine)


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


def _scored_key(prep: Prepared, max_seq_len: int) -> dict[str, Any]:
    """What base scores are valid for: the same rows scored (their content), the same length limit
    and engine. The base's answers are greedy, so on these they are the same in every trial."""
    digest = hashlib.sha256(json.dumps(prep.scored, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return {
        "rows_sha256": digest,
        "rows": len(prep.scored),
        "max_seq_len": max_seq_len,
        "engine": prep.engine,
        "scoring": SCORING,
    }


def _generated_suite(
    model, tokenizer, asked: Sequence[Row], prompts: list[int], context: int | None, desc: str
) -> list[Prediction | None]:
    """HF generate's answers to a suite's rows (bfcl.budgets new tokens each), read with the serving parser;
    None for a row whose prompt leaves no room in the context."""
    budgets = bfcl.budgets(prompts, context)
    keep = [i for i, b in enumerate(budgets) if b >= 1]
    parser = tool_call_parser(tokenizer.chat_template, list(tokenizer.get_added_vocab()))
    texts = generation.generate(
        model, tokenizer, [asked[i] for i in keep], desc=desc, budgets=[budgets[i] for i in keep]
    )
    out: list[Prediction | None] = [None] * len(asked)
    for i, p in zip(keep, parsed_outputs(texts, parser)):
        out[i] = p
    return out


def _score_models(
    model_dir: Path,
    tuned_dir: Path | None,
    prep: Prepared,
    max_seq_len: int,
    names: tuple[str, ...],
    suite: tuple[list[BfclRow], list[int]] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, list[Prediction]], dict[str, list[Prediction | None]]]:
    """Metrics and per-row predictions of `names` (base: `model_dir`; tuned: `tuned_dir` on it) on the
    held-out rows, and their answers to `suite` (BFCL's rows and prompt lengths: trainer.evaluate.bfcl)."""
    scored, turns, examples, tokenizer = prep.scored, prep.turns, prep.examples, prep.tokenizer
    served = (
        served_mod.served_predictions(
            model_dir, tuned_dir, turns, examples, tokenizer, max_seq_len, prep.context, names=names, suite=suite
        )
        if prep.engine == "vllm"
        else {}
    )
    results, outputs, suite_outputs = {}, {}, {}
    for name in names:
        # Served: answers and losses came from the server, no weights load here.
        model = None if name in served else generation.load(model_dir, tuned_dir if name == "tuned" else None)
        if scored:
            results[name], outputs[name] = score(
                model,
                tokenizer,
                turns,
                examples,
                desc=f"evaluate {name}",
                predictions=served.get(name, {}).get("predictions"),
                losses=served.get(name, {}).get("losses"),
                loss_rows=scored,
            )
        if suite is not None:
            suite_outputs[name] = (
                served[name]["suite"]
                if name in served
                else _generated_suite(model, tokenizer, *suite, prep.context, f"BFCL {name}")
            )
        del model
    return results, outputs, suite_outputs


def score_base(
    model_dir: Path, eval_path: Path, max_rows: int = 200, max_seq_len: int = 512, engine: str = "auto"
) -> dict[str, Any]:
    """The base model's scores on the rows `evaluate` scores with the same arguments, for its
    `base`: a sweep scores its base once for all its trials instead of once in each. Returns
    {"key": what they are valid for (`_scored_key`), "metrics", "predictions" (per row)}: JSON."""
    prep = _prepared(model_dir, eval_path, max_rows, max_seq_len, engine)
    results, outputs, _ = _score_models(model_dir, None, prep, max_seq_len, ("base",))
    return {"key": _scored_key(prep, max_seq_len), "metrics": results["base"], "predictions": outputs["base"]}


def evaluate(
    model_dir: Path,
    tuned_dir: Path,
    eval_path: Path,
    max_rows: int = 200,
    max_seq_len: int = 512,
    n_examples: int = 5,
    engine: str = "auto",
    base: dict[str, Any] | None = None,
    suites: tuple[str, ...] = ("heldout",),
    bfcl_dir: Path | None = None,
    bfcl_rows: int = 25,
    seed: int = 0,
    kept: kept_base.KeptBase | None = None,
) -> dict[str, Any]:
    """Metrics for base and tuned, plus a few side-by-side examples for the report.

    `suites` (trainer.data.bfcl.SUITES): heldout scores the eval split (below); bfcl asks `bfcl_rows`
    rows per BFCL category from `bfcl_dir` (drawn with `seed`) on the same servers or loaded weights
    and scores them by BFCL's rules (trainer.evaluate.bfcl): the result's "bfcl" holds both models'
    metrics, the counts, the failures and BFCL's version. Without heldout, base/tuned are empty.

    Returns {"base": metrics, "tuned": metrics, "rows", "fc_rows", "text_rows",
    "skipped_long_rows", "warnings", "examples", "categories", "sources" (a mixed dataset's rows per
    source, `source_rows`), "failures" (a few wrong rows per category, `failures`)}: the counts are of the rows scored (the
    accuracies' denominators), rows too long for max_seq_len are counted apart and score
    nothing; metric names are the same in every run (a kind with no rows scores 0).
    Progress (rows generated) goes to stderr. `engine` (ENGINES): vllm answers through the served
    model and reads the eval loss off the same server's prompt log-probabilities
    (`served_predictions`; no model is loaded here), hf generates here, reads the texts with the
    serving parser and computes the loss with transformers; auto picks by `choose_engine`.
    `base`: `score_base`'s result for the same arguments, used instead of scoring the base again;
    made for other rows, another max_seq_len or engine, it is set aside, said, and the base scored here.
    `kept`: the base's scores kept in the bucket (trainer.evaluate.kept_base), the held-out part and the BFCL
    part apart: a part an earlier run made with the same base tree, chat template, rows and engine settings is
    used (the base is not asked it), a part scored here is kept there for the next run.

    Raises:
        UserError: every row is too long, found before any model loads.
    """
    prep = _prepared(model_dir, eval_path if "heldout" in suites else None, max_rows, max_seq_len, engine)
    key = _scored_key(prep, max_seq_len)
    base = _given_base(base, key)
    suite, bfcl_version = None, ""
    if "bfcl" in suites:
        if bfcl_dir is None:
            raise ValueError("suites holds bfcl but bfcl_dir is None: deliver BFCL's data first (deliver-bfcl)")
        asked, bfcl_version = bfcl.rows(bfcl_dir, bfcl_rows, seed), bfcl_data.version(bfcl_dir)
        suite = (asked, bfcl.prompt_lengths(prep.tokenizer, asked))
    base_suite, shas = None, {}
    if kept is not None:  # an earlier run's answers, each part for the same inputs (trainer.evaluate.kept_base)
        base, base_suite, shas = _kept_answers(kept, prep, key, base, suite, bfcl_version, bfcl_rows, seed)
    results, outputs, suite_outputs, need = _answers(
        model_dir, tuned_dir, prep, max_seq_len, suite, base, base_suite, kept, shas
    )
    if "heldout" not in need and base is not None:
        results["base"], outputs["base"] = base["metrics"], base["predictions"]
    if "bfcl" not in need and base_suite is not None:
        suite_outputs["base"] = base_suite
    turns = prep.turns
    result: dict[str, Any] = {
        "base": results.get("base", {}),
        "tuned": results.get("tuned", {}),
        "rows": len(prep.scored),
        "turns": len(turns),
        **row_counts(turns),
        "categories": category_rows(turns),
        "sources": source_rows(turns),
        "failures": failures(turns, outputs) if turns else {},
        "engine": prep.engine,
        "skipped_long_rows": len(prep.rows) - len(prep.scored),
        "warnings": prep.warnings,
        "examples": _examples(turns, outputs, n_examples),
        "suites": list(suites),
    }
    result["paired"] = heldout_counts(turns, outputs) if turns else {}  # fc_<category>_lost / _won: the gate's
    if suite is not None:
        result["bfcl"] = _bfcl_result(suite, suite_outputs, prep, bfcl_version, bfcl_rows, seed, result["warnings"])
    return result


def _examples(turns: list[Row], outputs: dict[str, list[Prediction]], n: int) -> list[dict[str, Any]]:
    """A few turns side by side for the report: the request, what was expected, each model's raw answer."""
    return [
        {
            "prompt": last_user_request(turns[i]),
            "turn": turn_label(turns[i]),
            "expected": expected_call(turns[i]) or expected_text(turns[i]),
            "base": outputs["base"][i]["raw"],
            "tuned": outputs["tuned"][i]["raw"],
        }
        for i in example_turns(turns, n)
    ]


def _bfcl_result(suite, suite_outputs, prep: Prepared, version: str, rows: int, seed: int, warnings: list[str]):
    """The result's "bfcl": both models' scores by BFCL's rules, the counts, failures and answers; a warning in
    `warnings` for prompts that leave no room to answer in the model's context."""
    asked, prompts = suite
    too_long = [b < 1 for b in bfcl.budgets(prompts, prep.context)]
    if any(too_long):
        warnings.append(
            f"{sum(too_long)} BFCL rows have prompts longer than the model's context "
            f"({prep.context} tokens) leaves room to answer in: counted as wrong "
            "(bfcl_<category>length_limit); use a model with a longer context"
        )
    return {
        "version": version,
        "rows_per_category": rows,
        "seed": seed,
        "base": bfcl.score(asked, suite_outputs["base"]),
        "tuned": bfcl.score(asked, suite_outputs["tuned"]),
        "counts": bfcl.counts(asked, too_long, suite_outputs),
        "failures": bfcl.failures(asked, suite_outputs),
        "answers": bfcl.answers(asked, suite_outputs),
    }


def _given_base(base: dict[str, Any] | None, key: dict[str, Any]) -> dict[str, Any] | None:
    """`score_base`'s result when it was made for these rows and settings; else None, said (the base is scored)."""
    if base is None or base.get("key") == key:
        return base
    given = base.get("key") or {}
    differ = [f"{k} {given.get(k)} instead of {v}" for k, v in key.items() if given.get(k) != v and k != "rows_sha256"]
    print(
        f"WARNING: the base scores given are not of these rows and settings "
        f"({', '.join(differ) or 'other rows'}): scoring the base model here",
        flush=True,
    )
    return None


def _kept_answers(kept, prep, key, base, suite, bfcl_version, bfcl_rows, seed):
    """(held-out base scores, BFCL base answers, {part: digest}): what the bucket keeps of an earlier run's base for
    the same inputs, each part apart (None where it keeps nothing); the digests name where this run keeps its own."""
    template = prep.tokenizer.chat_template
    base_suite, shas = None, {}
    if prep.scored and base is None:
        shas["heldout"] = kept_base.digest(kept.model_uri, template, "heldout", key)
        base = kept.load(shas["heldout"], "heldout", len(prep.turns))
    if suite is not None:
        shas["bfcl"] = kept_base.digest(
            kept.model_uri, template, "bfcl", kept_base.suite_key(suite[0], bfcl_version, bfcl_rows, seed)
        )
        base_suite = (kept.load(shas["bfcl"], "bfcl", len(suite[0])) or {}).get("answers")
    return base, base_suite, shas


def _answers(model_dir, tuned_dir, prep, max_seq_len, suite, base, base_suite, kept, shas):
    """(metrics, predictions, BFCL answers) per model asked here, and the parts the base was asked (`need`).

    The base is asked only what no earlier answer covers, first, and what it answered is kept at once: a tuned
    model that fails or stalls (2026-12-02: a server that stopped answering after 40 min) no longer loses the
    base's 25 minutes of answers with it. With kept scores, the base has its own server (on vLLM's CPU build it
    had one anyway; on a GPU it costs one more start, in the run that first scores the base)."""
    need = {"heldout"} if prep.scored and base is None else set()
    need |= {"bfcl"} if suite is not None and base_suite is None else set()
    have = ({"heldout"} if prep.scored else set()) | ({"bfcl"} if suite is not None else set())
    if need and need == have and kept is None:  # nothing to keep: one server for both where vLLM serves the adapter
        results, outputs, suite_outputs = _score_models(
            model_dir, tuned_dir, prep, max_seq_len, ("base", "tuned"), suite
        )
    else:
        results, outputs, suite_outputs = {}, {}, {}
        if need:  # the part left to ask: the held-out rows or BFCL's
            asked_base = prep if "heldout" in need else replace(prep, scored=[], turns=[], examples=[])
            more = _score_models(model_dir, None, asked_base, max_seq_len, ("base",), suite if "bfcl" in need else None)
            results.update(more[0])
            outputs.update(more[1])
            suite_outputs.update(more[2])
            for part in need & set(shas):
                assert kept is not None  # shas are made only with it
                kept.save(
                    shas[part],
                    part,
                    {"metrics": results["base"], "predictions": outputs["base"]}
                    if part == "heldout"
                    else {"answers": suite_outputs["base"]},
                )
        tuned = _score_models(model_dir, tuned_dir, prep, max_seq_len, ("tuned",), suite)
        results.update(tuned[0])
        outputs.update(tuned[1])
        suite_outputs.update(tuned[2])
    return results, outputs, suite_outputs, need
