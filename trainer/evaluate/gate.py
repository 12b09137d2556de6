"""The promotion rule, one for both pipelines: whether the finetune pipeline's tuned model is deployed and
registered (`promotion`), and which sweep trial wins and whether it is deployed (`pick`, which ranks trials by the
same metric and then asks `promotion` of the winner).

The primary metric is `PRIMARY`, fc_ast_accuracy: the BFCL-style AST accuracy over every function-calling category
of the held-out split (trainer.chat.fc_check). Every category of every suite is held to `max_category_drop` below the
base's, with McNemar's exact test on the rows lost and won (trainer.evaluate.paired); `max_drop_by_category` sets
another limit for the categories it names (`parse_drops`). A category whose rows are too few for McNemar's test to
show a drop of its limit is said to be inconclusive (`inconclusive`): the verdict says so, and the default gate still
decides by the points alone, as before."""

from __future__ import annotations

import math
from typing import Any

from trainer.core import metrics as names
from trainer.core.errors import UserError
from trainer.chat import fc_check
from trainer.data import bfcl

PRIMARY = names.PRIMARY
# select_metric -> the direction that improves; the primary metric or, for data without tool calls, eval loss
SELECT = {PRIMARY: "higher", "eval_loss": "lower"}
# The sweep's metric before the two gates shared one (exact-match accuracy): named in its refusal, with the fix
RENAMED = {"fc_accuracy": PRIMARY}
# Every category the gate holds to max_category_drop: the held-out suite's and BFCL's
GATED = {"heldout": fc_check.CATEGORIES, "bfcl": bfcl.CATEGORIES}
# Their names as the gate's lines and max_drop_by_category write them: fc_irrelevance, bfcl_live_irrelevance
GATED_NAMES = tuple(names.category(suite, c) for suite, cats in GATED.items() for c in cats)
# The significance an inconclusive verdict is judged at when gate_significance is 0 (off)
INCONCLUSIVE_ALPHA = 0.05
DROPS_PARAM = "max_drop_by_category"


def parse_drops(text: Any, name: str = DROPS_PARAM) -> dict[str, float]:
    """`max_drop_by_category`'s text, `bfcl_irrelevance=0.2,fc_multi_turn=0.15`, as {category: its limit}: each
    category named as the gate's lines name it (GATED_NAMES), each limit a fraction from 0 to 1 (1: that category
    off). Empty: {} (every category at max_category_drop).

    Raises:
        UserError: every problem at once (an unknown category with the known ones, a limit that is no fraction, a
            category named twice, an item without `=`), with the fix.
    """
    if not isinstance(text, str):
        raise UserError(f"{name} must be text such as 'bfcl_irrelevance=0.2', got {text!r}")
    out: dict[str, float] = {}
    problems = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        key, sep, value = (s.strip() for s in item.partition("="))
        if not sep:
            problems.append(f"{item!r} has no '=': write category=fraction, e.g. bfcl_irrelevance=0.2")
            continue
        if key not in GATED_NAMES:
            problems.append(f"{key!r} is no category the gate reads; one of {', '.join(GATED_NAMES)}")
            continue
        try:
            limit = float(value)
        except ValueError:
            limit = math.nan
        if not math.isfinite(limit) or not 0 <= limit <= 1:
            problems.append(f"{key}={value!r} is no fraction from 0 to 1 (0.2 is 20 points; 1 turns that category off)")
        elif key in out:
            problems.append(f"{key} is given twice ({out[key]:g} and {limit:g}): keep one")
        else:
            out[key] = limit
    if problems:
        raise UserError(f"{name}={text!r}: " + "; ".join(problems))
    return out


def _limit(category: str, max_drop: float, by_category: dict[str, float] | None) -> tuple[float, str]:
    """A category's limit and how the gate's line names it."""
    if by_category and category in by_category:
        return by_category[category], f"{DROPS_PARAM} {category}={by_category[category]:g}"
    return max_drop, f"max_category_drop {max_drop:g}"


def lost_to_show(limit: float, alpha: float) -> int:
    """The fewest rows lost, none won, for which McNemar's exact p is below `alpha`."""
    return next(k for k in range(1, 64) if mcnemar_p(k, 0) < alpha)


def inconclusive(
    metrics: dict[str, float], max_drop: float, significance: float = 0.0, by_category: dict[str, float] | None = None
) -> list[str]:
    """The categories whose rows cannot show a drop past their limit: an exact binomial bound. A drop past a limit
    d on n paired rows needs at least floor(d*n) + 1 rows lost; with every changed row lost and none won, McNemar's
    exact p is 2 * 0.5**lost, its smallest; where even that is not below `significance` (INCONCLUSIVE_ALPHA when
    0), no outcome on these rows could tell such a drop from chance. A category whose base has fewer right rows than
    that cannot fall past the limit at all, and is not listed. One entry each: its rows and the rows that would show
    it."""
    alpha = significance if significance > 0 else INCONCLUSIVE_ALPHA
    out = []
    for c in names.read(metrics, GATED).categories:
        limit, _ = _limit(c.name, max_drop, by_category)
        if limit >= 1 or not c.rows:
            continue
        needed = math.floor(limit * c.rows + 1e-9) + 1
        if round(c.base * c.rows) < needed or mcnemar_p(needed, 0) < alpha:
            continue
        enough = max(1, math.ceil((lost_to_show(limit, alpha) - 1) / limit - 1e-9)) if limit > 0 else 1
        out.append(f"{c.name} ({c.rows} rows; {enough} would show a {limit * 100:g}-point drop)")
    return out


