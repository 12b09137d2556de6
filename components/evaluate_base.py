"""evaluate_base: the base model scored once on the held-out split, for every trial of a sweep."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from trainer.core import settings


# The evaluate step's image and placement: the same engine scores base and tuned (trainer.evaluate.score_base).
@dsl.component(base_image=settings.get("EVAL_IMAGE"), install_kfp_package=False)
def evaluate_base(
    base_model: Input[Model],
    dataset: Input[Dataset],
    scores: Output[Artifact],
    max_rows: int,
    max_seq_len: int,
    eval_engine: str,
):
    """Score the base model on the rows each trial's evaluate scores (the same max_rows, max_seq_len
    and eval_engine); `scores` (JSON: metrics and each row's answer) is their `base_scores`, so the
    base is scored once per sweep instead of once per trial."""
    import json

    from components.artifacts import read_uri
    from trainer.core.errors import exit_on_user_error
    from trainer.evaluate import score_base
    from trainer.models.model import skip_bitsandbytes
    from trainer.core.storage import Store

    with exit_on_user_error():
        store = Store.from_env()
        skip_bitsandbytes()  # the base is never 4-bit here: 1.4 s less
        result = score_base(
            store.get_tree(read_uri(base_model)),
            store.get_tree(read_uri(dataset)) / "eval.jsonl",
            max_rows=max_rows,
            max_seq_len=max_seq_len,
            engine=eval_engine,
        )
    with open(scores.path, "w") as f:
        json.dump(result, f, ensure_ascii=False)
    m = result["metrics"]
    print(
        f"base model: {result['key']['rows']} rows scored, "
        + (f"fc accuracy {m['fc_accuracy']:.1%}, " if "fc_accuracy" in m else "")
        + f"eval loss {m['eval_loss']:.4f} (eval_engine={result['key']['engine']})",
        flush=True,
    )
