"""Reading, validating, encoding and batching chat rows."""

import copy
import json

import pytest

from trainer import data
from trainer.core.errors import UserError


def write(tmp_path, lines, name="d.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})


@pytest.mark.parametrize(
    "line, expected",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"text": "no messages"}), "no 'messages' field"),
        (json.dumps({"messages": []}), "non-empty list"),
        (
            json.dumps({"messages": [{"role": "robot", "content": "x"}, {"role": "assistant", "content": "y"}]}),
            "unknown role 'robot'",
        ),
        (
            json.dumps({"messages": [{"role": "developer", "content": "x"}, {"role": "assistant", "content": "y"}]}),
            "unknown role 'developer'; use one of ['assistant', 'system', 'tool', 'user'] ('developer' is 'system' here)",
        ),
        (
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": "x"},
                        {
                            "role": "assistant",
                            "content": "",
                            "tool_calls": [{"function": {"name": "f", "arguments": "{bad"}}],
                        },
                    ]
                }
            ),
            "not valid JSON",
        ),
        (json.dumps({"messages": [{"role": "user", "content": "x"}]}), "no assistant message"),
        (json.dumps([1, 2]), "expected a JSON object"),
    ],
)
def test_bad_rows_name_file_line_and_reason(tmp_path, line, expected):
    path = write(tmp_path, [GOOD, line])
    with pytest.raises(UserError) as err:
        data.read_jsonl(path)
    assert f"{path}:2:" in str(err.value) and expected in str(err.value)


def test_every_bad_line_is_reported_at_once_capped(tmp_path):
    path = write(tmp_path, [" " * i + "{bad" for i in range(30)])  # 30 different columns: 30 problems
    msg = str(pytest.raises(UserError, data.read_jsonl, path).value)
    assert msg.count("not valid JSON") == data.MAX_REPORTED and "and 10 more" in msg


def test_the_same_problem_on_every_row_is_one_line(tmp_path):
    """A file in another format (here plain text rows) says so once, not once per row."""
    path = write(tmp_path, [json.dumps({"text": f"t{i}"}) for i in range(40)])
    msg = str(pytest.raises(UserError, data.read_jsonl, path).value)
    assert "(1 problem)" in msg and f"{path} lines 1, 2, 3 and 37 more: row has no 'messages' field" in msg
    assert "(its keys: 'text'); plain 'text' rows are for pretraining" in msg


def test_missing_and_empty_files(tmp_path):
    assert "not found" in str(pytest.raises(UserError, data.read_jsonl, tmp_path / "nope.jsonl").value)
    assert "no rows" in str(pytest.raises(UserError, data.read_jsonl, write(tmp_path, [""])).value)


def test_string_arguments_are_normalised_to_dicts(tmp_path):
    row = {
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}],
            },
        ],
        "tools": [{"type": "function", "function": {"name": "f"}}],
    }
    [out] = data.read_jsonl(write(tmp_path, [json.dumps(row)]))
    assert out["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}


def test_a_call_without_arguments_is_written_with_empty_ones_and_renders(tmp_path):
    """Issue 57 F17: a call to a tool without parameters, without an `arguments` key, was accepted by the reader but
    kept without it, and the chat template failed on it with a TypeError whose fix was about the template."""

    from trainer.chat import templates
    from trainer.models import builtin_model

    tool = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
    row = {
        "messages": [
            {"role": "user", "content": "What time is it?"},
            {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "get_time"}}]},
        ],
        "tools": [tool],
    }
    [read] = data.validate_rows([row], "rows")
    assert read["messages"][1]["tool_calls"][0]["function"]["arguments"] == {}
    tok = builtin_model.build_tokenizer()
    tok.chat_template = templates.resolve("chatml-tools")
    text = tok.apply_chat_template(read["messages"], tools=read["tools"], tokenize=False)
    assert "get_time" in text and "{}" in text


def test_encode_drops_over_long_rows_and_counts_them(tokenizer):
    rows = [
        json.loads(GOOD),
        {"messages": [{"role": "user", "content": "word " * 400}, {"role": "assistant", "content": "ok"}]},
    ]
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


def test_tokenizer_without_pad_token_still_batches():
    """Llama 3's tokenizer has no pad token (pad_token_id None): batches pad with 0 and mask it."""
    rows = [{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [5], "labels": [5]}]
    batch = data.collate(rows, None)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [5, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    packed = data.collate_packed(rows, total=6, pad_id=None)
    assert packed["input_ids"].tolist() == [[5, 6, 7, 5, 0, 0]]
    assert packed["labels"].tolist() == [[-100, 6, 7, -100, -100, -100]]


def test_packed_batch_loss_equals_per_row_losses(tiny_model_dir, tokenizer):
    """Padding-free packing changes nothing about the loss: no row attends to another."""
    import torch
    from transformers import AutoModelForCausalLM

    from trainer.data import builtin_data

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():  # make attention matter, so cross-row leakage would show in the loss
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(20)
    examples = [data.encode(r, tokenizer, 512) for r in builtin_data.generate(5, 1, seed=3)["train"]]
    total, count = 0.0, 0
    with torch.no_grad():
        for e in examples:  # each row alone, token-weighted
            b = data.collate([e], tokenizer.pad_token_id)
            logits = model(input_ids=b["input_ids"], use_cache=False).logits[0, :-1]
            labels = b["labels"][0, 1:]
            total += torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="sum").item()
            count += int((labels != -100).sum())
        packed = data.collate_packed(examples)
        assert packed["input_ids"].shape == (1, sum(len(e["input_ids"]) for e in examples))
        loss = model(**packed, use_cache=False).loss.item()
        leaked = model(input_ids=packed["input_ids"], labels=packed["labels"], use_cache=False).loss.item()
    assert abs(loss - total / count) < 1e-5
    assert abs(leaked - total / count) > 1e-3  # without per-row positions rows would see each other