def inconclusive_line(
    metrics: dict[str, float], max_drop: float, significance: float, by_category: dict[str, float] | None
) -> str:
    """`inconclusive`'s verdict as a clause of the gate's line ('' when none)."""
    found = inconclusive(metrics, max_drop, significance, by_category)
    if not found:
        return ""
    alpha = significance if significance > 0 else INCONCLUSIVE_ALPHA
    return (
        f"inconclusive at p<{alpha:g} (exact binomial bound: with every changed row lost, McNemar's p stays above "
        f"it), so these categories' verdicts rest on the points alone: {', '.join(found)}"
    )


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


def category_drops(
    metrics: dict[str, float], max_drop: float, significance: float = 0.0, by_category: dict[str, float] | None = None
) -> list[str]:
    """Every category measured on both models (held-out fc_<category>_accuracy, BFCL
    bfcl_<category>_accuracy) whose accuracy fell more than `max_drop` below the base's (a fraction, as the
    accuracies are: 0.1 is 10 points; a hair's float error, 1.0 - 0.9 > 0.1, is not a drop past it): a line
    each, with its rows and McNemar's exact test on the rows lost and won (trainer.evaluate.paired).
    `significance` > 0 keeps only the drops that chance explains poorly (p < significance); a drop whose
    counts were not logged (an older run's metrics) is kept, as without the test. `by_category`: the limits of the
    categories it names instead of `max_drop` (`parse_drops`; 1: that category off)."""
    return [line for line, kept in _drops(metrics, max_drop, significance, by_category) if kept]


def gate_drops(
    metrics: dict[str, float], max_drop: float, significance: float, by_category: dict[str, float] | None = None
) -> tuple[list[str], list[str]]:
    """(`category_drops`, the drops larger than their limit it lets pass at `significance`: p >= it), found once."""
    found = _drops(metrics, max_drop, significance, by_category)
    return [line for line, kept in found if kept], [line for line, kept in found if not kept]


def _drops(
    metrics: dict[str, float], max_drop: float, significance: float, by_category: dict[str, float] | None = None
) -> list[tuple[str, bool]]:
    out = []
    for c in names.read(metrics, GATED).categories:
        limit, gate = _limit(c.name, max_drop, by_category)
        gate += f", gate_significance {significance:g}" if significance > 0 else ""
        if limit >= 1 or c.base - c.tuned <= limit + 1e-9:
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
    by_category: dict[str, float] | None = None,
) -> tuple[bool, str]:
    """The promotion gate on the evaluate step's logged metrics: the tuned model's BFCL-style
    accuracy (fc_ast_accuracy, every function-calling category) at least `min_fc_accuracy`, and
    at least `min_gain` above the base's (fractions: 0.05 is 5 points; None: not asked), and no category of any suite
    more than `max_category_drop` below the base's (a fraction too: 0.1 is 10 points; `category_drops`; 1: off). Each
    category's line gives its rows and McNemar's exact p on the rows lost and won; `gate_significance`
    > 0 refuses only the drops with p below it (0: every drop past max_category_drop, significant or
    not), and the promoted line names those let pass. `by_category`: other limits for the categories it names
    (`parse_drops`). The line ends with the categories whose rows are too few to show a drop of their limit
    (`inconclusive`); they do not change the verdict. Returns (promoted, the line that says why); an
    accuracy the split cannot measure passes only a gate that asks nothing."""
    promoted, said = _accuracy_gate(metrics, min_fc_accuracy, min_gain)
    gated = max_category_drop < 1 or any(v < 1 for v in (by_category or {}).values())
    drops, passed = gate_drops(metrics, max_category_drop, gate_significance, by_category) if gated else ([], [])
    unsure = inconclusive_line(metrics, max_category_drop, gate_significance, by_category) if gated else ""
    if not drops:
        if promoted and passed:
            said = f"{said}; within chance, so let pass: {'; '.join(passed)}"
        return promoted, f"{said.rstrip('.')}. {unsure}" if unsure else said
    fix = (
        "fine-tuning took away what the base model could do: train on rows of that kind too (e.g. text answers "
        "where no offered tool fits), or raise max_category_drop"
    )
    tail = f". {unsure}" if unsure else ""
    if not promoted:  # both: one line, the accuracy's reason first (its fix follows "Nothing is deployed...")
        return False, f"{said.rstrip('.')}; and {'; '.join(drops)}: {fix}{tail}"
    return False, f"not promoted: {'; '.join(drops)}. Nothing is deployed or registered: {fix}{tail}"


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
    by_category: dict[str, float] | None = None,
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
    gated = max_category_drop < 1 or any(v < 1 for v in (by_category or {}).values())
    drops = [category_drops(m, max_category_drop, gate_significance, by_category) if gated else [] for m in metrics]
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
            f"({max_category_drop * 100:g} points){' or its ' + DROPS_PARAM + ' limit' if by_category else ''} below "
            f"the base; the best, trial {best} ({desc}): {'; '.join(drops[best])}"
        )
        return {"best": best, "deploy": False, "reason": reason, "rows": rows}
    if select_metric == PRIMARY:
        promoted, said = promotion(
            metrics[best], min_fc_accuracy, min_gain, max_category_drop, gate_significance, by_category
        )
        verdict = "deploying" if promoted else "not deployed:"
        return {
            "best": best,
            "deploy": promoted,
            "rows": rows,
            "reason": f"{verdict} trial {best} ({desc}): {said.split(': ', 1)[1]}",
        }
    # eval_loss: the accuracy floor and the categories as the gate asks them; not the accuracy's gain (min_gain
    # is the loss's here)
    promoted, said = promotion(metrics[best], min_fc_accuracy, None, max_category_drop, gate_significance, by_category)
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
