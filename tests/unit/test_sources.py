"""Source strings, local and Hub code paths (the Hub exercised offline on local data)."""

import json

import pytest

from trainer.data import builtin_data
from trainer import data
from trainer.data import loading
from trainer.store import delivery
from trainer.models import model_tree
from trainer.config import sources
from trainer.core.errors import UserError


@pytest.mark.parametrize(
    "source, kind",
    [("builtin:tiny-llama", "builtin"), ("meta-llama/Llama-3.2-1B-Instruct", "hub"), ("Qwen/Qwen2.5-0.5B", "hub")],
)
def test_model_sources_parse(source, kind):
    assert sources.parse(source, "model").kind == kind


@pytest.mark.parametrize(
    "source, message",
    [
        ("builtin:gpt-5", "unknown built-in model"),
        ("s3:/weird", "unknown model source"),
        ("", "model_source is empty: give builtin:tiny-llama"),
        ("./does/not/exist", "model path not found"),
    ],
)
def test_bad_model_sources_say_what_is_accepted(source, message):
    err = str(pytest.raises(UserError, sources.parse, source, "model").value)
    assert message in err


def test_missing_dataset_file_fails_before_any_work(tmp_path):
    err = str(pytest.raises(UserError, sources.parse, str(tmp_path / "train.jsonl"), "dataset").value)
    assert "dataset path not found" in err


def test_local_file_is_split_with_a_seed(tmp_path):
    rows = builtin_data.generate(90, 10)["train"]
    data.write_jsonl(rows, tmp_path / "all.jsonl")
    src = sources.parse(str(tmp_path / "all.jsonl"), "dataset")
    a = data.load(src, "", eval_fraction=0.2, seed=1)
    assert (len(a["train"]), len(a["eval"])) == (72, 18)
    assert a == data.load(src, "", eval_fraction=0.2, seed=1)


def test_local_directory_needs_a_train_file(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(
        UserError,
        match=r"has no train file \(train.jsonl, .json, .csv, .tsv or .parquet, the text ones "
        r"optionally .gz; it holds "
        r"\['notes.txt'\]\) and is not a `datasets` save_to_disk directory",
    ):
        data.load(sources.Source("local", str(tmp_path)), "")


CHATS = builtin_data.generate(40, 8)["train"]
PAIRS = [{"prompt": f"What is {i}+1?", "completion": str(i + 1)} for i in range(40)]


def _chat_rows_as(fmt, path):
    """CHATS written in one file format, as a user's tools would write it."""
    import pandas as pd

    if fmt == "json":  # one JSON list
        path.write_text(json.dumps(CHATS, indent=1))
    elif fmt == "csv":  # JSON text in the messages / tools cells, as pandas writes it
        pd.DataFrame(
            {
                "messages": [json.dumps(r["messages"]) for r in CHATS],
                "tools": [json.dumps(r["tools"]) if r.get("tools") else "" for r in CHATS],
            }
        ).to_csv(path, index=False)
    elif fmt == "tsv":
        pd.DataFrame(
            {
                "messages": [json.dumps(r["messages"]) for r in CHATS],
                "tools": [json.dumps(r["tools"]) if r.get("tools") else "" for r in CHATS],
            }
        ).to_csv(path, index=False, sep="\t")
    elif fmt == "parquet":  # tools as JSON text: one column type for every tool schema
        pd.DataFrame(
            {
                "messages": [r["messages"] for r in CHATS],
                "tools": [json.dumps(r["tools"]) if r.get("tools") else None for r in CHATS],
            }
        ).to_parquet(path)
    return path


@pytest.mark.parametrize("fmt", ["json", "csv", "tsv", "parquet"])
def test_chat_rows_read_the_same_from_every_file_format(tmp_path, fmt):
    path = _chat_rows_as(fmt, tmp_path / f"chats.{fmt}")
    data.write_jsonl(CHATS, tmp_path / "chats.jsonl")
    expected = data.read_rows(tmp_path / "chats.jsonl")
    assert data.read_rows(path) == expected
    split = data.load(sources.parse(str(path), "dataset"), "", eval_fraction=0.25, seed=0)
    assert (len(split["train"]), len(split["eval"])) == (30, 10)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_prompt_completion_rows_become_chat(tmp_path, fmt):
    import pandas as pd

    path = tmp_path / f"pairs.{fmt}"
    if fmt == "jsonl":
        data.write_jsonl([{**r, "system": "Be terse."} for r in PAIRS], path)
    else:
        frame = pd.DataFrame([{**r, "system": "Be terse."} for r in PAIRS])
        frame.to_csv(path, index=False) if fmt == "csv" else frame.to_parquet(path)
    rows = data.read_rows(path)
    assert rows[3] == {
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "What is 3+1?"},
            {"role": "assistant", "content": "4"},
        ]
    }


