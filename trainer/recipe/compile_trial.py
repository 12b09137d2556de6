"""`compile=true` never runs slower than eager beyond a few steps: after compiled warm-up steps the
recipe times steps with the compiled layers and as many with the same layers run eagerly, and the
faster runs the rest of the training (see CompileTrial)."""

from __future__ import annotations

import sys
from typing import Any, Callable

from trainer.core import settings


class CompileTrial:
    """compile=true must never make training slower than eager, and whether it does depends on
    the model, the GPU and the batch shapes (on an H100 the 1B shape's compiled step spent less
    kernel time than eager but more on padding; on CPU the tiny model's is slower). So the run
    measures it: after WARM compiled steps (compilation and any recompile), TIMED steps are timed
    with the compiled layers, then TIMED with the same layers run eagerly (their compiled code
    kept, rows padded only to their longest); only the steps themselves are timed, not logging,
    eval or checkpoints. The faster setting, over all ranks' tokens, runs the rest of the
    training, and the log says which and by how much. A run too short for the comparison keeps
    the compiled layers and says so."""

    WARM, TIMED = 3, 4

    def __init__(
        self,
        first: int,
        layers: list,
        mark: Callable[[], tuple[float, int]],
        use_bucketing: Callable[[bool], None],
        world: int = 1,
        device: Any = "cpu",
        master: bool = True,
    ):
        """`layers`: the compiled decoder layers; `mark()`: (now, this rank's real tokens so far)
        after the device's queued work (Recipe.mark: the clock a test scripts); `use_bucketing`:
        pad compiled batches to bucket widths (on) or to their longest row (off, eager)."""
        self.first, self.layers, self.mark, self.use_bucketing = first, layers, mark, use_bucketing
        self.world, self.device, self.master = world, device, master
        self.switch, self.last = first + self.TIMED, first + 2 * self.TIMED - 1
        self.code: dict[int, Any] = {}
        self.sums = [0, 0.0, 0, 0.0]  # compiled tokens, seconds; eager tokens, seconds (this rank)
        self.rates: tuple[float, float] | None = None  # (compiled, eager) real tokens/s, all ranks
        self.started: tuple[float, int] = (0.0, 0)  # the timed step's start: (time, tokens)

    @classmethod
    def plan(cls, done: int, max_steps: int, layers: list, **parts: Any) -> "CompileTrial | None":
        """The trial for a run at step `done` of `max_steps` (`parts`: the rest of __init__'s
        arguments), or None where the run is too short for it or FINETUNE_COMPILE_TRIAL=0."""
        if settings.switched_off("FINETUNE_COMPILE_TRIAL"):
            return None
        first = done + 1 + cls.WARM
        if first + 2 * cls.TIMED - 1 >= max_steps:  # a choice needs a step left to use it
            if parts.get("master", True) and done < max_steps:
                print(
                    f"compile=true: {max_steps - done} steps to run, too few to time compiled "
                    f"layers against eager and use the faster (that takes {cls.WARM + 2 * cls.TIMED + 1}); "
                    "keeping them compiled",
                    flush=True,
                )
            return None
        return cls(first, layers, **parts)

    def _use_compiled(self, on: bool) -> None:
        for layer in self.layers:
            if on:
                layer._compiled_call_impl = self.code[id(layer)]
            else:
                self.code[id(layer)], layer._compiled_call_impl = layer._compiled_call_impl, None
        self.use_bucketing(on)

    def before(self, step: int) -> None:
        if self.first <= step <= self.last:
            if step == self.switch:
                self._use_compiled(False)
            self.started = self.mark()

    def after(self, step: int) -> None:
        if not self.first <= step <= self.last:
            return
        t, n = self.mark()
        at = 0 if step < self.switch else 2
        self.sums[at] += n - self.started[1]
        self.sums[at + 1] += t - self.started[0]
        if step == self.last:
            self._decide()

    def _decide(self) -> None:
        import torch
        import torch.distributed as dist

        sums = torch.tensor(self.sums, dtype=torch.float64, device=self.device)
        if self.world > 1:
            dist.all_reduce(sums)  # every rank decides the same
        c_tok, c_s, e_tok, e_s = sums.tolist()
        self.rates = (c_tok / c_s, e_tok / e_s)
        keep = self.rates[0] >= self.rates[1]
        if keep:
            self._use_compiled(True)
        if self.master:
            print(
                f"compile=true: compiled layers {self.rates[0]:,.0f} real tokens/s, eager {self.rates[1]:,.0f}, "
                f"{self.TIMED} steps each ({self.rates[0] / self.rates[1]:.2f}x): "
                f"{'keeping the compiled layers' if keep else 'continuing eager, the faster here'}",
                flush=True,
            )

    def metrics(self) -> dict[str, float]:
        if self.rates is None:
            return {}
        return {
            "compiled_layers": float(self.rates[0] >= self.rates[1]),
            "compile_trial_compiled_tokens_per_second": self.rates[0],
            "compile_trial_eager_tokens_per_second": self.rates[1],
        }


def compiled_graphs() -> int:
    """Graphs torch.compile has built in this process so far (0 without torch._dynamo loaded)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def say_compiled(graphs: int) -> None:
    """After the first step: what torch.compile built (`graphs` since the run began). compile_layers lets a
    failed compile run eager (suppress_errors), which must not pass for a compiled measurement."""
    print(
        f"compile=true: the first step compiled {graphs} graph(s)"
        if graphs
        else "compile=true: nothing was compiled (torch.compile failed and fell back to eager; see the warnings "
        "above): the layers run eagerly",
        flush=True,
    )


def compile_metrics(graphs: list[int]) -> dict[str, float]:
    """Graphs dynamo compiled in all, and inside the steady window (a recompile there puts compile time into the
    throughput figure); `graphs`: compiled_graphs() at the run's start, then at the steady window's ends."""
    out = {"compiled_graphs": float(compiled_graphs() - graphs[0])}
    if len(graphs) >= 3:
        out["graphs_compiled_in_steady_window"] = float(graphs[2] - graphs[1])
    return out
