"""The built-in dataset and model: deterministic, valid, and shaped as the pipeline expects."""

import json
from pathlib import Path

from trainer import builtin_data, data


def test_generator_is_deterministic_and_splits_are_disjoint():
    a, b = builtin_data.generate(300, 50, seed=3), builtin_data.generate(300, 50, seed=3)
    assert json.dumps(a) == json.dumps(b)
    assert json.dumps(builtin_data.generate(300, 50, seed=4)) != json.dumps(a)
    assert (len(a["train"]), len(a["eval"])) == (300, 50)
    eval_requests = {r["messages"][0]["content"] for r in a["eval"]}
    assert len(eval_requests) == 50  # no duplicates inside eval
    assert not eval_requests & {r["messages"][0]["content"] for r in a["train"]}


def test_generated_rows_are_valid_and_arguments_appear_in_the_request():
    rows = builtin_data.generate(200, 10)["train"]
    assert data.validate_rows(rows, "builtin")
    for row in rows:
        request = row["messages"][0]["content"]
        args = row["messages"][1]["tool_calls"][0]["function"]["arguments"]
        # every argument value must be readable from the request, or the task is unlearnable
        assert all(str(v) in request for v in args.values()), (request, args)


def test_tiny_model_loads_and_masks_only_the_assistant_turn(tiny_model_dir, tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.num_hidden_layers == 4 and model.config.hidden_size == 128
    row = builtin_data.generate(1, 1)["train"][0]
    enc = data.encode(row, tokenizer, 512)
    target = tokenizer.decode([t for t in enc["labels"] if t != -100])
    call = row["messages"][1]["tool_calls"][0]["function"]
    assert target.startswith("<tool_call>") and target.endswith("</tool_call><|end|>")
    parsed = json.loads(target[len("<tool_call>"):-len("</tool_call><|end|>")])
    assert parsed == {"name": call["name"], "arguments": call["arguments"]}
    assert row["messages"][0]["content"] not in target  # the prompt carries no loss


def test_the_cached_model_is_the_built_one_built_once_per_key(tmp_path, monkeypatch):
    """Delivery reads builtin:tiny-llama from the local cache: byte for byte what `build` writes, built on the
    first call only; a changed builder or library (another key) or a damaged entry builds again, and where the
    cache cannot be written it is built in the caller's working directory."""
    from trainer import builtin_model

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

    from trainer import builtin_model

    real_build, real_rmtree = builtin_model.build, shutil.rmtree
    final = tmp_path / "builtin" / f"tiny-llama-{builtin_model.cache_key()}"

    def racing(out, **kw):
        real_build(final)  # the other process, first
        return real_build(out, **kw)

    monkeypatch.setattr(builtin_model, "build", racing)
    monkeypatch.setattr("shutil.rmtree", lambda path, **kw: (_ for _ in ()).throw(AssertionError(path))
                        if Path(path) == final else real_rmtree(path, **kw))  # the other's is never removed
    assert builtin_model.cached(tmp_path / "unused", tmp_path) == final
    assert [p.name for p in final.parent.iterdir()] == [final.name] and (final / "model.safetensors").is_file()


def test_the_cache_key_covers_the_builders_code_and_the_libraries_that_write_the_files(monkeypatch):
    from importlib import metadata

    from trainer import builtin_model

    key = builtin_model.cache_key()
    assert key == builtin_model.cache_key() and len(key) == 16
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.0" if name == "transformers" else real(name))
    assert builtin_model.cache_key() != key
