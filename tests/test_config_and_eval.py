"""Training config validation and the evaluation scorers (tool-call rows and text rows apart)."""

import argparse
import json
import random

import pytest

from trainer.config import TrainConfig
from trainer.errors import UserError
from trainer.evaluate import (evaluate, is_correct, last_user_request, parse_tool_call, row_counts, score_outputs,
                              text_matches)


def test_every_config_problem_is_reported_at_once():
    cfg = TrainConfig(model_uri="hf://x", dataset_uri="", output_prefix="", lora_r=0, learning_rate=0,
                      max_steps=-1, batch_size=0)
    msg = str(pytest.raises(UserError, cfg.validate).value)
    for needle in ("model_uri", "dataset_uri", "output_prefix", "lora_r", "learning_rate", "max_steps",
                   "batch_size"):
        assert needle in msg
    assert "7 problems" in msg
    assert "method must be 'lora' or 'full'" in str(pytest.raises(
        UserError, TrainConfig(model_uri="s3://b/m", dataset_uri="s3://b/d", output_prefix="r",
                               method="qlora").validate).value)


def test_config_survives_the_command_line():
    cfg = TrainConfig(model_uri="s3://b/m", dataset_uri="s3://b/d", output_prefix="runs/x", lora_r=4,
                      lora_train_embeddings=True, learning_rate=1e-4)
    parser = argparse.ArgumentParser()
    TrainConfig.add_arguments(parser)
    assert TrainConfig.from_namespace(parser.parse_args(cfg.to_args())) == cfg


@pytest.mark.parametrize("text, expected", [
    ('<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', {"name": "f", "arguments": {"a": 1}}),
    ('{"name": "f", "parameters": {"a": 1}}', {"name": "f", "arguments": {"a": 1}}),  # Llama 3 style
    ('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>', {"name": "f", "arguments": {"a": 1}}),
    ('<tool_call>{"name": "f", "arguments": {"a": 1}} trailing', {"name": "f", "arguments": {"a": 1}}),
    ("Sure, the weather is nice.", None),
    ('<tool_call>{"name": "f", "arguments": {"a": </tool_call>', None),
    ('{"arguments": {}}', None),
])
def test_parse_tool_call(text, expected):
    assert parse_tool_call(text) == expected


def test_exact_match_ignores_key_order_but_not_values():
    exp = {"name": "f", "arguments": {"a": 1, "b": "x"}}
    assert is_correct({"name": "f", "arguments": {"b": "x", "a": 1}}, exp)
    assert not is_correct({"name": "f", "arguments": {"a": 1, "b": "y"}}, exp)
    assert not is_correct({"name": "g", "arguments": {"a": 1, "b": "x"}}, exp)
    assert not is_correct(None, exp)
    assert not is_correct(None, None) and not is_correct(exp, None)  # no call expected: not an fc row


def mixed_rows(n_fc: int, n_text: int, seed: int = 0) -> list[dict]:
    """Built-in tool-call rows plus rows whose scored turn is text after a tool result."""
    from trainer.builtin_data import make_row

    rng = random.Random(seed)
    rows = [make_row(rng) for _ in range(n_fc)]
    for i in range(n_text):
        row = make_row(rng)
        call = row["messages"][1]["tool_calls"][0]["function"]
        row["messages"] += [{"role": "tool", "content": json.dumps({"ok": True})},
                            {"role": "assistant", "content": f"Done: {call['name']} ran with {len(call['arguments'])} "
                                                             f"arguments (request {i})."}]
        rows.append(row)
    return rows


