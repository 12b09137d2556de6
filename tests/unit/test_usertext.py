"""Text the model is trained to say (irrelevance_reply): no control character, none of the tokenizer's special
tokens; and `pipelines.runs` prints a record's control characters escaped."""

from __future__ import annotations

import json
import socket

import pytest

from trainer.data import builtin_data
from trainer import data
from trainer.chat import usertext
from trainer.validate import pipeline_problems


@pytest.mark.parametrize(
    "text, char",
    [
        ("clear\x1b[2J", "\\x1b"),
        ("title\x1b]0;owned\x07", "\\x1b"),
        ("bell\x07", "\\x07"),
        ("rtl \u202e txt", "\\u202e"),
        ("nul\x00", "\\x00"),
    ],
)
def test_a_control_character_in_trained_text_is_refused_naming_it(text, char):
    problem = usertext.control_problem(text, "irrelevance_reply", "e.g. irrelevance_reply='No tool fits.'")
    assert f"irrelevance_reply holds the control character '{char}'" in problem
    assert "give plain text without it, e.g. irrelevance_reply='No tool fits.'" in problem
    assert usertext.control_problem("Zwei Zeilen\n\tund ein Tab: passt, é ✓", "irrelevance_reply") is None


@pytest.mark.parametrize("reply, token", [("Sorry.<|user|>", "<|user|>"), ("<|system|> none fits", "<|system|>")])
def test_a_reply_with_the_builtin_models_turn_token_is_refused_at_validate(reply, token):
    problems = [p for p in pipeline_problems({"irrelevance_reply": reply}) if "irrelevance_reply" in p]
    assert len(problems) == 1 and f"irrelevance_reply holds {token!r}, a special token of model builtin:" in problems[0]
    assert "leave it out, e.g. irrelevance_reply=" in problems[0]


def test_a_reply_with_a_local_models_special_token_is_refused_naming_the_token(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|end_of_text|>"]})
    model = tmp_path / "model"
    import shutil

    shutil.copytree(tiny_model_dir, model)
    tokenizer.save_pretrained(model)
    rows = tmp_path / "rows.jsonl"
    data.write_jsonl(builtin_data.generate(n_train=60, n_eval=0, seed=0)["train"], rows)
    params = {"model_source": str(model), "dataset_source": str(rows), "chat_template": "model"}
    for reply, token in (("None fits.<|end_of_text|>", "<|end_of_text|>"), ("Nope <|user|>", "<|user|>")):
        found = [p for p in pipeline_problems({**params, "irrelevance_reply": reply}) if "irrelevance_reply" in p]
        assert len(found) == 1 and f"holds {token!r}, a special token of model {model}" in found[0], found
    assert not [
        p
        for p in pipeline_problems({**params, "irrelevance_reply": "No tool here does that."})
        if "irrelevance_reply" in p
    ]


def test_runs_list_and_compare_print_a_records_control_characters_escaped(tmp_path, capsys):
    from pipelines import runs

    for name, value in (("20261122-100000-finetune", "a\x1b[2J"), ("20261122-100001-finetune", "b\x1b]0;x\x07")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(
            json.dumps(
                {
                    "status": "succeeded",
                    "params": {"irrelevance_reply": value},
                    "changed": {"irrelevance_reply": value},
                    "metrics": {"evaluate\x1b[1m": {"loss\u202e": 1.0}},
                },
                ensure_ascii=False,
            )
        )
    assert runs.main(["list", "--runs-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "\x1b" not in listed and "\x07" not in listed and "irrelevance_reply=a\\x1b[2J" in listed
    assert runs.main(["compare", "--runs-dir", str(tmp_path)]) == 0
    compared = capsys.readouterr().out
    assert "\x1b" not in compared and "\u202e" not in compared
    assert "b\\x1b]0;x\\x07" in compared and "evaluate\\x1b[1m: loss\\u202e" in compared


@pytest.mark.parametrize(
    "text, needle",
    [
        ('{"params": ' + "[" * 100_000 + "]" * 100_000 + "}", "unreadable run.json (RecursionError"),
        ('{"status": "succeeded", "elapsed_s": 1' + "0" * 400 + "}", "wrong type: elapsed_s"),
    ],
)
def test_runs_list_shows_a_damaged_record_as_one_line_and_the_others(tmp_path, capsys, text, needle):
    from pipelines import runs

    good, bad = tmp_path / "20261122-100000-finetune", tmp_path / "20261122-100001-finetune"
    for d in (good, bad):
        d.mkdir()
    (good / "run.json").write_text(json.dumps({"status": "succeeded", "params": {}, "metrics": {}}))
    (bad / "run.json").write_text(text)
    assert runs.main(["list", "--runs-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    [line] = [line for line in listed.splitlines() if line.startswith(bad.name)]
    assert " broken " in line and needle in line and f"remove {bad}" in line
    assert any(line.startswith(good.name) and " succeeded " in line for line in listed.splitlines())


@pytest.mark.parametrize(
    "field",
    [
        {"params": {"irrelevance_reply": "caf\udce9"}, "changed": {"x": "\udce9"}},
        {"status": "running", "pid": 10**30, "host": socket.gethostname()},
        {"params": {"deep": json.loads("[" * 900 + "]" * 900)}},
    ],
)
def test_runs_compare_and_list_survive_a_damaged_value(tmp_path, capfd, field):
    from pipelines import runs

    for name in ("20261122-100000-finetune", "20261122-100001-finetune"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(
            json.dumps({"status": "succeeded", "params": {"x": name}, "metrics": {}, **field})
        )
    for command in ("list", "compare"):
        extra = ["--all-params"] if command == "compare" else []
        assert runs.main([command, *extra, "--runs-dir", str(tmp_path)]) == 0
        out = capfd.readouterr().out
        assert "20261122-100001-finetune" in out
        if "changed" in field:  # list shows what a run changed, compare its parameters
            assert ("x=\\udce9" if command == "list" else "caf\\udce9") in out


@pytest.mark.parametrize("reply", ["Nope\x1b[2J", "Nope\x1b]0;title\x07", "No \u202etool"])
def test_a_reply_with_a_control_character_is_refused_everywhere_it_is_given(reply, tmp_path, capsys):
    from trainer.__main__ import main
    from trainer.data import masking

    assert "holds the control character" in masking.reply_problem(reply)
    found = [p for p in pipeline_problems({"irrelevance_reply": reply}) if "irrelevance_reply" in p]
    assert len(found) == 1 and "holds the control character" in found[0]
    rows = tmp_path / "rows.jsonl"
    data.write_jsonl(builtin_data.generate(n_train=20, n_eval=0, seed=0)["train"], rows)
    with pytest.raises(SystemExit) as exit_:
        main(["deliver-dataset", str(rows), "--irrelevance-share", "0.1", "--irrelevance-reply", reply])
    assert exit_.value.code == 2 and "--irrelevance-reply holds the control character" in capsys.readouterr().err