def test_token_budget_batches_respect_the_budget_and_resume_exactly():
    from trainer.recipe.train import batches

    examples = [{"input_ids": [0] * n} for n in [30, 70, 50, 90, 20, 60, 40, 80, 10, 100] * 3]
    for flatten, cost in (
        (True, lambda b: sum(len(e["input_ids"]) for e in b)),
        (False, lambda b: len(b) * max(len(e["input_ids"]) for e in b)),
    ):
        stream = batches(examples, 0, 0, 2, seed=1, batch_tokens=200, flatten=flatten)
        first = [next(stream) for _ in range(12)]  # several epochs
        assert all(cost(b) <= 200 for b in first)
        assert sum(len(b) for b in first) > 24  # several rows per batch, not one
        resumed = batches(examples, 0, 0, 2, seed=1, start=7, batch_tokens=200, flatten=flatten)
        assert [next(resumed) for _ in range(5)] == first[7:]


def test_utf8_with_and_without_bom_reads_the_same(tmp_path):
    plain = tmp_path / "plain.jsonl"
    plain.write_text(GOOD + "\n" + GOOD + "\n", encoding="utf-8")
    bom = tmp_path / "bom.jsonl"
    bom.write_text(GOOD + "\n" + GOOD + "\n", encoding="utf-8-sig")  # as Windows editors save it
    assert bom.read_bytes().startswith(b"\xef\xbb\xbf")
    assert data.read_jsonl(bom) == data.read_jsonl(plain)


@pytest.mark.parametrize(
    "content, expected",
    [
        (
            (GOOD + "\n").encode() + '{"messages": [{"role": "user", "content": "café"}]}'.encode("latin-1"),
            "d.jsonl:2: not UTF-8 text (byte 0xe9",
        ),
        (bytes(range(256)), "is not JSONL text (binary data)"),
        (b"PAR1" + bytes(100), "is not JSONL text (Parquet)"),
        (GOOD.encode("utf-16"), "is not JSONL text (UTF-16 text)"),
    ],
    ids=["latin-1", "binary", "parquet", "utf-16"],
)
def test_wrong_encodings_fail_with_one_line(tmp_path, content, expected):
    path = tmp_path / "d.jsonl"
    path.write_bytes(content)
    msg = str(pytest.raises(UserError, data.read_jsonl, path).value)
    assert expected in msg and "\n" not in msg  # one line, not one per row


def test_deeply_nested_json_is_a_row_problem_not_a_crash(tmp_path):
    path = write(tmp_path, [GOOD, "[" * 100_000 + "]" * 100_000, '{"a":' * 5000 + "1" + "}" * 5000])
    msg = str(pytest.raises(UserError, data.read_jsonl, path).value)
    assert "1 problem" in msg and "d.jsonl lines 2, 3: JSON nested too deeply" in msg


TOOLS = [{"type": "function", "function": {"name": "get_weather"}}]


@pytest.mark.parametrize(
    "row, expected",
    [
        ({"tools": "[]"}, "'tools' must be a list"),
        ({"tools": {"get_weather": {}}}, "'tools' must be a list"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0] needs function.name"),
        (
            {"messages": [{"role": "user", "content": ["a", "b"]}, {"role": "assistant", "content": "x"}]},
            "messages[0].content must be a string, got a list",
        ),
        ({"messages": [{"role": "user"}, {"role": "assistant", "content": "x"}]}, "messages[0].content is missing"),
        (
            {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None}]},
            "messages[1].content is missing or null",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": None, "tool_calls": "get_weather()"},
                ]
            },
            "tool_calls must be a list",
        ),
        (
            {
                "tools": TOOLS,
                "messages": [
                    {"role": "user", "content": "x"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"function": {"name": "get_time", "arguments": {}}}],
                    },
                ],
            },
            "calls 'get_time', which is not in the row's tools ['get_weather']",
        ),
    ],
)
def test_field_types_are_checked_at_delivery(row, expected):
    base = json.loads(GOOD)
    assert any(expected in p for p in data.row_problems({**base, **row}))


def test_valid_tool_rows_pass():
    ok = {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"function": {"name": "get_weather", "arguments": "{}"}}],
            },
            {"role": "tool", "content": "sunny"},
            {"role": "assistant", "content": "ok"},
        ],
    }
    assert data.row_problems(ok) == []
    no_tools_declared = {"messages": ok["messages"]}  # a call to a tool never offered, as with `tools: []`
    assert data.row_problems(no_tools_declared) == [
        "messages[1].tool_calls[0] calls 'get_weather', but the row has no 'tools' (a call to a tool never offered): "
        "add the tool's schema to the row's 'tools' ({\"type\": \"function\", \"function\": {\"name\", "
        "\"description\", \"parameters\"}}), or drop the row"
    ]


class CountingTokenizer:
    """The real tokenizer, counting how often a chat template is rendered."""

    def __init__(self, tokenizer):
        self._tok, self.renders = tokenizer, 0

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def apply_chat_template(self, *args, **kwargs):
        self.renders += 1
        return self._tok.apply_chat_template(*args, **kwargs)


def test_a_huge_row_is_skipped_without_tokenizing(tokenizer):
    """A 50 MB row used to be tokenized whole (minutes, gigabytes) before being dropped."""
    counting = CountingTokenizer(tokenizer)
    huge = {"messages": [{"role": "user", "content": "x" * 50_000_000}, {"role": "assistant", "content": "y"}]}
    examples, dropped = data.encode_all([huge, json.loads(GOOD)], counting, max_seq_len=64)
    assert dropped == 1 and len(examples) == 1
    renders_for_good_row = counting.renders
    counting.renders = 0
    data.encode(huge, counting, 64)
    assert counting.renders == 0 and renders_for_good_row > 0


def test_length_precheck_never_drops_a_row_that_fits(tokenizer):
    """The bound is safe: rows just under it that fit in max_seq_len are still encoded."""
    limit = 64
    fits = {"messages": [{"role": "user", "content": "a b"}, {"role": "assistant", "content": "c"}]}
    assert data.text_chars(fits) <= limit * data.max_token_chars(tokenizer)
    assert data.encode(fits, tokenizer, limit) is not None


def test_rows_the_chat_template_refuses_are_one_user_error(tokenizer):
    """In training (Hub model or data, not checked before): exit 2, never a jinja traceback."""
    import copy

    refusing = copy.copy(tokenizer)
    refusing.chat_template = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
        "supported') }}{% endif %}" + tokenizer.chat_template
    )
    system = {"messages": [{"role": "system", "content": "Be terse."}, *json.loads(GOOD)["messages"]]}
    msg = str(pytest.raises(UserError, data.encode_all, [json.loads(GOOD), system, system], refusing, 512).value)
    assert "refuses 2 of 3 rows (System role not supported; e.g. the row whose first message is system" in msg
    assert data.encode_all([json.loads(GOOD)], refusing, 512)[1] == 0
    assert "raise_exception" not in tokenizer.chat_template  # the shared fixture is untouched


