"""The base scored once (issue 44, trainer/evaluate/kept_base.py through trainer.evaluate.evaluate): a second
evaluation with the same base tree, chat template, rows and settings takes the base's held-out and BFCL scores
from the bucket and never asks the base; another row, template or max_seq_len scores it again; a damaged kept
object is set aside in one line; a store that refuses the write costs a warning, not the run."""

import hashlib
import io
import json
import shutil

import pytest

from trainer.data import builtin_data
from trainer import data
from trainer import evaluate as ev
from trainer.core.errors import Unavailable
from tests.fakes.fake_engine import FakeEngine
from trainer.evaluate.kept_base import KeptBase


def _calls(model, suite, row):
    name = "get_weather" if model == "tuned" else "search"
    return f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>'


@pytest.fixture
def engine():
    """An engine whose models answer every row with a call (the base `search`, the tuned `get_weather`); its `asked`:
    (model, suite) of every question, in order."""
    return FakeEngine(_calls)


@pytest.fixture
def kept(store, tmp_path):
    """The base's kept scores for a base tree of this test's own (its URI unique to the test)."""
    tree = hashlib.sha256(str(tmp_path).encode()).hexdigest()
    return KeptBase(store, f"s3://{store.bucket}/models/sha256-{tree}", run="run-1")


def _eval_file(tmp_path, rows=None):
    path = tmp_path / "eval.jsonl"
    data.write_jsonl(rows if rows is not None else builtin_data.generate(n_train=0, n_eval=4, seed=2)["eval"], path)
    return path


def test_a_second_evaluation_reuses_the_base_and_changed_inputs_score_it_again(
    tiny_model_dir, tmp_path, kept, engine, capsys
):
    path = _eval_file(tmp_path)
    first = ev.evaluate(tiny_model_dir, tiny_model_dir, path, engine=engine, kept=kept)
    assert engine.asked == [("base", "heldout"), ("tuned", "heldout")]
    out = capsys.readouterr().out
    where = out.split("base scores kept at ", 1)[1].split(" ", 1)[0]
    assert where.startswith(f"s3://{kept.store.bucket}/base_scores/sha256-")

    engine.questions.clear()
    again = ev.evaluate(tiny_model_dir, tiny_model_dir, path, engine=engine, kept=kept)
    assert engine.asked == [("tuned", "heldout")]  # the base is not asked
    assert f"base scores reused from {where} (heldout, scored by run run-1)" in capsys.readouterr().out
    assert again["base"] == first["base"] and again == first  # metrics, examples, failures, paired counts

    # what decides the base's answers, each changed: scored again
    engine.questions.clear()
    ev.evaluate(tiny_model_dir, tiny_model_dir, path, max_seq_len=500, engine=engine, kept=kept)
    rows = data.read_jsonl(path)
    rows[0]["messages"][0]["content"] += " Please."
    ev.evaluate(tiny_model_dir, tiny_model_dir, _eval_file(tmp_path, rows), engine=engine, kept=kept)
    other = shutil.copytree(tiny_model_dir, tmp_path / "other-template")
    (other / "chat_template.jinja").write_text((other / "chat_template.jinja").read_text() + "\n")
    ev.evaluate(other, other, path, engine=engine, kept=kept)  # the same tree URI: the template alone differs
    assert engine.asked.count(("base", "heldout")) == 3


def test_a_damaged_kept_object_is_set_aside_and_the_base_scored(tiny_model_dir, tmp_path, kept, engine, capsys):
    path = _eval_file(tmp_path)
    first = ev.evaluate(tiny_model_dir, tiny_model_dir, path, engine=engine, kept=kept)
    where = capsys.readouterr().out.split("base scores kept at ", 1)[1].split(" ", 1)[0]
    key = where.split(f"s3://{kept.store.bucket}/", 1)[1]
    good = kept.store.get_json(key)
    for damage, said in (
        (b'{"format": 1, "dig', "not JSON"),
        (json.dumps({**good, "digest": "0" * 64}).encode(), "it names digest 000000000000"),
        (json.dumps({**good, "predictions": good["predictions"][:1]}).encode(), "1 held-out answers"),
        # issue 57 F12: the right name and shape, other content: evaluate failed with a traceback in every run after
        (json.dumps({**good, "predictions": [None] * len(good["predictions"])}).encode(), "answer 0 is NoneType"),
        (
            json.dumps({**good, "metrics": {**good["metrics"], "eval_loss": "0.5"}}).encode(),
            "metric 'eval_loss' is '0.5', not a finite number",
        ),
        (
            json.dumps({**good, "predictions": [{**p, "calls": "x"} for p in good["predictions"]]}).encode(),
            "answer 0's calls are not a list",
        ),
        (
            (
                json.dumps({**good, "predictions": None})[:-1] + ', "deep": ' + "[" * 100000 + "]" * 100000 + "}"
            ).encode(),
            "not JSON: RecursionError",
        ),
    ):
        kept.store.client.put_object(kept.store.bucket, key, io.BytesIO(damage), len(damage))
        engine.questions.clear()
        again = ev.evaluate(tiny_model_dir, tiny_model_dir, path, engine=engine, kept=kept)
        out = capsys.readouterr().out
        assert f"WARNING: the kept base scores at {where} are damaged ({said}" in out
        assert engine.asked == [("base", "heldout"), ("tuned", "heldout")] and again["base"] == first["base"]
        assert f"base scores kept at {where}" in out  # and kept again, whole
    assert kept.store.get_json(key)["digest"] == good["digest"]


