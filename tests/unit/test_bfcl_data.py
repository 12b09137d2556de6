"""trainer/data/bfcl.py: BFCL's data read from its PyPI wheel, asked as BFCL asks an OpenAI-style model, sampled
the same way every run, and a training set holding its questions refused."""

import json
import zipfile

import pytest

from trainer.data import bfcl
from trainer.core.errors import UserError


def test_every_category_is_read_with_its_answers(bfcl_tree):
    counts = {c: len(bfcl.read(bfcl_tree, c)) for c in bfcl.CATEGORIES}
    # the single-turn categories of v4 (2026.3.23): a new wheel with other rows must be looked at, not taken
    assert counts == {
        "simple_python": 400,
        "multiple": 200,
        "parallel": 200,
        "parallel_multiple": 200,
        "irrelevance": 240,
        "live_simple": 258,
        "live_multiple": 1053,
        "live_parallel": 16,
        "live_parallel_multiple": 24,
        "live_irrelevance": 884,
    }
    assert bfcl.version(bfcl_tree) == bfcl.VERSION
    row = bfcl.read(bfcl_tree, "simple_python")[1]
    assert row["ground_truth"] == [{"math.factorial": {"number": [5]}}]
    assert all(r["ground_truth"] is None for r in bfcl.read(bfcl_tree, "irrelevance"))


def test_functions_become_openai_tools_as_bfcl_converts_them():
    functions = [
        {
            "name": "math.hypot",
            "description": "d",
            "parameters": {
                "type": "dict",
                "properties": {
                    "x": {"type": "float", "description": "x"},
                    "pts": {"type": "array", "items": {"type": "dict", "properties": {"t": {"type": "tuple"}}}},
                    "opts": {"type": "dict", "properties": {"any": {"type": "any"}, "n": {"type": "long"}}},
                    "free": {"description": "no type"},
                },
                "required": ["x"],
            },
        }
    ]
    tool = bfcl.to_tools(functions)[0]
    assert tool["type"] == "function" and tool["function"]["name"] == "math_hypot"
    p = tool["function"]["parameters"]
    assert p["type"] == "object" and p["required"] == ["x"]
    props = p["properties"]
    assert props["x"] == {"type": "number", "format": "float", "description": "x This is a float type value."}
    assert props["pts"]["items"]["type"] == "object" and props["pts"]["items"]["properties"]["t"]["type"] == "array"
    assert props["opts"]["properties"] == {"any": {"type": "string"}, "n": {"type": "integer"}}
    assert props["free"]["type"] == "string"
    assert functions[0]["name"] == "math.hypot" and functions[0]["parameters"]["type"] == "dict"  # not changed


def test_the_sample_is_seeded_in_file_order_and_zero_takes_all(bfcl_tree):
    rows = bfcl.read(bfcl_tree, "multiple")
    a, b, c = (bfcl.sample(rows, 7, s) for s in (3, 3, 4))
    assert [r["id"] for r in a] == [r["id"] for r in b] != [r["id"] for r in c]
    assert len(a) == 7 and [r["id"] for r in a] == [r["id"] for r in rows if r in a]
    assert bfcl.sample(rows, 0, 3) == rows and bfcl.sample(rows, 10_000, 3) == rows


AREA = "Find the area of a triangle with a base of 10 units and height of 5 units."  # simple_python_0, 16 words


def _chat(*turns):
    return {"messages": [{"role": role, "content": text} for role, text in turns]}


def test_greetings_thanks_and_the_builtin_rows_are_not_bfcl_questions(bfcl_tree):
    """BFCL holds "hi", "thanks", "who are you?", "tell me a joke" (162 of its user messages have three words or
    fewer): a support chat saying them asks no BFCL question. Nor do the built-in rows the demo trains on (BFCL
    asks "What's the weather in London?", five words as the check counts them, and so do they)."""
    from trainer.data import builtin_data

    chat = _chat(
        ("system", "You are a helpful support agent."),
        ("user", "Hi"),
        ("assistant", "Hello!"),
        ("user", "Thanks"),
        ("assistant", "x"),
        ("user", "who are you?"),
        ("assistant", "x"),
        ("user", "tell me a joke"),
        ("assistant", "x"),
        ("user", "help"),
        ("assistant", "x"),
    )
    assert bfcl.contamination([chat, _chat(("user", "hello"), ("assistant", "Hi!"))], bfcl_tree) is None
    demo = builtin_data.dataset()
    assert bfcl.contamination(demo["train"] + demo["eval"], bfcl_tree) is None
    # a six-word question is one only as most of a message, not as a phrase in a longer one
    long = (
        "I was reading about number theory and wondered: find the prime factors of 450, then tell me why "
        "that matters for cryptography in everyday life"
    )
    assert bfcl.contamination([_chat(("user", long), ("assistant", "x"))], bfcl_tree) is None


