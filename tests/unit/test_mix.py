"""Several datasets in one run (trainer.data.mix, trainer.config.sources.mix_parts)."""

import json

import pytest

from trainer.config import sources
from trainer.data import mix
from trainer.core.errors import UserError


def _rows(name, n):
    return [
        {"messages": [{"role": "user", "content": f"{name} {i}"}, {"role": "assistant", "content": "ok"}]}
        for i in range(n)
    ]


def _parts():
    return [
        ("a", 3, {"train": _rows("a", 90), "eval": _rows("a-eval", 9)}),
        ("b", 1, {"train": _rows("b", 10), "eval": _rows("b-eval", 3)}),
    ]


def test_weights_are_shares_of_all_training_rows_and_a_small_source_repeats_in_whole_passes():
    assert mix.take_counts([90, 10], [3, 1]) == [75, 25]
    assert mix.take_counts([5, 5, 5], [1, 1, 1]) == [5, 5, 5] and sum(mix.take_counts([7, 4], [2.5, 1])) == 11
    assert mix.take_counts([1000, 3], [1, 1e-9]) == [1003, 1]  # every source gives a row
    splits, record = mix.mix(_parts(), seed=0)
    b = [r["messages"][0]["content"] for r in splits["train"] if r[mix.TAG] == 1]
    assert len(b) == 25 and all(b.count(f"b {i}") in (2, 3) for i in range(10))  # 2.5 passes over b's 10 rows
    a = [r["messages"][0]["content"] for r in splits["train"] if r[mix.TAG] == 0]
    assert len(a) == len(set(a)) == 75  # a seeded sample of a's 90, none twice
    assert record == [
        {"source": "a", "weight": 3, "train_rows": 90, "train_taken": 75, "eval_rows": 9},
        {"source": "b", "weight": 1, "train_rows": 10, "train_taken": 25, "eval_rows": 3},
    ]
    assert mix.mix(_parts(), seed=0) == (splits, record) and mix.mix(_parts(), seed=1)[0] != splits


def test_every_eval_row_is_kept_once_and_any_prefix_holds_each_source():
    splits, _ = mix.mix(_parts(), seed=0)
    evals = splits["eval"]
    assert sorted(r["messages"][0]["content"] for r in evals) == sorted(
        [f"a-eval {i}" for i in range(9)] + [f"b-eval {i}" for i in range(3)]
    )
    assert {r[mix.TAG] for r in evals[:4]} == {0, 1}
    assert [r["messages"][0]["content"] for r in evals if r[mix.TAG] == 0] == [f"a-eval {i}" for i in range(9)]
    assert mix.sources_of(evals) == [0, 1] and mix.sources_of(_rows("x", 3)) == []
    said = mix.describe(mix.mix(_parts(), 0)[1], "dataset d")
    assert "[0] a (weight 3): 75 training rows of its 90 (a sample), 9 eval rows" in said
    assert "[1] b (weight 1): 25 training rows of its 10 (each about 2.5 times), 3 eval rows" in said


def test_a_mixed_dataset_source_is_parsed_with_every_problem_named(tmp_path):
    (tmp_path / "mine.jsonl").write_text("{}\n")
    value = json.dumps(
        [{"source": "builtin:function-calling", "weight": 2}, {"source": f"file://{tmp_path}/mine.jsonl", "weight": 1}]
    )
    src = sources.parse(f"  {value} ", "dataset")
    assert src.kind == "mix" and sources.mix_parts(src.ref) == [
        ("builtin:function-calling", 2),
        (str(tmp_path / "mine.jsonl"), 1),
    ]
    with pytest.raises(UserError) as err:
        sources.parse(
            json.dumps(
                [
                    {"source": "builtin:function-calling", "weight": float("nan")},
                    {"source": "builtin:nope", "weight": 1},
                    {"source": "builtin:function-calling", "weight": True},
                    ["x"],
                ]
            ),
            "dataset",
        )
    for said in (
        "dataset_source[0].weight must be a finite number above 0",
        "got NaN",
        "dataset_source[1]: unknown built-in dataset 'builtin:nope'",
        "dataset_source[2].weight must be",
        "dataset_source[2] names 'builtin:function-calling' again",
        'dataset_source[3] must be {"source": ..., "weight": ...}, got ["x"]',
    ):
        assert said in str(err.value)
    for bad, said in (
        ("[{", "is not a JSON list"),
        ("[]", "a mix is a JSON list of 1 to 8 sources"),
        (json.dumps([{"source": "[1]", "weight": 1}]), "must be one source's text (not a mix)"),
    ):
        with pytest.raises(UserError, match=said.replace("(", r"\(").replace(")", r"\)")):
            sources.parse(bad, "dataset")
    with pytest.raises(UserError, match="unknown model source"):  # a model is one model
        sources.parse(value, "model")


