"""Training config validation, `--param` parsing and the evaluation scorers (tool-call rows and text rows apart)."""

import argparse
import json
import math
import random

import pytest

from tests.fakes.fake_engine import FakeEngine
from trainer import data
from trainer.chat import turns
from trainer.chat.parsers import parse_tool_call
from trainer.chat.turns import last_user_request
from trainer.config.training import TrainConfig
from trainer.config.params import add_train_arguments
from trainer.core.errors import UserError
from trainer.evaluate import evaluate, parsed_outputs, row_counts, score_predictions


def test_every_config_problem_is_reported_at_once():
    cfg = TrainConfig(
        model_uri="hf://x", dataset_uri="", output_prefix="", lora_r=0, learning_rate=0, max_steps=-1, batch_size=0
    )
    msg = str(pytest.raises(UserError, cfg.validate).value)
    for needle in ("model_uri", "dataset_uri", "output_prefix", "lora_r", "learning_rate", "max_steps", "batch_size"):
        assert needle in msg
    assert "7 problems" in msg
    assert "method must be one of lora, dora, qlora, full, got 'adapter'" in str(
        pytest.raises(
            UserError,
            TrainConfig(model_uri="s3://b/m", dataset_uri="s3://b/d", output_prefix="r", method="adapter").validate,
        ).value
    )


def test_a_watchdog_shorter_than_a_process_start_is_refused():
    """stall_timeout_s=1 was accepted, and stopped every job while it imported torch."""
    s3 = dict(model_uri="s3://b/m", dataset_uri="s3://b/d", output_prefix="r")
    [problem] = TrainConfig(**s3, stall_timeout_s=1).problems()
    assert problem.startswith("stall_timeout_s=1 is shorter than a training process takes to start")
    assert problem.endswith("give at least 60 (e.g. 1800), or 0 to turn it off")
    assert TrainConfig(**s3, stall_timeout_s=0).problems() == TrainConfig(**s3, stall_timeout_s=60).problems() == []


def test_a_packing_without_a_token_budget_is_refused_not_ignored():
    s3 = dict(model_uri="s3://b/m", dataset_uri="s3://b/d", output_prefix="r")
    for packing in ("flatten", "pad"):
        [problem] = TrainConfig(**s3, packing=packing, batch_tokens=0).problems()
        assert problem.startswith(f"packing={packing} arranges token-budget batches, but batch_tokens=0")
    assert TrainConfig(**s3, packing="auto", batch_tokens=0).problems() == []


def test_every_lr_scheduler_offered_runs_and_the_others_are_refused_before_setup():
    """`trainer train --lr-scheduler bogus` was a ValueError traceback after loading; reduce_lr_on_plateau and greedy
    (need a metric), cosine_with_min_lr (needs min_lr) failed at their first step or at setup."""
    import torch
    from transformers import get_scheduler

    from trainer.config.training import LR_SCHEDULERS

    s3 = dict(model_uri="s3://b/m", dataset_uri="s3://b/d", output_prefix="r")
    for name in LR_SCHEDULERS:  # as trainer.recipe.train sets it up, and a few steps
        assert TrainConfig(**s3, lr_scheduler=name).problems() == [], name
        optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
        scheduler = get_scheduler(name, optimizer, num_warmup_steps=1, num_training_steps=10)
        for _ in range(3):
            optimizer.step()
            scheduler.step()
    for name in ("bogus", "reduce_lr_on_plateau", "greedy", "cosine_with_min_lr", "warmup_stable_decay"):
        [problem] = TrainConfig(**s3, lr_scheduler=name).problems()
        assert problem == f"lr_scheduler must be one of {', '.join(LR_SCHEDULERS)}, got {name!r}"


def test_a_non_finite_value_is_one_problem_and_each_bad_setting_is_named_with_an_example():
    """learning_rate=inf was said twice (not finite; must be below 1); a negative stall_timeout_s was said as
    "stall_timeout_s and shutdown_grace_s must be >= 0"; lora_r=0 and learning_rate<=0 gave no value to use."""
    s3 = dict(model_uri="s3://b/m", dataset_uri="s3://b/d", output_prefix="r")
    for name, value in [
        ("learning_rate", float("inf")),
        ("lora_dropout", float("nan")),
        ("warmup_ratio", float("-inf")),
        ("shutdown_grace_s", float("-inf")),
    ]:
        problems = TrainConfig(**s3, **{name: value}).problems()
        assert len(problems) == 1 and problems[0].startswith(f"{name} must be a finite number"), problems
    assert TrainConfig(**s3, stall_timeout_s=-1).problems() == [
        "stall_timeout_s must be >= 0 seconds, got -1 (0 turns the watchdog off)"
    ]
    [lr, rank] = sorted(TrainConfig(**s3, learning_rate=-1, lora_r=0).problems())
    assert "about 2e-4 for LoRA" in lr and "e.g. lora_r=16" in rank