def test_csv_written_by_pandas_with_python_lists_names_the_fix(tmp_path):
    """`pd.DataFrame({"messages": [[{...}]]}).to_csv()` writes Python reprs, not JSON."""
    import pandas as pd

    path = tmp_path / "chats.csv"
    pd.DataFrame({"messages": [json.loads(GOOD)["messages"]] * 3}).to_csv(path, index=False)
    msg = str(pytest.raises(UserError, data.read_rows, path).value)
    assert (
        "(1 problem)" in msg
        and "rows 1, 2, 3: 'messages' is text that is not a JSON list of messages; it looks "
        "like a Python repr (single quotes): write the column with json.dumps"
        in msg
    )


def test_csv_prompt_cells_stay_text_unless_they_hold_messages(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text(
        'prompt,completion\n"[1, 2] is a list?",yes\n'
        '"[{""role"": ""user"", ""content"": ""hi""}]","[{""role"": ""assistant"", ""content"": ""yo""}]"\n'
    )
    first, second = data.read_rows(path)
    assert first["messages"][0] == {"role": "user", "content": "[1, 2] is a list?"}
    assert second["messages"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


def test_a_csv_row_with_empty_prompt_or_completion_cells_is_named_for_what_it_lacks(tmp_path):
    """The empty cells were dropped, and the row read as "row has no 'messages' field (its keys: none)"."""
    path = tmp_path / "pairs.csv"
    path.write_text("prompt,completion,system\nhello,hi,\n,,\nq,,\n")
    with pytest.raises(UserError) as err:
        data.read_rows(path)
    assert "rows 2, 3: every assistant message is empty" in str(err.value)
    assert "no 'messages' field" not in str(err.value)
    path.write_text("prompt,completion,system\nhello,hi,\n")
    assert data.read_rows(path)[0]["messages"] == [
        {"role": "user", "content": "hello"},  # an empty system: absent
        {"role": "assistant", "content": "hi"},
    ]


def test_too_few_rows_names_the_rows_skipped_as_too_long():
    from trainer.data.batching import check_rows

    with pytest.raises(
        UserError,
        match=r"only 0 training rows \(40 more were longer than max_seq_len and skipped: "
        r"raise max_seq_len or shorten them\), fewer than the 2 processes",
    ):
        check_rows(0, 16, 2, batch_tokens=512, skipped=40)
    check_rows(2, 16, 2, batch_tokens=512, skipped=40)  # enough: nothing to say


def test_text_content_parts_are_joined():
    """OpenAI's `content: [{"type": "text", "text": ...}]` reads as the string it stands for."""
    row = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "you"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
        ]
    }
    [out] = data.validate_rows([row], "rows")
    assert [m["content"] for m in out["messages"]] == ["Hello, you", "hi"]


@pytest.mark.parametrize("name", ["d.jsonl.gz", "d.json.gz", "d.csv.gz"])
def test_gzipped_files_read_as_their_inner_format(tmp_path, name):
    import gzip

    rows = [json.loads(GOOD)] * 3
    text = {
        "d.jsonl.gz": "".join(json.dumps(r) + "\n" for r in rows),
        "d.json.gz": json.dumps(rows),
        "d.csv.gz": "prompt,completion\n" + "hi,hello\n" * 3,
    }[name]
    (tmp_path / name).write_bytes(gzip.compress(text.encode()))
    assert data.read_rows(tmp_path / name) == rows


@pytest.mark.parametrize(
    "content", [b"not gzip at all", __import__("gzip").compress(GOOD.encode() * 50)[:60]], ids=["not-gzip", "truncated"]
)
def test_a_broken_gzip_file_is_one_line(tmp_path, content):
    (tmp_path / "d.jsonl.gz").write_bytes(content)
    msg = str(pytest.raises(UserError, data.read_rows, tmp_path / "d.jsonl.gz").value)
    assert "d.jsonl.gz is not a readable gzip file" in msg and "\n" not in msg


# Formats users bring from axolotl, LLaMA-Factory, TRL and OpenAI fine-tuning: converted on load,
# and each must train exactly as the same conversation written as messages by hand.

WEATHER = {
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
SHAREGPT = {
    "system": "Be brief.",
    "tools": json.dumps([WEATHER]),
    "conversations": [
        {"from": "human", "value": "Weather in Paris?"},
        {"from": "function_call", "value": json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})},
        {"from": "observation", "value": "sunny"},
        {"from": "gpt", "value": "It is sunny."},
        {"from": "human", "value": "Thanks"},
        {"from": "gpt", "value": "You're welcome."},
    ],
}
BY_HAND = {
    "tools": [{"type": "function", "function": WEATHER}],
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "Thanks"},
        {"role": "assistant", "content": "You're welcome."},
    ],
}


def encoded(rows, tokenizer):
    return [data.encode(r, tokenizer, 512) for r in rows]


def test_sharegpt_rows_train_as_the_same_conversation_in_messages(tmp_path, tokenizer, capsys):
    path = write(tmp_path, [json.dumps(SHAREGPT)] * 3)
    rows = data.read_rows(path)
    assert rows == data.validate_rows([BY_HAND] * 3, "by hand")
    assert encoded(rows, tokenizer) == encoded(data.validate_rows([BY_HAND], "x") * 3, tokenizer)
    assert sum(label != -100 for label in encoded(rows, tokenizer)[0]["labels"]) > 10  # every answer trained
    assert (
        f"{path}: 3 ShareGPT ('conversations' of {{from, value}}) rows converted to chat messages"
        in capsys.readouterr().out
    )


def test_sharegpt_turns_under_messages_and_a_call_after_text_join_one_turn():
    """Some Hub datasets keep {from, value} turns under 'messages'; a text answer followed by
    its function_call is one assistant turn (text, then the call)."""
    row = {
        "messages": [
            {"from": "user", "value": "Paris?"},
            {"from": "gpt", "value": "Checking."},
            {"from": "function_call", "value": json.dumps({"name": "get_weather", "arguments": {}})},
            {"from": "tool", "value": "sunny"},
            {"from": "assistant", "value": "Sunny."},
        ],
        "tools": TOOLS,
    }
    [out] = data.validate_rows([row], "rows")
    assert [(m["role"], m["content"], bool(m.get("tool_calls"))) for m in out["messages"]] == [
        ("user", "Paris?", False),
        ("assistant", "Checking.", True),
        ("tool", "sunny", False),
        ("assistant", "Sunny.", False),
    ]


