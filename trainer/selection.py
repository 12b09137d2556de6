"""Choosing a sweep's winner and deciding whether to deploy it (the sweep pipeline is pipelines/sweep.py)."""

from __future__ import annotations

import math
from typing import Any

from trainer import fc_check
from trainer.data import bfcl

# metric -> (direction, the Metrics keys written by the evaluate component)
SELECT = {"fc_accuracy": "higher", "eval_loss": "lower"}


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
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


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
    names = [f"fc_{c}" for c in fc_check.CATEGORIES] + [f"bfcl_{c}" for c in bfcl.CATEGORIES]
    gate = f"max_category_drop {max_drop:g}" + (f", gate_significance {significance:g}" if significance > 0 else "")
    out = []
    for name in names:
        accuracy = f"{name}_accuracy"
        base, tuned = metrics.get(f"base_{accuracy}"), metrics.get(f"tuned_{accuracy}", metrics.get(accuracy))
        if base is None or tuned is None or base - tuned <= max_drop + 1e-9:
            continue
        rows, lost, won = (metrics.get(f"{name}_{k}") for k in ("rows", "lost", "won"))
        of = f" on {int(rows)} rows" if rows is not None else ""
        if lost is None or won is None:
            test, kept = "lost/won not logged (an older run): taken as significant", True
        else:
            p = mcnemar_p(int(lost), int(won))
            test, kept = f"{int(lost)} lost, {int(won)} won, McNemar p={p:.3g}", not significance > 0 or p < significance
        out.append((f"{name} fell {base:.1%} -> {tuned:.1%} ({(tuned - base) * 100:+.1f} points{of}; {test}; "
                    f"{gate})", kept))
    return out


def pick(trials: list[dict[str, Any]], metrics: list[dict[str, float]], select_metric: str,
         min_gain: float, min_fc_accuracy: float = 0.0, max_category_drop: float = 1.0,
         gate_significance: float = 0.0) -> dict[str, Any]:
    """The best trial by `select_metric`, and whether it beats the base model by `min_gain`. A trial
    with a category more than `max_category_drop` (a fraction: 0.1 is 10 points) below the base's (`category_drops`) is not
    picked while another passes; where none does, nothing is deployed. `gate_significance` > 0: only a drop
    with McNemar's p below it counts (`category_drops`).

    `metrics[i]` are trial i's evaluate metrics (base_* and tuned_* keys). Gain is measured in
    the metric's own units, in the improving direction (accuracy up, loss down).
    Returns {"best": index, "deploy": bool, "reason": str, "rows": [per-trial summary]}; with
    "measured": False (and base/tuned/gain None in the rows) when the metric measured nothing.
    """
    if select_metric not in SELECT:
        raise ValueError(f"select_metric must be one of {sorted(SELECT)}, got {select_metric!r}")
    if not metrics or len(metrics) != len(trials):
        raise ValueError(f"{len(trials)} trials but {len(metrics)} metric sets")
    # The evaluate step logs no fc_accuracy for a split without tool-call rows (a logged 0 would
    # read as measured); 0 here only feeds the tie that the fc_rows check below turns down.
    metrics = [{f"base_{select_metric}": 0.0, f"tuned_{select_metric}": 0.0, **m} if m.get("fc_rows", 1) == 0 else m
               for m in metrics]
    sign = 1.0 if SELECT[select_metric] == "higher" else -1.0
    gains = [sign * (m[f"tuned_{select_metric}"] - m[f"base_{select_metric}"]) for m in metrics]
    # ties: the earlier trial; a trial whose gain is not a number (a NaN eval loss) is never the best of others
    drops = [category_drops(m, max_category_drop, gate_significance) if max_category_drop < 1 else []
             for m in metrics]
    best = max(range(len(gains)), key=lambda i: (not drops[i], math.isfinite(gains[i]),
                                                 gains[i] if math.isfinite(gains[i]) else 0, -i))
    # KFP passes list parameters through protobuf, where every number is a float: show 4, not 4.0.
    trials = [{k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in t.items()} for t in trials]
    rows = [{"trial": i, **trials[i], "base": metrics[i][f"base_{select_metric}"],
             "tuned": metrics[i][f"tuned_{select_metric}"], "gain": gains[i]} for i in range(len(trials))]
    b = rows[best]
    desc = ", ".join(f"{k}={v}" for k, v in trials[best].items())
    if select_metric == "fc_accuracy" and all(m.get("fc_rows", 1) == 0 for m in metrics):
        # 0 -> 0 for every trial would "pick" trial 0 by a tie nobody meant; the table shows the
        # metric as not measured (None), never as a measured-looking 0, and marks no trial best.
        for r in rows:
            r.update(base=None, tuned=None, gain=None)
        reason = (f"not deployed: fc_accuracy measures nothing here, the eval split has no tool-call rows "
                  f"({int(metrics[0].get('text_rows', 0))} text rows): run the sweep with select_metric=eval_loss")
        return {"best": best, "deploy": False, "reason": reason, "rows": rows, "measured": False}
    if drops[best]:  # every trial lost a category the base had
        reason = (f"not deployed: every trial fell in a category more than max_category_drop {max_category_drop:g} "
                  f"({max_category_drop * 100:g} points) below the base; the best, trial {best} ({desc}): {'; '.join(drops[best])}")
        return {"best": best, "deploy": False, "reason": reason, "rows": rows}
    accuracy = metrics[best].get("fc_ast_accuracy")  # the finetune pipeline's promotion gate, the same rule
    if min_fc_accuracy > 0 and (accuracy is None or not meets(accuracy, min_fc_accuracy)):
        said = "is not measured (no function-calling rows)" if accuracy is None else f"is {accuracy:.1%}"
        reason = (f"not deployed: the best trial {best} ({desc}) has fc_ast_accuracy that {said}, below "
                  f"min_fc_accuracy {min_fc_accuracy:.1%}")
        return {"best": best, "deploy": False, "reason": reason, "rows": rows}
    if meets(gains[best], min_gain):
        reason = (f"deploying trial {best} ({desc}): {select_metric} {b['base']:.4g} -> {b['tuned']:.4g}, "
                  f"gain {gains[best]:.4g} >= min_gain {min_gain}")
        return {"best": best, "deploy": True, "reason": reason, "rows": rows}
    reason = (f"not deployed: the best trial {best} ({desc}) improves {select_metric} by {gains[best]:.4g} "
              f"({b['base']:.4g} -> {b['tuned']:.4g}), less than min_gain {min_gain}")
    return {"best": best, "deploy": False, "reason": reason, "rows": rows}
