"""Component tier: each component's Python function with real temp-path artifacts and S3."""


from kfp.dsl import HTML, Markdown, Metrics, Model

from components.evaluate import evaluate
from components.finetune import finetune
from components.merge_lora import merge_lora
from tests.unit.test_components import art, delivered  # noqa: F401 (delivered: a fixture, found by name)


def test_finetune_evaluate_merge_components(delivered, tmp_path):
    model, data = delivered
    adapter, train_metrics = art(Model, tmp_path, "adapter"), art(Metrics, tmp_path, "train_metrics")
    report = art(HTML, tmp_path, "report")
    finetune.python_func(base_model=model, dataset=data, run_id="component-test", adapter=adapter,
                         metrics=train_metrics, report=report, nodes=1, max_steps=8, batch_size=4,
                         lora_train_embeddings=True)
    page = open(report.path).read()
    assert page.startswith("<!doctype html>") and "data:image/png;base64," in page and "train_loss" in page
    assert adapter.metadata["uri"] != model.metadata["uri"] and adapter.metadata["method"] == "lora"
    assert train_metrics.metadata["train_steps"] == 8 and train_metrics.metadata["world_size"] == 1

    scores, examples = art(Metrics, tmp_path, "scores"), art(Markdown, tmp_path, "examples")
    evaluate.python_func(base_model=model, tuned_model=adapter, dataset=data, metrics=scores, examples=examples,
                         max_rows=8)
    # no text rows in these 8: no text_match / text_eval_loss (a logged 0 would read as measured)
    # and of the BFCL categories only `multiple` (five tools offered, one call): the others are not measured
    ast = {"fc_ast_accuracy", "fc_exact_accuracy", "fc_multiple_accuracy"}
    names = {f"{m}_{k}" for m in ("base", "tuned") for k in ("eval_loss", "fc_accuracy", *ast)}
    assert set(scores.metadata) == names | ast | {"fc_accuracy_gain", "fc_ast_accuracy_gain", "eval_rows", "fc_rows",
                                                  "text_rows", "skipped_long_rows", "promoted"} \
        | {f"fc_{c}_rows" for c in ("simple", "multiple", "parallel", "irrelevance", "multi_turn")}
    assert scores.metadata["fc_multiple_rows"] == 8 and scores.metadata["fc_irrelevance_rows"] == 0
    assert scores.metadata["fc_ast_accuracy"] == scores.metadata["tuned_fc_ast_accuracy"]
    assert scores.metadata["skipped_long_rows"] == 0
    assert scores.metadata["eval_rows"] == 8 and scores.metadata["fc_rows"] == 8 and scores.metadata["text_rows"] == 0
    assert scores.metadata["tuned_eval_loss"] < scores.metadata["base_eval_loss"]
    assert "| function-calling accuracy (8 tool-call rows) |" in open(examples.path).read()

    merged = art(Model, tmp_path, "merged")
    merge_lora.python_func(base_model=model, adapter=adapter, merged=merged)
    assert merged.metadata["uri"] not in (model.metadata["uri"], adapter.metadata["uri"])
