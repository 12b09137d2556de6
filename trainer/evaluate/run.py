"""The evaluation of base and tuned (`evaluate`): a loop over the suites chosen (trainer.evaluate.base.Suite: the
held-out split, BFCL) on one engine (trainer.evaluate.base.Engine: HF generate or vLLM's server), the base asked only
what no earlier answer covers; the numbers the evaluate step logs (`logged_metrics`); and a sweep's base scored once
(`score_base`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from trainer.chat import fc_check
from trainer.core import metrics as names
from trainer.data import bfcl as bfcl_data
from trainer.evaluate import kept_base
from trainer.evaluate.base import Engine, Evaluation, Suite
from trainer.evaluate.bfcl import Bfcl
from trainer.evaluate.generation import HfEngine
from trainer.evaluate.heldout import HeldOut, Prepared, prepared
from trainer.evaluate.scoring import row_counts
from trainer.evaluate.served import VllmEngine, choose_engine

# eval_engine's values: auto (choose_engine picks), or an engine by its name.
ENGINES: dict[str, type[Engine]] = {e.name: e for e in (VllmEngine, HfEngine)}
ENGINE_CHOICES = ("auto", *ENGINES)


def logged_metrics(result: Evaluation) -> dict[str, float]:
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
    both = {"base": result["base"], "tuned": result["tuned"]}
    out = names.both({m: {k: v for k, v in scores.items() if k not in unmeasured} for m, scores in both.items()})
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
        counted = {
            "eval_rows": result.get("rows"),
            "eval_turns": result.get("turns"),
            "fc_rows": result.get("fc_rows"),
            "text_rows": result.get("text_rows"),
            "skipped_long_rows": result.get("skipped_long_rows"),
        }
        out.update({k: float(v) for k, v in counted.items() if v is not None})
    if "bfcl" in result:  # as the held-out ones: base_ and tuned_, the tuned model's also plain, and the counts
        suite = result["bfcl"]
        out.update(names.both({"base": suite["base"], "tuned": suite["tuned"]}))
        out.update({k: float(v) for k, v in suite["tuned"].items()})
        out.update({k: float(v) for k, v in suite["counts"].items()})
        if (number := bfcl_data.version_number(suite["version"])) is not None:
            out["bfcl_version"] = number  # 2026.3.23 -> 20260323: Compare runs shows which data scored them
    return out


def _engine_and_rows(
    engine: str | Engine, model_dir: Path, eval_path: Path | None, max_rows: int, max_seq_len: int
) -> tuple[Engine, Prepared]:
    """The engine that answers (`engine` itself, or the one eval_engine names, auto chosen by `choose_engine`) and
    the held-out rows it is asked (none where `eval_path` is None), said in one line."""
    prep = prepared(model_dir, eval_path, max_rows, max_seq_len)
    if not isinstance(engine, Engine):
        engine = ENGINES[choose_engine(engine, model_dir)](prep.tokenizer, prep.context)
    counts = row_counts(prep.turns)
    print(
        f"evaluating {len(prep.scored)} held-out rows, {len(prep.turns)} assistant turns ({counts['fc_rows']} call "
        f"turns, {counts['text_rows']} text turns), with {engine.description} (eval_engine={engine.name})",
        flush=True,
    )
    return engine, prep


def score_base(
    model_dir: Path, eval_path: Path, max_rows: int = 200, max_seq_len: int = 512, engine: str | Engine = "auto"
) -> dict[str, Any]:
    """The base model's scores on the rows `evaluate` scores with the same arguments, for its
    `base`: a sweep scores its base once for all its trials instead of once in each. Returns
    {"key": what they are valid for (HeldOut.key), "metrics", "predictions" (per turn)}: JSON."""
    answering, prep = _engine_and_rows(engine, model_dir, eval_path, max_rows, max_seq_len)
    suite = HeldOut(prep, max_seq_len, answering.name)
    answers = answering.answer(model_dir, None, ("base",), {suite.name: suite.asked})["base"][suite.name]
    return {"key": suite.key(), **suite.scored(answers)}


def evaluate(
    model_dir: Path,
    tuned_dir: Path,
    eval_path: Path,
    max_rows: int = 200,
    max_seq_len: int = 512,
    n_examples: int = 5,
    engine: str | Engine = "auto",
    base: dict[str, Any] | None = None,
    suites: tuple[str, ...] = ("heldout",),
    bfcl_dir: Path | None = None,
    bfcl_rows: int = 25,
    seed: int = 0,
    kept: kept_base.KeptBase | None = None,
) -> Evaluation:
    """Metrics for base and tuned, plus a few side-by-side examples for the report.

    `suites` (trainer.data.bfcl.SUITES): heldout scores the eval split (trainer.evaluate.heldout); bfcl asks
    `bfcl_rows` rows per BFCL category from `bfcl_dir` (drawn with `seed`) on the same engine and scores them by
    BFCL's rules (trainer.evaluate.bfcl): the result's "bfcl" holds both models' metrics, the counts, the failures
    and BFCL's version. Without heldout, base/tuned are empty.

    Returns an `Evaluation` (trainer.evaluate.base): the counts are of the rows scored (the accuracies'
    denominators), rows too long for max_seq_len are counted apart and score nothing; metric names are the same in
    every run (a kind with no rows scores 0). Progress (rows answered) goes to stderr.

    `engine`: an Engine, or its name in ENGINES (eval_engine): vllm answers through the served model and reads the
    eval loss off the same server's prompt log-probabilities (no model is loaded here), hf generates here, reads the
    texts with the serving parser and computes the loss with transformers; auto picks by `choose_engine`.
    `base`: `score_base`'s result for the same arguments, used instead of scoring the base again; made for other
    rows, another max_seq_len or engine, it is set aside, said, and the base scored here.
    `kept`: the base's scores kept in the bucket (trainer.evaluate.kept_base), each suite's part apart: a part an
    earlier run made with the same base tree, chat template, rows and engine settings is used (the base is not
    asked it), a part scored here is kept there for the next run.

    Raises:
        UserError: every row is too long, found before any model loads.
    """
    answering, prep = _engine_and_rows(
        engine, model_dir, eval_path if HeldOut.name in suites else None, max_rows, max_seq_len
    )
    chosen: list[Suite] = [HeldOut(prep, max_seq_len, answering.name, n_examples)]
    if Bfcl.name in suites:
        if bfcl_dir is None:
            raise ValueError("suites holds bfcl but bfcl_dir is None: deliver BFCL's data first (deliver-bfcl)")
        chosen.append(Bfcl(bfcl_dir, bfcl_rows, seed, prep.tokenizer, prep.context))
    given = _given_base(base, chosen[0].key())
    base_scores, tuned_scores = _ask(
        answering, model_dir, tuned_dir, chosen, {chosen[0].name: given} if given else {}, kept, prep
    )
    result: dict[str, Any] = {
        "engine": answering.name,
        "suites": list(suites),
        "warnings": [w for s in chosen for w in s.warnings],
    }
    for suite in chosen:
        result.update(suite.result(base_scores.get(suite.name), tuned_scores.get(suite.name)))
    return cast(Evaluation, result)


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


def _ask(
    engine: Engine,
    model_dir: Path,
    tuned_dir: Path,
    suites: list[Suite],
    given: dict[str, dict[str, Any]],
    kept: kept_base.KeptBase | None,
    prep: Prepared,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Both models' scores per suite asked (`Suite.scored`): the base's from `given`, from what the bucket keeps of
    an earlier run's base for the same inputs (`kept`), or asked here; the tuned model's asked here.

    The base is asked only what nothing covers, first, and what it answered is kept at once: a tuned model that
    fails or stalls (2026-12-02: a server that stopped answering after 40 min) no longer loses the base's 25 minutes
    of answers with it. Where the base is asked everything and nothing is kept, both are asked in one go (on a GPU,
    vLLM serves the adapter beside its base: one server)."""
    asking = [s for s in suites if s.asked.rows]
    base = dict(given)
    shas = {}
    if kept is not None:  # an earlier run's answers, each part for the same inputs (trainer.evaluate.kept_base)
        for suite in (s for s in asking if s.name not in base):
            shas[suite.name] = kept_base.digest(kept.model_uri, prep.tokenizer.chat_template, suite.name, suite.key())
            if (earlier := kept.load(shas[suite.name], suite.name, len(suite.asked.rows))) is not None:
                base[suite.name] = earlier
    need = [s for s in asking if s.name not in base]
    if need and len(need) == len(asking) and kept is None:
        both = engine.answer(model_dir, tuned_dir, names.MODELS, {s.name: s.asked for s in asking})
        base.update({s.name: s.scored(both["base"][s.name]) for s in asking})
        tuned = both["tuned"]
    else:
        if need:
            answers = engine.answer(model_dir, None, ("base",), {s.name: s.asked for s in need})["base"]
            for suite in need:
                base[suite.name] = suite.scored(answers[suite.name])
                if kept is not None:
                    kept.save(shas[suite.name], suite.name, base[suite.name])
        tuned = engine.answer(model_dir, tuned_dir, ("tuned",), {s.name: s.asked for s in asking})["tuned"]
    return base, {s.name: s.scored(tuned[s.name]) for s in asking}