def test_max_seq_len_over_the_models_context_is_not_also_a_batch_tokens_problem():
    """max_seq_len=100000000 with the tiny model (context 512) also said "set batch_tokens >= 100000000"."""
    from trainer.validate import pipeline_problems

    problems = pipeline_problems({"max_seq_len": 100_000_000})
    assert any("exceeds the model's context length 512" in p for p in problems)
    assert not [p for p in problems if p.startswith("batch_tokens")], problems
    # a batch_tokens below the context is still refused
    assert any(
        p.startswith("batch_tokens=256 must be >= max_seq_len=512")
        for p in pipeline_problems({"max_seq_len": 100_000, "batch_tokens": 256})
    )


def test_batch_tokens_below_max_seq_len_says_what_to_set():
    cfg = TrainConfig(
        model_uri="s3://b/m", dataset_uri="s3://b/d", output_prefix="r", batch_tokens=512, max_seq_len=2048
    )
    msg = str(pytest.raises(UserError, cfg.validate).value)
    assert "batch_tokens=512 must be >= max_seq_len=2048" in msg
    assert "set batch_tokens >= 2048 (e.g. 16384" in msg and "batch_tokens=0 to use batch_size" in msg


def test_config_survives_the_command_line():
    cfg = TrainConfig(
        model_uri="s3://b/m",
        dataset_uri="s3://b/d",
        output_prefix="runs/x",
        lora_r=4,
        lora_train_embeddings=True,
        learning_rate=1e-4,
    )
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    assert TrainConfig.from_namespace(parser.parse_args(cfg.to_args())) == cfg


@pytest.mark.parametrize(
    "text, expected",
    [
        ('<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', {"name": "f", "arguments": {"a": 1}}),
        ('{"name": "f", "parameters": {"a": 1}}', {"name": "f", "arguments": {"a": 1}}),  # Llama 3 style
        ('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>', {"name": "f", "arguments": {"a": 1}}),
        ('<tool_call>{"name": "f", "arguments": {"a": 1}} trailing', {"name": "f", "arguments": {"a": 1}}),
        ("Sure, the weather is nice.", None),
        ('<tool_call>{"name": "f", "arguments": {"a": </tool_call>', None),
        ('{"arguments": {}}', None),
    ],
)
def test_parse_tool_call(text, expected):
    assert parse_tool_call(text) == expected


def test_exact_match_ignores_key_order_but_not_values():
    row = {
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": "x"}}}],
            },
        ]
    }

    def exact(call):
        return score_predictions([row], [{"calls": [call] if call else [], "content": None}])["fc_accuracy"]

    assert exact({"name": "f", "arguments": {"b": "x", "a": 1}}) == 1.0
    assert exact({"name": "f", "arguments": {"a": 1, "b": "y"}}) == 0.0
    assert exact({"name": "g", "arguments": {"a": 1, "b": "x"}}) == 0.0
    assert exact(None) == 0.0


def mixed_rows(n_fc: int, n_text: int, seed: int = 0) -> list[dict]:
    """Built-in tool-call rows plus rows whose scored turn is text after a tool result."""
    from trainer.data.builtin_data import make_row

    rng = random.Random(seed)
    rows = [make_row(rng) for _ in range(n_fc)]
    for i in range(n_text):
        row = make_row(rng)
        call = row["messages"][1]["tool_calls"][0]["function"]
        row["messages"] += [
            {"role": "tool", "content": json.dumps({"ok": True})},
            {
                "role": "assistant",
                "content": f"Done: {call['name']} ran with {len(call['arguments'])} arguments (request {i}).",
            },
        ]
        rows.append(row)
    return rows


