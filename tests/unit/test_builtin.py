"""The built-in dataset and model: deterministic, valid, and shaped as the pipeline expects."""

import json
import random
from pathlib import Path

from trainer.data import builtin_data, masking
from trainer import data
from trainer.chat import fc_check


def test_generator_is_deterministic_and_splits_are_disjoint():
    a, b = builtin_data.generate(300, 50, seed=3), builtin_data.generate(300, 50, seed=3)
    assert json.dumps(a) == json.dumps(b)
    assert json.dumps(builtin_data.generate(300, 50, seed=4)) != json.dumps(a)
    assert (len(a["train"]), len(a["eval"])) == (300, 50)
    eval_requests = {r["messages"][0]["content"] for r in a["eval"]}
    assert len(eval_requests) == 50  # no duplicates inside eval
    assert not eval_requests & {r["messages"][0]["content"] for r in a["train"]}


def _leaves(value):
    """The values inside a call's arguments: an array's items, a nested object's values."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def test_generated_rows_are_valid_and_arguments_appear_in_the_request():
    rows = builtin_data.generate(200, 10)["train"]
    assert data.validate_rows(rows, "builtin")
    for row in rows:
        request = row["messages"][0]["content"]
        args = row["messages"][1]["tool_calls"][0]["function"]["arguments"]
        # every argument value must be readable from the request, or the task is unlearnable
        assert all(str(v) in request for v in _leaves(args)), (request, args)
        assert row["messages"][1]["tool_calls"][0]["function"]["name"] in {t["function"]["name"] for t in row["tools"]}


def test_the_demos_data_holds_every_category_with_multiple_the_majority():
    """builtin:function-calling, what `make demo` trains and scores: every category the gate reads
    (fc_<category>_accuracy), in both splits and in the first 200 eval rows the demo scores."""
    from trainer.chat import fc_check

    splits = builtin_data.dataset("function-calling")
    counts = {
        s: {c: sum(fc_check.category(r) == c for r in rows) for c in fc_check.CATEGORIES} for s, rows in splits.items()
    }
    assert counts == {
        "train": {"simple": 150, "multiple": 3000, "parallel": 150, "irrelevance": 150, "multi_turn": 150},
        "eval": {"simple": 10, "multiple": 200, "parallel": 10, "irrelevance": 10, "multi_turn": 10},
    }
    for name, rows in splits.items():
        assert counts[name]["multiple"] > len(rows) / 2
    scored = [fc_check.category(r) for r in splits["eval"][:200]]  # eval_max_rows=200
    assert all(scored.count(c) >= 8 for c in fc_check.CATEGORIES), scored
    multi_turn = [r for r in splits["train"] if fc_check.category(r) == "multi_turn"]
    assert all(r["messages"][2]["role"] == "tool" and r["messages"][3]["content"] for r in multi_turn)  # with results
    assert data.validate_rows(splits["train"] + splits["eval"], "builtin")
    assert builtin_data.dataset("function-calling-bfcl") == splits  # the older name: the same rows


def _schemas(schema):
    """Every JSON schema inside a parameters schema, itself included."""
    yield schema
    for sub in (schema.get("properties") or {}).values():
        yield from _schemas(sub)
    if isinstance(schema.get("items"), dict):
        yield from _schemas(schema["items"])


def test_the_tools_and_calls_hold_every_kind_of_value():
    """Strings, integers, floats, enums, arrays, nested objects and optional parameters with defaults, in the
    schemas and in the calls (an optional one left out where the request does not say it, given where it does)."""
    schemas = [s for t in builtin_data.TOOLS for s in _schemas(t["function"]["parameters"])]
    assert {s["type"] for s in schemas} == {"object", "string", "integer", "number", "array"}
    nested = [s for t in builtin_data.TOOLS for s in list(_schemas(t["function"]["parameters"]))[1:]]
    assert any("enum" in s for s in schemas) and any(s["type"] == "object" for s in nested)
    optional = {
        (t["function"]["name"], p): spec["default"]
        for t in builtin_data.TOOLS
        for p, spec in t["function"]["parameters"]["properties"].items()
        if p not in t["function"]["parameters"]["required"]
    }
    assert len(optional) >= 3 and all(v is not None for v in optional.values())
    calls = [c["function"] for r in builtin_data.generate(1000, 0)["train"] for c in r["messages"][1]["tool_calls"]]
    values = [v for c in calls for v in _leaves(c["arguments"])]
    assert any(isinstance(v, int) and not isinstance(v, bool) for v in values)
    results = [
        json.loads(m["content"]) for r in builtin_data.dataset()["train"] for m in r["messages"] if m["role"] == "tool"
    ]  # `amount` (a number) is whole in requests; converted amounts are decimals
    assert any(isinstance(v, float) and not v.is_integer() for r in results for v in _leaves(r))
    assert any(isinstance(v, list) for c in calls for v in c["arguments"].values())
    assert any(isinstance(v, dict) for c in calls for v in c["arguments"].values())
    for tool, param in optional:
        given = [param in c["arguments"] for c in calls if c["name"] == tool]
        assert any(given) and not all(given), (tool, param)  # both ways in the data
    offered = [len(r["tools"]) for r in builtin_data.generate(300, 0)["train"]]
    assert set(offered) == {3, 4}  # the call among a list that changes


def test_rows_stay_short_for_the_demos_max_seq_len(tokenizer):
    """The demo trains at max_seq_len 512: every built-in row fits with the built-in tokenizer, and the mean
    stays about what it was with five tools of plain strings (102 tokens; README laptop settings: the real
    tokenizer's lengths are tests/integration/test_builtin_lengths.py's)."""
    splits = builtin_data.dataset("function-calling")
    lengths = [len(data.encode(r, tokenizer, 512)["input_ids"]) for r in splits["train"][::7] + splits["eval"]]
    assert max(lengths) <= 200 and sum(lengths) / len(lengths) <= 110, (max(lengths), sum(lengths) / len(lengths))


def test_tiny_model_loads_and_masks_only_the_assistant_turn(tiny_model_dir, tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.num_hidden_layers == 4 and model.config.hidden_size == 128
    row = builtin_data.generate(1, 1)["train"][0]
    enc = data.encode(row, tokenizer, 512)
    target = tokenizer.decode([t for t in enc["labels"] if t != -100])
    call = row["messages"][1]["tool_calls"][0]["function"]
    assert target.startswith("<tool_call>") and target.endswith("</tool_call><|end|>")
    parsed = json.loads(target[len("<tool_call>") : -len("</tool_call><|end|>")])
    assert parsed == {"name": call["name"], "arguments": call["arguments"]}
    assert row["messages"][0]["content"] not in target  # the prompt carries no loss


def test_the_cached_model_is_the_built_one_built_once_per_key(tmp_path, monkeypatch):
    """Delivery reads builtin:tiny-llama from the local cache: byte for byte what `build` writes, built on the
    first call only; a changed builder or library (another key) or a damaged entry builds again, and where the
    cache cannot be written it is built in the caller's working directory."""
    from trainer.models import builtin_model

    fresh = builtin_model.build(tmp_path / "fresh")
    builds = []
    real_build = builtin_model.build
    monkeypatch.setattr(builtin_model, "build", lambda out, **kw: builds.append(out) or real_build(out, **kw))
    cache, unused = tmp_path / "cache", tmp_path / "unused"
    first = builtin_model.cached(unused, cache)
    assert builtin_model.cached(unused, cache) == first and len(builds) == 1
    assert first.parent == cache / "builtin" and [p.name for p in first.parent.iterdir()] == [first.name]
    assert sorted(p.name for p in first.iterdir()) == sorted(p.name for p in fresh.iterdir())
    for f in fresh.iterdir():
        assert (first / f.name).read_bytes() == f.read_bytes(), f.name

    (first / "model.safetensors").unlink()  # damaged: built again, in place
    assert builtin_model.cached(unused, cache) == first and len(builds) == 2
    assert (first / "model.safetensors").is_file()
    monkeypatch.setattr(builtin_model, "cache_key", lambda: "other")
    assert builtin_model.cached(unused, cache).name == "tiny-llama-other" and len(builds) == 3

    blocked = tmp_path / "file"
    blocked.write_text("")  # a cache directory that cannot be made
    assert builtin_model.cached(tmp_path / "work", blocked) == tmp_path / "work" and len(builds) == 4
    assert (tmp_path / "work" / "config.json").is_file()
    assert not unused.exists()