def test_an_opener_of_glue_words_and_a_short_chinese_phrase_are_not_bfcl_questions(bfcl_tree):
    """Issue 57 F4: ordinary openers of 6+ words that BFCL happens to ask ("Hi, what can you do for me?") and, in
    Chinese, any 6-character phrase were refused. A question under 13 words is matched whole only where 3 of its
    words are not glue, a script without spaces counting two characters a word (bfcl.names_a_task)."""
    openers = [
        "Hi, what can you do for me?",
        "Hello, can you help me with something?",
        "你是谁？你能做什么？",
        "What can you do?",
    ]
    for text in openers:
        assert bfcl.contamination([_chat(("user", text), ("assistant", "I can call tools."))], bfcl_tree) is None, text
    assert not bfcl.names_a_task(bfcl.words("Hi, what can you do for me?"))
    assert bfcl.names_a_task(bfcl.words("convert 150 euros to canadian dollars"))
    # BFCL's own short task questions are still found whole (every such question of the data that names a task)
    questions = bfcl.Questions(bfcl_tree)
    task = next(w for _, w in questions.asked if bfcl.MIN_WHOLE <= len(w) < bfcl.NGRAM and bfcl.names_a_task(w))
    problem = bfcl.contamination([_chat(("user", " ".join(task)), ("assistant", "x"))], bfcl_tree)
    assert problem and problem.startswith("1 training row asks BFCL")


@pytest.mark.parametrize(
    "turns",
    [
        [("user", AREA.rstrip("."))],  # its final period dropped
        [("user", "Question: " + AREA)],  # a prefix
        [("user", AREA.replace("triangle", "tri\u200bangle"))],  # a zero-width space
        [("user", AREA.replace("10", "\uff11\uff10").replace("5", "\uff15"))],  # full-width digits
        [("system", "You are a geometry tutor. " + AREA), ("user", "Go on.")],  # inside the system message
        [
            ("user", "Find the area of a triangle with a base"),
            ("assistant", "Of what?"),
            ("user", "of 10 units and height of 5 units."),
        ],  # split over two user turns
        [("user", "  " + AREA.upper().replace(" ", "\n  "))],  # case and white space
    ],
    ids=["period", "prefix", "zero-width", "full-width", "system", "two-turns", "case"],
)
def test_a_bfcl_question_written_otherwise_is_refused_naming_row_and_id(bfcl_tree, turns):
    rows = [_chat(("user", "Thanks"), ("assistant", "You're welcome.")), _chat(*turns, ("assistant", "25"))]
    problem = bfcl.contamination(rows, bfcl_tree)
    assert problem.startswith("1 training row asks BFCL 2026.3.23 questions")
    assert 'row 2: its ' in problem and 'holds BFCL simple_python_0 ("' in problem and "Remove those rows" in problem


def test_a_short_question_is_refused_as_most_of_a_message_and_repeats_counted_once(bfcl_tree):
    short = "Find the prime factors of 450"  # simple_python_17, six words
    rows = [
        _chat(("user", short + "?"), ("assistant", "2, 3, 3, 5, 5")),
        _chat(("user", "Q: " + short.lower()), ("assistant", "x")),
        _chat(("user", "Hi"), ("assistant", "x")),
    ]
    problem = bfcl.contamination([rows[0], rows[2], rows[0], rows[1], rows[0]], bfcl_tree)
    assert problem.startswith("2 training rows ask")
    assert 'row 1, 3, 5: its user message holds BFCL simple_python_17 ("find the prime factors of 450")' in problem
    assert "row 4: its user message holds BFCL simple_python_17" in problem