def test_text_rows_have_their_own_metric_and_never_count_for_function_calling():
    rows = mixed_rows(4, 2)
    calls = ["<tool_call>" + json.dumps(r["messages"][1]["tool_calls"][0]["function"]) + "</tool_call>" for r in rows]
    texts = [r["messages"][-1]["content"] for r in rows]
    assert row_counts(rows) == {"fc_rows": 4, "text_rows": 2}

    def scored(outputs, special=()):
        got = score_predictions(rows, parsed_outputs(outputs, "hermes"), special)
        return {k: got[k] for k in ("fc_accuracy", "text_match")}

    # The old bug: a model that never calls a tool scored 1/3 here (text rows counted as right).
    assert scored(["I cannot help with that."] * 6) == {"fc_accuracy": 0.0, "text_match": 0.0}
    assert scored(calls[:4] + texts[4:]) == {"fc_accuracy": 1.0, "text_match": 1.0}
    # A tool call where text was expected is wrong; text compares case/punctuation/space-insensitively, with the
    # tokenizer's special tokens (an end-of-turn marker) removed first.
    assert scored(calls[:4] + calls[4:]) == {"fc_accuracy": 1.0, "text_match": 0.0}
    loose = [t.upper().replace(":", "") + "  <|end|>" for t in texts[4:]]
    assert scored(calls[:4] + loose, ("<|end|>",)) == {"fc_accuracy": 1.0, "text_match": 1.0}
    assert scored(calls[:4] + [t.replace("request", "reply") for t in texts[4:]])["text_match"] == 0.0
    # The report shows what the user asked, not the tool result before the scored turn.
    assert last_user_request(rows[5]) == rows[5]["messages"][0]["content"]


def test_random_model_scores_zero_on_a_mixed_split(tiny_model_dir, tmp_path, capsys):
    """The untrained built-in model on 12 tool-call + 8 text rows: ~0% function calling, text scored apart."""
    path = tmp_path / "eval.jsonl"
    rows = mixed_rows(12, 8, seed=1)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = evaluate(tiny_model_dir, tiny_model_dir, path, max_rows=100)
    # every assistant turn asked: the 8 text rows' calls (turn 1) count as call turns, their answers as text turns
    assert (result["rows"], result["turns"], result["fc_rows"], result["text_rows"]) == (20, 28, 20, 8)
    for name in ("base", "tuned"):
        m = result[name]
        assert m["fc_accuracy"] <= 0.1 and m["text_match"] == 0.0, m
        assert m["text_eval_loss"] > 1.0 and m["eval_loss"] > 1.0  # random weights: far from the answers
    assert result["warnings"] and "only 20 rows" in result["warnings"][0]
    assert "WARNING: the eval split has only 20 rows" in capsys.readouterr().out
    assert result["examples"][0]["prompt"] == rows[0]["messages"][0]["content"]
    # fewer rows because eval_max_rows took them: the fix is eval_max_rows, not eval_fraction (it said that)
    from trainer.evaluate import warnings_for

    [warning] = warnings_for(rows[:10], split_rows=20)
    assert warning.startswith("only 10 eval rows scored (< 50; the split has 20)") and warning.endswith(
        "raise eval_max_rows"
    )


def test_examples_report_states_counts_warnings_and_requests():
    from trainer.evaluate.report import examples_markdown, markdown_html

    m = {"eval_loss": 2.0, "fc_accuracy": 0.25, "text_match": 0.5, "text_eval_loss": 3.0}
    md = examples_markdown(
        {
            "base": m,
            "tuned": m,
            "rows": 5,
            "turns": 6,
            "fc_rows": 4,
            "text_rows": 2,
            "warnings": ["the eval split has only 6 rows"],
            "examples": [
                {
                    "prompt": "Wake me at 7",
                    "turn": "turn 2, after a tool result",
                    "expected": "Done.",
                    "base": "x",
                    "tuned": "y",
                }
            ],
        }
    )
    assert "> **Warning:** the eval split has only 6 rows" in md
    assert "Held-out rows: 5; assistant turns asked: 6 (4 expect a tool call, 2 expect text" in md
    assert "| function-calling accuracy (4 tool-call turns) | 25.0% | 25.0% |" in md
    assert "| text match (2 text turns) | 50.0% | 50.0% |" in md
    assert "| Wake me at 7 | turn 2, after a tool result | Done. | x | y |" in md
    page = markdown_html(md, "Evaluation of run X")
    assert "<title>Evaluation of run X</title>" in page and "<table>" in page and "<td>Wake me at 7</td>" in page


