"""Name masking (trainer.data.name_masking, pipeline parameter name_masking): function and parameter names random
and the same in a row's tools, calls, tool results and texts; descriptions and values kept; the tools shuffled; the
share of the train split's rows with tools; the eval split untouched; seeded; the renamed rows pass every row
check; the parameter refused where it cannot apply, at validate, deliver-dataset and its CLI."""

import json
import keyword
import random

import pytest

from trainer import data
from trainer.core.errors import UserError
from trainer.data import builtin_data
from trainer.data import name_masking as nm
from trainer.store import delivery


def _tools_by_description(row):
    return {t["function"].get("description"): t["function"] for t in row.get("tools") or []}


def _calls(row):
    return [tc["function"] for m in row["messages"] for tc in m.get("tool_calls") or []]


def test_a_renamed_row_is_the_same_row_under_other_names():
    row = builtin_data.make_multi_turn_row(random.Random(4))
    row["messages"][0]["content"] += " Use get_weather or convert_currency, and search if you must."
    new, names = nm.renamed(row, random.Random(0))
    old_fns, new_fns = _tools_by_description(row), _tools_by_description(new)
    assert set(old_fns) == set(new_fns)  # descriptions kept: one tool each
    assert set(names) == {f["name"] for f in old_fns.values()}
    for desc, old in old_fns.items():
        fn = new_fns[desc]
        assert fn["name"] == names[old["name"]] != old["name"]
        assert 5 <= len(fn["name"]) <= 15 and fn["name"].isidentifier() and not keyword.iskeyword(fn["name"])
        old_props, props = old["parameters"]["properties"], fn["parameters"]["properties"]
        assert list(props.values()) == list(old_props.values())  # schemas (types, enums, defaults) kept, in order
        assert not set(props) & set(old_props) and all(4 <= len(p) <= 10 for p in props)
        rename = dict(zip(old_props, props))
        assert fn["parameters"]["required"] == [rename[p] for p in old["parameters"]["required"]]
    # the call: the same function by its new name, the same values under the new parameter names
    [old_call], [call] = _calls(row), _calls(new)
    old_fn = next(f for f in old_fns.values() if f["name"] == old_call["name"])
    fn = new_fns[old_fn.get("description")]
    rename = dict(zip(old_fn["parameters"]["properties"], fn["parameters"]["properties"]))
    assert call["name"] == fn["name"]
    assert call["arguments"] == {rename[k]: v for k, v in old_call["arguments"].items()}
    # texts: identifiers renamed, the plain word "search" left, the tool result and the answer as they were
    text = new["messages"][0]["content"]
    assert "get_weather" not in text and names["get_weather"] in text and "if you must" in text and "search" in text
    assert new["messages"][2:] == row["messages"][2:] and row["messages"][0] != new["messages"][0]
    assert data.validate_rows([new], "renamed")  # every row check: schema, calls against it
    assert nm.renamed(row, random.Random(0)) == (new, names)  # seeded


def test_a_tool_result_named_by_its_function_and_a_description_naming_a_parameter_are_renamed():
    tool = {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Time in a city; give tz_name as an IANA zone.",
            "parameters": {"type": "object", "properties": {"tz_name": {"type": "string"}}, "required": ["tz_name"]},
        },
    }
    row = {
        "messages": [
            {"role": "user", "content": "Time in Oslo?"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"type": "function", "function": {"name": "get_time", "arguments": {"tz_name": "Europe/Oslo"}}}
                ],
            },
            {"role": "tool", "name": "get_time", "content": '{"time": "10:00"}'},
            {"role": "assistant", "content": "It is 10:00 (from get_time)."},
        ],
        "tools": [tool],
    }
    new, names = nm.renamed(row, random.Random(1))
    fn = new["tools"][0]["function"]
    [param] = fn["parameters"]["properties"]
    assert new["messages"][2]["name"] == names["get_time"] == fn["name"]
    assert fn["description"] == f"Time in a city; give {param} as an IANA zone."
    assert new["messages"][3]["content"] == f"It is 10:00 (from {names['get_time']})."
    assert new["messages"][1]["tool_calls"][0]["function"]["arguments"] == {param: "Europe/Oslo"}