def test_sharegpt_from_names_are_read_in_any_case():
    row = {"conversations": [{"from": "Human", "value": "hi"}, {"from": "GPT ", "value": "yo"}]}
    assert data.validate_rows([row], "rows") == [json.loads(GOOD.replace("hello", "yo"))]


def test_sharegpt_weights_on_every_turn_keep_only_the_assistants():
    """axolotl-style exports (SlimOrca) weigh every turn: system null, human 0, gpt 1. Only an
    assistant turn is trained, so the others' weights are dropped, not refused."""
    slimorca = {
        "conversations": [
            {"from": "system", "value": "You are an AI assistant.", "weight": None},
            {"from": "human", "value": "Hi", "weight": 0.0},
            {"from": "gpt", "value": "Hello", "weight": 1.0},
            {"from": "human", "value": "Again", "weight": 0.0},
            {"from": "gpt", "value": "Bye", "weight": 0},
        ]
    }
    [out] = data.validate_rows([slimorca], "slimorca")
    assert out["messages"] == [
        {"role": "system", "content": "You are an AI assistant."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "weight": 1},
        {"role": "user", "content": "Again"},
        {"role": "assistant", "content": "Bye", "weight": 0},
    ]
    bad = {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello", "weight": 0.5}]}
    assert "messages[1].weight must be 0" in str(pytest.raises(UserError, data.validate_rows, [bad], "r").value)


@pytest.mark.parametrize(
    "row",
    [
        {
            "conversations": [
                {"from": "system", "value": ""},
                {"from": "human", "value": "hi"},
                {"from": "gpt", "value": "yo"},
            ]
        },
        {
            "conversations": [
                {"from": "system", "value": None},
                {"from": "human", "value": "hi"},
                {"from": "chatgpt", "value": "yo"},
            ]
        },
        {"system": "", "conversations": [{"from": "human", "value": "hi"}, {"from": "bing", "value": "yo"}]},
        {
            "system": "Be brief.",
            "conversations": [
                {"from": "system", "value": " "},
                {"from": "human", "value": "hi"},
                {"from": "gpt", "value": "yo"},
            ],
        },
    ],
    ids=["empty-system-turn", "null-system-turn-chatgpt", "empty-system-field-bing", "system-field-and-empty-turn"],
)
def test_sharegpt_empty_system_turns_are_skipped_and_original_dump_names_are_assistants(row):
    """The original ShareGPT dumps (FastChat's ShareGPT_Vicuna) name assistant turns chatgpt or bing."""
    [out] = data.validate_rows([row], "rows")
    system = [{"role": "system", "content": "Be brief."}] if row.get("system") else []
    assert out["messages"] == system + [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


def test_alpaca_rows_train_as_prompt_completion(tmp_path, tokenizer, capsys):
    alpaca = [
        {"instruction": "Translate to French.", "input": "cat", "output": "chat"},
        {"instruction": "Name a colour.", "input": "", "output": "Blue", "system": "Be brief."},
        {"instruction": "And another?", "output": "Red", "history": [["Name a colour.", "Blue"]]},
    ]
    by_hand = [
        {"prompt": "Translate to French.\ncat", "completion": "chat"},
        {"prompt": "Name a colour.", "completion": "Blue", "system": "Be brief."},
        {
            "prompt": [
                {"role": "user", "content": "Name a colour."},
                {"role": "assistant", "content": "Blue"},
                {"role": "user", "content": "And another?"},
            ],
            "completion": "Red",
        },
    ]
    (tmp_path / "alpaca.json").write_text(json.dumps(alpaca))
    rows = data.read_rows(tmp_path / "alpaca.json")
    assert rows == data.validate_rows(by_hand, "by hand")
    assert encoded(rows, tokenizer) == encoded(data.validate_rows(by_hand, "x"), tokenizer)
    assert "3 Alpaca (instruction, input, output) rows converted" in capsys.readouterr().out


def test_openai_legacy_functions_train_as_tools(tokenizer, capsys):
    legacy = {
        "functions": [WEATHER],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
            },
            {"role": "function", "name": "get_weather", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
        ],
    }
    by_hand = {
        "tools": [{"type": "function", "function": WEATHER}],
        "messages": [
            BY_HAND["messages"][1],
            BY_HAND["messages"][2],
            {"role": "tool", "name": "get_weather", "content": "sunny"},
            BY_HAND["messages"][4],
        ],
    }
    rows = data.validate_rows([legacy], "legacy")
    assert rows == data.validate_rows([by_hand], "x")
    assert encoded(rows, tokenizer) == encoded([by_hand], tokenizer)
    assert "1 OpenAI legacy functions / function_call row converted" in capsys.readouterr().out


@pytest.mark.parametrize(
    "lines, expected",
    [
        (
            [{"conversations": [{"from": "human", "value": "hi"}, {"from": "bot", "value": "yo"}]}],
            "d.jsonl:1: conversations[1] has unknown 'from' 'bot': ShareGPT turns are from human, user, gpt,",
        ),
        (
            [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": ""}]}],
            "d.jsonl:1: conversations[1] (from 'gpt') has an empty value: every turn needs its text",
        ),
        (
            [
                {
                    "conversations": [
                        {"from": "human", "value": "hi"},
                        {"from": "function_call", "value": "get_weather()"},
                    ]
                }
            ],
            "conversations[1] (function_call) must be JSON text of {\"name\": ..., \"arguments\": {...}}",
        ),
        (
            [
                {
                    "conversations": [
                        {"from": "System", "value": "a"},
                        {"from": "human", "value": "hi"},
                        {"from": "gpt", "value": "yo"},
                    ],
                    "system": "b",
                }
            ],
            "has both a 'system' field and a system turn: keep one",
        ),
        ([{"conversations": []}], "'conversations' must be a non-empty list of ShareGPT turns"),
        ([{"instruction": "2+2"}], "d.jsonl:1: Alpaca row has no 'output'"),
        (
            [{"instruction": "Sum up.", "context": "Long text", "response": "Short", "category": "summarization"}],
            "Alpaca row has no 'output' (its keys: 'category', 'context', 'instruction', 'response'): give the answer to "
            "learn as 'output' (and any context as 'input')",
        ),
        ([{"instruction": "2+2", "output": 4}], "'output' must be a string, got a number (write it as text: \"4\")"),
        ([{"instruction": "Say hi", "output": " "}], "'output' is empty: there is nothing to learn"),
        ([{"instruction": "", "input": "", "output": "x"}], "'instruction' and 'input' are both empty"),
        (
            [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}] * 3
            + [{"instruction": "Say hi", "output": "hi"}],
            "d.jsonl:4: row is Alpaca (instruction, input, output), but 3 of the file's 4 rows are ShareGPT",
        ),
        (
            [json.loads(GOOD)] * 2
            + [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}],
            "d.jsonl:3: row is ShareGPT ('conversations' of {from, value}), but 2 of the file's 3 rows are chat ('messages') "
            "or prompt-completion: a file holds one format",
        ),
        (
            [{**json.loads(GOOD), "functions": "get_weather", "tools": TOOLS}],
            "'functions' (OpenAI's legacy format) must be a list of function schemas, and not given beside 'tools'",
        ),
    ],
    ids=[
        "unknown-from",
        "empty-value",
        "bad-call",
        "two-systems",
        "no-turns",
        "no-output",
        "dolly",
        "number-output",
        "empty-output",
        "no-request",
        "mixed-sharegpt-alpaca",
        "mixed-chat-sharegpt",
        "functions-and-tools",
    ],
)
def test_broken_or_mixed_rows_of_other_formats_are_named_with_the_fix(tmp_path, lines, expected):
    path = write(tmp_path, [json.dumps(r) for r in lines])
    msg = str(pytest.raises(UserError, data.read_rows, path).value)
    assert expected in msg and "Traceback" not in msg


