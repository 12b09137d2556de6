"""An evaluation engine for tests (trainer.evaluate.base.Engine): each model answers each row it is asked with the
text `reply(model, suite, row)` gives, read as vLLM's hermes parser reads it (`<tool_call>{json}</tool_call>`); no
model is loaded and no server started. It records what each model was asked, in order, and can fail a model to
show what the evaluation does when an engine fails mid-way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainer.chat.types import Prediction, Row
from trainer.evaluate.base import Answers, Asked, Engine
from trainer.evaluate.scoring import parsed_outputs


@dataclass
class Question:
    """One suite's rows as one model was asked them: the rows asked (those with room to answer) and their budgets."""

    model: str
    suite: str
    rows: list[Row]
    budgets: list[int]
    examples: int


class FakeEngine(Engine):
    """`reply(model, suite, row) -> text`; each example's loss is `loss` (summed loss, tokens); `fail`: a model
    whose answers raise RuntimeError (a server that stopped answering)."""

    name = "fake"
    description = "a fake engine"

    def __init__(
        self,
        reply: Callable[[str, str, Row], str] = lambda model, suite, row: "",
        loss: tuple[float, int] = (1.0, 1),
        fail: str = "",
    ) -> None:
        self.reply, self.loss, self.fail = reply, loss, fail
        self.questions: list[Question] = []

    @property
    def asked(self) -> list[tuple[str, str]]:
        """(model, suite) of every question, in order."""
        return [(q.model, q.suite) for q in self.questions]

    def answer(
        self, model_dir: Path, tuned_dir: Path | None, models: tuple[str, ...], asked: dict[str, Asked]
    ) -> dict[str, dict[str, Answers]]:
        if "tuned" in models and tuned_dir is None:
            raise ValueError("the tuned model asked without tuned_dir")
        out: dict[str, dict[str, Answers]] = {}
        for model in models:
            out[model] = {}
            for suite, a in asked.items():
                if not a.rows:
                    continue
                keep = a.asked()
                rows = [a.rows[i] for i in keep]
                self.questions.append(Question(model, suite, rows, [a.budgets[i] for i in keep], len(a.examples)))
                if model == self.fail:
                    raise RuntimeError(f"the {model} model's server stopped answering")
                predictions: list[Prediction | None] = [None] * len(a.rows)
                texts = [self.reply(model, suite, r) for r in rows]
                for i, p in zip(keep, parsed_outputs(texts, "hermes")):
                    predictions[i] = p
                out[model][suite] = Answers(predictions, [self.loss] * len(a.examples))
        return out