@pytest.mark.parametrize(
    "text, said",
    [
        (
            '[{"source": "builtin:function-calling", "weight": ' + "9" * 401 + '}]',
            "dataset_source[0].weight must be a finite number above 0",
        ),
        (
            '[{"source": "builtin:function-calling", "weight": ' + "9" * 5001 + '}]',
            "is not a JSON list (a number of more than 4300 digits",
        ),
        ("[" * 3000, "does not read as a JSON list (nested too deep)"),
        ('[{"source": "builtin:function-calling", "weight": 1, "weight": 2}]', "has the key 'weight' twice"),
        (
            '[{"source": "s3://bkt/up/x.jsonl/", "weight": 1}, {"source": " s3://bkt/up/x.jsonl", "weight": 1}]',
            "dataset_source[1] names 's3://bkt/up/x.jsonl' again",
        ),
        (
            '[{"source": "builtin:function-calling", "weight": 1}, {"source": "builtin:function-calling-bfcl", "weight": 1}]',
            "dataset_source[1] names 'builtin:function-calling-bfcl' again",
        ),
    ],
)
def test_a_mix_that_a_json_reader_or_float_cannot_hold_or_that_names_a_source_twice_is_one_message(text, said):
    with pytest.raises(UserError) as err:
        sources.mix_parts(text)
    assert said in str(err.value)


def test_huge_weights_are_shares_like_any_others():
    assert sources.mix_parts('[{"source": "builtin:function-calling", "weight": 1e308}]')[0][1] == 1e308
    assert mix.take_counts([10, 20], [1e308, 1e308]) == [15, 15] == mix.take_counts([10, 20], [1, 1])
    assert mix.take_counts([10, 20], [1e308, 1e-300]) == [30, 1]  # at least one row each, as ever


def test_the_same_row_from_two_sources_counts_as_train_eval_overlap():
    from trainer.data import eval_overlap

    row = _rows("same", 1)[0]
    assert "1 of 1 eval rows are also train rows" in eval_overlap(
        {"train": [{**row, mix.TAG: 0}], "eval": [{**row, mix.TAG: 1}]}
    )
    assert eval_overlap({"train": [{**row, mix.TAG: 0}], "eval": _rows("other", 1)}) == ""


def test_the_evaluation_scores_each_source_of_a_mix():
    from trainer.data import builtin_data
    from trainer.evaluate.scoring import score_predictions

    rows = builtin_data.generate(0, 40, seed=2)["eval"]
    tools = [r for r in rows if r["messages"][-1].get("tool_calls")][:6]
    texts = [
        {"tools": r["tools"], "messages": [r["messages"][0], {"role": "assistant", "content": "None fits."}]}
        for r in tools[:4]
    ]
    tagged = [{**r, mix.TAG: 0} for r in tools[:4]] + [{**r, mix.TAG: 1} for r in tools[4:] + texts]
    right = [{"calls": [tc["function"] for tc in r["messages"][-1]["tool_calls"]], "content": None} for r in tools]
    # source 0: 3 of 4 calls right; source 1: both calls right, and 1 of 4 text rows answered with a call
    predictions = (
        right[:3]
        + [{"calls": [], "content": "no"}]
        + right[4:]
        + [right[0]]
        + [{"calls": [], "content": "None fits."}] * 3
    )
    scores = score_predictions(tagged, predictions)
    assert scores["mix0_fc_ast_accuracy"] == 0.75 and "mix0_text_kept" not in scores
    assert scores["mix1_fc_ast_accuracy"] == 5 / 6 and scores["mix1_text_kept"] == 0.75
    assert not [k for k in score_predictions(tools, right) if k.startswith("mix")]