def test_conversational_prompt_completion_keeps_its_messages_and_tools():
    tools = [{"type": "function", "function": {"name": "f"}}]
    row = {
        "prompt": [{"role": "user", "content": "call f"}],
        "tools": json.dumps(tools),
        "completion": [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
            }
        ],
    }
    [out] = data.validate_rows([row], "rows")
    assert out["tools"] == tools and [m["role"] for m in out["messages"]] == ["user", "assistant"]
    assert out["messages"][1]["tool_calls"][0]["function"]["arguments"] == {}


def test_directory_with_a_test_split_uses_it_for_eval(tmp_path):
    """train + test (or validation) files, as many datasets ship: the held-out file is the eval split."""
    data.write_jsonl(CHATS[:30], tmp_path / "train.jsonl")
    _chat_rows_as("parquet", tmp_path / "test.parquet")
    out = data.load(sources.Source("local", str(tmp_path)), "")
    assert (len(out["train"]), len(out["eval"])) == (30, 40)
    data.write_jsonl(CHATS[30:], tmp_path / "validation.jsonl")  # train / validation / test: validation is eval
    out = data.load(sources.Source("local", str(tmp_path)), "")
    assert (len(out["train"]), len(out["eval"])) == (30, 10)
    (tmp_path / "train.csv").write_text("prompt,completion\na,b\n")
    with pytest.raises(UserError, match=r"has train in 2 formats \(train.jsonl, train.csv\): keep one"):
        data.load(sources.Source("local", str(tmp_path)), "")


@pytest.mark.parametrize("splits", [False, True], ids=["Dataset", "DatasetDict"])
def test_save_to_disk_directory_is_read(tmp_path, splits):
    import datasets

    rows = [{**r, "tools": r.get("tools")} for r in CHATS]  # every row every column, null where absent
    ds = datasets.Dataset.from_list(rows)
    if splits:
        ds = datasets.DatasetDict(
            {"train": datasets.Dataset.from_list(rows[:30]), "validation": datasets.Dataset.from_list(rows[30:])}
        )
    ds.save_to_disk(str(tmp_path / "saved"))
    out = data.load(sources.parse(str(tmp_path / "saved"), "dataset"), "", 0.25, 0)
    assert (len(out["train"]), len(out["eval"])) == (30, 10)
    assert all(m.get("tool_calls", []) is not None for r in out["train"] + out["eval"] for m in r["messages"])
    canonical = lambda row: json.dumps(row, sort_keys=True)  # noqa: E731 - Arrow reorders struct keys
    assert sorted(map(canonical, out["train"] + out["eval"])) == sorted(
        map(canonical, data.validate_rows(json.loads(json.dumps(CHATS)), "x"))
    )


def test_hub_dataset_code_path_on_a_local_repo(tmp_path):
    """datasets.load_dataset treats a local directory like a Hub repo: same code path."""
    splits = builtin_data.generate(40, 8)
    data.write_jsonl(splits["train"], tmp_path / "train.jsonl")
    data.write_jsonl(splits["eval"], tmp_path / "validation.jsonl")
    out = data.load(sources.Source("hub", str(tmp_path)), "")
    assert (len(out["train"]), len(out["eval"])) == (40, 8)
    assert out["eval"][0]["messages"][0] == splits["eval"][0]["messages"][0]