def test_eval_loss_batches_fit_the_logits_budget(tiny_model_dir, monkeypatch):
    """Rows per eval batch shrink with vocabulary x length (a 128k vocabulary would otherwise
    need GBs of logits); the token-weighted loss is the same however the rows are batched."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer import data, evaluate as ev
    from trainer.data.builtin_data import generate

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    examples = data.encode_all(generate(n_train=0, n_eval=10, seed=3)["eval"], tok, 512)[0]
    whole = ev.eval_loss(model, examples, tok.pad_token_id)
    sizes = []
    real_collate = data.collate
    monkeypatch.setattr(data, "collate", lambda rows, pad: sizes.append(len(rows)) or real_collate(rows, pad))
    longest = max(len(e["input_ids"]) for e in examples)
    monkeypatch.setattr(ev.losses, "LOGITS_BUDGET", 4 * longest * model.config.vocab_size * 3)  # 3 rows' worth
    assert ev.eval_loss(model, examples, tok.pad_token_id) == pytest.approx(whole, rel=1e-5)
    assert sizes == [3, 3, 3, 1]


def lengthened(row: dict, words: int) -> dict:
    """The row with its request padded by `words` tokens (one per "please " with the tiny tokenizer)."""
    row = json.loads(json.dumps(row))
    row["messages"][0]["content"] = "please " * words + row["messages"][0]["content"]
    return row


def test_eval_rows_longer_than_max_seq_len_are_skipped_before_generating_and_counted(
    tiny_model_dir, tmp_path, monkeypatch
):
    """Issue: a long eval row was generated anyway (an 8,000-token row took a 10-row eval from 0.4 s
    to 184 s on CPU, padding its whole batch) and counted in the accuracy's denominator while the
    eval loss silently left it out. Now it never reaches generation and is counted apart."""
    from trainer import evaluate as ev

    rows = mixed_rows(6, 2, seed=2)
    long_rows = [lengthened(rows[0], 600), lengthened(rows[1], 8000), lengthened(rows[7], 600)]  # 2 fc, 1 text
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:3] + long_rows + rows[3:]))
    generated = []
    real_generate = ev.generate

    def oracle(model, tokenizer, scored, **kw):
        """The real generation runs; its outputs are then replaced by each row's right answer, so the
        accuracy shows its denominator: 100% over the rows scored, 6/8 if a long row counted."""
        generated.extend(scored)
        real_generate(model, tokenizer, scored, **kw)
        return [
            "<tool_call>" + json.dumps(turns.expected_call(r)) + "</tool_call>"
            if turns.expected_call(r)
            else turns.expected_text(r)
            for r in scored
        ]

    monkeypatch.setattr(ev.generation, "generate", oracle)
    result = ev.evaluate(tiny_model_dir, tiny_model_dir, path, max_seq_len=512)
    # 8 rows scored, 10 turns asked per model (each text row's call turn and text turn)
    assert len(generated) == 2 * 10 and not any("please please" in json.dumps(r) for r in generated)
    assert (result["rows"], result["fc_rows"], result["text_rows"], result["skipped_long_rows"]) == (8, 8, 2, 3)
    for name in ("base", "tuned"):
        assert result[name]["fc_accuracy"] == 1.0 and result[name]["text_match"] == 1.0, result[name]
    assert result["warnings"][0].startswith("3 of 11 eval rows are longer than max_seq_len=512 tokens")
    assert "(no loss, no accuracy): use a model with a longer context, or shorten them" in result["warnings"][0]
    # the examples are of scored turns only, the first of each category first (a text turn after a result among them)
    scored_requests = {turns.last_user_request(r) for r in rows}
    assert len(result["examples"]) == 5 and all(e["prompt"] in scored_requests for e in result["examples"])
    assert any(e["turn"] == "turn 2, after a tool result" for e in result["examples"])


def test_eval_split_with_no_row_short_enough_fails_before_any_model_loads(tiny_model_dir, tmp_path, monkeypatch):
    """Every row too long: one message naming max_seq_len and the fix, not a 0% that reads as a result."""
    from trainer import evaluate as ev

    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in mixed_rows(3, 1)))
    loaded = []
    monkeypatch.setattr(ev.generation, "load", lambda *a: loaded.append(a))
    msg = str(pytest.raises(UserError, ev.evaluate, tiny_model_dir, tiny_model_dir, path, max_seq_len=24).value)
    assert msg == (
        "all 4 eval rows are longer than max_seq_len=24 tokens (prompt and expected answer), so none can "
        "be scored: raise max_seq_len (at most the model's context, 512), or add shorter rows to the "
        "eval split"
    )
    assert not loaded


def test_generation_never_runs_past_a_learned_position_table(tiny_model_dir, tmp_path):
    """A GPT-2-style model (learned positions, 160 of them) raised IndexError as soon as a prompt plus
    the answer budget passed its context. Rows over the context are skipped even with max_seq_len=512
    above it; a row that fits only without the full slack gets a clamped budget and its own batch."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from trainer import evaluate as ev

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model_dir = tmp_path / "gpt2"
    GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tok),
            n_positions=160,
            n_embd=32,
            n_layer=1,
            n_head=2,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    ).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    rows = mixed_rows(4, 0, seed=3)
    near = lengthened(rows[0], 40)  # ~150 tokens with its answer: fits 160, but not with 96 tokens of slack
    full = data.encode(near, tok, 10_000)
    assert (
        160 - 96 < len(full["input_ids"]) - sum(label != -100 for label in full["labels"])
        and len(full["input_ids"]) <= 160
    ), len(full["input_ids"])
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows, near, lengthened(rows[1], 300)]))
    result = ev.evaluate(model_dir, model_dir, path, max_seq_len=512)
    assert (result["rows"], result["skipped_long_rows"]) == (5, 1)
    assert (
        "longer than the model's context (160 tokens; max_seq_len=512 is above it) and were not scored (no "
        "loss, no accuracy): use a model with a longer context, or shorten them" in result["warnings"][0]
    )