def test_the_report_and_the_run_summary_show_a_table_by_source_with_the_sources_names(tmp_path):
    from pipelines.run_local import summarize
    from trainer.data import builtin_data
    from trainer.evaluate import logged_metrics
    from trainer.evaluate.scoring import score_predictions, source_rows
    from trainer.evaluate.report import examples_markdown

    rows = builtin_data.generate(0, 40, seed=2)["eval"]
    tools = [r for r in rows if r["messages"][-1].get("tool_calls")][:4]
    texts = [
        {"tools": r["tools"], "messages": [r["messages"][0], {"role": "assistant", "content": "None fits."}]}
        for r in tools[:2]
    ]
    tagged = [{**r, mix.TAG: 0} for r in tools] + [{**r, mix.TAG: 1} for r in texts]
    calls = [{"calls": [tc["function"] for tc in r["messages"][-1]["tool_calls"]], "content": None} for r in tools]
    nothing = [{"calls": [], "content": "no"}] * 6
    base, tuned = score_predictions(tagged, nothing), score_predictions(tagged, calls[:3] + nothing[:1] + calls[:2])
    m = {"eval_loss": 1.0, "fc_accuracy": 0.5, "text_match": 0.5, "text_eval_loss": 1.0}
    result = {
        "base": {**m, **base},
        "tuned": {**m, **tuned},
        "rows": 6,
        "fc_rows": 4,
        "text_rows": 2,
        "skipped_long_rows": 0,
        "warnings": [],
        "examples": [],
        "sources": source_rows(tagged),
        "mix": [{"source": "builtin:function-calling", "weight": 2}, {"source": "mine.jsonl", "weight": 1}],
    }
    assert result["sources"] == {"mix0_rows": 4, "mix1_rows": 2}
    md = examples_markdown(result)
    assert "| [0] builtin:function-calling | 4 | 0.0% | 75.0% | n/a | n/a |" in md
    assert "| [1] mine.jsonl | 2 | 100.0% | 0.0% | 100.0% | 0.0% |" in md
    logged = logged_metrics(result)
    assert logged["mix0_rows"] == 4 and logged["tuned_mix1_text_kept"] == 0
    text = summarize({"evaluate": logged}, None, False, 1.0, sources=[r["source"] for r in result["mix"]])
    assert "== by source of the mix" in text
    line = next(x for x in text.splitlines() if "[1] mine.jsonl" in x).split()
    assert line[-5:] == ["2", "100.0%", "0.0%", "100.0%", "0.0%"], line
    # the record reaches the dataset artifact's metadata, which the evaluate step reads the names from
    from types import SimpleNamespace

    from components.artifacts import write_pointer

    artifact = SimpleNamespace(metadata={}, path=str(tmp_path / "dataset"))
    write_pointer(artifact, "s3://b/datasets/x", {"mix": result["mix"], "files": []})
    assert artifact.metadata["mix"] == result["mix"]
    # one source: no table, in either
    plain = {**result, "sources": {}, "mix": [], "base": m, "tuned": m}
    assert "By source" not in examples_markdown(plain)
    assert "by source" not in summarize({"evaluate": logged_metrics(plain)}, None, False, 1.0)


