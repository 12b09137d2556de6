"""The function-calling datasets users name (glaive-function-calling-v2, hermes-function-calling-v1,
xLAM / APIGen, OpenAI's fine-tuning format) read into chat rows with tools, calls and results
(trainer.data.fc_formats). Every row here is written by hand after the dataset cards' formats."""

import json

import pytest

from trainer import data, parity
from trainer.data import formats
from trainer.core.errors import UserError

CONVERT = {
    "name": "convert_currency",
    "description": "Convert an amount between currencies",
    "parameters": {
        "type": "object",
        "properties": {"amount": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"}},
        "required": ["amount", "from", "to"],
    },
}
CLOCK = {"name": "get_time", "description": "The current time", "parameters": {"type": "object", "properties": {}}}
NOTE = {
    "name": "save_note",
    "description": "Save a note",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}


def tools(*schemas):
    return [{"type": "function", "function": s} for s in schemas]


def call(name, args, n):
    return {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": args}}


def write(tmp_path, rows, name="d.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def refusal(tmp_path, rows):
    msg = str(pytest.raises(UserError, data.read_rows, write(tmp_path, rows)).value)
    assert "Traceback" not in msg
    return msg


# glaive-function-calling-v2 ---------------------------------------------------------------------------

GLAIVE_SYSTEM = (
    "SYSTEM: You are a helpful assistant with access to the following functions. Use them if "
    "required -\n"
    + json.dumps(CONVERT, indent=4)
    + "\n\n"
    + json.dumps(CLOCK, indent=4)
    + "\n\n"
    + json.dumps(NOTE, indent=4)
    + "\n"
)
GLAIVE = {
    "system": GLAIVE_SYSTEM,
    "chat": (
        "USER: How much is 20 euros in dollars?\n\n\n"
        "ASSISTANT: <functioncall> {\"name\": \"convert_currency\", \"arguments\": "
        "'{\"amount\": 20, \"from\": \"EUR\", \"to\": \"USD\"}'} <|endoftext|>\n\n\n"
        "FUNCTION RESPONSE: {\"converted_amount\": 21.7}\n\n\n"
        "ASSISTANT: 20 euros are 21.70 dollars. <|endoftext|>\n\n\n"
        "USER: And what time is it? Also note that it's done.\n\n\n"
        "ASSISTANT: Let me check. <functioncall> {\"name\": \"get_time\", \"arguments\": '{}'} <|endoftext|>\n\n\n"
        "FUNCTION RESPONSE: {\"time\": \"10:30\"}\n\n\n"
        # an apostrophe inside the single-quoted arguments: no JSON or Python reader takes the call whole
        "ASSISTANT: <functioncall> {\"name\": \"save_note\", \"arguments\": '{\"text\": \"it's done\"}'} <|endoftext|>"
        "\n\n\nFUNCTION RESPONSE: {\"saved\": true}\n\n\n"
        "ASSISTANT: It is 10:30, and the note is saved. <|endoftext|>"
    ),
}
GLAIVE_NO_TOOLS = {
    "system": "SYSTEM: You are a helpful assistant, with no access to external functions.",
    "chat": "USER: Tell me a joke. ASSISTANT: Why did the chicken cross the road? <|endoftext|>",
}


def test_glaive_rows_become_tools_calls_and_linked_results(tmp_path, capsys):
    path = write(tmp_path, [GLAIVE, GLAIVE_NO_TOOLS])
    row, plain = data.read_rows(path)
    assert row["tools"] == tools(CONVERT, CLOCK, NOTE)
    assert row["messages"] == [
        {
            "role": "system",
            "content": "You are a helpful assistant with access to the following functions. Use them if required -",
        },
        {"role": "user", "content": "How much is 20 euros in dollars?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("convert_currency", {"amount": 20, "from": "EUR", "to": "USD"}, 0)],
        },
        {"role": "tool", "content": "{\"converted_amount\": 21.7}", "tool_call_id": "call_0"},
        {"role": "assistant", "content": "20 euros are 21.70 dollars."},
        {"role": "user", "content": "And what time is it? Also note that it's done."},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [call("get_time", {}, 1)]},
        {"role": "tool", "content": "{\"time\": \"10:30\"}", "tool_call_id": "call_1"},
        {"role": "assistant", "content": "", "tool_calls": [call("save_note", {"text": "it's done"}, 2)]},
        {"role": "tool", "content": "{\"saved\": true}", "tool_call_id": "call_2"},
        {"role": "assistant", "content": "It is 10:30, and the note is saved."},
    ]
    assert plain == {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant, with no access to external functions."},
            {"role": "user", "content": "Tell me a joke."},
            {"role": "assistant", "content": "Why did the chicken cross the road?"},
        ]
    }
    assert formats.convert(GLAIVE)[1] == "glaive"
    # a role's name inside a sentence is text where the turns are on lines of their own (it split the user's turn)
    quoted = {
        "system": GLAIVE_NO_TOOLS["system"],
        "chat": (
            'USER: My log has lines like "Bot said ASSISTANT: hi". How do I strip ASSISTANT: from them?\n\n\n'
            "ASSISTANT: Use sed 's/ASSISTANT: //'. <|endoftext|>\n\n\nUSER: Thanks!\n\n\nASSISTANT: You're welcome."
        ),
    }
    assert [m["content"] for m in formats.convert(quoted)[0]["messages"][1:]] == [
        'My log has lines like "Bot said ASSISTANT: hi". How do I strip ASSISTANT: from them?',
        "Use sed 's/ASSISTANT: //'.",
        "Thanks!",
        "You're welcome.",
    ]
    # turns on lines of their own in part, by spaces elsewhere: a turn that goes on after <|endoftext|> is split
    mixed = {
        "system": GLAIVE_NO_TOOLS["system"],
        "chat": "USER: Hi\nASSISTANT: Hello! <|endoftext|> USER: A joke? "
        "ASSISTANT: Why did the chicken cross the road? <|endoftext|>",
    }
    assert [m["content"] for m in formats.convert(mixed)[0]["messages"][1:]] == [
        "Hi",
        "Hello!",
        "A joke?",
        "Why did the chicken cross the road?",
    ]
    assert (
        f"{path}: 2 glaive-function-calling-v2 (system, chat) rows converted to chat messages"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize(
    "row, expected",
    [
        (
            {
                "system": GLAIVE_SYSTEM,
                "chat": "USER: 20 EUR?\n\nASSISTANT: <functioncall> {\"name\": \"convert_currency\", "
                "\"arguments\": '{amount: 20}'} <|endoftext|>",
            },
            "d.jsonl:1: 'chat' turn 2 (ASSISTANT): the arguments of 'convert_currency' are not JSON (Expecting property name "
            "enclosed in double quotes): glaive writes a call as <functioncall> {\"name\": \"f\", \"arguments\": '{\"a\": 1}'}"
            "; fix them, or drop the row",
        ),
        (
            {
                "system": GLAIVE_SYSTEM,
                "chat": "USER: hi\n\nASSISTANT: <functioncall> convert_currency(20) <|endoftext|>",
            },
            "'chat' turn 2 (ASSISTANT): the call 'convert_currency(20)' is not {\"name\": ..., \"arguments\": ...}",
        ),
        (
            {"system": "SYSTEM: Use these -\n{\"name\": \"f\", \"parameters\": {", "chat": "USER: hi\nASSISTANT: yo"},
            "'system' holds '{\"name\": \"f\", \"parameters\": {'..., not a function's JSON schema (Expecting property "
            "name enclosed in double quotes): glaive's system is \"SYSTEM: <text> -\" then one JSON object per function",
        ),
        (
            {"system": "", "chat": "Hello there\nUSER: hi\nASSISTANT: yo"},
            "'chat' starts with 'Hello there', not a turn",
        ),
        ({"system": "", "chat": "USER: hi\nASSISTANT: <|endoftext|>"}, "'chat' turn 2 (ASSISTANT) is empty"),
        ({"system": "", "chat": ["USER: hi"]}, "'chat' must be glaive's conversation as text"),
        (
            {
                "system": GLAIVE_SYSTEM,
                "chat": "USER: Time?\n\nASSISTANT: <functioncall> {\"name\": \"get_time\", "
                "\"arguments\": '{}'} Let me check. <|endoftext|>",
            },
            "'chat' turn 2 (ASSISTANT): text follows the call ('Let me check.')",
        ),  # said so for JSON arguments only
    ],
    ids=[
        "args-not-json",
        "not-a-call",
        "bad-schema",
        "text-before-turns",
        "empty-turn",
        "chat-not-text",
        "text-after-quoted-args",
    ],
)
def test_glaive_rows_that_do_not_parse_are_refused_with_the_problem_and_the_fix(tmp_path, row, expected):
    assert expected in refusal(tmp_path, [row])


# hermes-function-calling-v1 ---------------------------------------------------------------------------


def hermes_system(listed):
    return (
        "You are a function calling AI model. Function signatures are given within <tools> </tools> XML "
        f"tags. Here are the tools: <tools> {listed} </tools> Reply with each call as JSON within "
        "<tool_call> </tool_call> tags."
    )


HERMES = {
    "conversations": [
        # tools and calls as Python reprs (single quotes), as the dataset writes some of them
        {"from": "system", "value": hermes_system(str(tools(CONVERT, CLOCK)))},
        {"from": "human", "value": "Convert 20 EUR and 30 GBP to USD, and tell me the time."},
        {
            "from": "gpt",
            "value": "On it.\n<tool_call>\n"
            + str({"arguments": {"amount": 20, "from": "EUR", "to": "USD"}, "name": "convert_currency"})
            + "\n</tool_call>\n<tool_call>\n"
            + json.dumps({"name": "convert_currency", "arguments": {"amount": 30, "from": "GBP", "to": "USD"}})
            + "\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
        },
        {
            "from": "tool",
            "value": "<tool_response>\n{\"converted_amount\": 21.7}\n</tool_response>\n"
            "<tool_response>\n{\"converted_amount\": 38.1}\n</tool_response>\n"
            "<tool_response>\n{\"time\": \"10:30\"}\n</tool_response>",
        },
        {"from": "gpt", "value": "20 EUR are 21.70 USD, 30 GBP are 38.10 USD, and it is 10:30."},
    ]
}
HERMES_MESSAGES = [
    # the prose around the tools stays (a line each); the tools are the chat template's to write
    {
        "role": "system",
        "content": "You are a function calling AI model. Function signatures are given within <tools> "
        "</tools> XML tags. Here are the tools:\nReply with each call as JSON within "
        "<tool_call> </tool_call> tags.",
    },
    {"role": "user", "content": "Convert 20 EUR and 30 GBP to USD, and tell me the time."},
    {
        "role": "assistant",
        "content": "On it.",
        "tool_calls": [
            call("convert_currency", {"amount": 20, "from": "EUR", "to": "USD"}, 0),
            call("convert_currency", {"amount": 30, "from": "GBP", "to": "USD"}, 1),
            call("get_time", {}, 2),
        ],
    },
    {"role": "tool", "content": "{\"converted_amount\": 21.7}", "tool_call_id": "call_0"},
    {"role": "tool", "content": "{\"converted_amount\": 38.1}", "tool_call_id": "call_1"},
    {"role": "tool", "content": "{\"time\": \"10:30\"}", "tool_call_id": "call_2"},
    {"role": "assistant", "content": "20 EUR are 21.70 USD, 30 GBP are 38.10 USD, and it is 10:30."},
]
PLAIN_SHAREGPT = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}


def test_hermes_rows_become_parallel_calls_with_one_result_each(tmp_path, capsys):
    assert formats.row_format(HERMES) == "hermes"
    path = write(tmp_path, [HERMES, PLAIN_SHAREGPT])  # a Hermes file may hold rows without tools
    row, plain = data.read_rows(path)
    assert row["tools"] == tools(CONVERT, CLOCK)
    assert row["messages"] == HERMES_MESSAGES
    assert plain == {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    out = capsys.readouterr().out
    assert "1 Hermes function calling (ShareGPT with <tools>, <tool_call>, <tool_response>) row converted" in out
    assert "1 ShareGPT ('conversations' of {from, value}) row converted" in out


def test_hermes_under_messages_and_a_call_alone_keep_the_turns_weight():
    row = {
        "messages": [
            {"from": "system", "value": f"<tools>{json.dumps(tools(CLOCK))}</tools>"},
            {"from": "human", "value": "Time?"},
            {"from": "gpt", "value": "<tool_call>{'name': 'get_time'}</tool_call>", "weight": 0},
            {"from": "tool", "value": "10:30"},
            {"from": "gpt", "value": "It is 10:30."},
        ]
    }
    [out] = data.validate_rows([row], "rows")
    assert out == {
        "tools": tools(CLOCK),
        "messages": [  # the system turn held the tools only: no prompt left
            {"role": "user", "content": "Time?"},
            {"role": "assistant", "content": "", "tool_calls": [call("get_time", {}, 0)], "weight": 0},
            {"role": "tool", "content": "10:30", "tool_call_id": "call_0"},
            {"role": "assistant", "content": "It is 10:30."},
        ],
    }


@pytest.mark.parametrize(
    "turn, expected",
    [
        (
            {"from": "gpt", "value": "<tool_call>{'name': 'get_time', 'arguments': </tool_call>"},
            "d.jsonl:1: conversations[2]: <tool_call> holds \"{'name': 'get_time', 'arguments':\", not {\"name\": ..., "
            "\"arguments\": {...}} (Expecting property name enclosed in double quotes at character 1); fix it, or drop the "
            "row",
        ),
        (
            {"from": "gpt", "value": "<tool_call>{\"name\": \"get_time\", \"arguments\": \"{x\"}</tool_call>"},
            "conversations[2]: the arguments of 'get_time' are not JSON (Expecting property name",
        ),
        (
            {"from": "gpt", "value": "<tool_call>{\"name\": \"get_time\"}"},
            "conversations[2] has a <tool_call> without its </tool_call>: close it, or drop the row",
        ),
    ],
    ids=["call-not-json", "arguments-not-json", "unclosed"],
)
def test_hermes_rows_that_do_not_parse_are_refused_naming_the_turn(tmp_path, turn, expected):
    row = {"conversations": [HERMES["conversations"][0], {"from": "human", "value": "Time?"}, turn]}
    assert expected in refusal(tmp_path, [row])
    without_tools = {"conversations": row["conversations"][1:]}  # still Hermes: by its call
    assert expected.replace("d.jsonl:1: ", "").replace("[2]", "[1]") in refusal(tmp_path, [without_tools])


def test_hermes_tools_that_do_not_parse_and_shareGPT_problems_are_named_as_given(tmp_path):
    row = {
        "conversations": [
            {"from": "system", "value": "<tools>[{'name': </tools>"},
            {"from": "human", "value": "hi"},
            {"from": "gpt", "value": "yo"},
        ]
    }
    assert "conversations[0]: <tools> holds \"[{'name':\", not a JSON list of function schemas" in refusal(
        tmp_path, [row]
    )
    row = {
        "conversations": [
            {"from": "gpt", "value": "<tool_call>{\"name\": \"f\"}</tool_call>"},
            {"from": "bot", "value": "x"},
        ]
    }
    assert "conversations[1] has unknown 'from' 'bot'" in refusal(tmp_path, [row])


# xLAM / APIGen ----------------------------------------------------------------------------------------

XLAM_TOOLS = [
    {
        "name": "convert_currency",
        "description": "Convert an amount between currencies.",
        "parameters": {
            "amount": {"description": "How much.", "type": "float"},
            "currency": {"description": "ISO code to convert to.", "type": "str, optional", "default": "USD"},
            "rounding": {"description": "Decimal places.", "type": "Optional[int]"},
            "fee": {"description": "A fee to add.", "type": "Union[int, float, None]", "default": 0},
        },
    },
    {
        "name": "sum_list",
        "description": "Add numbers.",
        "parameters": {
            "numbers": {"description": "The numbers.", "type": "List[int]"},
            "strict": {"description": "Refuse non-numbers.", "type": "bool", "default": False},
            "callback": {"description": "Called with the sum.", "type": "Callable"},
        },
    },
    {"name": "get_time", "description": "The current time.", "parameters": {}},
]
XLAM = {
    "id": 7,
    "query": "Convert 20 EUR, add 1, 2 and 3, and tell me the time.",
    "tools": json.dumps(XLAM_TOOLS),
    "answers": json.dumps(
        [
            {"name": "convert_currency", "arguments": {"amount": 20.0}},
            {"name": "sum_list", "arguments": {"numbers": [1, 2, 3], "callback": "print"}},
            {"name": "get_time", "arguments": {}},
        ]
    ),
}


def test_xlam_rows_become_json_schema_tools_and_parallel_calls(tmp_path, capsys):
    assert formats.row_format(XLAM) == "xlam"
    path = write(tmp_path, [XLAM, {**XLAM, "tools": XLAM_TOOLS, "answers": json.loads(XLAM["answers"])}])
    row, as_lists = data.read_rows(path)
    assert row == as_lists  # the columns as JSON text (the dataset's) or as lists
    assert [t["function"]["parameters"] for t in row["tools"]] == [
        {
            "type": "object",
            "required": ["amount"],
            "properties": {
                "amount": {"type": "number", "description": "How much."},
                "currency": {"type": "string", "description": "ISO code to convert to.", "default": "USD"},
                "rounding": {"type": "integer", "description": "Decimal places."},
                "fee": {"type": "number", "description": "A fee to add.", "default": 0},
            },
        },
        {
            "type": "object",
            "required": ["numbers", "callback"],
            "properties": {
                "numbers": {"type": "array", "items": {"type": "integer"}, "description": "The numbers."},
                "strict": {"type": "boolean", "description": "Refuse non-numbers.", "default": False},
                "callback": {"description": "Called with the sum."},
            },
        },  # no JSON schema type: left open
        {"type": "object", "properties": {}, "required": []},
    ]
    assert row["messages"] == [
        {"role": "user", "content": XLAM["query"]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                call("convert_currency", {"amount": 20.0}, 0),
                call("sum_list", {"numbers": [1, 2, 3], "callback": "print"}, 1),
                call("get_time", {}, 2),
            ],
        },
    ]
    assert "2 xLAM / APIGen (query, tools, answers) rows converted to chat messages" in capsys.readouterr().out


def test_xlam_rows_in_parquet_with_structured_columns_read_as_the_same_rows_in_json(tmp_path):
    """Arrow gives every row every key another row's tools have, null where absent: a filler "default": null made a
    required parameter optional, and another row's parameters made the tools unreadable (found by a review)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    weather = {
        "name": "get_weather",
        "description": "Weather.",
        "parameters": {"location": {"description": "City.", "type": "str"}},
    }
    rows = [
        {
            "query": "Weather in Oslo?",
            "tools": [weather],
            "answers": [{"name": "get_weather", "arguments": {"location": "Oslo"}}],
        },
        {
            "query": "Weather here?",
            "tools": [
                {**weather, "parameters": {"location": {"description": "City.", "type": "str", "default": "London"}}}
            ],
            "answers": [{"name": "get_weather", "arguments": {"location": "London"}}],
        },
        {**XLAM, "tools": XLAM_TOOLS, "answers": json.loads(XLAM["answers"])},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x.parquet")
    (tmp_path / "x.json").write_text(json.dumps(rows))
    from_json, from_parquet = data.read_rows(tmp_path / "x.json"), data.read_rows(tmp_path / "x.parquet")
    assert from_parquet == from_json
    assert from_json[0]["tools"][0]["function"]["parameters"]["required"] == ["location"]


@pytest.mark.parametrize(
    "row, expected",
    [
        (
            {**XLAM, "answers": "[]"},
            "d.jsonl:1: 'answers' is empty: an xLAM row teaches the calls that answer its query, "
            "and this one has none and no text answer to learn instead; for a request no tool "
            "fits, write the row as {\"messages\"",
        ),
        ({**XLAM, "answers": "[{'name': 'get_time'}]"}, "'answers' is text that is not JSON (Expecting property name"),
        (
            {**XLAM, "answers": json.dumps([{"name": "get_time", "arguments": "{x"}])},
            "answers[0]: the arguments of 'get_time' are not JSON",
        ),
        (
            {**XLAM, "answers": json.dumps([{"name": "book_flight", "arguments": {}}])},
            "messages[1].tool_calls[0] calls 'book_flight', which is not in the row's tools",
        ),
        (
            {**XLAM, "tools": "[]", "answers": json.dumps([{"name": "get_time", "arguments": {}}])},
            "calls 'get_time', which is not in the row's tools []",
        ),
        ({"query": "hi", "tools": "[]"}, "xLAM rows need 'query', 'tools' and 'answers'"),
    ],
    ids=["no-answers", "answers-python-repr", "arguments-not-json", "undeclared-call", "no-tools", "no-answers-key"],
)
def test_xlam_rows_that_cannot_be_read_are_refused_with_the_fix(tmp_path, row, expected):
    assert expected in refusal(tmp_path, [row])


# OpenAI's fine-tuning chat format -----------------------------------------------------------------------

OPENAI = {
    "tools": tools(CONVERT, CLOCK),
    "parallel_tool_calls": True,
    "messages": [
        {"role": "system", "content": "You convert currencies."},
        {"role": "user", "content": "20 EUR and 30 GBP in USD?"},
        {
            "role": "assistant",
            "content": None,
            "weight": 1,
            "tool_calls": [  # arguments as JSON text: OpenAI's
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {
                        "name": "convert_currency",
                        "arguments": "{\"amount\": 20, \"from\": \"EUR\", \"to\": \"USD\"}",
                    },
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {
                        "name": "convert_currency",
                        "arguments": "{\"amount\": 30, \"from\": \"GBP\", \"to\": \"USD\"}",
                    },
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "21.7"},
        {"role": "tool", "tool_call_id": "call_b", "content": "38.1"},
        {"role": "assistant", "content": "21.70 and 38.10 USD.", "weight": 0},
    ],
}


def test_openai_fine_tuning_rows_are_read_and_weight_0_is_not_trained(tokenizer):
    [row] = data.validate_rows([OPENAI], "openai")
    assert "parallel_tool_calls" not in row and row["tools"] == OPENAI["tools"]
    assert row["messages"][2]["tool_calls"][1]["function"]["arguments"] == {"amount": 30, "from": "GBP", "to": "USD"}
    trained = tokenizer.decode([t for t in data.encode(row, tokenizer, 1024)["labels"] if t != -100])
    assert "convert_currency" in trained and "21.70" not in trained  # the weight-0 answer is context only
    one_each = {
        **OPENAI,
        "parallel_tool_calls": False,
        "messages": OPENAI["messages"][:2]
        + [{**OPENAI["messages"][2], "tool_calls": OPENAI["messages"][2]["tool_calls"][:1]}, OPENAI["messages"][3]],
    }
    assert data.validate_rows([one_each], "openai")[0]["messages"][2]["tool_calls"][0]["id"] == "call_a"


def test_openai_rows_in_csv_read_parallel_tool_calls_as_the_boolean_csv_spells(tmp_path):
    """Every CSV cell is text: 'false' was refused as not a boolean, so no CSV of this format could be read."""
    import csv

    single = {
        **OPENAI,
        "messages": OPENAI["messages"][:2]
        + [{**OPENAI["messages"][2], "tool_calls": OPENAI["messages"][2]["tool_calls"][:1]}, OPENAI["messages"][3]],
    }
    with (tmp_path / "d.csv").open("w", newline="") as f:
        out = csv.DictWriter(f, ["messages", "tools", "parallel_tool_calls"])
        out.writeheader()
        for row, flag in ((OPENAI, "True"), (single, "false")):
            out.writerow(
                {
                    "messages": json.dumps(row["messages"]),
                    "tools": json.dumps(row["tools"]),
                    "parallel_tool_calls": flag,
                }
            )
    assert data.read_rows(tmp_path / "d.csv") == data.validate_rows(
        [OPENAI, {**single, "parallel_tool_calls": False}], "d"
    )
    (tmp_path / "d.csv").write_text((tmp_path / "d.csv").read_text().replace(",false", ",no"))
    refused = str(pytest.raises(UserError, data.read_rows, tmp_path / "d.csv").value)
    assert "d.csv row 2: 'parallel_tool_calls' must be true or false (OpenAI's fine-tuning format), got 'no'" in refused


def test_parallel_tool_calls_false_beside_parallel_calls_is_the_rows_problem():
    row = {**OPENAI, "parallel_tool_calls": False}
    assert formats.conversion_problems(row) == [
        "'parallel_tool_calls' is false, but messages[2] makes 2 calls at once: the model would learn calls its "
        "requests forbid; set parallel_tool_calls to true, or give each call its own turn"
    ]
    assert formats.conversion_problems({**OPENAI, "parallel_tool_calls": "no"}) == [
        "'parallel_tool_calls' must be true or false (OpenAI's fine-tuning format), got 'no'"
    ]
    assert formats.conversion_problems(OPENAI) is None  # converted: its messages are checked as chat


@pytest.mark.parametrize(
    "row",
    [
        {**OPENAI, "parallel_tool_calls": False},
        # refused today too, but as chat messages without roles, not for its call
        {
            "messages": [
                {"from": "human", "value": "Time?"},
                {"from": "gpt", "value": "<tool_call>{'name': </tool_call>"},
            ]
        },
    ],
    ids=["parallel-false", "hermes-under-messages"],
)
def test_rows_refused_by_their_converter_while_holding_messages_are_refused_for_it(row):
    [problem] = formats.conversion_problems(row)
    assert problem in str(pytest.raises(UserError, data.validate_rows, [row], "rows").value)


# every format --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rows, expected",
    [
        (
            [GLAIVE, GLAIVE_NO_TOOLS, XLAM],
            "d.jsonl:3: row is xLAM / APIGen (query, tools, answers), but 2 of the file's "
            "3 rows are glaive-function-calling-v2 (system, chat): a file holds one format",
        ),
        (
            [HERMES, PLAIN_SHAREGPT, OPENAI],
            "d.jsonl:3: row is chat ('messages') or prompt-completion, but 2 of the "
            "file's 3 rows are ShareGPT ('conversations' of {from, value})",
        ),
        (
            [OPENAI, OPENAI, GLAIVE],
            "d.jsonl:3: row is glaive-function-calling-v2 (system, chat), but 2 of the file's 3 "
            "rows are chat ('messages') or prompt-completion",
        ),
    ],
    ids=["glaive-and-xlam", "hermes-and-openai", "openai-and-glaive"],
)
def test_a_file_mixing_formats_is_refused_row_by_row(tmp_path, rows, expected):
    assert expected in refusal(tmp_path, rows)


def test_converted_rows_pass_the_row_checks_and_the_builtin_templates_parity_check(tokenizer):
    rows = (
        data.validate_rows([GLAIVE], "g")
        + data.validate_rows([HERMES], "h")
        + data.validate_rows([XLAM], "x")
        + data.validate_rows([OPENAI], "o")
    )
    assert [data.row_problems(r) for r in rows] == [[]] * 4
    verdict = parity.check(rows, tokenizer, "hermes")
    assert verdict.ok, verdict.problems
    assert verdict.with_tools == 4 and verdict.turns == 5 + 2 + 1 + 1  # OPENAI's weight-0 answer is not trained


_GET_X = '{"name": "get_x", "description": "d", "parameters": {"type": "object", "properties": {}}}'
_HERMES_TOOLS = (
    'You may call <tools>[{"type": "function", "function": {"name": "get_x", "parameters": '
    '{"type": "object", "properties": {}}}}]</tools>'
)


@pytest.mark.parametrize(
    "row, said",
    [
        (
            {
                "system": f"SYSTEM: x - {_GET_X}",
                "chat": "USER: hi\n\nASSISTANT: <functioncall> {\"name\": \"get_x\", "
                "\"arguments\": '{}'}\n\nFUNCTION RESPONSE: 1\n\nFUNCTION RESPONSE: 2\n\nASSISTANT: ok",
            },
            "the tool result '2' (message 5) has no call left to answer",
        ),
        (
            {"system": f"SYSTEM: x - {_GET_X}", "chat": 'USER: hi\n\nFUNCTION RESPONSE: {"r": 1}\n\nASSISTANT: ok'},
            "has no call left to answer",
        ),
        (
            {
                "system": f"SYSTEM: x - {_GET_X}",
                "chat": "USER: hi\n\nASSISTANT: <functioncall> {\"name\": \"get_x\", "
                "\"arguments\": '{}'} <functioncall> {\"name\": \"get_x\", \"arguments\": '{}'}",
            },
            "'chat' turn 2 (ASSISTANT) holds 2 <functioncall>s",
        ),
        (
            {"system": 'SYSTEM: x - {"name": "get_x", "n": 1e999}', "chat": "USER: hi\n\nASSISTANT: ok"},
            "tools[0]['function']['n'] must be a finite number, not NaN or Infinity",
        ),
        (
            {
                "conversations": [
                    {"from": "system", "value": _HERMES_TOOLS},
                    {"from": "human", "value": "hi"},
                    {"from": "gpt", "value": "<tool_call>\n</tool_call>"},
                ]
            },
            "conversations[2] has an empty <tool_call></tool_call>",
        ),
        (
            {
                "conversations": [
                    {"from": "system", "value": _HERMES_TOOLS},
                    {"from": "human", "value": "hi"},
                    {"from": "gpt", "value": '<tool_call>{"name": "get_x", "arguments": {}}</tool_call>'},
                    {"from": "tool", "value": "<tool_response>1</tool_response>"},
                    {"from": "tool", "value": "<tool_response>2</tool_response>"},
                    {"from": "gpt", "value": "ok"},
                ]
            },
            "has no call left to answer",
        ),
        (
            {
                "conversations": [
                    {"from": "system", "value": _HERMES_TOOLS},
                    {"from": "human", "value": "hi"},
                    {"from": "gpt", "value": '<tool_call>{"name": "get_x", "arguments": {}}</tool_call>'},
                    {"from": "tool", "value": "<tool_response></tool_response>"},
                    {"from": "gpt", "value": "ok"},
                ]
            },
            "conversations[3] has an empty <tool_response></tool_response>",
        ),
    ],
)
def test_a_result_of_no_call_an_empty_tag_a_second_call_or_a_non_finite_schema_is_refused(row, said):
    with pytest.raises(UserError) as err:
        data.validate_rows([row], "x")
    assert said in str(err.value)


def test_a_plain_rows_tool_schema_with_nan_is_refused():
    row = {
        "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "ok"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "parameters": {"type": "object", "properties": {"a": {"type": "number", "default": float("nan")}}},
                },
            }
        ],
    }
    with pytest.raises(UserError, match=r"\['default'\] must be a finite number, not NaN or Infinity"):
        data.validate_rows([row], "x")


# a call with no tool list (issue 45) ---------------------------------------------------------------------

_TIME_CALL = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>"


@pytest.mark.parametrize(
    "row, expected",
    [
        (
            {
                "system": "SYSTEM: You are a helpful assistant.",
                "chat": "USER: Time?\n\nASSISTANT: <functioncall> {\"name\": \"get_time\", \"arguments\": '{}'} <|endoftext|>"
                "\n\nFUNCTION RESPONSE: {\"time\": \"10:30\"}\n\nASSISTANT: It is 10:30. <|endoftext|>",
            },
            "d.jsonl:1: 'chat' turn 2 (ASSISTANT) calls 'get_time', but 'system' lists no function (a call to a tool never "
            "offered): add the function's JSON schema to 'system'",
        ),
        (
            {
                "conversations": [
                    {"from": "system", "value": "You call functions."},
                    {"from": "human", "value": "Time?"},
                    {"from": "gpt", "value": _TIME_CALL},
                ]
            },
            "d.jsonl:1: conversations[2] calls 'get_time', but no system turn offers a tool in <tools>[...]</tools> (a call "
            "to a tool never offered): add the tool's schema to the system turn's <tools> list, or drop the row",
        ),
        (
            {
                "conversations": [
                    {"from": "human", "value": f"<tools>{json.dumps(tools(CLOCK))}</tools> Time?"},
                    {"from": "gpt", "value": _TIME_CALL},
                ]
            },
            "conversations[1] calls 'get_time', but no system turn offers a tool in <tools>[...]</tools> (a call to a tool "
            "never offered); the <tools> in conversations[0] is not read there, only in the system turn",
        ),
        (
            {
                "parallel_tool_calls": True,
                "messages": [
                    {"role": "user", "content": "Time?"},
                    {"role": "assistant", "content": None, "tool_calls": [call("get_time", {}, 0)]},
                ],
            },
            "d.jsonl:1: messages[1].tool_calls[0] calls 'get_time', but the row has no 'tools' (a call to a tool never "
            "offered): add the tool's schema to the row's 'tools'",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "Time?"},
                    {"role": "assistant", "content": None, "tool_calls": [call("get_time", {}, 0)]},
                ]
            },
            "messages[1].tool_calls[0] calls 'get_time', but the row has no 'tools'",
        ),
    ],
    ids=["glaive-no-functions", "hermes-no-tools", "hermes-tools-in-user-turn", "openai-no-tools", "chat-no-tools"],
)
def test_a_call_with_no_tool_list_is_refused_as_with_an_empty_one(tmp_path, row, expected):
    """The same row with `tools: []` was refused; without a tool list it trained a call to a tool never offered."""
    assert expected in refusal(tmp_path, [row])


def test_a_hermes_call_with_its_tools_in_the_rows_tools_column_is_read():
    row = {
        "tools": tools(CLOCK),
        "conversations": [{"from": "human", "value": "Time?"}, {"from": "gpt", "value": _TIME_CALL}],
    }
    [out] = data.validate_rows([row], "rows")
    assert out["tools"] == tools(CLOCK) and out["messages"][1]["tool_calls"] == [call("get_time", {}, 0)]


# a key repeated inside a call's JSON (issue 45) -------------------------------------------------------------

_TWICE = "repeats the key 'from' (a reader keeps only the last value, and the others would be dropped without a word)"
_HUMAN = {"from": "human", "value": "20 EUR?"}


@pytest.mark.parametrize(
    "row, expected",
    [
        (
            {
                "system": GLAIVE_SYSTEM,
                "chat": "USER: 20 EUR?\n\nASSISTANT: <functioncall> {\"name\": \"convert_currency\", "
                "\"arguments\": '{\"amount\": 20, \"from\": \"EUR\", \"from\": \"GBP\", \"to\": "
                "\"USD\"}'} <|endoftext|>",
            },
            "d.jsonl:1: 'chat' turn 2 (ASSISTANT): the arguments of 'convert_currency' repeat the key 'from'",
        ),
        (
            {
                "system": GLAIVE_SYSTEM,
                "chat": "USER: 20 EUR?\n\nASSISTANT: <functioncall> {\"name\": \"convert_currency\", "
                "\"arguments\": {\"amount\": 20, \"from\": \"EUR\", \"from\": \"GBP\", \"to\": "
                "\"USD\"}} <|endoftext|>",
            },
            "d.jsonl:1: 'chat' turn 2 (ASSISTANT): the call '{\"name\": \"convert_currency\"",
        ),
        (
            {
                "conversations": [
                    HERMES["conversations"][0],
                    _HUMAN,
                    {
                        "from": "gpt",
                        "value": (
                            "<tool_call>{\"name\": \"convert_currency\", \"arguments\": {\"amount\": 20, \"from\": \"EUR\", \"from\": "
                            "\"GBP\", \"to\": \"USD\"}}</tool_call>"
                        ),
                    },
                ]
            },
            "d.jsonl:1: conversations[2]: <tool_call> ",
        ),
        (
            {
                "conversations": [
                    HERMES["conversations"][0],
                    _HUMAN,
                    {
                        "from": "gpt",
                        "value": (
                            "<tool_call>{'name': 'convert_currency', 'arguments': {'amount': 20, 'from': 'EUR', 'from': 'GBP', "
                            "'to': 'USD'}}</tool_call>"
                        ),
                    },
                ]
            },
            "d.jsonl:1: conversations[2]: <tool_call> ",
        ),
        (
            {
                "conversations": [
                    HERMES["conversations"][0],
                    _HUMAN,
                    {
                        "from": "gpt",
                        "value": (
                            "<tool_call>{\"name\": \"convert_currency\", \"arguments\": \"{\\\"amount\\\": 20, \\\"from\\\": \\\"EUR\\\", "
                            "\\\"from\\\": \\\"GBP\\\", \\\"to\\\": \\\"USD\\\"}\"}</tool_call>"
                        ),
                    },
                ]
            },
            "d.jsonl:1: conversations[2]: the arguments of 'convert_currency' repeat the key 'from'",
        ),
        (
            {
                "query": "20 EUR?",
                "tools": json.dumps([CONVERT]),
                "answers": (
                    "[{\"name\": \"convert_currency\", \"arguments\": {\"amount\": 20, \"from\": \"EUR\", \"from\": \"GBP\", "
                    "\"to\": \"USD\"}}]"
                ),
            },
            "d.jsonl:1: 'answers' " + _TWICE,
        ),
        (
            {
                "query": "20 EUR?",
                "tools": json.dumps([CONVERT]),
                "answers": json.dumps(
                    [
                        {
                            "name": "convert_currency",
                            "arguments": "{\"amount\": 20, \"from\": \"EUR\", \"from\": \"GBP\", \"to\": \"USD\"}",
                        }
                    ]
                ),
            },
            "d.jsonl:1: answers[0]: the arguments of 'convert_currency' repeat the key 'from'",
        ),
    ],
    ids=[
        "glaive-quoted-args",
        "glaive-json-args",
        "hermes-json",
        "hermes-python-repr",
        "hermes-args-text",
        "xlam-answers",
        "xlam-args-text",
    ],
)
def test_a_key_repeated_in_a_calls_json_is_refused_in_every_format(tmp_path, row, expected):
    """json keeps the last value of a repeated key: the call trained would be one nobody wrote."""
    msg = refusal(tmp_path, [row])
    assert expected in msg and "'from'" in msg and "keep one" in msg


# a Python literal read by joining two strings (issue 45) ---------------------------------------------------


def test_a_missing_comma_between_two_strings_is_refused_not_joined(tmp_path):
    """`"Bern" "Oslo"` is one string to Python: the row was trained as a call for "BernOslo"."""
    places = {
        "name": "places",
        "description": "Places",
        "parameters": {"type": "object", "properties": {"cities": {"type": "array", "items": {"type": "string"}}}},
    }
    row = {
        "conversations": [
            {"from": "system", "value": hermes_system(json.dumps(tools(places)))},
            {"from": "human", "value": "Bern and Oslo?"},
            {
                "from": "gpt",
                "value": "<tool_call>{'name': 'places', 'arguments': {'cities': ['Bern' 'Oslo']}}</tool_call>",
            },
        ]
    }
    msg = refusal(tmp_path, [row])
    assert "d.jsonl:1: conversations[2]: <tool_call>" in msg
    assert "reads 'Bern' 'Oslo' as one string 'BernOslo': a comma is missing between two strings" in msg
    assert "add the comma, or drop the row" in msg
    fixed = json.loads(json.dumps(row).replace("'Bern' 'Oslo'", "'Bern', 'Oslo'"))
    [out] = data.read_rows(write(tmp_path, [fixed]))
    assert out["messages"][-1]["tool_calls"][0]["function"]["arguments"] == {"cities": ["Bern", "Oslo"]}


@pytest.mark.parametrize(
    "value, shown",
    [
        ("'C:\\\\data\\\\file'", "the backslash in \\f is an escape in a Python literal"),  # a form feed
        ("'\\\\x41'", "reads '\\x41' as 'A'"),
        ("'bell\\\\a'", "the backslash in \\a is an escape"),
        ("'\\\\101'", "the backslash in \\101 is an escape"),  # octal: A
    ],
)
def test_a_python_literal_whose_escapes_change_its_text_is_refused(tmp_path, value, shown):
    """Issue 57 F6: the Hermes Python-literal fallback read "C:\\data\\file" with a form feed and "\\x41" as "A":
    escapes repr never writes are what a value written with single backslashes holds by accident."""
    opener = {
        "name": "open_file",
        "description": "Open a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }

    def row(literal):
        call = "<tool_call>{'name': 'open_file', 'arguments': {'path': " + literal + "}}</tool_call>"
        return {
            "conversations": [
                {"from": "system", "value": hermes_system(json.dumps(tools(opener)))},
                {"from": "human", "value": "Open it."},
                {"from": "gpt", "value": call},
            ]
        }

    msg = refusal(tmp_path, [row(json.loads(f'"{value}"'))])
    assert shown in msg and "write the value as JSON, or double the backslash" in msg, msg
    # what repr writes reads as it shows: a doubled backslash, \n, \x07 for a character it cannot print
    [out] = data.read_rows(write(tmp_path, [row(r"'C:\\data\\file\n\x07'")]))
    assert out["messages"][-1]["tool_calls"][0]["function"]["arguments"] == {"path": "C:\\data\\file\n\x07"}


def test_a_parameter_repeated_in_tools_given_as_json_text_is_refused_naming_it(tmp_path):
    """Issue 57 F5: a parameter repeated in `tools` written as JSON text (xLAM's columns, CSV cells) was parsed keeping
    its last copy: the row then trained against a schema nobody wrote (refused, if at all, for its call's type)."""
    twice = '"city": {"type": "str", "description": "c"}, "city": {"type": "int", "description": "d"}'
    xlam = {
        "query": "Weather in Paris?",
        "tools": '[{"name": "get_weather", "description": "w", "parameters": {' + twice + "}}]",
        "answers": '[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
    }
    msg = refusal(tmp_path, [xlam])
    assert "'tools' repeats the key 'city'" in msg and "keep one" in msg and "expected type integer" not in msg
    schema = '"properties": {"city": {"type": "string"}, "city": {"type": "integer"}}'
    chat = {
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {}}}]},
        ],
        "tools": '[{"type": "function", "function": {"name": "w", "parameters": {"type": "object", ' + schema + "}}}]",
    }
    msg = refusal(tmp_path, [chat])
    assert "'tools' (JSON text) has the key 'city' twice (a JSON reader keeps only the last value): keep one" in msg