def test_a_param_given_twice_with_different_values_is_refused_with_the_other_problems():
    """`--param max_steps=5 --param max_steps=7` used to keep 7 silently."""
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.cli_params import parse_params

    msg = str(
        pytest.raises(
            UserError,
            parse_params,
            finetune_pipeline,
            ["max_steps=5", "lora_r=8", "max_stepz=1", "max_steps=7", "max_steps=9"],
        ).value
    )
    assert msg.startswith("bad --param (3 problems):")
    assert "parameter max_steps is given twice with different values (max_steps='5', then max_steps='7')" in msg
    assert "(max_steps='5', then max_steps='9')" in msg and "unknown parameter 'max_stepz'" in msg
    # The same value twice drops nothing (e.g. --keep-serving next to --param keep_serving=true).
    params = parse_params(
        finetune_pipeline,
        ["max_steps=5", "max_steps=05", "node_selector={\"a\": \"b\"}", "node_selector={ \"a\":\"b\" }"],
    )
    assert params["max_steps"] == 5 and params["node_selector"] == {"a": "b"}


def test_run_summary_says_how_many_eval_rows_were_too_long_to_score():
    from pipelines.run_local import summarize

    ev = {
        "base_eval_loss": 2.0,
        "tuned_eval_loss": 1.0,
        "base_fc_accuracy": 0.5,
        "tuned_fc_accuracy": 1.0,
        "eval_rows": 60,
        "fc_rows": 60,
        "text_rows": 0,
    }
    assert "not scored" not in summarize({"evaluate": {**ev, "skipped_long_rows": 0}}, None, False, 1.0)
    text = summarize({"evaluate": {**ev, "skipped_long_rows": 3}}, None, False, 1.0)
    assert "function-calling accuracy (60 rows)" in text
    assert "warning: 3 eval rows longer than max_seq_len were not scored" in text


def test_eval_rows_the_chat_template_refuses_are_one_user_error(tokenizer):
    """A Hub model's template that refuses some eval rows (here: system turns) stops evaluation
    with one message naming the rows and the fix, not a jinja traceback."""
    import copy

    from trainer.evaluate import fitting_rows

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "{{ m['role'] + ': ' + m['content'] + '\n' }}{% endfor %}"
    )
    ok = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    bad = {"messages": [{"role": "system", "content": "be brief"}, *ok["messages"]]}
    assert fitting_rows([ok, ok], tok, 512)[0] == [0, 1]
    with pytest.raises(UserError) as err:
        fitting_rows([ok, bad, bad], tok, 512)
    text = str(err.value)
    assert "refuses 2 of 3 rows" in text and "System role not supported" in text and "fold a system message" in text


# --- what the evaluate step logs: stable names, no 0 standing for "not measured" -------------