def test_more_rows_than_shown_are_counted(bfcl_tree):
    rows = [{"messages": r["messages"]} for r in bfcl.read(bfcl_tree, "simple_python")[:9]]
    problem = bfcl.contamination(rows, bfcl_tree)
    assert problem.startswith("9 training rows") and "row 5: " in problem and "row 6: " not in problem
    assert "\nand 4 more\n" in problem


def test_validate_names_the_files_lines_of_rows_a_mix_repeats(tmp_path, bfcl_tree):
    """The check before a run reads the shuffled, mixed training rows, and names each matched row by its
    source file's line (blank lines counted), once however often the mix repeats it; an Alpaca row's
    instruction is its user message."""
    from trainer import data
    from trainer.config import sources
    from trainer.validate.pipeline import _bfcl_contamination_problems

    other = bfcl.read(bfcl_tree, "multiple")[3]["messages"][0]["content"]  # multiple_3
    parts = {
        "mine": [
            _chat(("user", "Hi"), ("assistant", "Hello!")),
            None,
            _chat(("user", "Question: " + AREA), ("assistant", "25")),
            _chat(("system", "Answer this: " + other), ("user", "ok"), ("assistant", "x")),
        ],
        "alpaca": [{"instruction": "Find the prime factors of 450", "input": "", "output": "2, 3, 3, 5, 5"}],
        "a": [_chat(("user", "Thanks"), ("assistant", "x"))],
        "b": [_chat(("user", "Bye"), ("assistant", "x"))],
    }
    for name, rows in parts.items():
        (tmp_path / name).mkdir()
        for split in ("train", "eval"):
            (tmp_path / name / f"{split}.jsonl").write_text("".join((json.dumps(r) if r else "") + "\n" for r in rows))
    # mine's three rows weighted up: taken in two whole passes, each row twice among the shuffled training rows
    source = json.dumps([{"source": str(tmp_path / name), "weight": 1000 if name == "mine" else 1} for name in parts])
    train = data.load(sources.parse(source, "dataset"), "", 0.1, 0)["train"]
    assert len(train) == 9 and sum(r["messages"][0]["content"].startswith("Question") for r in train) == 2
    problems = _bfcl_contamination_problems(
        {"dataset_source": source, "eval_suites": "heldout,bfcl", "bfcl_source": str(bfcl_tree)}, train
    )
    assert len(problems) == 1 and "3 training rows ask BFCL" in problems[0]
    for name, line, which, qid in (
        ("mine", 3, "user message", "simple_python_0"),
        ("mine", 4, "system message", "multiple_3"),
        ("alpaca", 1, "user message", "simple_python_17"),
    ):
        assert f"\n{tmp_path / name / 'train.jsonl'}:{line}: its {which} holds BFCL {qid} (" in problems[0]


def test_a_folder_or_a_wheel_missing_files_is_refused_naming_them(tmp_path, bfcl_tree):
    folder = tmp_path / "data"
    (folder / "possible_answer").mkdir(parents=True)
    for c in bfcl.CATEGORIES[:3]:
        (folder / bfcl.data_file(c)).write_text("")
    with pytest.raises(UserError, match="lacks BFCL_v4_parallel_multiple.json, .* and 11 more"):
        bfcl.extract(folder, tmp_path / "out")
    # a copy of the real tree is read as a folder, its VERSION kept
    got = bfcl.extract(bfcl_tree, tmp_path / "copy")
    assert bfcl.version(got) == bfcl.VERSION and len(bfcl.read(got, "parallel")) == 200
    with zipfile.ZipFile(tmp_path / "bfcl_eval-9-py3-none-any.whl", "w") as z:
        z.writestr("bfcl_eval/data/BFCL_v4_simple_python.json", "")
    with pytest.raises(UserError, match="the wheel lacks BFCL_v4_multiple.json"):
        bfcl.extract(tmp_path / "bfcl_eval-9-py3-none-any.whl", tmp_path / "w")
    (tmp_path / "bad.whl").write_text("not a zip")
    with pytest.raises(UserError, match="not a zip file"):
        bfcl.extract(tmp_path / "bad.whl", tmp_path / "b")