def test_two_processes_building_the_cached_model_at_once_keep_one(tmp_path, monkeypatch):
    """The other one renames its build into place while this one builds: this one's is dropped, the other's
    (which that process may be reading) kept, nothing else left."""
    import shutil

    from trainer.models import builtin_model

    real_build, real_rmtree = builtin_model.build, shutil.rmtree
    final = tmp_path / "builtin" / f"tiny-llama-{builtin_model.cache_key()}"

    def racing(out, **kw):
        real_build(final)  # the other process, first
        return real_build(out, **kw)

    monkeypatch.setattr(builtin_model, "build", racing)
    monkeypatch.setattr(
        "shutil.rmtree",
        lambda path, **kw: (
            (_ for _ in ()).throw(AssertionError(path)) if Path(path) == final else real_rmtree(path, **kw)
        ),
    )  # the other's is never removed
    assert builtin_model.cached(tmp_path / "unused", tmp_path) == final
    assert [p.name for p in final.parent.iterdir()] == [final.name] and (final / "model.safetensors").is_file()


def test_the_cache_key_covers_the_builders_code_and_the_libraries_that_write_the_files(monkeypatch):
    from importlib import metadata

    from trainer.models import builtin_model

    key = builtin_model.cache_key()
    assert key == builtin_model.cache_key() and len(key) == 16
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.0" if name == "transformers" else real(name))
    assert builtin_model.cache_key() != key