def _result(fc_rows, text_rows, fc=0.5, text=0.25):
    scores = {
        "eval_loss": 1.5,
        "text_eval_loss": 2.0 if text_rows else 0.0,
        "fc_accuracy": fc if fc_rows else 0.0,
        "text_match": text if text_rows else 0.0,
    }
    return {
        "base": dict(scores, fc_accuracy=0.0 if fc_rows else 0.0),
        "tuned": scores,
        "rows": fc_rows + text_rows,
        "fc_rows": fc_rows,
        "text_rows": text_rows,
        "skipped_long_rows": 0,
        "warnings": [],
        "examples": [],
    }


def test_logged_metrics_have_the_same_names_and_types_in_every_measured_run():
    from trainer.evaluate import logged_metrics

    a, b = logged_metrics(_result(12, 8)), logged_metrics(_result(150, 50, fc=0.9, text=0.7))
    assert (
        set(a)
        == set(b)
        == {
            "base_eval_loss",
            "tuned_eval_loss",
            "base_text_eval_loss",
            "tuned_text_eval_loss",
            "base_fc_accuracy",
            "tuned_fc_accuracy",
            "base_text_match",
            "tuned_text_match",
            "fc_accuracy_gain",
            "eval_rows",
            "fc_rows",
            "text_rows",
            "skipped_long_rows",
        }
    )
    assert all(type(v) is float for v in [*a.values(), *b.values()])
    assert a["fc_accuracy_gain"] == 0.5 and a["eval_rows"] == 20.0


def test_a_kind_of_row_the_split_lacks_logs_no_score_rather_than_a_measured_looking_zero():
    from trainer.evaluate import logged_metrics
    from trainer.evaluate.gate import pick

    text_only = logged_metrics(_result(0, 30))
    assert not {k for k in text_only if "fc_accuracy" in k}  # blank in KFP's Compare, not 0%
    assert text_only["fc_rows"] == 0.0 and text_only["tuned_text_match"] == 0.25
    tools_only = logged_metrics(_result(30, 0))
    assert not {k for k in tools_only if "text_" in k and k != "text_rows"}
    assert tools_only["text_rows"] == 0.0 and tools_only["tuned_fc_accuracy"] == 0.5
    # the sweep's pick reads these very metrics: by fc_ast_accuracy nothing is deployed, by eval_loss it works
    trials = [{"lora_r": 4, "lora_alpha": 8, "learning_rate": 0.003}] * 2
    picked = pick(trials, [text_only, text_only], "fc_ast_accuracy", min_gain=0.0)
    assert not picked["deploy"] and "select_metric=eval_loss" in picked["reason"]
    assert pick(trials, [text_only, text_only], "eval_loss", min_gain=0.0)["best"] == 0


def test_a_row_is_scored_on_its_last_answer_of_weight_1():
    """A weight-0 answer is one the data says not to learn: never the one the model is scored on."""
    from trainer.chat.turns import target_index

    row = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": "bad", "weight": 0},
        ]
    }
    assert target_index(row) == 1
    row["messages"][3]["weight"] = 1
    assert target_index(row) == 3


def test_promotion_gate_both_ways():
    from trainer.evaluate import promotion

    metrics = {"base_fc_ast_accuracy": 0.10, "fc_ast_accuracy": 0.95}
    ok, reason = promotion(metrics, min_fc_accuracy=0.9, min_gain=0.5)
    assert ok and reason.startswith("promoted: fc_ast_accuracy 10.0% -> 95.0% (+85.0 points)")
    ok, reason = promotion(metrics, min_fc_accuracy=0.96, min_gain=0.9)
    assert not ok and reason.startswith("not promoted:")
    assert "95.0% < min_fc_accuracy 96.0%" in reason and "+85.0 points < min_gain 90.0" in reason
    assert promotion({"base_fc_ast_accuracy": 0.5, "fc_ast_accuracy": 0.4})[0] is False  # worse than its base
    assert promotion({})[0] is True  # chat-only data and a gate that asks nothing
    ok, reason = promotion({}, min_fc_accuracy=0.5)
    assert not ok and "measures nothing" in reason


def test_a_gate_met_exactly_passes_whatever_floating_point_makes_of_it():
    """0.7 - 0.6 is 0.09999999999999998 in floating point: a gain of exactly min_gain was refused as
    "+10.0 points < min_gain 10.0" (k/100 accuracies meet such gates in practice); one row less still fails."""
    from trainer.evaluate import promotion

    assert 0.7 - 0.6 < 0.1  # the arithmetic this is about
    ok, reason = promotion({"base_fc_ast_accuracy": 0.6, "fc_ast_accuracy": 0.7}, min_fc_accuracy=0.7, min_gain=0.1)
    assert ok, reason
    ok, reason = promotion({"base_fc_ast_accuracy": 0.6, "fc_ast_accuracy": 0.69}, min_fc_accuracy=0.7, min_gain=0.1)
    assert not ok and "< min_fc_accuracy 70.0%" in reason and "+9.0 points < min_gain 10.0" in reason