def test_each_part_of_a_mix_is_checked_as_its_kind_on_a_cluster_and_in_the_bucket(store, tmp_path):
    from trainer.validate import on_cluster_problems
    from trainer.validate.objects import object_problems

    (tmp_path / "mine.jsonl").write_text("{}\n")
    store.ensure_bucket()
    store.put_json("uploads/there.jsonl", {})
    value = json.dumps(
        [
            {"source": str(tmp_path / "mine.jsonl"), "weight": 1},
            {"source": f"s3://{store.bucket}/uploads/there.jsonl", "weight": 1},
            {"source": f"s3://{store.bucket}/uploads/gone.jsonl", "weight": 1},
        ]
    )
    assert [p for p in on_cluster_problems({"dataset_source": value}) if "is a path on this machine" in p] == [
        f"dataset_source {str(tmp_path / 'mine.jsonl')!r} is a path on this machine, which the cluster cannot read: "
        "deliver it first (python -m trainer deliver-dataset ... with S3_ENDPOINT at the cluster's MinIO) and pass "
        "the printed s3:// URI"
    ]
    [gone] = object_problems({"dataset_source": value}, store)
    assert gone.startswith(f"dataset_source s3://{store.bucket}/uploads/gone.jsonl: no such object")


def test_a_two_source_weighted_mix_is_delivered_content_addressed_with_its_record(store, tmp_path, capsys):
    from trainer.data import builtin_data
    from trainer import data
    from trainer.store import delivery

    mine = builtin_data.generate(60, 0, seed=7)["train"]
    data.write_jsonl(mine, tmp_path / "mine.jsonl")
    store.ensure_bucket()
    store.client.fput_object(store.bucket, "uploads/mine.jsonl", str(tmp_path / "mine.jsonl"))
    tree, _ = delivery.deliver_dataset(str(tmp_path / "mine.jsonl"), "", store, eval_fraction=0.25, seed=5)
    for second in (str(tmp_path / "mine.jsonl"), f"s3://{store.bucket}/uploads/mine.jsonl", tree):
        value = json.dumps([{"source": "builtin:function-calling", "weight": 1}, {"source": second, "weight": 1}])
        uri, meta = delivery.deliver_dataset(value, "", store, eval_fraction=0.25, seed=5)
        read, taken = [r["train_rows"] for r in meta["mix"]], [r["train_taken"] for r in meta["mix"]]
        assert read[1] == 45 and taken == [sum(read) - sum(read) // 2, sum(read) // 2], meta["mix"]
        assert [r["eval_rows"] for r in meta["mix"]][1] == 15 and meta["rows"]["train"] == sum(read)
        assert "dataset_source: a mix of 2 sources" in capsys.readouterr().out
        root = store.get_tree(uri)
        evals = data.read_jsonl(root / "eval.jsonl")
        assert {r[mix.TAG] for r in evals} == {0, 1} and len(evals) == meta["rows"]["eval"]
        assert delivery.deliver_dataset(value, "", store, eval_fraction=0.25, seed=5)[0] == uri  # content-addressed
    # without the bucket (the parameters' check) the local parts are mixed the same way
    local = json.dumps(
        [{"source": "builtin:function-calling", "weight": 1}, {"source": str(tmp_path / "mine.jsonl"), "weight": 1}]
    )
    splits = data.load(sources.parse(local, "dataset"), "", 0.25, 5)
    assert len(splits["eval"]) == meta["rows"]["eval"]
    with pytest.raises(UserError, match="a mix with one is read by the deliver-dataset step"):
        data.load(sources.parse(value, "dataset"), "", 0.25, 5)


def test_a_mix_of_local_and_built_in_parts_is_checked_fully_before_a_run(tmp_path):
    from pipelines.run_local import throwaway_s3_problems
    from trainer.data import builtin_data
    from trainer import data
    from trainer.validate import pipeline_problems

    data.write_jsonl(builtin_data.generate(40, 0, seed=3)["train"], tmp_path / "mine.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n' * 5)
    good = json.dumps(
        [{"source": "builtin:function-calling", "weight": 3}, {"source": str(tmp_path / "mine.jsonl"), "weight": 1}]
    )
    assert pipeline_problems({"dataset_source": good}) == []
    bad = json.dumps(
        [{"source": "builtin:function-calling", "weight": 3}, {"source": str(tmp_path / "bad.jsonl"), "weight": 1}]
    )
    assert any(
        "bad.jsonl lines 1, 2, 3 and 2 more: no assistant message" in p
        for p in pipeline_problems({"dataset_source": bad})
    ), pipeline_problems({"dataset_source": bad})
    [revision] = pipeline_problems({"dataset_source": good, "dataset_revision": "v1"})
    assert "is a mix of sources (each Hub part is read at its main branch): leave dataset_revision empty" in revision
    in_s3 = json.dumps(
        [
            {"source": "builtin:function-calling", "weight": 1},
            {"source": "s3://llm-finetune/uploads/x.jsonl", "weight": 1},
        ]
    )
    [throwaway] = throwaway_s3_problems(
        {"dataset_source": in_s3, "model_source": "builtin:tiny-llama", "chat_template": "model"}, None
    )
    assert "is an object in S3, but without --s3-endpoint this run starts an empty throwaway S3 server" in throwaway


@pytest.mark.parametrize("other", ["s3://llm-finetune/uploads/x.jsonl", "someorg/some-dataset"])
def test_a_local_part_beside_an_s3_or_hub_part_is_read_and_checked_at_validate(tmp_path, other):
    """A mix with a part not on this machine was left whole to deliver-dataset, its local part unread until then:
    now each local part is read and checked as a lone local dataset is, whatever the other parts are."""
    from trainer.validate import pipeline_problems

    (tmp_path / "bad.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n' * 5)
    (tmp_path / "empty.jsonl").write_text("")
    bad = json.dumps([{"source": other, "weight": 1}, {"source": str(tmp_path / "bad.jsonl"), "weight": 1}])
    problems = pipeline_problems({"dataset_source": bad})
    assert any("bad.jsonl lines 1, 2, 3 and 2 more: no assistant message" in p for p in problems), problems
    alone = pipeline_problems({"dataset_source": str(tmp_path / "empty.jsonl")})
    mixed = pipeline_problems(
        {
            "dataset_source": json.dumps(
                [{"source": other, "weight": 1}, {"source": str(tmp_path / "empty.jsonl"), "weight": 2}]
            )
        }
    )
    assert alone and [p for p in alone if "empty.jsonl" in p] == [p for p in mixed if "empty.jsonl" in p], mixed
    # submit does not read this machine's files (on_cluster_problems refuses the local part)
    assert not [p for p in pipeline_problems({"dataset_source": bad}, check_local_files=False) if "bad.jsonl" in p]


def test_an_uploaded_dataset_is_named_by_its_object_not_its_downloaded_copy(store, tmp_path, capsys):
    """The readers take the name their messages use (`shown`): an uploaded file's problems and its conversion line
    name s3://..., never the temporary copy it was read from (no rewriting of captured text)."""
    from trainer.store import delivery

    store.ensure_bucket()
    (tmp_path / "alpaca.jsonl").write_text(
        "".join(json.dumps({"instruction": f"Say {i}.", "input": "", "output": str(i)}) + "\n" for i in range(8))
    )
    store.client.fput_object(store.bucket, "uploads/alpaca.jsonl", str(tmp_path / "alpaca.jsonl"))
    delivery.deliver_dataset(f"s3://{store.bucket}/uploads/alpaca.jsonl", "", store, eval_fraction=0.25)
    said = capsys.readouterr().out
    assert f"s3://{store.bucket}/uploads/alpaca.jsonl" in said and "/tmp" not in said, said
    (tmp_path / "bad.jsonl").write_text('{"instruction": "Say 1.", "input": "", "output": "1"}\n{"messages": 3}\n')
    store.client.fput_object(store.bucket, "uploads/bad.jsonl", str(tmp_path / "bad.jsonl"))
    err = str(
        pytest.raises(UserError, delivery.deliver_dataset, f"s3://{store.bucket}/uploads/bad.jsonl", "", store).value
    )
    assert f"s3://{store.bucket}/uploads/bad.jsonl:2: " in err and "/tmp" not in err, err