def test_text_rows_have_their_own_metric_and_never_count_for_function_calling():
    rows = mixed_rows(4, 2)
    calls = ["<tool_call>" + json.dumps(r["messages"][1]["tool_calls"][0]["function"]) + "</tool_call>" for r in rows]
    texts = [r["messages"][-1]["content"] for r in rows]
    assert row_counts(rows) == {"fc_rows": 4, "text_rows": 2}
    # The old bug: a model that never calls a tool scored 1/3 here (text rows counted as right).
    assert score_outputs(rows, ["I cannot help with that."] * 6) == {"fc_accuracy": 0.0, "text_match": 0.0}
    assert score_outputs(rows, calls[:4] + texts[4:]) == {"fc_accuracy": 1.0, "text_match": 1.0}
    # A tool call where text was expected is wrong; text compares case/punctuation/space-insensitively.
    assert score_outputs(rows, calls[:4] + calls[4:]) == {"fc_accuracy": 1.0, "text_match": 0.0}
    assert text_matches("  done FUNC ran,  with 2 arguments<|end|>", "Done: func ran with 2 arguments.", ("<|end|>",))
    assert not text_matches("Done: func ran with 3 arguments.", "Done: func ran with 2 arguments.")
    # The report shows what the user asked, not the tool result before the scored turn.
    assert last_user_request(rows[5]) == rows[5]["messages"][0]["content"]


def test_random_model_scores_zero_on_a_mixed_split(tiny_model_dir, tmp_path, capsys):
    """The untrained built-in model on 12 tool-call + 8 text rows: ~0% function calling, text scored apart."""
    path = tmp_path / "eval.jsonl"
    rows = mixed_rows(12, 8, seed=1)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = evaluate(tiny_model_dir, tiny_model_dir, path, max_rows=100)
    assert (result["rows"], result["fc_rows"], result["text_rows"]) == (20, 12, 8)
    for name in ("base", "tuned"):
        m = result[name]
        assert m["fc_accuracy"] <= 0.1 and m["text_match"] == 0.0, m
        assert m["text_eval_loss"] > 1.0 and m["eval_loss"] > 1.0  # random weights: far from the answers
    assert result["warnings"] and "only 20 rows" in result["warnings"][0]
    assert "WARNING: the eval split has only 20 rows" in capsys.readouterr().out
    assert result["examples"][0]["prompt"] == rows[0]["messages"][0]["content"]


def test_examples_report_states_counts_warnings_and_requests():
    from trainer.report import examples_markdown, markdown_html

    m = {"eval_loss": 2.0, "fc_accuracy": 0.25, "text_match": 0.5, "text_eval_loss": 3.0}
    md = examples_markdown({"base": m, "tuned": m, "rows": 6, "fc_rows": 4, "text_rows": 2,
                            "warnings": ["the eval split has only 6 rows"],
                            "examples": [{"prompt": "Wake me at 7", "expected": "Done.", "base": "x", "tuned": "y"}]})
    assert "> **Warning:** the eval split has only 6 rows" in md
    assert "| function-calling accuracy (4 tool-call rows) | 25.0% | 25.0% |" in md
    assert "| text match (2 text rows) | 50.0% | 50.0% |" in md
    assert "| Wake me at 7 | Done. | x | y |" in md
    page = markdown_html(md, "Evaluation of run X")
    assert "<title>Evaluation of run X</title>" in page and "<table>" in page and "<td>Wake me at 7</td>" in page


def test_eval_loss_batches_fit_the_logits_budget(tiny_model_dir, monkeypatch):
    """Rows per eval batch shrink with vocabulary x length (a 128k vocabulary would otherwise
    need GBs of logits); the token-weighted loss is the same however the rows are batched."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer import data, evaluate as ev
    from trainer.builtin_data import generate

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    examples = data.encode_all(generate(n_train=0, n_eval=10, seed=3)["eval"], tok, 512)[0]
    whole = ev.eval_loss(model, examples, tok.pad_token_id)
    sizes = []
    real_collate = data.collate
    monkeypatch.setattr(data, "collate", lambda rows, pad: sizes.append(len(rows)) or real_collate(rows, pad))
    longest = max(len(e["input_ids"]) for e in examples)
    monkeypatch.setattr(ev, "LOGITS_BUDGET", 4 * longest * model.config.vocab_size * 3)  # 3 rows' worth
    assert ev.eval_loss(model, examples, tok.pad_token_id) == pytest.approx(whole, rel=1e-5)
    assert sizes == [3, 3, 3, 1]
