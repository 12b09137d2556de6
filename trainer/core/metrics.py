"""Every logged metric's name, in one place: the evaluate step logs them, KFP's Compare view lines runs up by them,
the promotion gate and the sweep's pick read them, the reports show them. Names are built here and nowhere else.

  fc_ast_accuracy, fc_exact_accuracy     the held-out suite over every function-calling category (PRIMARY: the
                                         metric both pipelines' promotion rule reads, trainer.evaluate.gate)
  fc_<category>_accuracy / _rows         a held-out category (trainer.chat.fc_check.CATEGORIES)
  bfcl_<category>_accuracy / _rows / _too_long
                                         a BFCL category (trainer.data.bfcl.CATEGORIES), and its aggregates
  <suite>_<category>_lost / _won         rows the tuned model lost / won against the base (McNemar's test)
  base_<name>, tuned_<name>              a metric of each model (the tuned one's also under its plain name)
  mix<k>_<name>                          a metric over a mixed dataset's k-th source's rows (mix<k>_rows,
                                         mix<k>_fc_ast_accuracy, mix<k>_text_kept)
  scale<pct>_<name>                      a tuned metric at another merge scale than the one chosen (merge_scales)
  train_<name>, eval_<name>              a step's metric as the Model Registry's version properties hold it

tests/unit/test_metric_names.py fails on a name built anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PRIMARY = "fc_ast_accuracy"
EXACT = "fc_exact_accuracy"
SUITE_PREFIX = {"heldout": "fc", "bfcl": "bfcl"}
# BFCL's aggregates, as BFCL's board reports them: the non-live AST mean, live AST pooled, irrelevance mean
BFCL_AGGREGATES = ("non_live_ast", "live_ast", "hallucination")
MODELS = ("base", "tuned")
TEXT_KEPT = "text_kept"  # rows answered in text where text is wanted (a mix's source, BFCL's irrelevance)
ROWS = "rows"
REGISTRY_STAGES = ("train", "eval")


def category(suite: str, name: str) -> str:
    """A category's stem: `fc_<name>` (held-out) or `bfcl_<name>` (BFCL)."""
    return f"{SUITE_PREFIX[suite]}_{name}"


def accuracy(suite: str, name: str) -> str:
    """A category's (or a BFCL aggregate's) accuracy: `fc_multiple_accuracy`, `bfcl_live_ast_accuracy`."""
    return f"{category(suite, name)}_accuracy"


def count(suite: str, name: str, kind: str) -> str:
    """A category's count: `kind` rows, too_long (BFCL), lost or won (against the base)."""
    if kind not in ("rows", "too_long", "lost", "won"):
        raise ValueError(f"unknown count {kind!r}")
    return f"{category(suite, name)}_{kind}"


def of(model: str, name: str) -> str:
    """A metric of one model: `base_<name>` or `tuned_<name>`."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}")
    return f"{model}_{name}"


def base(name: str) -> str:
    return of("base", name)


def tuned(name: str) -> str:
    return of("tuned", name)


def of_tuned(name: str) -> str | None:
    """The plain name inside `tuned_<name>`; None for any other name."""
    prefix = tuned("")
    return name[len(prefix) :] if name.startswith(prefix) else None


def both(metrics: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Each model's metrics ({"base": {...}, "tuned": {...}}) under `base_<name>` and `tuned_<name>`."""
    return {of(model, k): float(v) for model in MODELS if model in metrics for k, v in metrics[model].items()}


def mix(k: int, name: str) -> str:
    """A metric over a mixed dataset's k-th source's rows: `mix0_fc_ast_accuracy`, `mix1_rows`."""
    return f"mix{k}_{name}"


def mix_rows_index(name: str) -> int | None:
    """k of a `mix<k>_rows` count; None for any other name."""
    head, _, rest = name.partition("_")
    if rest != ROWS or not head.startswith("mix") or not head[3:].isdigit():
        return None
    return int(head[3:])


def scaled(scale: float, name: str) -> str:
    """A tuned metric at a merge scale (merge_scales): `scale75_fc_ast_accuracy`."""
    return f"scale{round(scale * 100)}_{name}"


def registry(stage: str, name: str) -> str:
    """A step's metric as a Model Registry version property: `train_loss`, `eval_tuned_fc_accuracy`."""
    if stage not in REGISTRY_STAGES:
        raise ValueError(f"unknown stage {stage!r}")
    return f"{stage}_{name}"


@dataclass(frozen=True)
class CategoryResult:
    """A category of a suite as both models scored it: accuracies (fractions), its rows, and the rows the tuned model
    lost and won against the base (None: not logged, an older run's metrics)."""

    suite: str
    category: str
    base: float
    tuned: float
    rows: int | None
    lost: int | None
    won: int | None

    @property
    def name(self) -> str:
        return category(self.suite, self.category)


@dataclass(frozen=True)
class Scores:
    """What the promotion gate reads, typed: the primary metric of each model (None: not measured, e.g. an eval split
    without function-calling rows) and every category both models measured (`read`)."""

    base: float | None
    tuned: float | None
    categories: tuple[CategoryResult, ...]


def read(logged: Mapping[str, float], suites: Mapping[str, Sequence[str]]) -> Scores:
    """The evaluate step's logged metrics (base_*, tuned_* and plain names: the tuned model's) as `Scores`, for the
    categories of `suites` ({suite: category names}); read here, where the names are made, and nowhere else."""

    def number(name: str) -> int | None:
        value = logged.get(name)
        return None if value is None else int(value)

    found = []
    for suite, names in suites.items():
        for name in names:
            stem = accuracy(suite, name)
            base_value, tuned_value = logged.get(base(stem)), logged.get(tuned(stem), logged.get(stem))
            if base_value is None or tuned_value is None:
                continue
            counts = (number(count(suite, name, kind)) for kind in ("rows", "lost", "won"))
            found.append(CategoryResult(suite, name, base_value, tuned_value, *counts))
    return Scores(logged.get(base(PRIMARY)), logged.get(tuned(PRIMARY), logged.get(PRIMARY)), tuple(found))
