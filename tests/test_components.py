"""Component tier: each component's Python function with real temp-path artifacts and S3."""

import json

import pytest
from kfp.dsl import HTML, Dataset, Markdown, Metrics, Model

from components.deliver_dataset import deliver_dataset
from components.deliver_model import deliver_model
from components.evaluate import evaluate
from components.finetune import finetune
from components.merge_lora import merge_lora


def art(cls, tmp_path, name):
    return cls(name=name, uri=str(tmp_path / name), metadata={})


@pytest.fixture(scope="module")
def delivered(s3_env, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("art")
    model, data = art(Model, tmp, "model"), art(Dataset, tmp, "dataset")
    deliver_model.python_func(source="builtin:tiny-llama", revision="", model=model)
    deliver_dataset.python_func(source="builtin:function-calling", revision="", eval_fraction=0.1, seed=0,
                                dataset=data)
    return model, data


def test_deliver_records_pointer_and_checksums(delivered):
    model, data = delivered
    assert model.metadata["uri"].startswith("s3://test-bucket/models/sha256-")
    assert model.metadata["source"] == "builtin:tiny-llama" and model.metadata["total_bytes"] > 1_000_000
    pointer = json.loads(open(model.path).read())
    assert pointer["uri"] == model.metadata["uri"]
    assert {f["path"] for f in pointer["files"]} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert all(len(f["sha256"]) == 64 for f in pointer["files"])
    assert data.metadata["rows"] == {"train": 3000, "eval": 200}


def test_delivery_is_idempotent(delivered, tmp_path):
    again = art(Model, tmp_path, "again")
    deliver_model.python_func(source="builtin:tiny-llama", revision="", model=again)
    assert again.metadata["uri"] == delivered[0].metadata["uri"] and again.metadata["uploaded_bytes"] == 0


def test_bad_source_exits_with_one_message(s3_env, tmp_path, capsys):
    out = art(Model, tmp_path, "m")
    with pytest.raises(SystemExit) as exit_info:
        deliver_model.python_func(source="builtin:nope", revision="", model=out)
    assert exit_info.value.code == 2
    assert "unknown built-in model" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()  # no artifact written for a failed delivery


def test_validate_params_component(capsys):
    from components.validate_params import validate_params

    good = dict(model_source="builtin:tiny-llama", dataset_source="builtin:function-calling", eval_fraction=0.1,
                launcher="local", nodes=2, procs_per_node=1, method="lora", lora_r=16, lora_alpha=32,
                lora_dropout=0.0, lora_train_embeddings=True, learning_rate=3e-3, max_steps=10, batch_size=8,
                batch_tokens=1024, max_seq_len=512, seed=0, checkpoint_every=100, max_restarts=2, eval_max_rows=10,
                deploy_backend="local", accelerator_resource="nvidia.com/gpu", tolerations=[], cleanup="on-success",
                wait_timeout_s=0)
    validate_params.python_func(**good)
    assert "parameters OK" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        validate_params.python_func(**{**good, "lora_r": 0, "nodes": 0, "launcher": "kubernetes",
                                       "cleanup": "sometimes"})
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "3 problems" in err and "cleanup must be one of" in err


@pytest.mark.integration
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


def test_a_local_finetune_marks_its_tensorboard_prefix_before_training(delivered, tmp_path, monkeypatch, store):
    """run_local finds a failed run's TensorBoard events by this mark (runs/<id>/local-run/<run name>), not by time."""
    from trainer.errors import UserError

    model, data = delivered

    def fails(*_, **__):
        raise UserError("training failed on node 0 (exit status 3)")

    monkeypatch.setattr("trainer.launch.run_training", fails)
    monkeypatch.setenv("FINETUNE_LOCAL_RUN", "20261124-101500-finetune")
    with pytest.raises(SystemExit):
        finetune.python_func(base_model=model, dataset=data, run_id="marked-run", adapter=art(Model, tmp_path, "a"),
                             metrics=art(Metrics, tmp_path, "m"), report=art(HTML, tmp_path, "r"), nodes=1)
    assert store.exists("runs/marked-run/local-run/20261124-101500-finetune")