def test_the_share_of_train_rows_with_tools_is_renamed_and_the_eval_split_is_not(capsys):
    splits = builtin_data.dataset("function-calling")
    out, n = nm.mask_names(splits, 0.67, seed=3)
    candidates = [r for r in splits["train"] if nm.renamable(r)]
    assert n == round(len(candidates) * 0.67) and len(out["train"]) == len(splits["train"])
    changed = sum(a != b for a, b in zip(splits["train"], out["train"]))
    assert changed == n
    assert out["eval"] is splits["eval"]
    known = {t["function"]["name"] for t in builtin_data.TOOLS}
    renamed = [r for r, o in zip(out["train"], splits["train"]) if r != o]
    assert all(not {f["name"] for f in _calls(r)} & known for r in renamed)
    # a fresh name in (nearly) every row: the model cannot learn one
    assert len({t["function"]["name"] for r in renamed for t in r["tools"]}) > 0.9 * sum(
        len(r["tools"]) for r in renamed
    )
    data.validate_rows(out["train"], "renamed")
    assert nm.mask_names(splits, 0.67, seed=3) == (out, n) and nm.mask_names(splits, 0.67, seed=4)[0] != out
    assert (
        f"{n} of {len(splits['train'])} train rows renamed by name masking (name_masking=0.67"
        in capsys.readouterr().out
    )
    assert nm.mask_names(splits, 0.0, seed=3) == (splits, 0)


def test_a_row_whose_calls_could_not_follow_is_left_as_it_is():
    row = builtin_data.make_row(random.Random(0))
    unoffered = json.loads(json.dumps(row))
    unoffered["messages"][1]["tool_calls"][0]["function"]["name"] = "not_offered"
    text_args = json.loads(json.dumps(row))
    text_args["messages"][1]["tool_calls"][0]["function"]["arguments"] = "city=Paris"
    assert nm.renamable(row) and not nm.renamable(unoffered) and not nm.renamable(text_args)
    out, n = nm.mask_names({"train": [unoffered, text_args, row], "eval": []}, 1.0, 0)
    assert n == 1 and out["train"][:2] == [unoffered, text_args] and out["train"][2] != row


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), float("inf"), True, "0.5"])
def test_a_share_out_of_range_is_refused_naming_the_fix(bad):
    err = str(pytest.raises(UserError, nm.mask_names, builtin_data.dataset("function-calling"), bad, 0).value)
    assert err.startswith("name_masking must be a number from 0 to 1") and "e.g. name_masking=0.67" in err


def test_data_without_tools_is_refused_at_validate_and_by_the_cli(tmp_path, capsys):
    from trainer.__main__ import main
    from trainer.validate import pipeline_problems

    path = tmp_path / "chats.jsonl"
    data.write_jsonl(
        [
            {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]}
            for i in range(20)
        ],
        path,
    )
    [refused] = [
        p for p in pipeline_problems({"dataset_source": str(path), "name_masking": 0.5}) if "name_masking" in p
    ]
    assert refused == (
        f"name_masking=0.5, but dataset_source {str(path)!r} has no row whose names can be masked: no training row "
        "offers tools; set name_masking=0"
    )
    with pytest.raises(SystemExit) as exit_:
        main(["deliver-dataset", str(path), "--name-masking", "0.5"])
    assert exit_.value.code == 2 and "--name-masking=0.5, but dataset" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["deliver-dataset", str(path), "--name-masking", "nan"])
    assert exit_.value.code == 2 and "--name-masking must be a number from 0 to 1" in capsys.readouterr().err
    assert [p for p in pipeline_problems({"name_masking": 2.0}) if "name_masking" in p]


def test_the_delivery_records_it_and_a_delivered_tree_refuses_it(store, tmp_path):
    path = tmp_path / "rows.jsonl"
    data.write_jsonl(builtin_data.generate(60, 0, seed=1)["train"], path)
    uri, meta = delivery.deliver_dataset(str(path), "", store, eval_fraction=0.2, seed=0, name_masking=0.5)
    assert meta["name_masking"] == 0.5 and meta["name_masked_rows"] == 24  # half of 48 train rows
    train = data.read_jsonl(store.get_tree(uri) / "train.jsonl")
    known = {t["function"]["name"] for t in builtin_data.TOOLS}
    assert sum(not {f["name"] for f in _calls(r)} <= known for r in train) == 24
    with pytest.raises(UserError) as err:
        delivery.deliver_dataset(uri, "", store, name_masking=0.5)
    assert str(err.value) == (
        f"name_masking=0.5, but dataset_source {uri} is a delivered tree, passed through as it is: set "
        "name_masking=0, or deliver its source with it (python -m trainer deliver-dataset SOURCE --name-masking 0.5)"
    )


def test_the_parameter_is_the_tables_and_reaches_the_deliver_dataset_step():
    from components.deliver_dataset import deliver_dataset
    from components.validate_params import validate_params
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.dag.sweep import sweep_pipeline

    for component in (deliver_dataset, validate_params):
        assert "name_masking" in component.component_spec.inputs
    for pipeline in (finetune_pipeline, sweep_pipeline):
        assert pipeline.component_spec.inputs["name_masking"].default == 0.0