def test_hub_model_from_offline_cache(tmp_path, tiny_model_dir, monkeypatch):
    """snapshot_download resolves `org/name` from a pre-filled HF cache with HF_HUB_OFFLINE=1."""
    import shutil

    from huggingface_hub import constants

    cache = tmp_path / "hub"
    snap = cache / "models--acme--tiny" / "snapshots" / ("a" * 40)
    shutil.copytree(tiny_model_dir, snap)
    (cache / "models--acme--tiny" / "refs").mkdir(parents=True)
    (cache / "models--acme--tiny" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    path = delivery.materialize_model(sources.parse("acme/tiny", "model"), "", tmp_path)
    assert json.loads((path / "config.json").read_text())["model_type"] == "llama"


def _objects(store, prefix):
    store.ensure_bucket()
    return [o.object_name for o in store.client.list_objects(store.bucket, prefix=prefix, recursive=True)]


def test_model_without_weights_is_refused_before_upload(tmp_path, tiny_model_dir, store):
    import shutil

    broken = tmp_path / "m"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "model.safetensors").unlink()
    before = _objects(store, "models/")
    err = str(pytest.raises(UserError, delivery.deliver_model, str(broken), "", store).value)
    assert "no weights" in err and "download the whole model" in err
    assert _objects(store, "models/") == before  # nothing uploaded


def test_dataset_uri_as_model_source_and_model_uri_as_dataset_source(tmp_path, tiny_model_dir, store):
    splits = builtin_data.generate(20, 4)
    data.write_jsonl(splits["train"], tmp_path / "train.jsonl")
    data.write_jsonl(splits["eval"], tmp_path / "eval.jsonl")
    dataset_uri, _ = store.put_tree(tmp_path, "datasets")
    model_uri, _ = store.put_tree(tiny_model_dir, "models")
    err = str(pytest.raises(UserError, delivery.deliver_model, dataset_uri, "", store).value)
    assert "holds a dataset, not a model: pass it as dataset_source" in err
    err = str(pytest.raises(UserError, delivery.deliver_dataset, model_uri, "", store).value)
    assert "is a delivered model, not a dataset: pass it as model_source" in err


def test_delivered_model_passes_the_checks(tiny_model_dir):
    assert model_tree.model_dir_problems(tiny_model_dir) == []