def test_the_report_has_the_category_table_and_the_tuned_models_failures_with_raw_output():
    """Issue 19's report: base vs tuned per BFCL-style category (only the categories the split has), then a few
    rows per category the tuned model got wrong, with why and both raw outputs."""
    from trainer import evaluate as ev
    from trainer.data.builtin_data import generate
    from trainer.evaluate.report import examples_markdown, markdown_html

    rows = generate(n_train=0, n_eval=4, seed=1, categories=True)["eval"]
    rows = [r for r in rows if turns.expected_call(r) is not None][:3]  # tool-call rows
    right = [
        {"calls": [turns.expected_call(r)], "content": None, "raw": f"<tool_call>{i}</tool_call>"}
        for i, r in enumerate(rows)
    ]
    wrong = [{"calls": [], "content": "no idea", "raw": "no idea"} for _ in rows]
    tuned = [right[0], wrong[1], right[2]]
    failures = ev.scoring.failures(rows, {"base": wrong, "tuned": tuned})
    [(category, [shown])] = failures.items()
    assert shown["tuned"] == "no idea" and shown["base"] == "no idea" and shown["why"]
    assert shown["prompt"] == turns.last_user_request(rows[1])

    base, tuned_metrics = ev.score_predictions(rows, wrong), ev.score_predictions(rows, tuned)
    result = {
        "base": {**base, "eval_loss": 2.0},
        "tuned": {**tuned_metrics, "eval_loss": 1.0},
        "rows": 3,
        "fc_rows": 3,
        "text_rows": 0,
        "categories": ev.scoring.category_rows(rows),
        "failures": failures,
        "examples": [],
    }
    md = examples_markdown(result)
    counts = {c.removeprefix("fc_").removesuffix("_rows"): n for c, n in result["categories"].items() if n}
    assert "| all | 3 | 0.0% | 66.7% |" in md
    for c, n in counts.items():
        assert f"| {c} | {n} | 0.0% | {tuned_metrics[f'fc_{c}_accuracy']:.1%} |" in md
    assert "| irrelevance |" not in md or counts.get("irrelevance")  # a category the split lacks is not shown
    assert f"| {category} | {shown['prompt']} |" in md and "| no idea | no idea |" in md
    assert "<table>" in markdown_html(md, "x")


def test_qlora_without_bitsandbytes_is_refused_with_the_install_line(monkeypatch):
    import importlib.util

    from trainer.config.training import TrainConfig

    cfg = TrainConfig(model_uri="s3://b/m", dataset_uri="s3://b/d", output_prefix="runs/x", method="qlora")
    assert not [p for p in cfg.problems() if "bitsandbytes" in p]  # installed here (a dependency)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a)
    )
    [problem] = [p for p in cfg.problems() if "bitsandbytes" in p]
    assert "pip install 'bitsandbytes>=0.50'" in problem and "method=lora" in problem


def test_trainer_train_refuses_tokens_per_step_of_more_than_max_accum_micro_batches_at_setup():
    """The pipeline refuses it with the parameters when batch_tokens is set; `trainer train` with batch_tokens=0 (rows
    padded: the micro-batch's tokens known only from the data) at setup, before any step."""
    from trainer.config.training import MAX_ACCUM
    from trainer.core.errors import UserError
    from trainer.recipe.train import Recipe

    recipe = Recipe.__new__(Recipe)
    recipe.cfg = TrainConfig(
        model_uri="s3://b/m",
        dataset_uri="s3://b/d",
        output_prefix="r",
        batch_tokens=0,
        batch_size=8,
        tokens_per_step=10**9,
    )
    recipe.world = 2
    examples = [{"input_ids": [1] * 100, "labels": [1] * 100}] * 16  # 8 rows x 100 tokens x 2 processes: 1600
    with pytest.raises(
        UserError,
        match=rf"tokens_per_step=1000000000 is 625000 micro-batches per optimizer step "
        rf"\(about 1600 tokens each on 2 processes\), more than {MAX_ACCUM}",
    ):
        recipe._setup_batching(examples)
    # the largest value it suggests is accepted: 5 rows of 100.6 tokens on average make micro-batches of 1609.6
    examples = [{"input_ids": [1] * n, "labels": [1] * n} for n in (100, 100, 101, 101, 101)]
    with pytest.raises(UserError) as err:
        recipe._setup_batching(examples)
    most = int(str(err.value).split("give at most ")[1].split(",")[0])
    assert math.ceil(most / (8 * 100.6 * 2)) <= MAX_ACCUM < math.ceil((most + 8 * 2 * 101) / (8 * 100.6 * 2))


