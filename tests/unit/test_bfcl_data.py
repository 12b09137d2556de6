"""trainer/data/bfcl.py: BFCL's data read from its PyPI wheel, asked as BFCL asks an OpenAI-style model, sampled
the same way every run, and a training set holding its questions refused."""

import json
import zipfile

import pytest

from trainer.data import bfcl
from trainer.errors import UserError


def test_every_category_is_read_with_its_answers(bfcl_tree):
    counts = {c: len(bfcl.read(bfcl_tree, c)) for c in bfcl.CATEGORIES}
    # the single-turn categories of v4 (2026.3.23): a new wheel with other rows must be looked at, not taken
    assert counts == {"simple_python": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200,
                      "irrelevance": 240, "live_simple": 258, "live_multiple": 1053, "live_parallel": 16,
                      "live_parallel_multiple": 24, "live_irrelevance": 884}
    assert bfcl.version(bfcl_tree) == bfcl.VERSION
    row = bfcl.read(bfcl_tree, "simple_python")[1]
    assert row["ground_truth"] == [{"math.factorial": {"number": [5]}}]
    assert all(r["ground_truth"] is None for r in bfcl.read(bfcl_tree, "irrelevance"))


def test_functions_become_openai_tools_as_bfcl_converts_them():
    functions = [{"name": "math.hypot", "description": "d", "parameters": {"type": "dict", "properties": {
        "x": {"type": "float", "description": "x"},
        "pts": {"type": "array", "items": {"type": "dict", "properties": {"t": {"type": "tuple"}}}},
        "opts": {"type": "dict", "properties": {"any": {"type": "any"}, "n": {"type": "long"}}},
        "free": {"description": "no type"}}, "required": ["x"]}}]
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


def test_a_training_set_holding_bfcl_questions_is_refused_with_rows_and_categories(bfcl_tree):
    question = bfcl.read(bfcl_tree, "live_irrelevance")[5]["messages"][-1]["content"]
    other = bfcl.read(bfcl_tree, "parallel")[0]["messages"][0]["content"]
    rows = [{"messages": [{"role": "user", "content": "What is the weather in Paris?"},
                          {"role": "assistant", "content": "Sunny."}]},
            {"messages": [{"role": "user", "content": "  " + question.upper().replace(" ", "\n  ") + " "},
                          {"role": "assistant", "content": "x"}]},
            {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": other},
                          {"role": "assistant", "content": "y"}]}]
    problem = bfcl.contamination(rows, bfcl_tree)
    assert "2 training rows" in problem and "rows 2, 3" in problem
    assert "live_irrelevance" in problem and "parallel" in problem and "Remove those rows" in problem
    assert bfcl.contamination(rows[:1], bfcl_tree) is None


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


@pytest.mark.parametrize("value, ok", [("heldout", ("heldout",)), ("bfcl, HELDOUT", ("heldout", "bfcl")),
                                       ("bfcl", ("bfcl",)), ("", None), ("heldout,bcfl", None)])
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
    from trainer import delivery

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
    with pytest.raises(UserError, match=r"1 training rows ask BFCL .*rows 1; categories simple_python"):
        delivery.bfcl_contamination(dirty, uri, store)


def _dataset(folder, question):
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("train", "eval"):
        (folder / f"{name}.jsonl").write_text(json.dumps({"messages": [
            {"role": "user", "content": question}, {"role": "assistant", "content": "ok"}]}) + "\n")
    return folder