WEIGHTED = {
    "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "weight": 0},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "bye", "weight": 1},
    ]
}


def trained_text(example, tokenizer):
    return tokenizer.decode([t for t in example["labels"] if t != -100])


def test_weight_zero_assistant_messages_are_not_trained(tokenizer):
    """OpenAI's `weight: 0`: that answer is context only; the rest of the row is unchanged."""
    unweighted = {"messages": [{k: v for k, v in m.items() if k != "weight"} for m in WEIGHTED["messages"]]}
    weighted, every = data.encode(WEIGHTED, tokenizer, 512), data.encode(unweighted, tokenizer, 512)
    assert weighted["input_ids"] == every["input_ids"]
    assert trained_text(every, tokenizer) == "hello<|end|>bye<|end|>"
    assert trained_text(weighted, tokenizer) == "bye<|end|>"
    first_only = {"messages": [*WEIGHTED["messages"][:3], {**WEIGHTED["messages"][3], "weight": 0}]}
    first_only["messages"][1] = {**first_only["messages"][1], "weight": 1}
    assert trained_text(data.encode(first_only, tokenizer, 512), tokenizer) == "hello<|end|>"


def test_weight_zero_without_one_mask_run_per_message(tokenizer):
    """Templates that mask a header with the answer join two answers in a row into one masked run:
    each message's tokens are then found by rendering the conversation up to it."""
    import copy

    joined = copy.copy(tokenizer)
    joined.chat_template = tokenizer.chat_template.replace(
        "<|assistant|>{% generation %}", "{% generation %}<|assistant|>"
    )
    row = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello", "weight": 0},
            {"role": "assistant", "content": "bye"},
        ]
    }
    assert trained_text(data.encode(row, joined, 512), joined) == "<|assistant|>bye<|end|>"


def test_weight_zero_with_a_template_without_generation_mask(tokenizer):
    """The fallback trains one turn: the last one of weight 1, not a weight-0 answer after it."""
    import copy

    plain = copy.copy(tokenizer)
    plain.chat_template = tokenizer.chat_template.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    row = {
        "messages": [
            *WEIGHTED["messages"][:2],
            {**WEIGHTED["messages"][1], "weight": 1},
            {"role": "user", "content": "more"},
            {"role": "assistant", "content": "no", "weight": 0},
        ]
    }
    assert trained_text(data.encode(row, plain, 512), plain) == "hello<|end|>"


@pytest.mark.parametrize(
    "change, expected",
    [
        ({1: {"weight": 2}}, "messages[1].weight must be 0 (do not train on this message) or 1, got 2"),
        ({1: {"weight": "0"}}, "messages[1].weight must be 0 (do not train on this message) or 1, got '0'"),
        ({0: {"weight": 1}}, "messages[0] has a weight, which only assistant messages take"),
        ({3: {"weight": 0}}, "every assistant message has weight 0: there is nothing to learn"),
        ({1: {"content": ""}, 3: {"content": "  "}}, "every assistant message is empty (no content, no tool_calls)"),
    ],
)
def test_weights_and_empty_answers_are_checked(change, expected):
    row = {"messages": [{**m, **change.get(i, {})} for i, m in enumerate(WEIGHTED["messages"])]}
    [problem] = data.row_problems(row)
    assert expected in problem


def test_a_windows_file_with_blank_lines_reads_as_the_clean_one(tmp_path):
    """BOM, CRLF line ends, blank lines and trailing whitespace, as editors and exports leave them."""
    clean = write(tmp_path, [GOOD, GOOD], "clean.jsonl")
    messy = tmp_path / "messy.jsonl"
    messy.write_bytes(b"\xef\xbb\xbf" + f"{GOOD}  \r\n\r\n \t\r\n{GOOD}\t\r\n\r\n".encode())
    assert data.read_rows(messy) == data.read_rows(clean)


def test_a_json_list_named_jsonl_and_one_row_object_in_json(tmp_path):
    (tmp_path / "list.jsonl").write_text(json.dumps([json.loads(GOOD)] * 2, indent=2))
    assert data.read_rows(tmp_path / "list.jsonl") == [json.loads(GOOD)] * 2
    (tmp_path / "one.json").write_text(json.dumps({"prompt": "hi", "completion": "hello"}, indent=2))
    assert data.read_rows(tmp_path / "one.json") == [json.loads(GOOD)]


