"""Several datasets in one run: dataset_source as a JSON list of `{"source": ..., "weight": ...}`
(trainer.config.sources.mix_parts). Each source is read, checked and split as it would be alone; then:

  - train: the weights are shares of all the sources' training rows together (largest-remainder rounding, at
    least one row each). A source is taken in a seeded order, in whole passes: its rows repeat only where its
    share is above its size (a small set weighted up), and a large one weighted down gives a seeded sample.
    The mixed rows are shuffled by the seed.
  - eval: every eval row of every source (none repeated or dropped: an eval split is a measurement), the sources
    interleaved in proportion so that any first N rows (eval_max_rows scores a prefix) hold each source.

Every mixed row carries TAG, its source's index in the mix, so the evaluation reports per source. The record
(source, weight, rows read, rows taken) goes into the dataset's metadata and the run record.
"""

from __future__ import annotations

import math
import random
from typing import Any, Final

from trainer.chat.types import Row

TAG: Final = "mix_source"  # a row's source's index in the mix (trainer.chat.types.Row names it)


def take_counts(sizes: list[int], weights: list[float]) -> list[int]:
    """Training rows taken from each source: its weight's share of sum(sizes), rounded so they add up."""
    top = max(weights)  # weights as shares of the largest: 1e308 each adds up to no infinity
    total, weight = sum(sizes), sum(w / top for w in weights)
    exact = [total * (w / top) / weight for w in weights]
    counts = [math.floor(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])[: total - sum(counts)]:
        counts[i] += 1
    return [max(1, c) for c in counts]


def mix(
    parts: list[tuple[str, float, dict[str, list[Row]]]], seed: int
) -> tuple[dict[str, list[Row]], list[dict[str, Any]]]:
    """`parts`: (source, weight, {"train", "eval"}) in the mix's order -> (mixed splits, one record per source)."""
    counts = take_counts([len(splits["train"]) for _, _, splits in parts], [w for _, w, _ in parts])
    train: list[Row] = []
    evals: list[list[Row]] = []
    record: list[dict[str, Any]] = []
    for k, ((source, weight, splits), n) in enumerate(zip(parts, counts)):
        rows = splits["train"][:]
        random.Random(f"mix:{seed}:{k}").shuffle(rows)
        train += [_tagged(rows[i % len(rows)], k) for i in range(n)]
        evals.append([_tagged(r, k) for r in splits["eval"]])
        record.append(
            {
                "source": source,
                "weight": weight,
                "train_rows": len(rows),
                "train_taken": n,
                "eval_rows": len(splits["eval"]),
            }
        )
    random.Random(f"mix:{seed}").shuffle(train)
    # row i of a source of n rows sits at (i + 0.5) / n of the split: each source spread evenly, order kept
    spread = sorted(((i + 0.5) / len(rows), k, i) for k, rows in enumerate(evals) for i in range(len(rows)))
    return {"train": train, "eval": [evals[k][i] for _, k, i in spread]}, record


def _tagged(row: Row, k: int) -> Row:
    out = Row(**row)  # a copy: a source's rows are its own
    out[TAG] = k
    return out


def describe(record: list[dict[str, Any]], where: str) -> str:
    """One line per source for the log: what was read and what was taken. Not indented: run_local's console
    shows a task's lines that start at its margin (deeper ones are traceback frames, for the log file)."""
    lines = [f"{where}: a mix of {len(record)} sources"]
    for k, r in enumerate(record):
        times = r["train_taken"] / max(r["train_rows"], 1)
        how = (
            f"each about {times:.1f} times"
            if times > 1.05
            else "a sample"
            if r["train_taken"] < r["train_rows"]
            else "all"
        )
        lines.append(
            f"{where}[{k}] {r['source']} (weight {r['weight']:g}): {r['train_taken']} training rows of its "
            f"{r['train_rows']} ({how}), {r['eval_rows']} eval rows"
        )
    return "\n".join(lines)


def sources_of(rows: list[Row]) -> list[int]:
    """The mix indices the rows carry, in order; [] for rows of one source."""
    return sorted({r[TAG] for r in rows if isinstance(r.get(TAG), int)})
