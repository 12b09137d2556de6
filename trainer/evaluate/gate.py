"""The promotion rule, one for both pipelines: whether the finetune pipeline's tuned model is deployed and
registered (`promotion`), and which sweep trial wins and whether it is deployed (`pick`, which ranks trials by the
same metric and then asks `promotion` of the winner).

The primary metric is `PRIMARY`, fc_ast_accuracy: the BFCL-style AST accuracy over every function-calling category
of the held-out split (trainer.chat.fc_check). Every category of every suite is held to `max_category_drop` below the
base's, with McNemar's exact test on the rows lost and won (trainer.evaluate.paired)."""

from __future__ import annotations

import math
from typing import Any

from trainer.core import metrics as names
from trainer.chat import fc_check
from trainer.data import bfcl

PRIMARY = names.PRIMARY
# select_metric -> the direction that improves; the primary metric or, for data without tool calls, eval loss
SELECT = {PRIMARY: "higher", "eval_loss": "lower"}
# The sweep's metric before the two gates shared one (exact-match accuracy): named in its refusal, with the fix
RENAMED = {"fc_accuracy": PRIMARY}
# Every category the gate holds to max_category_drop: the held-out suite's and BFCL's
GATED = {"heldout": fc_check.CATEGORIES, "bfcl": bfcl.CATEGORIES}


def meets(value: float, floor: float) -> bool:
    """`value >= floor` for a gate on metrics: accuracies are fractions k/n and a gain is their difference, which
    floating point can leave a hair under a gate it meets (0.7 - 0.6 = 0.09999999999999998 < 0.1, refused
    as "+10.0 points < min_gain 10.0"). Far below any difference one eval row makes."""
    return value >= floor - 1e-9


def mcnemar_p(lost: int, won: int) -> float:
    """McNemar's exact test, two-sided, on the rows tuning changed (trainer.evaluate.paired): were tuning harmless
    a changed row would be as likely lost as won, so the smaller count is binomial(lost + won, 1/2) in either
    tail; p = min(1, twice that tail), 1 when no row changed. Exact for any count (integer arithmetic)."""
    n, k = int(lost) + int(won), min(int(lost), int(won))
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def category_drops(metrics: dict[str, float], max_drop: float, significance: float = 0.0) -> list[str]:
    """Every category measured on both models (held-out fc_<category>_accuracy, BFCL
    bfcl_<category>_accuracy) whose accuracy fell more than `max_drop` below the base's (a fraction, as the
    accuracies are: 0.1 is 10 points; a hair's float error, 1.0 - 0.9 > 0.1, is not a drop past it): a line
    each, with its rows and McNemar's exact test on the rows lost and won (trainer.evaluate.paired).
    `significance` > 0 keeps only the drops that chance explains poorly (p < significance); a drop whose
    counts were not logged (an older run's metrics) is kept, as without the test."""
    return [line for line, kept in _drops(metrics, max_drop, significance) if kept]


def gate_drops(metrics: dict[str, float], max_drop: float, significance: float) -> tuple[list[str], list[str]]:
    """(`category_drops`, the drops larger than `max_drop` it lets pass at `significance`: p >= it), found once."""
    found = _drops(metrics, max_drop, significance)
    return [line for line, kept in found if kept], [line for line, kept in found if not kept]


def _drops(metrics: dict[str, float], max_drop: float, significance: float) -> list[tuple[str, bool]]:
    gate = f"max_category_drop {max_drop:g}" + (f", gate_significance {significance:g}" if significance > 0 else "")
    out = []
    for c in names.read(metrics, GATED).categories:
        if c.base - c.tuned <= max_drop + 1e-9:
            continue
        of = f" on {c.rows} rows" if c.rows is not None else ""
        if c.lost is None or c.won is None:
            test, kept = "lost/won not logged (an older run): taken as significant", True
        else:
            p = mcnemar_p(c.lost, c.won)
            test, kept = f"{c.lost} lost, {c.won} won, McNemar p={p:.3g}", not significance > 0 or p < significance
        out.append(
            (
                f"{c.name} fell {c.base:.1%} -> {c.tuned:.1%} ({(c.tuned - c.base) * 100:+.1f} points{of}; {test}; "
                f"{gate})",
                kept,
            )
        )
    return out