def test_a_store_that_refuses_the_write_costs_one_warning(tiny_model_dir, tmp_path, kept, engine, capsys, monkeypatch):
    def refuse(key, obj):
        raise Unavailable("S3 endpoint unreachable during upload after retries")

    monkeypatch.setattr(kept.store, "put_json", refuse)
    result = ev.evaluate(tiny_model_dir, tiny_model_dir, _eval_file(tmp_path), engine=engine, kept=kept)
    out = capsys.readouterr().out
    assert result["rows"] == 4 and out.count("WARNING: could not keep the base scores at") == 1


def test_bfcl_base_answers_are_kept_beside_the_held_out_ones(tiny_model_dir, tmp_path, bfcl_tree, kept, engine, capsys):
    path = _eval_file(tmp_path)
    args = dict(engine=engine, suites=("heldout", "bfcl"), bfcl_dir=bfcl_tree, bfcl_rows=1, seed=0, kept=kept)
    first = ev.evaluate(tiny_model_dir, tiny_model_dir, path, **args)
    assert engine.asked == [("base", "heldout"), ("base", "bfcl"), ("tuned", "heldout"), ("tuned", "bfcl")]
    engine.questions.clear()
    again = ev.evaluate(tiny_model_dir, tiny_model_dir, path, **args)
    assert engine.asked == [("tuned", "heldout"), ("tuned", "bfcl")]
    assert "base scores reused from" in capsys.readouterr().out
    assert again["bfcl"] == first["bfcl"] and again["base"] == first["base"]
    engine.questions.clear()
    ev.evaluate(tiny_model_dir, tiny_model_dir, path, **{**args, "seed": 1})  # other BFCL rows drawn
    assert engine.asked == [
        ("base", "bfcl"),
        ("tuned", "heldout"),
        ("tuned", "bfcl"),
    ]  # the held-out part kept, BFCL's asked again, first


def test_the_bfcl_part_is_reused_on_another_dataset(tiny_model_dir, tmp_path, bfcl_tree, kept, engine, capsys):
    """The base's BFCL answers do not depend on the held-out rows: a run on other data with the same base, template
    and BFCL rows asks the base its held-out rows only (BFCL was two thirds of the evaluation's time here)."""
    args = dict(engine=engine, suites=("heldout", "bfcl"), bfcl_dir=bfcl_tree, bfcl_rows=1, seed=0, kept=kept)
    first = ev.evaluate(tiny_model_dir, tiny_model_dir, _eval_file(tmp_path), **args)
    capsys.readouterr()
    other = tmp_path / "other"
    other.mkdir()
    engine.questions.clear()
    again = ev.evaluate(
        tiny_model_dir,
        tiny_model_dir,
        _eval_file(other, builtin_data.generate(n_train=0, n_eval=6, seed=5)["eval"]),
        **args,
    )
    assert engine.asked == [("base", "heldout"), ("tuned", "heldout"), ("tuned", "bfcl")]
    out = capsys.readouterr().out
    assert "(bfcl, scored by run run-1)" in out and out.count("base scores kept at") == 1  # the new held-out part
    assert again["bfcl"]["base"] == first["bfcl"]["base"] and again["rows"] == 6
    engine.questions.clear()
    ev.evaluate(
        tiny_model_dir,
        tiny_model_dir,
        _eval_file(other, builtin_data.generate(n_train=0, n_eval=6, seed=5)["eval"]),
        **{**args, "suites": ("bfcl",)},
    )  # BFCL alone: the base asked nothing
    assert engine.asked == [("tuned", "bfcl")]


def test_kept_bfcl_answers_of_another_shape_are_damage():
    """Issue 57 F12, BFCL's part: an answer that is no answer object (None stays: a row too long to ask)."""
    from trainer.evaluate import kept_base

    def obj(answers):
        return json.dumps({"format": kept_base.FORMAT, "digest": "d", "part": "bfcl", "answers": answers}).encode()

    ok = {"calls": [{"name": "f", "arguments": {}}], "content": None, "raw": "<tool_call>"}
    assert kept_base._damage(obj([ok, None]), "d", "bfcl", 2)[0] == ""
    assert kept_base._damage(obj([ok, {"calls": [], "content": 3, "raw": ""}]), "d", "bfcl", 2)[0] == (
        "BFCL answer 1's content is int, not text"
    )
    assert kept_base._damage(obj([ok, "x"]), "d", "bfcl", 2)[0] == "BFCL answer 1 is str, not an answer object"
    assert kept_base._damage(obj([ok]), "d", "bfcl", 2)[0] == "1 BFCL answers instead of 2"


def test_the_bases_answers_are_kept_before_the_tuned_model_is_asked(tiny_model_dir, tmp_path, kept, capsys):
    """2026-12-02: the tuned model's server stopped answering after 40 min, the evaluate step failed, and the base's
    25 minutes of answers, scored but not yet kept, were lost with it. The base is now asked first and kept at once."""
    path = _eval_file(tmp_path)
    failing = FakeEngine(_calls, fail="tuned")
    with pytest.raises(RuntimeError, match="the tuned model's server stopped answering"):
        ev.evaluate(tiny_model_dir, tiny_model_dir, path, engine=failing, kept=kept)
    assert failing.asked == [("base", "heldout"), ("tuned", "heldout")]
    assert "base scores kept at" in capsys.readouterr().out
    again = FakeEngine(_calls)
    ev.evaluate(tiny_model_dir, tiny_model_dir, path, engine=again, kept=kept)
    assert again.asked == [("tuned", "heldout")]  # the next try asks the tuned model alone
