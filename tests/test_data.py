"""Reading, validating, encoding and batching chat rows."""

import json

import pytest

from trainer import data
from trainer.errors import UserError


def write(tmp_path, lines, name="d.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})


@pytest.mark.parametrize("line, expected", [
    ("{not json", "not valid JSON"),
    (json.dumps({"text": "no messages"}), "no 'messages' field"),
    (json.dumps({"messages": []}), "non-empty list"),
    (json.dumps({"messages": [{"role": "robot", "content": "x"}, {"role": "assistant", "content": "y"}]}),
     "unknown role 'robot'"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "",
                 "tool_calls": [{"function": {"name": "f", "arguments": "{bad"}}]}]}), "not valid JSON"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}]}), "no assistant message"),
    (json.dumps([1, 2]), "expected a JSON object"),
])
def test_bad_rows_name_file_line_and_reason(tmp_path, line, expected):
    path = write(tmp_path, [GOOD, line])
    with pytest.raises(UserError) as err:
        data.read_jsonl(path)
    assert f"{path}:2:" in str(err.value) and expected in str(err.value)


def test_every_bad_line_is_reported_at_once_capped(tmp_path):
    path = write(tmp_path, ["{bad"] * 30)
    msg = str(pytest.raises(UserError, data.read_jsonl, path).value)
    assert msg.count("not valid JSON") == data.MAX_REPORTED and "and 10 more" in msg


def test_missing_and_empty_files(tmp_path):
    assert "not found" in str(pytest.raises(UserError, data.read_jsonl, tmp_path / "nope.jsonl").value)
    assert "no rows" in str(pytest.raises(UserError, data.read_jsonl, write(tmp_path, [""])).value)


def test_string_arguments_are_normalised_to_dicts(tmp_path):
    row = {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}]}
    [out] = data.read_jsonl(write(tmp_path, [json.dumps(row)]))
    assert out["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}


def test_encode_drops_over_long_rows_and_counts_them(tokenizer):
    rows = [json.loads(GOOD), {"messages": [{"role": "user", "content": "word " * 400},
                                            {"role": "assistant", "content": "ok"}]}]
    examples, dropped = data.encode_all(rows, tokenizer, max_seq_len=64)
    assert (len(examples), dropped) == (1, 1)


def test_template_without_generation_mask_falls_back_to_last_turn(tokenizer):
    import copy

    plain = copy.deepcopy(tokenizer)
    plain.chat_template = tokenizer.chat_template.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    row = json.loads(GOOD)
    masked, fallback = data.encode(row, tokenizer, 512), data.encode(row, plain, 512)
    assert masked["input_ids"] == fallback["input_ids"]
    assert masked["labels"] == fallback["labels"]  # same result as the template's own mask


def test_collate_pads_to_longest_in_batch_only():
    batch = data.collate([{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [5], "labels": [5]}], 0)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [5, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [5, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    left = data.collate([{"input_ids": [5, 6], "labels": [5, 6]}, {"input_ids": [7], "labels": [7]}], 0, "left")
    assert left["input_ids"].tolist() == [[5, 6], [0, 7]]
