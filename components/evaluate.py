"""evaluate: eval loss and function-calling accuracy, base vs tuned, plus example outputs."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Metrics, Model, Output

from trainer import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
def evaluate(
    base_model: Input[Model],
    tuned_model: Input[Model],
    dataset: Input[Dataset],
    metrics: Output[Metrics],
    examples: Output[Markdown],
    max_rows: int = 200,
    max_seq_len: int = 512,
):
    """Score base and tuned on the held-out split; metric names are the same in every run."""
    from components.artifacts import log_metrics, read_uri
    from trainer.errors import exit_on_user_error
    from trainer.evaluate import evaluate as run_eval
    from trainer.report import examples_markdown
    from trainer.storage import Store

    with exit_on_user_error():
        store = Store.from_env()
        result = run_eval(store.get_tree(read_uri(base_model)), store.get_tree(read_uri(tuned_model)),
                          store.get_tree(read_uri(dataset)) / "eval.jsonl", max_rows=max_rows,
                          max_seq_len=max_seq_len)
    for name in ("base", "tuned"):
        log_metrics(metrics, result[name], prefix=f"{name}_")
    metrics.log_metric("fc_accuracy_gain", result["tuned"]["fc_accuracy"] - result["base"]["fc_accuracy"])
    metrics.log_metric("eval_rows", float(result["rows"]))
    with open(examples.path, "w") as f:
        f.write(examples_markdown(result))
    print({k: result[k] for k in ("base", "tuned", "rows")})
