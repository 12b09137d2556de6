"""The adapter's strength chosen by the promotion gate (pipeline parameter `merge_scales`).

Interpolating base and tuned weights keeps more of what the base could do at little cost to what tuning taught
(WiSE-FT: 4-6 points out of distribution at no training cost); for a LoRA adapter it is merging its update at a
scale s in (0, 1] (trainer.models.merge.scaled_adapter). The evaluate step scores the tuned model at each scale
given, on the same rows, with the base scored once (its scores kept, trainer.evaluate.kept_base), asks the gate of
each (trainer.evaluate.gate.promotion) and takes the strongest that passes: the highest primary metric among the
scales that pass (ties: the larger scale, the one closer to what was trained). Where none passes, the one with the
highest primary metric is reported, and not promoted. The merge step merges at the scale chosen, so what is
deployed is what was scored.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.core import metrics as names
from trainer.core.errors import UserError
from trainer.evaluate import gate
from trainer.evaluate.base import Evaluation
from trainer.evaluate.report import summary_lines
from trainer.evaluate.run import logged_metrics
from trainer.models.merge import scale_problem, scaled_adapter

PARAM = "merge_scales"
MAX_SCALES = 5  # each costs one more scoring of the tuned model


def parse_scales(text: Any, name: str = PARAM) -> tuple[float, ...]:
    """`merge_scales`'s text, `1.0,0.75,0.5`, as its scales in the order given: each a finite number in (0, 1],
    none twice, at most MAX_SCALES. Empty: (1.0,), the adapter as trained.

    Raises:
        UserError: every problem at once, with the fix.
    """
    fix = f"e.g. {name}=1.0,0.75,0.5 (1.0 is the adapter as trained)"
    if not isinstance(text, str):
        raise UserError(f"{name} must be text, comma-separated scales, got {text!r}: {fix}")
    items = [i.strip() for i in text.split(",") if i.strip()]
    if not items:
        return (1.0,)
    out: list[float] = []
    problems = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not 0 < value <= 1:
            problems.append(f"{item!r} is no scale in (0, 1]")
        elif value in out:
            problems.append(f"{item} is given twice")
        else:
            out.append(value)
    if len(items) > MAX_SCALES:
        problems.append(f"{len(items)} scales, at most {MAX_SCALES} (each scores the tuned model once more)")
    if problems:
        raise UserError(f"{name}={text!r}: {'; '.join(problems)}: {fix}")
    return tuple(out)


@dataclass(frozen=True)
class Choice:
    """The scale the gate chose among those scored, the verdict at it, and each scale's verdict (scale, promoted,
    primary metric, the gate's line)."""

    index: int
    scale: float
    promoted: bool
    reason: str
    verdicts: tuple[tuple[float, bool, float | None, str], ...]


def choose(
    scales: tuple[float, ...], logged: list[dict[str, float]], verdict: Callable[[dict], tuple[bool, str]]
) -> Choice:
    """The strongest scale that passes `verdict` (the promotion gate on a scale's logged metrics): the highest
    primary metric among those that pass, ties to the larger scale; where none passes, the highest primary metric,
    not promoted. The reason names the scale where more than one was scored."""
    verdicts = []
    for scale, metrics in zip(scales, logged):
        ok, line = verdict(metrics)
        verdicts.append((scale, ok, names.read(metrics, {}).tuned, line))

    def strength(i: int) -> tuple[float, float]:
        primary = verdicts[i][2]
        return (primary if primary is not None and math.isfinite(primary) else -math.inf, verdicts[i][0])

    passing = [i for i, v in enumerate(verdicts) if v[1]]
    best = max(passing or range(len(verdicts)), key=strength)
    scale, ok, _, line = verdicts[best]
    if len(scales) > 1:
        others = ", ".join(
            f"{s:g}: {'passes' if p else 'fails'}" + (f" at {m:.1%}" if m is not None else "")
            for s, p, m, _ in verdicts
            if s != scale
        )
        verb, rest = line.split(": ", 1) if ": " in line else (line, "")
        line = f"{verb} at merge scale {scale:g} (of {', '.join(f'{s:g}' for s in scales)}; {others}): {rest}"
    return Choice(best, scale, ok, line, tuple(verdicts))


def scale_metrics(scales: tuple[float, ...], logged: list[dict[str, float]], chosen: float) -> dict[str, float]:
    """What the evaluate step logs beside the chosen scale's metrics: `merge_scale`, and every scale's tuned
    accuracies under `names.scaled` (only where more than one was scored)."""
    out = {"merge_scale": float(chosen)}
    if len(scales) < 2:
        return out
    for scale, metrics in zip(scales, logged):
        out.update(
            {
                names.scaled(scale, p): metrics[k]
                for k in metrics
                if (p := names.of_tuned(k)) and p.endswith("_accuracy")
            }
        )
    return out


def evaluate_scales(
    evaluate: Callable[..., Evaluation],
    model_dir: Path,
    tuned_dir: Path,
    scales: tuple[float, ...],
    verdict: Callable[[dict], tuple[bool, str]] | None = None,
    **kwargs,
) -> list[Evaluation]:
    """`evaluate(model_dir, adapter, **kwargs)`'s result at each scale (the adapter's update scaled,
    trainer.models.merge.scaled_adapter), in order. The base's scores are kept by the first (`kwargs["kept"]`) and
    reused by the others, so the base is asked once. Where there is more than one scale, each one's scores (and the
    gate's `verdict` at it, where given) are printed as soon as it is scored (`scale_lines`): on a laptop a scale costs
    minutes of asking, and its outcome should not wait for the last.

    Raises:
        UserError: a scale other than 1 for an output whose update cannot be scaled.
    """
    if any(s != 1 for s in scales) and (problem := scale_problem(tuned_dir)):
        raise UserError(f"{PARAM}={','.join(f'{s:g}' for s in scales)}: {problem}, or {PARAM}=1")
    results = []
    for scale in scales:
        with tempfile.TemporaryDirectory(prefix="scaled-adapter-") as tmp:
            adapter = scaled_adapter(tuned_dir, scale, Path(tmp) / "adapter")
            if len(scales) > 1:
                print(f"evaluate: the tuned model at merge scale {scale:g}", flush=True)
            results.append(evaluate(model_dir, adapter, **kwargs))
        if len(scales) > 1:
            print("\n".join(scale_lines(scale, results[-1], verdict)), flush=True)
    return results


def scale_lines(
    scale: float, result: Evaluation, verdict: Callable[[dict], tuple[bool, str]] | None = None
) -> list[str]:
    """What the evaluate step prints as soon as a scale is scored: its scores, base -> tuned, and the gate's verdict
    at it (`verdict`, as `choose` asks it; none: no gate line)."""
    lines = [f"merge scale {scale:g} scored:", *(f"  {text}" for text in summary_lines(result))]
    return lines + ([f"  gate: {verdict(logged_metrics(result))[1]}"] if verdict is not None else [])


def promotion_at(by_category: dict[str, float] | None = None, **gate_args: Any) -> Callable[[dict], tuple[bool, str]]:
    """The promotion gate with these settings, as `choose` asks it of each scale."""
    return lambda metrics: gate.promotion(metrics, by_category=by_category, **gate_args)
