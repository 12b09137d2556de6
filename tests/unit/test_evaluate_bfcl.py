"""BFCL as an evaluation suite (trainer/evaluate/bfcl.py through trainer.evaluate.evaluate): the rows asked
as BFCL asks, scored by its rules per category, rows too long for the context counted wrong and said, the
metrics logged under stable names, the report and the gate's per-category floor."""

import json

import pytest

from tests.fakes.fake_engine import FakeEngine
from trainer import data
from trainer import evaluate as ev
from trainer.data import bfcl as bfcl_data
from trainer.evaluate import bfcl
from trainer.evaluate.gate import promotion
from trainer.evaluate.gate import category_drops
from trainer.evaluate.report import examples_markdown, summary_lines


def _first(accepted):
    """BFCL's first accepted value ("" = may be omitted, skipped); a dict's values are lists of accepted values too."""
    value = next(v for v in accepted if v != "")
    return {k: _first(v) for k, v in value.items() if any(x != "" for x in v)} if isinstance(value, dict) else value


def right_answer(row) -> str:
    """The first accepted value of every argument BFCL's answer names, as a <tool_call> per expected call."""
    calls = []
    for call in row["ground_truth"] or []:
        ((name, params),) = call.items()
        calls.append(
            {
                "name": bfcl_data.served_name(name),
                "arguments": {k: _first(v) for k, v in params.items() if any(x != "" for x in v)},
            }
        )
    return "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls) or "I cannot help with that."


def _scripted_reply(model: str, suite: str, row) -> str:
    """The tuned model answers every BFCL row right, the base and every held-out turn answer text."""
    return right_answer(row) if model == "tuned" and suite == "bfcl" else "Let me think about that."


@pytest.fixture
def scripted(monkeypatch):
    """HF generate replaced: the tuned model answers every BFCL row right, the base answers text; the prompts
    each saw and the new tokens each was given are kept."""
    seen = {}

    def generate(model, tokenizer, rows, batch_size=32, desc="generate", budgets=None):
        seen[desc] = (rows, budgets)
        if desc.startswith("BFCL tuned"):
            return [right_answer(r) for r in rows]
        return ["Let me think about that." for _ in rows]

    monkeypatch.setattr(ev.generation, "generate", generate)
    return seen


def test_bfcl_rows_asked_scored_and_too_long_ones_counted_wrong(tiny_model_dir, tmp_path, bfcl_tree):
    data.write_jsonl([], tmp_path / "eval.jsonl")
    engine = FakeEngine(_scripted_reply)
    result = ev.evaluate(
        tiny_model_dir,
        tiny_model_dir,
        tmp_path / "eval.jsonl",
        engine=engine,
        suites=("bfcl",),
        bfcl_dir=bfcl_tree,
        bfcl_rows=2,
        seed=1,
    )
    suite = result["bfcl"]
    assert suite["version"] == bfcl_data.VERSION and result["rows"] == 0 and result["base"] == {}
    counts = suite["counts"]
    assert {c: counts[f"bfcl_{c}_rows"] for c in bfcl_data.CATEGORIES} == {c: 2 for c in bfcl_data.CATEGORIES}
    assert engine.asked == [("base", "bfcl"), ("tuned", "bfcl")]
    asked_rows, budgets = engine.questions[1].rows, engine.questions[1].budgets
    # the tiny model's context is 512 tokens: rows whose prompt leaves no room are not asked, and counted
    long = sum(counts[f"bfcl_{c}_too_long"] for c in bfcl_data.CATEGORIES)
    assert len(asked_rows) == 20 - long and 0 < long < 20
    assert all(1 <= b <= bfcl.ANSWER_TOKENS for b in budgets)
    assert any("BFCL rows have prompts longer than the model's context" in w for w in result["warnings"])
    # asked with BFCL's tools (dots as _), the question as given, before the turn to answer
    assert all(r["messages"][-1] == {"role": "assistant", "content": ""} and r["tools"] for r in asked_rows)
    tuned, base = suite["tuned"], suite["base"]
    for c in bfcl_data.CATEGORIES:
        n, too_long = 2, counts[f"bfcl_{c}_too_long"]
        if c in bfcl_data.IRRELEVANCE:  # the scripted tuned model calls nothing there: right where asked
            assert tuned[f"bfcl_{c}_accuracy"] == base[f"bfcl_{c}_accuracy"] == (n - too_long) / n, c
        else:  # the right call where asked, the base's text never
            assert tuned[f"bfcl_{c}_accuracy"] == (n - too_long) / n and base[f"bfcl_{c}_accuracy"] == 0, c
    assert tuned["bfcl_non_live_ast_accuracy"] == pytest.approx(
        sum(tuned[f"bfcl_{c}_accuracy"] for c in bfcl_data.NON_LIVE_AST) / 4
    )
    live = [tuned[f"bfcl_{c}_accuracy"] * 2 for c in bfcl_data.LIVE_AST]
    assert tuned["bfcl_live_ast_accuracy"] == pytest.approx(sum(live) / 8)
    # every row's answers, as the step writes them out: verdicts that make the accuracies
    lines = suite["answers"]
    assert len(lines) == 20 and json.loads(json.dumps(lines)) == lines
    for c in bfcl_data.CATEGORIES:
        verdicts = [a["tuned"] is not None and a["tuned"]["right"] for a in lines if a["category"] == c]
        assert sum(verdicts) / 2 == tuned[f"bfcl_{c}_accuracy"], c
    # a too-long row is a failure the report shows, with why
    shown = [f for fs in suite["failures"].values() for f in fs]
    assert shown and all(f["why"] for f in shown)

    logged = ev.logged_metrics(result)
    assert "eval_rows" not in logged and "base_fc_accuracy" not in logged  # no held-out suite: nothing of it
    assert logged["bfcl_simple_python_accuracy"] == logged["tuned_bfcl_simple_python_accuracy"]
    assert logged["base_bfcl_irrelevance_accuracy"] == base["bfcl_irrelevance_accuracy"]
    assert logged["bfcl_live_parallel_rows"] == 2
    for c in bfcl_data.CATEGORIES:  # the gate's McNemar counts: the tuned right where asked, the base's text wrong
        won = 0 if c in bfcl_data.IRRELEVANCE else 2 - counts[f"bfcl_{c}_too_long"]  # on every call: never lost
        assert logged[f"bfcl_{c}_lost"] == 0 and logged[f"bfcl_{c}_won"] == won, c
    report = examples_markdown(result)
    assert (
        f"## BFCL {bfcl_data.VERSION}" in report and "Qwen3-0.6B" in report and "| 86.0% |" in report
    )  # the board of 2026-04-12's multiple
    assert "## Held-out rows" not in report
    lines = summary_lines(result)
    assert lines[0].startswith(f"BFCL {bfcl_data.VERSION} (2 rows per category, seed 1")
    assert any(line.split()[0] == "live_irrelevance" for line in lines[1:])


