"""pick_best: a sweep's winner by one metric, and whether it is good enough to deploy."""

from typing import List, NamedTuple

from kfp import dsl
from kfp.dsl import Input, Markdown, Metrics, Model, Output

from trainer.core import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
def pick_best(
    trials: list,
    trial_metrics: Input[List[Metrics]],
    adapters: Input[List[Model]],
    best_adapter: Output[Model],
    best_metrics: Output[Metrics],
    summary: Output[Markdown],
    select_metric: str = "fc_ast_accuracy",
    min_gain: float = 0.1,
    min_fc_accuracy: float = 0.0,
    max_category_drop: float = 0.1,
    gate_significance: float = 0.0,
    max_drop_by_category: str = "",
) -> NamedTuple("Outputs", deploy=bool, reason=str, best_trial=int, best_scale=float):
    """Rank trials by tuned-vs-base gain in `select_metric` (fc_ast_accuracy up, eval_loss down), those
    that lost more than `max_category_drop` (a fraction: 0.1 is 10 points; `max_drop_by_category` for the categories it
    names) in a category last; `deploy` is whether
    the winner passes the finetune pipeline's promotion gate (trainer.evaluate.gate.pick: one rule for both)."""
    from collections import namedtuple

    from components.artifacts import log_metrics, read_uri, write_pointer
    from trainer.core.errors import UserError, exit_on_user_error
    from trainer.evaluate.report import sweep_markdown
    from trainer.evaluate.gate import parse_drops, pick

    with exit_on_user_error():
        try:
            picked = pick(
                trials,
                [dict(m.metadata) for m in trial_metrics],
                select_metric,
                min_gain,
                min_fc_accuracy,
                max_category_drop,
                gate_significance,
                parse_drops(max_drop_by_category),
            )
        except ValueError as err:
            raise UserError(str(err)) from None
    best = picked["best"]
    write_pointer(best_adapter, read_uri(adapters[best]), {**adapters[best].metadata, "trial": best})
    log_metrics(best_metrics, {k: v for k, v in trial_metrics[best].metadata.items() if isinstance(v, (int, float))})
    with open(summary.path, "w") as f:
        f.write(sweep_markdown(picked, select_metric))
    print(picked["reason"])
    # the adapter's update at the scale the winner's evaluate chose (trainer.evaluate.scales; 1.0 before it existed)
    scale = float(trial_metrics[best].metadata.get("merge_scale", 1.0))
    return namedtuple("Outputs", ["deploy", "reason", "best_trial", "best_scale"])(
        picked["deploy"], picked["reason"], best, scale
    )