def promotion(
    metrics: dict[str, float],
    min_fc_accuracy: float = 0.0,
    min_gain: float | None = 0.0,
    max_category_drop: float = 1.0,
    gate_significance: float = 0.0,
) -> tuple[bool, str]:
    """The promotion gate on the evaluate step's logged metrics: the tuned model's BFCL-style
    accuracy (fc_ast_accuracy, every function-calling category) at least `min_fc_accuracy`, and
    at least `min_gain` above the base's (fractions: 0.05 is 5 points; None: not asked), and no category of any suite
    more than `max_category_drop` below the base's (a fraction too: 0.1 is 10 points; `category_drops`; 1: off). Each
    category's line gives its rows and McNemar's exact p on the rows lost and won; `gate_significance`
    > 0 refuses only the drops with p below it (0: every drop past max_category_drop, significant or
    not), and the promoted line names those let pass. Returns (promoted, the line that says why); an
    accuracy the split cannot measure passes only a gate that asks nothing."""
    promoted, said = _accuracy_gate(metrics, min_fc_accuracy, min_gain)
    gated = max_category_drop < 1
    drops, passed = gate_drops(metrics, max_category_drop, gate_significance) if gated else ([], [])
    if not drops:
        if promoted and passed:
            return True, f"{said}; within chance, so let pass: {'; '.join(passed)}"
        return promoted, said
    fix = (
        "fine-tuning took away what the base model could do: train on rows of that kind too (e.g. text answers "
        "where no offered tool fits), or raise max_category_drop"
    )
    if not promoted:  # both: one line, the accuracy's reason first (its fix follows "Nothing is deployed...")
        return False, f"{said.rstrip('.')}; and {'; '.join(drops)}: {fix}"
    return False, f"not promoted: {'; '.join(drops)}. Nothing is deployed or registered: {fix}"


def _accuracy_gate(metrics: dict[str, float], min_fc_accuracy: float, min_gain: float | None) -> tuple[bool, str]:
    """min_gain None: the accuracy's gain is not asked (the sweep by eval_loss, whose min_gain is the loss's)."""
    scores = names.read(metrics, {})
    tuned, base = scores.tuned, scores.base
    if tuned is None or base is None:
        if min_gain is None and min_fc_accuracy > 0:
            return False, (
                "not promoted: the eval split has no function-calling rows, so fc_ast_accuracy measures "
                f"nothing and cannot pass min_fc_accuracy={min_fc_accuracy:g}: set it to 0 for chat-only "
                "data"
            )
        if min_fc_accuracy > 0 or (min_gain or 0) > 0:
            return False, (
                "not promoted: the eval split has no function-calling rows, so fc_ast_accuracy measures "
                f"nothing and cannot pass min_fc_accuracy={min_fc_accuracy:g} / min_gain={min_gain:g}: set "
                "both to 0 for chat-only data"
            )
        return True, "promoted: no function-calling rows to gate on (min_fc_accuracy=0, min_gain=0)"
    gain = tuned - base
    failed = [
        f"fc_ast_accuracy {tuned:.1%} < min_fc_accuracy {min_fc_accuracy:.1%}"
        if not meets(tuned, min_fc_accuracy)
        else "",
        f"gain {gain * 100:+.1f} points < min_gain {min_gain * 100:.1f}"
        if min_gain is not None and not meets(gain, min_gain)
        else "",
    ]
    failed = [f for f in failed if f]
    said = f"fc_ast_accuracy {base:.1%} -> {tuned:.1%} ({gain * 100:+.1f} points)"
    if failed:
        return False, (
            f"not promoted: {said}; {'; '.join(failed)}. Nothing is deployed or registered: train longer "
            "(max_steps), or lower the gate"
        )
    asked = f", min_gain {min_gain * 100:.1f} points" if min_gain is not None else ""
    return True, f"promoted: {said}, min_fc_accuracy {min_fc_accuracy:.1%}{asked}"


def select_problem(select_metric: str) -> str:
    """'' for a select_metric `pick` reads, else the one line that says what to write instead."""
    if select_metric in SELECT:
        return ""
    if select_metric in RENAMED:
        return (
            f"select_metric={select_metric} is no longer a choice: the sweep now picks and gates on the finetune "
            f"pipeline's metric, {RENAMED[select_metric]} (BFCL-style AST accuracy over every function-calling "
            f"category): set select_metric={RENAMED[select_metric]}"
        )
    return f"select_metric must be one of {sorted(SELECT)}, got {select_metric!r}"