def test_hub_model_missing_offline_is_one_clear_error(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    err = str(
        pytest.raises(UserError, delivery.materialize_model, sources.parse("acme/absent", "model"), "", tmp_path).value
    )
    assert "not in the local Hugging Face cache" in err


def test_seed_out_of_range_is_refused_at_delivery(store):
    err = str(
        pytest.raises(UserError, delivery.deliver_dataset, "builtin:function-calling", "", store, 0.1, 2**64).value
    )
    assert "seed must be between 0 and 4294967295" in err


def test_a_clone_of_a_hub_dataset_repo_is_read_with_its_layout(tmp_path):
    """data/train-00000-of-00001.parquet + data/test-...: the layout Hub repos use, read by `datasets`."""
    import pandas as pd

    (tmp_path / "data").mkdir()
    for split, part in (("train", CHATS[:30]), ("test", CHATS[30:])):
        pd.DataFrame(
            {
                "messages": [json.dumps(r["messages"]) for r in part],  # messages as JSON text
                "tools": [json.dumps(r.get("tools")) for r in part],
            }
        ).to_parquet(tmp_path / "data" / f"{split}-00000-of-00001.parquet")
    out = data.load(sources.parse(str(tmp_path), "dataset"), "")
    assert (len(out["train"]), len(out["eval"])) == (30, 10)
    assert out["eval"][0]["messages"][0] == CHATS[30]["messages"][0]


def test_json_text_tools_column_with_rows_that_have_no_tools(tmp_path):
    """A tools column as JSON text where some rows declare none ("null", as json.dumps(None)
    writes, or empty): those rows are plain chat rows, not 'tools must be a list' errors."""
    import pandas as pd

    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    with_tools = [r for r in CHATS if r.get("tools")][:10]
    rows = [{"messages": json.dumps(r["messages"]), "tools": json.dumps(r["tools"])} for r in with_tools] + [
        {"messages": json.dumps(chat), "tools": t} for t in ("null", "") * 5
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "mixed.parquet")
    out = data.read_rows(tmp_path / "mixed.parquet")
    assert len(out) == 20 and sum("tools" in r for r in out) == 10
    assert all(isinstance(r["tools"], list) for r in out if "tools" in r)


def test_null_prompt_or_completion_cells_are_named(tmp_path):
    import pandas as pd

    pd.DataFrame({"prompt": ["a", None, "c"] * 10, "completion": ["x", "y", None] * 10}).to_parquet(
        tmp_path / "p.parquet"
    )
    msg = str(pytest.raises(UserError, data.read_rows, tmp_path / "p.parquet").value)
    assert "(2 problems)" in msg
    assert (
        "rows 2, 5, 8 and 7 more: row has no 'messages' field, and of prompt/completion 'prompt' is null, "
        "'completion' is a string: each must be a string or a list of messages" in msg
    )


def test_hub_dataset_offline_and_not_cached_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    err = str(pytest.raises(UserError, data.load, sources.Source("hub", "someorg/not-cached"), "").value)
    assert "is not in the local Hugging Face cache and the Hub cannot be reached" in err
    assert "hf download --repo-type dataset someorg/not-cached" in err


def test_hub_model_in_the_cache_has_its_template_checked_against_local_rows(tmp_path, tiny_model_dir, monkeypatch):
    """A Hub model already downloaded (HF cache) with a template that refuses system turns, and a
    local dataset that has them: refused at validation, before any delivery."""
    import shutil

    from huggingface_hub import constants

    from trainer.validate import pipeline_problems

    cache = tmp_path / "hub"
    snap = cache / "models--acme--tiny" / "snapshots" / ("a" * 40)
    shutil.copytree(tiny_model_dir, snap)
    template = snap / "chat_template.jinja"
    template.write_text(
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}" + template.read_text()
    )
    (cache / "models--acme--tiny" / "refs").mkdir(parents=True)
    (cache / "models--acme--tiny" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    rows = [{**r, "messages": [{"role": "system", "content": "Be terse."}, *r["messages"]]} for r in CHATS[:20]]
    data.write_jsonl(rows, tmp_path / "chats.jsonl")
    problems = pipeline_problems({"model_source": "acme/tiny", "dataset_source": str(tmp_path / "chats.jsonl")})
    assert (
        len(problems) == 1
        and "dataset_source with model acme/tiny: the model's chat template refuses 20 of 20 "
        "rows (System role not supported"
        in problems[0]
    )
    assert pipeline_problems({"model_source": "acme/not-cached", "dataset_source": str(tmp_path / "chats.jsonl")}) == []


def test_deliver_dataset_cli_takes_the_split_and_a_users_csv(tmp_path, store, capsys):
    """`python -m trainer deliver-dataset my.csv --eval-fraction 0.25 --seed 3`: for the cluster,
    where the pipeline's eval_fraction cannot split an already delivered dataset."""
    import pandas as pd

    from trainer.__main__ import main

    pd.DataFrame(PAIRS).to_csv(tmp_path / "pairs.csv", index=False)
    main(["deliver-dataset", str(tmp_path / "pairs.csv"), "--eval-fraction", "0.25", "--seed", "3"])
    out = json.loads(capsys.readouterr().out)
    assert out["uri"].startswith("s3://") and out["rows"] == {"train": 30, "eval": 10}
    train = data.read_jsonl(store.get_tree(out["uri"]) / "train.jsonl")
    assert train[0]["messages"][0]["role"] == "user" and len(train) == 30
    with pytest.raises(SystemExit) as exit_:
        main(["deliver-dataset", "org/data", "--eval-fraction", "0"])
    assert exit_.value.code == 2 and "--eval-fraction must be between 0 and 1" in capsys.readouterr().err
    (tmp_path / "empty.csv").write_text("prompt,completion\n")
    with pytest.raises(SystemExit) as exit_:  # both problems in one message
        main(["deliver-dataset", str(tmp_path / "empty.csv"), "--eval-fraction", "1.5"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--eval-fraction must be between 0 and 1" in err and "empty.csv" in err


def test_gzipped_split_files_hub_layouts_and_csv_models_are_recognised(tmp_path):
    """train.jsonl.gz in a directory, data/train-*.jsonl.gz in a Hub clone, and a CSV given as
    model_source: the same suffixes everywhere a dataset is recognised."""
    import gzip

    rows = [
        {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]} for i in range(20)
    ]
    lines = "".join(json.dumps(r) + "\n" for r in rows)
    d = tmp_path / "ds"
    d.mkdir()
    with gzip.open(d / "train.jsonl.gz", "wt") as f:
        f.write(lines)
    (d / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:5]))
    out = data.load(sources.parse(str(d), "dataset"), "")
    assert (len(out["train"]), len(out["eval"])) == (20, 5)
    hub = tmp_path / "hub" / "data"
    hub.mkdir(parents=True)
    with gzip.open(hub / "train-00000-of-00001.jsonl.gz", "wt") as f:
        f.write(lines)
    assert loading._hub_layout(hub.parent)
    (tmp_path / "pairs.csv").write_text("prompt,completion\na,b\n")
    assert "holds a dataset, not a model" in model_tree.model_dir_problems(tmp_path / "pairs.csv")[0]


WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def sharegpt_row(city):
    """A LLaMA-Factory ShareGPT row: tools as JSON text of bare schemas, a function_call turn."""
    return {
        "conversations": [
            {"from": "human", "value": f"Weather in {city}?"},
            {"from": "function_call", "value": json.dumps({"name": "get_weather", "arguments": {"city": city}})},
            {"from": "observation", "value": "sunny"},
            {"from": "gpt", "value": "Sunny."},
        ],
        "tools": json.dumps([WEATHER]),
        "system": "",
    }


def as_messages(city):
    return {
        "messages": [
            {"role": "user", "content": f"Weather in {city}?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}],
            },
            {"role": "tool", "content": "sunny"},
            {"role": "assistant", "content": "Sunny."},
        ],
        "tools": [{"type": "function", "function": WEATHER}],
    }


CITIES = ["Paris", "Oslo", "Rome", "Lima", "Kyiv", "Baku"]


def test_sharegpt_parquet_in_a_hub_repo_layout_is_converted(tmp_path, capsys):
    """The Hub code path (`datasets.load_dataset` on a repo's layout), with ShareGPT turns as
    Arrow structs: every split converted, and the run's log says so per split."""
    import pandas as pd

    (tmp_path / "data").mkdir()
    for split, cities in (("train", CITIES[:4]), ("test", CITIES[4:])):
        pd.DataFrame([sharegpt_row(c) for c in cities]).to_parquet(
            tmp_path / "data" / f"{split}-00000-of-00001.parquet"
        )
    out = data.load(sources.parse(str(tmp_path), "dataset"), "")
    assert out == {"train": [as_messages(c) for c in CITIES[:4]], "eval": [as_messages(c) for c in CITIES[4:]]}
    log = capsys.readouterr().out
    assert f"{tmp_path}[train]: 4 ShareGPT" in log and f"{tmp_path}[test]: 2 ShareGPT" in log