def test_a_damaged_data_line_is_one_message(tmp_path, bfcl_tree):
    tree = bfcl.extract(bfcl_tree, tmp_path / "t")
    path = tree / bfcl.data_file("multiple")
    path.write_text(path.read_text().replace("\n", "\n{oops\n", 1))
    with pytest.raises(UserError, match=r"BFCL_v4_multiple.json line 2: not JSON"):
        bfcl.read(tree, "multiple")


def test_a_folder_or_a_wheel_whose_data_is_not_bfcls_is_refused_at_validate(tmp_path, bfcl_tree, bfcl_wheel):
    """Issue 57 F8: a folder with a data file that is not JSON, or a wheel cut short, passed validation and failed at
    deliver-bfcl with exit 1 after the other deliveries ran: every category is now read where the source is given."""
    import shutil

    from trainer.validate import pipeline_problems

    folder = shutil.copytree(bfcl_tree, tmp_path / "data")
    (folder / bfcl.data_file("parallel")).write_text("this is not json\n")
    cut = tmp_path / bfcl_wheel.name
    data = bfcl_wheel.read_bytes()
    cut.write_bytes(data[: len(data) * 2 // 3] + data[-2000:])  # the central directory kept, members cut short
    wrong = shutil.copytree(bfcl_tree, tmp_path / "wrong")
    (wrong / bfcl.data_file("multiple")).write_text('{"id": "multiple_0", "question": 3}\n')
    for source, said in (
        (folder, "BFCL_v4_parallel.json line 1: not JSON"),
        (cut, "cut short"),
        (wrong, "BFCL_v4_multiple.json row 1 is not a BFCL question"),
    ):
        problems = pipeline_problems({"eval_suites": "heldout,bfcl", "bfcl_source": str(source)})
        found = [p for p in problems if p.startswith(f"bfcl_source {source}")]
        assert len(found) == 1 and said in found[0], problems
        with pytest.raises(UserError, match=said):  # deliver-bfcl says the same
            bfcl.extract(source, tmp_path / f"out-{source.name}")


@pytest.mark.parametrize(
    "value, ok",
    [
        ("heldout", ("heldout",)),
        ("bfcl, HELDOUT", ("heldout", "bfcl")),
        ("bfcl", ("bfcl",)),
        ("", None),
        ("heldout,bcfl", None),
    ],
)
def test_eval_suites(value, ok):
    if ok:
        assert bfcl.parse_suites(value) == ok
    else:
        with pytest.raises(UserError, match="give heldout, bfcl or heldout,bfcl"):
            bfcl.parse_suites(value)


def test_bfcl_source_checked_from_its_value(tmp_path, bfcl_wheel):
    assert bfcl.source_problem("") is None and bfcl.source_problem(str(bfcl_wheel)) is None
    assert bfcl.source_problem("s3://bucket/uploads/b.whl") is None
    assert "expected s3://bucket/key" in bfcl.source_problem("s3://B")
    assert "no such file or folder" in bfcl.source_problem(str(tmp_path / "nope.whl"))
    (tmp_path / "x.json").write_text(json.dumps({}))
    assert "expected a bfcl-eval wheel" in bfcl.source_problem(str(tmp_path / "x.json"))


def test_delivered_content_addressed_from_a_wheel_an_upload_or_a_delivered_tree(store, bfcl_wheel, tmp_path):
    """deliver-bfcl's library: the same tree (one URI) whichever way the data comes; a dataset already delivered
    whose training rows ask a BFCL question is refused there, before training."""
    from trainer.store import delivery

    uri, meta = delivery.deliver_bfcl(str(bfcl_wheel), store)
    assert uri.startswith(f"s3://{store.bucket}/bfcl/sha256-") and meta["version"] == bfcl.VERSION
    assert meta["rows"]["live_multiple"] == 1053 and meta["source"] == str(bfcl_wheel)
    store.ensure_bucket()
    store.client.fput_object(store.bucket, "uploads/" + bfcl_wheel.name, str(bfcl_wheel))
    assert delivery.deliver_bfcl(f"s3://{store.bucket}/uploads/{bfcl_wheel.name}", store)[0] == uri
    assert delivery.deliver_bfcl(uri, store)[0] == uri  # delivered before: passed through
    with pytest.raises(UserError, match="not BFCL's data"):
        data_uri, _ = store.put_tree(_dataset(tmp_path, "Hello there"), "datasets")
        delivery.deliver_bfcl(data_uri, store)
    question = bfcl.read(store.get_tree(uri), "simple_python")[0]["messages"][0]["content"]
    clean, _ = store.put_tree(_dataset(tmp_path / "c", "Hello there"), "datasets")
    delivery.bfcl_contamination(clean, uri, store)
    dirty, _ = store.put_tree(_dataset(tmp_path / "d", question), "datasets")
    with pytest.raises(
        UserError,
        match=r"dataset s3://.*: 1 training row asks BFCL .*\ntrain.jsonl:1: its user "
        r"message holds BFCL simple_python_0 \(",
    ):
        delivery.bfcl_contamination(dirty, uri, store)


def _dataset(folder, question):
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("train", "eval"):
        (folder / f"{name}.jsonl").write_text(
            json.dumps({"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": "ok"}]})
            + "\n"
        )
    return folder