@pytest.mark.parametrize(
    "name, content, expected",
    [
        (
            "d.jsonl",
            GOOD + '\n{"prompt": "a", "prompt": "b", "completion": "c"}\n',
            "d.jsonl:2: has the key 'prompt' twice (a JSON reader keeps only the last value): keep one",
        ),
        (
            "d.json",
            '[{"prompt": "a", "completion": "b", "completion": "c"}]',
            "d.json: an object has the key 'completion' twice",
        ),
        ("d.csv", "prompt,completion,prompt\na,b,c\n", "d.csv: the header names the column 'prompt' twice"),
    ],
)
def test_a_repeated_key_or_column_is_refused_not_dropped(tmp_path, name, content, expected):
    (tmp_path / name).write_text(content)
    assert expected in str(pytest.raises(UserError, data.read_rows, tmp_path / name).value)


def test_a_parquet_file_with_a_repeated_column_is_one_line(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table([pa.array(["a"]), pa.array(["b"]), pa.array(["c"])], names=["prompt", "completion", "prompt"])
    pq.write_table(table, tmp_path / "d.parquet")
    msg = str(pytest.raises(UserError, data.read_rows, tmp_path / "d.parquet").value)
    assert "d.parquet has the column 'prompt' twice: rename or drop one" in msg and "\n" not in msg


def test_length_check_of_a_runaway_template_stops_at_the_budget(monkeypatch):
    """length_problems tokenizes rows with the chat template: under the same budget as template_problems."""
    from trainer.models import builtin_model

    monkeypatch.setattr(data.preflight, "TEMPLATE_BUDGET_S", 0.3)
    tok = builtin_model.build_tokenizer()
    tok.chat_template = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}
    assert data.length_problems({"train": [row]}, tok, 64) == [
        "the chat template did not finish tokenizing the rows within 0.3 s (a template is code, and this one runs "
        "away: e.g. a loop like range(99999) inside another): fix the template, or give another with chat_template= "
        "(a built-in name or a .jinja file)"
    ]


def test_the_render_budget_puts_back_an_outer_timer():
    """SIGALRM and its timer are the process's: the budget restores whatever was there."""
    import signal

    fired = []
    handler = lambda *a: fired.append(1)  # noqa: E731
    previous = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 100)
        with data.time_limit(5):
            assert signal.getitimer(signal.ITIMER_REAL)[0] <= 5
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 90 < left <= 100 and signal.getsignal(signal.SIGALRM) is handler
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not fired


def test_the_eval_length_check_advises_raising_eval_max_rows_only_where_that_could_help():
    """It reads at most TEMPLATE_CHECK_ROWS rows: past that, raising eval_max_rows changes nothing it can see."""
    from trainer.models import builtin_model

    tokenizer = builtin_model.build_tokenizer()
    long = {"messages": [{"role": "user", "content": "x " * 3000}, {"role": "assistant", "content": "y"}]}
    short = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    beyond = data.TEMPLATE_CHECK_ROWS + 50
    for n, advised in ((20, True), (beyond, False)):
        splits = {"train": [short], "eval": [long] * beyond + [short] * 10}
        [problem] = data.length_problems(splits, tokenizer, 512, eval_max_rows=n)
        assert problem.startswith("no eval row of the ") and problem.endswith(", or raise eval_max_rows") is advised


def test_tools_as_bare_function_schemas_read_as_openai_tools_everywhere(tmp_path):
    """`tools: [{"name", "description", "parameters"}]` (a common shape) passed the row check and then crashed the
    template check with KeyError: 'function' (a traceback, exit 1): read as OpenAI tools when the row is read."""
    from trainer.data import builtin_data
    from trainer.validate import pipeline_problems

    rows = builtin_data.generate(60, 20, seed=4)
    for split in rows.values():
        for row in split:
            row["tools"] = [t["function"] for t in row["tools"]]
    data.write_jsonl(rows["train"] + rows["eval"], tmp_path / "bare.jsonl")
    problems = pipeline_problems({"dataset_source": str(tmp_path / "bare.jsonl")})
    assert not problems, problems
    converted, _ = data.convert(rows["train"][0])
    assert converted["tools"] == builtin_data.generate(60, 20, seed=4)["train"][0]["tools"]


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda r: r["tools"][0]["function"].update(name=""), "tools[0].function.name '' is empty"),
        (lambda r: r["tools"][0]["function"].update(name="get weather"), "holds ' ' (white space or control"),
        (lambda r: r["tools"][0]["function"].update(name="get\x07w"), "holds '\\x07'"),
        (lambda r: r["tools"].append(r["tools"][0]), "is declared twice in the row"),
        (
            lambda r: r["messages"].append({"role": "tool", "tool_call_id": "call_9", "content": "22C"}),
            "messages[2].tool_call_id 'call_9' answers no call made before it (the calls' ids: ['call_1'])",
        ),
    ],
)
def test_tool_names_no_application_can_call_and_results_answering_no_call_are_refused(change, said):
    """An empty tool name was accepted and trained; so were names with white space, duplicate tools and a tool
    result whose tool_call_id matches no call. Dotted names (BFCL's math.factorial) are real and kept."""
    from trainer.data import row_problems

    def row():
        return {
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
            "messages": [
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                    ],
                },
            ],
        }

    assert row_problems(row()) == []
    dotted = row()
    dotted["tools"][0]["function"]["name"] = dotted["messages"][1]["tool_calls"][0]["function"]["name"] = (
        "math.factorial"
    )
    assert row_problems(dotted) == []
    bad = row()
    change(bad)
    assert any(said in p for p in row_problems(bad)), row_problems(bad)


_SCHEMA = {
    "type": "object",
    "required": ["n"],
    "properties": {
        "n": {"type": "integer"},
        "x": {"type": "number"},
        "on": {"type": "boolean"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "array", "items": {"type": "integer"}},
    },
}


def _call_row(args):
    return {
        "tools": [{"type": "function", "function": {"name": "forecast", "parameters": _SCHEMA}}],
        "messages": [
            {"role": "user", "content": "Forecast?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "forecast", "arguments": json.dumps(args)}}],
            },
        ],
    }