def test_base_scores_made_once_stand_in_for_scoring_the_base_and_only_for_the_same_rows(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    """A sweep scores its base once (evaluate_base) and each trial reuses it: the result is the one scoring the base
    again gives, with the base never loaded; scores of other rows (here max_rows) are set aside, said, and redone."""
    from trainer import evaluate as ev

    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in mixed_rows(6, 4, seed=2)))
    both = ev.evaluate(tiny_model_dir, tiny_model_dir, path, max_rows=10)
    base = json.loads(json.dumps(ev.score_base(tiny_model_dir, path, max_rows=10)))  # as the artifact carries it
    assert base["metrics"] == both["base"] and base["key"]["rows"] == 10 and base["key"]["engine"] == "hf"
    real_load, loaded = ev.load, []
    monkeypatch.setattr(
        ev.generation, "load", lambda model_dir, adapter=None: loaded.append(adapter) or real_load(model_dir, adapter)
    )
    reused = ev.evaluate(tiny_model_dir, tiny_model_dir, path, max_rows=10, base=base)
    assert loaded == [tiny_model_dir]  # the tuned model alone
    assert reused == both  # metrics, examples, failures: the base's answers came from the scores
    capsys.readouterr()
    loaded.clear()
    fewer = ev.evaluate(tiny_model_dir, tiny_model_dir, path, max_rows=8, base=base)
    assert loaded == [None, tiny_model_dir] and fewer["rows"] == 8
    assert (
        "WARNING: the base scores given are not of these rows and settings (rows 10 instead of 8): scoring the "
        "base model here" in capsys.readouterr().out
    )


def test_a_glaive_split_is_scored_on_its_call_turns_and_noise_after_a_tool_result_fails(tiny_model_dir, tmp_path):
    """Issue 44: glaive and Hermes rows end in text after a tool result, and only the last turn was scored: the eval
    split had "0 tool-call rows, fc accuracy n/a" and both models writing byte noise scored 100% -> 100%. Every
    assistant turn is now asked after the gold turns before it: the calls are scored as calls, and noise fails."""
    from tests.unit.test_fc_datasets import GLAIVE, write
    from trainer import evaluate as ev

    rows = data.read_rows(write(tmp_path, [GLAIVE] * 3, "glaive.jsonl"))
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def noise(model, suite, row):
        return "\u00ff\u00fe garbage \u00ff"

    def right_answer(model, suite, row):
        call = turns.expected_call(row)
        return "<tool_call>" + json.dumps(call) + "</tool_call>" if call else turns.expected_text(row)

    engine = FakeEngine(noise)
    noisy = ev.evaluate(tiny_model_dir, tiny_model_dir, path, max_seq_len=2048, engine=engine)
    # each glaive row: 3 call turns (convert, get_time, save_note) and 2 answers to a tool result
    assert (noisy["rows"], noisy["turns"], noisy["fc_rows"], noisy["text_rows"]) == (3, 15, 9, 6)
    asked = engine.questions[0].rows
    assert [len(turns.trained_turns(r["messages"])) for r in asked[:5]] == [1, 2, 3, 4, 5]  # the gold prefix grows
    assert noisy["categories"]["fc_multi_turn_rows"] == 6
    for name in ("base", "tuned"):
        assert noisy[name]["fc_ast_accuracy"] == 0.0 and noisy[name]["fc_multi_turn_accuracy"] == 0.0, noisy[name]
    logged = ev.logged_metrics(noisy)
    assert (logged["eval_rows"], logged["eval_turns"], logged["fc_rows"]) == (3, 15, 9)
    assert {e["turn"] for e in noisy["examples"]} >= {"turn 1", "turn 2, after a tool result"}

    right = ev.evaluate(tiny_model_dir, tiny_model_dir, path, max_seq_len=2048, engine=FakeEngine(right_answer))
    assert right["tuned"]["fc_ast_accuracy"] == right["tuned"]["fc_multi_turn_accuracy"] == 1.0
