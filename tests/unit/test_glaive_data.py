"""benchmarks.glaive_data: built-in conversations written in glaive-function-calling-v2's format read back by the
project's glaive reader as the same calls, results and answers (what the glaive measurement in the README runs on)."""

import json
import random

from benchmarks import glaive_data
from trainer.data import builtin_data
from trainer import data
from trainer.chat.turns import trained_turns


def test_glaive_rows_read_back_as_the_conversations_they_were_made_from(tmp_path):
    made = builtin_data.make_multi_turn_row(random.Random(3))
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps(glaive_data.glaive_row(made)) + "\n")
    [row] = data.read_rows(path)
    # glaive's system text before the functions stays a system message
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    messages = row["messages"][1:]
    got, want = messages[1]["tool_calls"][0]["function"], made["messages"][1]["tool_calls"][0]["function"]
    assert (got["name"], got["arguments"]) == (want["name"], want["arguments"])
    assert messages[0]["content"] == made["messages"][0]["content"]
    assert json.loads(messages[2]["content"]) == json.loads(made["messages"][2]["content"])
    assert messages[3]["content"] == made["messages"][3]["content"]
    assert [t["function"] for t in row["tools"]] == [t["function"] for t in made["tools"]]


def test_the_file_has_distinct_requests_and_one_in_ten_answered_without_a_call(tmp_path):
    rows = glaive_data.rows(400, seed=1)
    assert len({r["chat"].split("\n\n\n", 1)[0] for r in rows}) == 400
    assert glaive_data.main([str(tmp_path / "g.jsonl"), "--rows", "400", "--seed", "1"]) == 0
    read = data.read_rows(tmp_path / "g.jsonl")
    texts = sum(not any(m.get("tool_calls") for m in r["messages"]) for r in read)
    assert 20 <= texts <= 60  # one in ten, drawn
    assert all(len(trained_turns(r["messages"])) == 2 for r in read if any(m.get("tool_calls") for m in r["messages"]))