@pytest.mark.parametrize(
    "args, said",
    [
        ({"n": "five"}, "(forecast.n: expected type integer, got string 'five')"),
        ({"n": True}, "(forecast.n: expected type integer, got boolean True)"),
        ({"n": "007"}, "(forecast.n: expected type integer, got string '007')"),  # not the same value as 7
        ({"x": 1.5}, "(missing required parameter 'n')"),
        ({"n": 1, "city": "Oslo"}, "(parameter 'city' is not declared by the schema)"),
        ({"n": 1, "unit": "k"}, "(forecast.unit: 'k' is not one of the schema's enum ['c', 'f'])"),
        ({"n": 1, "days": [1, "two"]}, "(forecast.days[1]: expected type integer, got string 'two')"),
    ],
)
def test_an_expected_call_that_breaks_its_own_tool_schema_is_refused(args, said):
    """Accepted before, and the checker then scored an exact copy of the answer as wrong (0/60), so
    min_fc_accuracy could turn a perfect model down."""
    with pytest.raises(UserError) as err:
        data.validate_rows([_call_row({"n": 1}), _call_row(args)], "d.jsonl")
    assert (
        f"d.jsonl row 2: messages[1].tool_calls[0].function.arguments breaks its own tool's schema {said}: the "
        "evaluation would score an exact copy of this call as wrong" in str(err.value)
    )


def test_values_spelled_in_another_type_than_the_schemas_are_read_as_its_type_and_said_once(capsys):
    from trainer.chat import fc_check

    rows = [
        _call_row({"n": "5", "x": "2.5", "on": "true", "days": ["1", 2.0]}),
        _call_row({"n": 3.0}),
        _call_row({"n": 4, "x": "1e400"}),
    ]
    with pytest.raises(UserError, match=r"row 3: .*forecast.x: expected type number, got string '1e400'"):
        data.validate_rows(rows, "d.jsonl")  # text that is no finite number stays text, and is refused
    out = data.validate_rows(rows[:2], "d.jsonl")
    said = capsys.readouterr().out
    assert said.count("d.jsonl: 2 calls gave values in another spelling than their tool's schema types") == 1
    assert (
        'e.g. row 1: {"n": "5", "x": "2.5", "on": "true", "days": ["1", 2.0]} -> '
        '{"n": 5, "x": 2.5, "on": true, "days": [1, 2]}' in said
    )
    first = out[0]["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert first == {"n": 5, "x": 2.5, "on": True, "days": [1, 2]} and type(first["n"]) is int
    assert out[1]["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"n": 3}
    # the row is now its own right answer
    call = out[0]["messages"][1]["tool_calls"][0]["function"]
    assert fc_check.check(out[0], [call], None) == (True, "call matched")
    data.validate_rows([_call_row({"n": 1})], "d.jsonl")
    assert "another spelling" not in capsys.readouterr().out


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_every_file_type_checks_calls_against_their_schemas_and_reads_them_in_its_types(tmp_path, suffix, capsys):
    """A .jsonl file, the usual one, skipped both (found by a review): a call breaking its own tool's schema trained
    and was scored wrong against itself, and "5" for an integer stayed text."""

    def write(name, rows):
        path = tmp_path / f"{name}{suffix}"
        path.write_text("\n".join(map(json.dumps, rows)) if suffix == ".jsonl" else json.dumps(rows))
        return path

    bad = write("bad", [_call_row({"n": 1}), _call_row({"n": 1, "unit": "k"})])
    with pytest.raises(
        UserError,
        match=rf"bad{suffix}(:| row )2: messages\[1\]\.tool_calls\[0\]\.function\.arguments "
        r"breaks its own tool's schema \(forecast\.unit: 'k' is not one of",
    ):
        data.read_rows(bad)
    out = data.read_rows(write("good", [_call_row({"n": "5"})]))
    assert out[0]["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"n": 5}
    assert f"good{suffix}: 1 call gave values in another spelling" in capsys.readouterr().out


def _deep(levels):
    value = 1
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda r: r["messages"][1].update(content=None, tool_calls=None), "messages[1].content is missing or null"),
        (lambda r: r["messages"].__setitem__(1, {"role": "assistant"}), "messages[1].content is missing or null"),
        (
            lambda r: r["messages"][1].update(role={"name": "assistant"}),
            "messages[1] has unknown role {'name': 'assistant'}",
        ),
        (lambda r: r["messages"][1].update(role=["assistant"]), "messages[1] has unknown role ['assistant']"),
        (
            lambda r: r["tools"][0]["function"]["parameters"].update(required=5),
            "tools[0].function.parameters.required must be a list of parameter names, e.g. [\"city\"], got 5",
        ),
        (
            lambda r: r["tools"][0]["function"]["parameters"].update(required="n"),
            "tools[0].function.parameters.required must be a list of parameter names, e.g. [\"city\"], got \"n\"",
        ),
        (
            lambda r: r["tools"][0]["function"]["parameters"]["properties"].update(
                unit={"type": "object", "required": {"a": 1}}
            ),
            "tools[0].function.parameters.properties.unit.required must be a list of parameter names",
        ),
        (
            lambda r: r["tools"][0]["function"]["parameters"].update(properties=["n"]),
            "tools[0].function.parameters.properties must be an object of parameter name -> its schema, got [\"n\"]",
        ),
        (
            lambda r: r["tools"][0]["function"]["parameters"]["properties"].update(n=5),
            "tools[0].function.parameters.properties.n must be a JSON schema object, got 5",
        ),
        (
            lambda r: r["tools"][0]["function"]["parameters"]["properties"]["unit"].update(enum="c"),
            "tools[0].function.parameters.properties.unit.enum must be a list of the allowed values, got \"c\"",
        ),
        (
            lambda r: r["tools"][0]["function"]["parameters"]["properties"]["days"].update(items=5),
            "tools[0].function.parameters.properties.days.items must be a JSON schema object, got 5",
        ),
        (
            lambda r: r["tools"][0]["function"]["parameters"]["properties"]["n"].update(type=5),
            "tools[0].function.parameters.properties.n.type must be a type name such as \"string\" (or a list of them), got 5",
        ),
        (
            lambda r: r["tools"][0]["function"].update(parameters=5),
            "tools[0].function.parameters must be a JSON schema object, got 5",
        ),
        (
            lambda r: r["messages"][1]["tool_calls"][0]["function"].update(arguments={"n": 1, "x": _deep(500)}),
            "messages[1].tool_calls[0].function.arguments is nested more than 64 levels deep",
        ),
        (
            lambda r: r["tools"][0]["function"]["parameters"]["properties"].update(deep=_deep(900)),
            "'tools' is nested more than 64 levels deep",
        ),
    ],
)
def test_malformed_messages_and_tool_schemas_are_one_message_each_not_a_traceback(tmp_path, change, said):
    """Each gave a traceback (KeyError 'content', an unhashable role, 'int' object is not iterable in the checker,
    RecursionError), or was read wrongly ("required": "n" as the names of its letters), or was accepted and left to
    fail at the server (found by a review)."""
    row = copy.deepcopy(_call_row({"n": 1}))  # _call_row's rows share one schema
    change(row)
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(_call_row({"n": 2})) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(UserError) as err:
        data.read_rows(path)
    assert f"d.jsonl:2: {said}" in str(err.value)