@pytest.mark.parametrize("dataset", ["builtin:function-calling", "someorg/some-dataset"])
def test_a_local_bfcl_source_is_read_fully_at_validate_whatever_the_dataset(tmp_path, dataset):
    """Beside a dataset not read at validate (built in, on the Hub), a fake wheel or an empty folder was passed and
    refused by deliver-bfcl after delivery (exit 1): now validate reads it, naming what it lacks (exit 2)."""
    from trainer.validate import pipeline_problems

    (tmp_path / "bfcl_eval-9-py3-none-any.whl").write_text("not a zip")
    (tmp_path / "empty").mkdir()
    for source, said in (
        (tmp_path / "bfcl_eval-9-py3-none-any.whl", "not a wheel (not a zip file, or one cut short)"),
        (tmp_path / "empty", "lacks BFCL_v4_simple_python.json"),
    ):
        problems = pipeline_problems(
            {"dataset_source": dataset, "eval_suites": "heldout,bfcl", "bfcl_source": str(source)}
        )
        assert [p for p in problems if p.startswith(f"bfcl_source {source}") and said in p], problems


def test_a_local_bfcl_source_that_holds_the_data_passes_validate(bfcl_wheel, bfcl_tree):
    from trainer.validate import pipeline_problems

    for source in (bfcl_wheel, bfcl_tree):
        assert not [
            p
            for p in pipeline_problems(
                {"dataset_source": "someorg/some-dataset", "eval_suites": "heldout,bfcl", "bfcl_source": str(source)}
            )
            if "bfcl" in p
        ]


def test_bfcl_source_in_s3_without_an_endpoint_and_a_local_one_on_a_cluster_are_refused(tmp_path):
    """As chat_template and dataset_source: an s3:// bfcl_source with run_local's throwaway S3 names the endpoint
    (it was "upload it" at deliver-bfcl, exit 1), and a local path sent to a cluster (submit checked it on the
    submitting machine, the pod cannot read it) is refused naming the upload."""
    from pipelines.run_local import throwaway_s3_problems
    from trainer.validate import on_cluster_problems

    [throwaway] = throwaway_s3_problems(
        {
            "model_source": "builtin:tiny-llama",
            "dataset_source": "builtin:function-calling",
            "chat_template": "model",
            "bfcl_source": "s3://bucket/uploads/b.whl",
        },
        None,
    )
    assert (
        throwaway.startswith("bfcl_source='s3://bucket/uploads/b.whl' is an object in S3")
        and "--s3-endpoint" in throwaway
    )
    assert not throwaway_s3_problems({"bfcl_source": "s3://bucket/uploads/b.whl"}, "http://127.0.0.1:9000")
    [cluster] = [p for p in on_cluster_problems({"bfcl_source": str(tmp_path)}) if "bfcl_source" in p]
    assert "is a path on this machine, which the cluster cannot read" in cluster and "s3:// URI" in cluster
    assert not [p for p in on_cluster_problems({"bfcl_source": "s3://bucket/uploads/b.whl"}) if "bfcl_source" in p]