def test_a_delivered_sharegpt_file_is_chat_rows_in_the_bucket(tmp_path, store):
    """What training reads (train.jsonl, eval.jsonl) holds the converted rows, not ShareGPT."""
    (tmp_path / "sg.jsonl").write_text("".join(json.dumps(sharegpt_row(c)) + "\n" for c in CITIES))
    uri, meta = delivery.deliver_dataset(str(tmp_path / "sg.jsonl"), "", store, eval_fraction=0.34, seed=0)
    root = store.get_tree(uri)
    delivered = data.read_jsonl(root / "train.jsonl") + data.read_jsonl(root / "eval.jsonl")
    assert meta["rows"] == {"train": 4, "eval": 2}
    assert sorted(map(json.dumps, delivered)) == sorted(json.dumps(as_messages(c)) for c in CITIES)


def test_a_hub_repo_whose_card_declares_configs(tmp_path):
    """A dataset card's `configs:` maps files to splits (read as the Hub would); several configs
    without a default cannot be chosen between here, and the message says what to pass instead."""
    card = "---\nconfigs:\n" + "".join(
        f"- config_name: {name}\n  data_files:\n  - split: train\n    path: {name}/train.jsonl\n" for name in "ab"
    )
    for name in "ab":
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.jsonl").write_text("".join(json.dumps(as_messages(c)) + "\n" for c in CITIES))
    (tmp_path / "README.md").write_text(card + "---\n# Weather chats\n")
    msg = str(pytest.raises(UserError, data.load, sources.parse(str(tmp_path), "dataset"), "").value)
    assert f"dataset '{tmp_path}' has several configs (['a', 'b']) and no default one" in msg
    assert "pass one config's folder or file as the dataset path" in msg
    (tmp_path / "README.md").write_text(card.split("- config_name: b")[0] + "---\n")  # one config: read
    out = data.load(sources.parse(str(tmp_path), "dataset"), "", eval_fraction=0.5)
    assert (len(out["train"]), len(out["eval"])) == (3, 3)


@pytest.mark.parametrize(
    "source, what, expected",
    [
        (
            "org/chats:train[:10%]",
            "dataset",
            "dataset_source 'org/chats:train[:10%]': a Hub dataset is its id alone "
            "(org/chats); a config or split cannot be chosen",
        ),
        (
            "org/chats[train]",
            "dataset",
            "a Hub dataset is its id alone (org/chats); a config or split cannot be chosen",
        ),
        ("org/chats@v2", "dataset", "a Hub dataset is its id alone (org/chats); give the revision as dataset_revision"),
        (
            "Qwen/Qwen2.5-0.5B@main",
            "model",
            "a Hub model is its id alone (Qwen/Qwen2.5-0.5B); give the revision as model_revision",
        ),
    ],
)
def test_split_slices_configs_and_revisions_in_a_hub_id_say_where_they_go(source, what, expected):
    assert expected in str(pytest.raises(UserError, sources.parse, source, what).value)


def test_a_dataset_file_uploaded_to_the_bucket_is_read_like_a_local_file(tmp_path, store, capsys):
    """`mc cp chats.jsonl minio/<bucket>/uploads/`, then dataset_source=s3://<bucket>/uploads/chats.jsonl:
    on a cluster the bucket is where a user's own file can be put; problems name the object."""
    store.ensure_bucket()
    (tmp_path / "sg.jsonl").write_text("".join(json.dumps(sharegpt_row(c)) + "\n" for c in CITIES))
    store.client.fput_object(store.bucket, "uploads/sg.jsonl", str(tmp_path / "sg.jsonl"))
    uri, meta = delivery.deliver_dataset(store.uri("uploads/sg.jsonl"), "", store, eval_fraction=0.34, seed=0)
    assert uri.startswith(store.uri("datasets/sha256-")) and meta["rows"] == {"train": 4, "eval": 2}
    said = f"{store.uri('uploads/sg.jsonl')}: 6 ShareGPT ('conversations' of {{from, value}}) rows converted"
    assert capsys.readouterr().out == said + " to chat messages\n"
    root = store.get_tree(uri)
    delivered = data.read_jsonl(root / "train.jsonl") + data.read_jsonl(root / "eval.jsonl")
    assert sorted(map(json.dumps, delivered)) == sorted(json.dumps(as_messages(c)) for c in CITIES)
    (tmp_path / "bad.jsonl").write_text(json.dumps(sharegpt_row("Oslo")) + "\n{oops\n")
    store.client.fput_object(store.bucket, "uploads/bad.jsonl", str(tmp_path / "bad.jsonl"))
    msg = str(pytest.raises(UserError, delivery.deliver_dataset, store.uri("uploads/bad.jsonl"), "", store).value)
    assert f"{store.uri('uploads/bad.jsonl')}:2: not valid JSON" in msg
    msg = str(pytest.raises(UserError, delivery.deliver_dataset, store.uri("uploads/none.jsonl"), "", store).value)
    assert f"{store.uri('uploads/none.jsonl')}: no such object in bucket '{store.bucket}'; check the key" in msg


