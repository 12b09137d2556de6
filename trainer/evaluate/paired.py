"""Base and tuned on the same rows, paired: per category the rows the tuned model lost (the base right, the
tuned wrong) and won (the base wrong, the tuned right): what McNemar's exact test reads
(trainer.evaluate.gate.mcnemar_p).

A category's accuracy can fall 8 points on 25 rows by chance as readily as by harm; the rows that changed
verdict say which. The evaluate step logs the counts (`fc_<category>_lost` / `_won` on the held-out rows,
`bfcl_<category>_lost` / `_won` on BFCL's), so the promotion gate (trainer.evaluate.gate.category_drops) reads
them from the metrics, as it reads the accuracies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from trainer.chat.types import Outcome, Prediction, Row
from trainer.core import metrics as names
from trainer.chat import fc_check


def paired_counts(
    base: Sequence[Outcome], tuned: Sequence[Outcome], suite: str, categories: Iterable[str] | None = None
) -> dict[str, float]:
    """`<suite>_<category>_lost` and `_won` (trainer.core.metrics.count) from both models' verdicts on the same rows
    (`{"category", "ok"}` per row, in the same order: trainer.chat.fc_check.score's), for every category with a
    row (of `categories` only, where given): a category measured logs its 0s, so a missing count means
    an older run, never none changed.

    Raises:
        ValueError: the two lists are not of the same rows.
    """
    if len(base) != len(tuned) or any(b["category"] != t["category"] for b, t in zip(base, tuned)):
        raise ValueError(f"base and tuned verdicts are not of the same rows ({len(base)} and {len(tuned)})")
    wanted = None if categories is None else set(categories)
    out: dict[str, float] = {}
    for b, t in zip(base, tuned):
        if wanted is not None and b["category"] not in wanted:
            continue
        lost, won = (names.count(suite, b["category"], kind) for kind in ("lost", "won"))
        out[lost] = out.get(lost, 0.0) + (bool(b["ok"]) and not t["ok"])
        out[won] = out.get(won, 0.0) + (not b["ok"] and bool(t["ok"]))
    return out


def heldout_counts(rows: list[Row], outputs: dict[str, list[Prediction]]) -> dict[str, float]:
    """`fc_<category>_lost` / `_won` on the held-out rows scored, from both models' predictions
    (`outputs["base"]`, `outputs["tuned"]`: {"calls", "content"} per row) by the AST check (trainer.chat.fc_check)."""
    verdicts = {
        name: [fc_check.score(r, p["calls"], p["content"]) for r, p in zip(rows, outputs[name])]
        for name in ("base", "tuned")
    }
    return paired_counts(verdicts["base"], verdicts["tuned"], "heldout", fc_check.CATEGORIES)
