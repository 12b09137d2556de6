"""The built-in dataset and model: deterministic, valid, and shaped as the pipeline expects."""

import json

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