@pytest.mark.parametrize(
    "schema, args",
    [
        ({"type": "object", "properties": {"p": {"type": "string", "nullable": True}}}, {"p": None}),  # OpenAPI, Gemini
        ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {}}, {"a": "x", "b": 1}),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True}, {"a": "x", "b": 1}),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "allOf": [{"properties": {"b": {"type": "integer"}}}],
            },
            {"a": "x", "b": 1},
        ),
        (
            {
                "type": "object",
                "properties": {
                    "p": {"type": "string", "required": True},
                    "q": {  # draft 3 (MCP catalogues)
                        "type": "object",
                        "required": False,
                        "properties": {"r": {"type": "integer", "required": True}},
                    },
                },
            },
            {"p": "x", "q": {"r": 1}},
        ),
        ({"type": "object", "properties": {"p": True, "q": None}}, {"p": [1], "q": 1}),  # any value; absent
    ],
)
def test_valid_json_schemas_the_checker_does_not_fully_read_are_accepted_in_every_file_type(tmp_path, schema, args):
    """Refused as "breaks its own tool's schema" (or a TypeError in the checker) once .jsonl files got the schema
    check: nullable, additionalProperties {} or true, properties in allOf, draft 3's boolean required (a review)."""
    from trainer.chat import fc_check

    row = {
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
        "messages": [
            {"role": "user", "content": "Do it."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": args}}],
            },
        ],
    }
    (tmp_path / "d.jsonl").write_text(json.dumps(row) + "\n")
    [read] = data.read_rows(tmp_path / "d.jsonl")
    assert read["messages"][1]["tool_calls"][0]["function"]["arguments"] == args
    assert fc_check.check(read, [{"name": "f", "arguments": args}], None) == (True, "call matched")


def test_a_schema_type_given_as_a_list_of_types_is_checked_as_json_schema_reads_it():
    """typed() raised TypeError (unhashable list) on `"type": ["integer", "string"]`, valid JSON schema."""
    row = _call_row({"n": 1})
    row["tools"][0]["function"]["parameters"]["properties"]["n"]["type"] = ["integer", "string"]
    for value in (1, "one"):
        row["messages"][1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"n": value})
        [out] = data.validate_rows([row], "d.jsonl")
        assert out["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"n": value}
    row["messages"][1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"n": [1]})
    with pytest.raises(UserError, match="expected type integer/string, got array"):
        data.validate_rows([row], "d.jsonl")


@pytest.mark.parametrize(
    "open_tag, close_tag",
    [
        ("{%- generation %}", "{%- endgeneration %}"),
        ("{% generation -%}", "{% endgeneration -%}"),
        ("{%- generation -%}", "{%- endgeneration -%}"),
        # issue 57 F2: Jinja's `+` modifier, which transformers' own pattern misses (its mask still marks every turn)
        ("{%+ generation %}", "{%+ endgeneration %}"),
        ("{% generation +%}", "{% endgeneration +%}"),
        ("{%generation%}", "{%endgeneration%}"),
    ],
)
def test_generation_block_with_whitespace_control_masks_every_assistant_turn(tokenizer, open_tag, close_tag):
    """`{%- generation %}` is the block transformers marks from: it was not recognised, and a multi-turn
    row trained its last assistant turn only (9 tokens where transformers' own mask has 29)."""
    import random

    from trainer.data import builtin_data

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = tokenizer.chat_template.replace("{% generation %}", open_tag).replace(
        "{% endgeneration %}", close_tag
    )
    assert open_tag in tok.chat_template
    row = builtin_data.make_multi_turn_row(random.Random(0))
    enc = tok.apply_chat_template(
        row["messages"],
        tools=row.get("tools") or None,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    out = data.encode(row, tok, 4096)
    assert out["input_ids"] == list(enc["input_ids"])
    assert [int(label != -100) for label in out["labels"]] == list(enc["assistant_masks"])
    assert sum(enc["assistant_masks"]) > 0 and out["labels"] == data.encode(row, tokenizer, 4096)["labels"]


def test_delivered_rows_are_read_plainly_only_where_the_tree_says_they_were_checked(tmp_path):
    """Delivery checks every row once and says so beside the splits (data.CHECKED); training's ranks, evaluation and
    the contamination check then read plain JSON lines. A tree without that record, or with an older one, is
    checked where it is read: a bad row there is refused as read_jsonl refuses it."""
    good = json.loads(GOOD)
    bad = {"messages": [{"role": "robot", "content": "x"}, {"role": "assistant", "content": "y"}]}
    assert data.write_delivered({"train": [good, good], "eval": [good]}, tmp_path) == {"train": 2, "eval": 1}
    assert json.loads((tmp_path / data.CHECKED).read_text()) == {
        "row_checks": data.ROW_CHECKS,
        "rows": {"train": 2, "eval": 1},
    }
    assert data.read_delivered(tmp_path / "train.jsonl") == [good, good]
    data.write_jsonl([good, bad], tmp_path / "train.jsonl")  # what only a checked tree may hold: read as it is
    assert data.read_delivered(tmp_path / "train.jsonl") == [good, bad]
    for record in (None, '{"row_checks": 0}', "not json", "[1]"):
        if record is None:
            (tmp_path / data.CHECKED).unlink()
        else:
            (tmp_path / data.CHECKED).write_text(record)
        with pytest.raises(UserError, match="unknown role 'robot'"):
            data.read_delivered(tmp_path / "train.jsonl")
