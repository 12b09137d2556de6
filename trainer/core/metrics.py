"""Every logged metric's name, in one place: the evaluate step logs them, KFP's Compare view lines runs up by them,
the promotion gate and the sweep's pick read them, the reports show them. Names are built here and nowhere else.

  fc_ast_accuracy, fc_exact_accuracy     the held-out suite over every function-calling category (PRIMARY: the
                                         metric both pipelines' promotion rule reads, trainer.evaluate.gate)
  fc_<category>_accuracy / _rows         a held-out category (trainer.chat.fc_check.CATEGORIES)
  bfcl_<category>_accuracy / _rows / _too_long
                                         a BFCL category (trainer.data.bfcl.CATEGORIES), and its aggregates
  <suite>_<category>_lost / _won         rows the tuned model lost / won against the base (McNemar's test)
  base_<name>, tuned_<name>              a metric of each model (the tuned one's also under its plain name)
  mix<k>_<name>                          a metric over a mixed dataset's k-th source's rows
"""

from __future__ import annotations

PRIMARY = "fc_ast_accuracy"
EXACT = "fc_exact_accuracy"
SUITE_PREFIX = {"heldout": "fc", "bfcl": "bfcl"}
# BFCL's aggregates, as BFCL's board reports them: the non-live AST mean, live AST pooled, irrelevance mean
BFCL_AGGREGATES = ("non_live_ast", "live_ast", "hallucination")


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


def base(name: str) -> str:
    return f"base_{name}"


def tuned(name: str) -> str:
    return f"tuned_{name}"


def mix(k: int, name: str) -> str:
    """A metric over a mixed dataset's k-th source's rows: `mix0_fc_ast_accuracy`, `mix1_rows`."""
    return f"mix{k}_{name}"