def pick(
    trials: list[dict[str, Any]],
    metrics: list[dict[str, float]],
    select_metric: str,
    min_gain: float,
    min_fc_accuracy: float = 0.0,
    max_category_drop: float = 1.0,
    gate_significance: float = 0.0,
) -> dict[str, Any]:
    """The best trial by `select_metric`, and whether it is deployed. A trial with a category more than
    `max_category_drop` below the base's (`category_drops`) is not picked while another passes. With
    select_metric=fc_ast_accuracy (`PRIMARY`) the winner is deployed exactly when `promotion` promotes it: the
    finetune pipeline's gate, with the same min_fc_accuracy, min_gain, max_category_drop and gate_significance.
    With eval_loss the gain is the fall in eval loss, at least `min_gain`, and `min_fc_accuracy` and the
    categories are asked as `promotion` asks them.

    One exception: where no trial measured fc_ast_accuracy (an eval split without tool calls), nothing is deployed
    by it, even where the finetune gate would promote at min_fc_accuracy=0 and min_gain=0; the sweep's validation
    refuses that case before any trial trains, naming select_metric=eval_loss.

    `metrics[i]` are trial i's evaluate metrics (base_* and tuned_* keys). Gain is measured in
    the metric's own units, in the improving direction (accuracy up, loss down).
    Returns {"best": index, "deploy": bool, "reason": str, "rows": [per-trial summary]}; with
    "measured": False (and base/tuned/gain None in the rows) when the metric measured nothing.
    """
    if problem := select_problem(select_metric):
        raise ValueError(problem)
    if not metrics or len(metrics) != len(trials):
        raise ValueError(f"{len(trials)} trials but {len(metrics)} metric sets")
    # The evaluate step logs no accuracy for a split without tool-call rows (a logged 0 would read as measured)
    base, tuned = names.base(select_metric), names.tuned(select_metric)
    measured = any(tuned in m and base in m for m in metrics)
    metrics = [{base: 0.0, tuned: 0.0, **m} for m in metrics]
    sign = 1.0 if SELECT[select_metric] == "higher" else -1.0
    gains = [sign * (m[tuned] - m[base]) for m in metrics]
    # ties: the earlier trial; a trial whose gain is not a number (a NaN eval loss) is never the best of others
    drops = [category_drops(m, max_category_drop, gate_significance) if max_category_drop < 1 else [] for m in metrics]
    best = max(
        range(len(gains)),
        key=lambda i: (not drops[i], math.isfinite(gains[i]), gains[i] if math.isfinite(gains[i]) else 0, -i),
    )
    # KFP passes list parameters through protobuf, where every number is a float: show 4, not 4.0.
    trials = [{k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in t.items()} for t in trials]
    rows = [
        {"trial": i, **trials[i], "base": metrics[i][base], "tuned": metrics[i][tuned], "gain": gains[i]}
        for i in range(len(trials))
    ]
    b = rows[best]
    desc = ", ".join(f"{k}={v}" for k, v in trials[best].items())
    if not measured:
        # 0 -> 0 for every trial would "pick" trial 0 by a tie nobody meant; the table shows the
        # metric as not measured (None), never as a measured-looking 0, and marks no trial best.
        for r in rows:
            r.update(base=None, tuned=None, gain=None)
        text = int(metrics[0].get("text_rows", 0))
        reason = (
            f"not deployed: {select_metric} measures nothing here, the eval split has no tool-call rows "
            f"({text} text rows): run the sweep with select_metric=eval_loss"
            if select_metric == PRIMARY
            else f"not deployed: {select_metric} was not measured for any trial"
        )
        return {"best": best, "deploy": False, "reason": reason, "rows": rows, "measured": False}
    if drops[best]:  # every trial lost a category the base had
        reason = (
            f"not deployed: every trial fell in a category more than max_category_drop {max_category_drop:g} "
            f"({max_category_drop * 100:g} points) below the base; the best, trial {best} ({desc}): {'; '.join(drops[best])}"
        )
        return {"best": best, "deploy": False, "reason": reason, "rows": rows}
    if select_metric == PRIMARY:
        promoted, said = promotion(metrics[best], min_fc_accuracy, min_gain, max_category_drop, gate_significance)
        verdict = "deploying" if promoted else "not deployed:"
        return {
            "best": best,
            "deploy": promoted,
            "rows": rows,
            "reason": f"{verdict} trial {best} ({desc}): {said.split(': ', 1)[1]}",
        }
    # eval_loss: the accuracy floor and the categories as the gate asks them; not the accuracy's gain (min_gain
    # is the loss's here)
    promoted, said = promotion(metrics[best], min_fc_accuracy, None, max_category_drop, gate_significance)
    if not promoted:
        return {
            "best": best,
            "deploy": False,
            "rows": rows,
            "reason": f"not deployed: trial {best} ({desc}): {said.split(': ', 1)[1]}",
        }
    if meets(gains[best], min_gain):
        reason = (
            f"deploying trial {best} ({desc}): {select_metric} {b['base']:.4g} -> {b['tuned']:.4g}, "
            f"gain {gains[best]:.4g} >= min_gain {min_gain}"
        )
        return {"best": best, "deploy": True, "reason": reason, "rows": rows}
    reason = (
        f"not deployed: the best trial {best} ({desc}) improves {select_metric} by {gains[best]:.4g} "
        f"({b['base']:.4g} -> {b['tuned']:.4g}), less than min_gain {min_gain}"
    )
    return {"best": best, "deploy": False, "reason": reason, "rows": rows}