def test_hf_generate_answers_both_suites_on_the_same_loaded_models(tiny_model_dir, tmp_path, bfcl_tree, scripted):
    """The HF engine: each model loaded once, asked the held-out turns and BFCL's rows (with their budgets), the
    texts read with the serving parser."""
    from trainer.data import builtin_data

    data.write_jsonl(builtin_data.generate(n_train=0, n_eval=4, seed=2)["eval"], tmp_path / "eval.jsonl")
    result = ev.evaluate(
        tiny_model_dir,
        tiny_model_dir,
        tmp_path / "eval.jsonl",
        engine="hf",
        suites=("heldout", "bfcl"),
        bfcl_dir=bfcl_tree,
        bfcl_rows=1,
        seed=0,
    )
    assert result["rows"] == 4 and "fc_accuracy" in result["tuned"] and "bfcl" in result
    assert list(scripted) == ["evaluate base", "BFCL base", "evaluate tuned", "BFCL tuned"]
    assert all(1 <= b <= bfcl.ANSWER_TOKENS for b in scripted["BFCL tuned"][1])
    tuned = result["bfcl"]["tuned"]  # its right answers, parsed as served, where a row was asked
    assert any(tuned[f"bfcl_{c}_accuracy"] == 1.0 for c in bfcl_data.CATEGORIES if c not in bfcl_data.IRRELEVANCE)
    logged = ev.logged_metrics(result)
    assert logged["eval_rows"] == 4 and "tuned_bfcl_multiple_accuracy" in logged
    paired = [k for k in logged if k.startswith("fc_") and k.endswith(("_lost", "_won"))]
    assert paired and all(logged[k] == 0 for k in paired)  # both answer the held-out rows alike: nothing changed
    report = examples_markdown(result)
    assert report.index("## BFCL") < report.index("## Held-out rows")


def test_the_gate_refuses_a_category_that_fell_more_than_allowed():
    metrics = {
        "fc_ast_accuracy": 0.97,
        "base_fc_ast_accuracy": 0.0,
        "base_fc_irrelevance_accuracy": 1.0,
        "tuned_fc_irrelevance_accuracy": 0.64,
        "base_bfcl_irrelevance_accuracy": 1.0,
        "tuned_bfcl_irrelevance_accuracy": 0.067,
        "base_bfcl_multiple_accuracy": 0.0,
        "tuned_bfcl_multiple_accuracy": 0.27,
    }
    assert [d.split()[0] for d in category_drops(metrics, 0.1)] == ["fc_irrelevance", "bfcl_irrelevance"]
    assert [d.split()[0] for d in category_drops(metrics, 0.4)] == ["bfcl_irrelevance"]
    ok, why = promotion(metrics, 0.9, 0.1, 0.4)
    assert (
        not ok
        and (
            "bfcl_irrelevance fell 100.0% -> 6.7% (-93.3 points; lost/won not logged (an older run): "
            "taken as significant; max_category_drop 0.4)"
        )
        in why
    )
    assert "raise max_category_drop" in why and why.count("Nothing is deployed") == 1
    assert promotion(metrics, 0.9, 0.1, 1.0)[0]  # 1.0: off
    assert promotion(metrics, 0.9, 0.1, 0.934)[0]
    both = promotion(metrics, 0.99, 0.1, 0.4)[1]
    assert "< min_fc_accuracy" in both and "bfcl_irrelevance fell" in both and both.count("Nothing is deployed") == 1


def test_arguments_are_decoded_once_as_bfcl_decodes_them(bfcl_tree):
    """A reply's arguments arrive decoded once (served._reply, the parsers); text left over is no JSON object,
    even when it is JSON of an object (double-encoded), as BFCL's single json.loads sees it."""
    row = bfcl_data.read(bfcl_tree, "simple_python")[1]  # math.factorial(number=5)
    good = {"calls": [{"name": "math_factorial", "arguments": {"number": 5}}], "content": None}
    double = {"calls": [{"name": "math_factorial", "arguments": json.dumps({"number": 5})}], "content": None}
    assert bfcl.score([row], [good])["bfcl_simple_python_accuracy"] == 1
    assert bfcl.score([row], [double])["bfcl_simple_python_accuracy"] == 0
    assert bfcl.score([row], [None])["bfcl_simple_python_accuracy"] == 0  # not asked: wrong, still counted