def test_a_hub_dataset_without_a_train_split_says_a_split_cannot_be_chosen(tmp_path):
    """Like HuggingFaceH4/ultrachat_200k (train_sft, test_sft, ...): the Hub path, on a local repo."""
    for split in ("train_sft", "test_sft"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(as_messages(c)) + "\n" for c in CITIES))
    (tmp_path / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n"
        "  - split: train_sft\n    path: train_sft.jsonl\n"
        "  - split: test_sft\n    path: test_sft.jsonl\n---\n"
    )
    msg = str(pytest.raises(UserError, data.load, sources.Source("hub", str(tmp_path)), "").value)
    assert "has no 'train' split (it has ['train_sft', 'test_sft']): a split cannot be chosen here: download" in msg


def test_eval_rows_that_are_also_train_rows_are_warned_about_at_delivery(store, tmp_path, capsys):
    """Nothing said a user's eval split repeated train rows: the tuned model was scored on rows it trained on."""
    rows = builtin_data.dataset("function-calling")
    folder = tmp_path / "dup"
    folder.mkdir()
    data.write_jsonl(rows["train"][:40], folder / "train.jsonl")
    data.write_jsonl(rows["train"][:3] + rows["eval"][:17], folder / "eval.jsonl")
    delivery.deliver_dataset(str(folder), "", store)
    assert (
        "WARNING: 3 of 20 eval rows are also train rows: the tuned model is scored on rows it trained on"
        in capsys.readouterr().out
    )
    delivery.deliver_dataset("builtin:function-calling", "", store)  # its splits share no row: nothing said
    assert "WARNING" not in capsys.readouterr().out


def test_builtin_dataset_delivers_every_category(store):
    """builtin:function-calling (the demo's): the one-call rows plus rows of every other BFCL category, spread
    through the eval split (eval_max_rows scores a prefix); builtin:function-calling-bfcl names the same rows."""
    from trainer.chat import fc_check

    uri, meta = delivery.deliver_dataset("builtin:function-calling", "", store)
    assert meta["rows"] == {"train": 3600, "eval": 240}
    evals = data.read_jsonl(store.get_tree(uri) / "eval.jsonl")
    assert {fc_check.category(r) for r in evals[:100]} == set(fc_check.CATEGORIES)
    assert delivery.deliver_dataset("builtin:function-calling-bfcl", "", store)[0] == uri
    err = str(pytest.raises(UserError, sources.parse, "builtin:function-calling-all", "dataset").value)
    assert "builtin:function-calling, builtin:function-calling-bfcl" in err


def test_a_file_url_of_localhost_and_with_percent_escapes_names_the_local_file(tmp_path):
    """file://localhost/abs was refused with a fix that did not apply, and %20 was not decoded (RFC 8089)."""
    from trainer.config import sources

    folder = tmp_path / "my data"
    folder.mkdir()
    (folder / "rows.jsonl").write_text("{}\n")
    want = str((folder / "rows.jsonl").resolve())
    for url in (
        f"file://localhost{str(folder).replace(' ', '%20')}/rows.jsonl",
        f"file://{str(folder).replace(' ', '%20')}/rows.jsonl",
    ):
        assert sources.parse(url, "dataset") == sources.Source("local", want), url
