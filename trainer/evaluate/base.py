"""The evaluation's two contracts and the values between them: a `Suite` says what to ask a model and scores what
it answered; an `Engine` asks it. `evaluate()` (trainer.evaluate.run) is a loop over the suites chosen, on one
engine: the base is asked only what no earlier answer covers (trainer.evaluate.kept_base), the tuned model all.

Suites: the held-out split (trainer.evaluate.heldout.HeldOut) and BFCL (trainer.evaluate.bfcl.Bfcl). Engines: HF
generate on loaded weights (trainer.evaluate.generation.HfEngine) and vLLM's OpenAI server
(trainer.evaluate.served.VllmEngine). Tests pass an engine of their own to `evaluate`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypedDict

from trainer.chat.types import Prediction, Row

# Requests in flight to a server: vLLM batches them.
CONCURRENCY = 8


@dataclass(frozen=True)
class Asked:
    """One suite's questions to a model. `rows`: each row as the model is asked it (the conversation before the turn
    it answers: trainer.chat.turns.target_index); `prompts`: each prompt's length in tokens as the chat template
    renders it with its tools; `budgets`: the new tokens each may take, within the model's context (below 1: not
    asked, its answer None); `examples`: encodings whose loss is read, per example (the held-out rows'; BFCL has
    none); `label`: what progress bars call it ("evaluate", "BFCL"); `in_flight`: requests at a time to a server."""

    rows: Sequence[Row]
    prompts: list[int]
    budgets: list[int]
    examples: list[dict[str, list[int]]] = field(default_factory=list)
    label: str = "evaluate"
    in_flight: int = CONCURRENCY

    def asked(self) -> list[int]:
        """The rows asked: those whose prompt leaves room for an answer."""
        return [i for i, b in enumerate(self.budgets) if b >= 1]


@dataclass(frozen=True)
class Answers:
    """One model's answers to one suite: a prediction per row (None: not asked) and (summed loss, tokens) per example
    of `Asked.examples`, token-weighted when pooled (trainer.evaluate.losses.mean_loss)."""

    predictions: list[Prediction | None]
    losses: list[tuple[float, int]] = field(default_factory=list)


class Engine(ABC):
    """What answers a suite's questions for the base and the tuned model, and reads the losses of its examples."""

    name: ClassVar[str]  # eval_engine's value for it
    description: ClassVar[str]  # what the log says answers: "HF generate", "the vLLM server"

    def __init__(self, tokenizer: Any = None, context: int | None = None) -> None:
        """An engine for models of this tokenizer (HF generate's) and context in tokens (a server's limit)."""
        self.tokenizer, self.context = tokenizer, context

    @abstractmethod
    def answer(
        self, model_dir: Path, tuned_dir: Path | None, models: tuple[str, ...], asked: dict[str, Asked]
    ) -> dict[str, dict[str, Answers]]:
        """{model: {suite: Answers}} for each of `models` ("base" is `model_dir`, "tuned" is `tuned_dir` on it;
        `tuned_dir` None: the base alone), every suite of `asked` that has rows. Whatever it starts (a server, a loaded
        model) is stopped or freed before it returns, an error included."""


class Suite(ABC):
    """What to ask (`asked`), what a base's earlier answers must have been asked for to stand in (`key`), and the
    scores: one model's (`scored`, what the bucket keeps of the base's) and both models' (`result`, its part of
    `evaluate()`'s result)."""

    name: ClassVar[str]  # its name in eval_suites and its part in the kept base (trainer.evaluate.kept_base.PARTS)
    asked: Asked
    warnings: list[str]  # what makes its numbers weak, for the log and the report

    @abstractmethod
    def key(self) -> dict[str, Any]:
        """What a model's answers to it are valid for: the rows asked (their content) and how they were chosen."""

    @abstractmethod
    def scored(self, answers: Answers) -> dict[str, Any]:
        """One model's answers as JSON: what the bucket keeps of the base's (trainer.evaluate.kept_base checks
        its shape) and what `result` takes of each model."""

    @abstractmethod
    def result(self, base: dict[str, Any] | None, tuned: dict[str, Any] | None) -> dict[str, Any]:
        """Its part of `evaluate()`'s result from both models' `scored` (None: not asked, a suite without rows)."""


class BfclResult(TypedDict):
    """The bfcl suite's part of `Evaluation` (trainer.evaluate.bfcl.Bfcl.result)."""

    version: str  # BFCL's data version (trainer.data.bfcl.version)
    rows_per_category: int
    seed: int
    base: dict[str, float]  # bfcl_<category>_accuracy and BFCL's aggregates, per model
    tuned: dict[str, float]
    counts: dict[str, float]  # rows, too-long rows, lost and won, per category
    failures: dict[str, list[dict[str, Any]]]  # a few wrong rows per category, with why
    answers: list[dict[str, Any]]  # every row's answers and verdicts (the bfcl_answers output)


class Evaluation(TypedDict, total=False):
    """What `evaluate()` returns: JSON, every key present (the held-out ones empty or 0 without that suite; "bfcl"
    only with it); the evaluate step adds "mix" (a mixed dataset's sources, for the report)."""

    engine: str  # the engine's name (eval_engine, auto resolved)
    suites: list[str]
    warnings: list[str]  # what makes the numbers weak, every suite's
    base: dict[str, float]  # the held-out metrics of each model (trainer.evaluate.heldout.metrics_of)
    tuned: dict[str, float]
    rows: int  # held-out rows scored, their turns asked, call and text turns, rows too long
    turns: int
    fc_rows: int
    text_rows: int
    skipped_long_rows: int
    categories: dict[str, int]  # turns per function-calling category
    sources: dict[str, int]  # a mixed dataset's turns per source
    failures: dict[str, list[dict[str, Any]]]
    examples: list[dict[str, Any]]
    paired: dict[str, float]  # fc_<category>_lost / _won: the rows tuning lost and won
    bfcl: BfclResult
    mix: list[dict[str, Any]]