def _valid_against(args, schema):
    """A call's arguments hold every required parameter, no other one, and each value of its schema's type."""
    kinds = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict}
    props = schema.get("properties") or {}
    assert set(schema.get("required") or []) <= set(args) <= set(props), (args, schema)
    for key, value in args.items():
        spec = props[key]
        assert isinstance(value, kinds[spec["type"]]) and not (
            spec["type"] in ("integer", "number") and isinstance(value, bool)
        ), (key, value)
        assert "enum" not in spec or value in spec["enum"], (key, value)
        if spec["type"] == "array":
            assert all(isinstance(v, kinds[spec["items"]["type"]]) for v in value), (key, value)


def test_the_wide_dataset_calls_all_38_tools_with_arguments_read_from_the_request():
    """builtin:function-calling-wide: the five tools' rows and the library's 33 tools', each call valid against
    the schema it calls, every argument in the request, the called tool among 3 or 4 offered at any position;
    eval requests never in train; the demo's dataset unchanged beside it."""
    from trainer.data import tool_library

    splits = builtin_data.dataset("function-calling-wide")
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in builtin_data.WIDE_TOOLS}
    assert len(schemas) == 38 and set(tool_library.REQUESTS) == {t["function"]["name"] for t in tool_library.LIBRARY}
    called: dict[str, int] = {}
    positions = set()
    for row in splits["train"]:
        offered = [t["function"]["name"] for t in row["tools"]]
        for m in row["messages"]:
            for c in m.get("tool_calls") or []:
                name, args = c["function"]["name"], c["function"]["arguments"]
                called[name] = called.get(name, 0) + 1
                _valid_against(args, schemas[name])
                assert name in offered
                assert all(str(v) in row["messages"][0]["content"] for v in _leaves(args)), (row["messages"][0], args)
        if fc_check.category(row) == "multiple":
            positions.add(offered.index(row["messages"][1]["tool_calls"][0]["function"]["name"]))
    assert set(called) == set(schemas) and min(called.values()) >= 20, sorted(called.items(), key=lambda kv: kv[1])[:3]
    assert positions == {0, 1, 2, 3}
    counts = {
        s: {c: sum(fc_check.category(r) == c for r in rows) for c in fc_check.CATEGORIES} for s, rows in splits.items()
    }
    assert counts["eval"] == {"simple": 10, "multiple": 200, "parallel": 10, "irrelevance": 10, "multi_turn": 10}
    assert not {r["messages"][0]["content"] for r in splits["eval"]} & {
        r["messages"][0]["content"] for r in splits["train"]
    }
    assert data.validate_rows(splits["train"] + splits["eval"], "builtin")
    assert splits != builtin_data.dataset("function-calling")
    assert builtin_data.dataset("function-calling") == builtin_data.generate(categories=True)


def test_the_wide_datasets_irrelevance_rows_offer_no_tool_named_like_the_one_the_request_needs():
    """Half its irrelevance rows are the built-in five's; half ask what one of the 38 tools does and offer 1-4
    others, none that fits the request (trainer.data.masking.fits: convert_length is no distractor for
    convert_currency, book_table none for a reservation)."""
    from trainer.data.masking import IRRELEVANCE_REPLY

    rows = [builtin_data.make_wide_irrelevance_row(random.Random(k)) for k in range(200)]
    declined = [r for r in rows if r["messages"][1]["content"] == IRRELEVANCE_REPLY]
    assert 70 <= len(declined) <= 130 and all(
        r["messages"][1]["content"].startswith("Sorry, I can't") for r in rows if r not in declined
    )
    sizes = set()
    for k in range(300):
        rng = random.Random(k)
        request, call = builtin_data._wide_call(rng)
        row = builtin_data.decline_row(request, call, rng)
        offered = [t["function"]["name"] for t in row["tools"]]
        sizes.add(len(offered))
        own = [t for t in builtin_data.WIDE_TOOLS if t["function"]["name"] == call["function"]["name"]]
        asked = builtin_data._one_call_row(request, call, own)
        assert call["function"]["name"] not in offered and not any(masking.fits(t, asked) for t in row["tools"])
        assert row["messages"][0]["content"] == request and "tool_calls" not in row["messages"][1]
    assert sizes == {1, 2, 3, 4}
