"""The BFCL-style function-calling checker (trainer/chat/fc_check.py): each rule passes and fails on
hand-written cases; categories and their summary; the built-in dataset's rows of every category."""

import json

import pytest

from trainer.data import builtin_data
from trainer import data
from trainer.chat import fc_check


def _tool(name, properties, required=()):
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": properties, "required": list(required)},
        },
    }


WEATHER = _tool(
    "get_weather",
    {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "default": 1},
    },
    required=["city"],
)
CONVERT = _tool(
    "convert",
    {"amount": {"type": "number"}, "currency": {"type": "string"}, "exact": {"type": "boolean"}},
    required=["amount", "currency"],
)
BOOK = _tool(
    "book",
    {
        "guests": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            },
        },
        "options": {"type": "object", "properties": {"late": {"type": "boolean"}, "note": {"type": "string"}}},
    },
)


def _call(name, **arguments):
    return {"name": name, "arguments": arguments}


def _row(expected, tools, history=()):
    """A chat row whose last assistant turn makes `expected` calls, or answers `expected` text."""
    answer = (
        {"role": "assistant", "content": expected}
        if isinstance(expected, str)
        else {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": c} for c in expected]}
    )
    return {"messages": [{"role": "user", "content": "please"}, *history, answer], "tools": tools}


def _one(expected_args, predicted_args, tool=WEATHER):
    """check() of one call to `tool` with these arguments against the expected ones."""
    name = tool["function"]["name"]
    return fc_check.check(_row([_call(name, **expected_args)], [tool]), [_call(name, **predicted_args)], None)


# --- the rules, each passing and failing ---


def test_right_call_passes_and_wrong_function_name_fails():
    row = _row([_call("get_weather", city="Paris")], [WEATHER, CONVERT])
    assert fc_check.check(row, [_call("get_weather", city="Paris")], None) == (True, "call matched")
    ok, reason = fc_check.check(row, [_call("convert", amount=1, currency="EUR")], None)
    assert not ok and "called 'convert', expected 'get_weather'" in reason


def test_every_required_parameter_must_be_present():
    row = _row([_call("convert", amount=5, currency="EUR")], [CONVERT])
    ok, reason = fc_check.check(row, [_call("convert", amount=5)], None)
    assert not ok and "missing required parameter 'currency'" in reason


def test_no_parameter_the_schema_does_not_declare():
    ok, reason = _one({"city": "Paris"}, {"city": "Paris", "country": "France"})
    assert not ok and "'country' is not declared" in reason


def test_optional_parameters_must_match_the_expected_call_or_the_schema_default():
    assert _one({"city": "Paris"}, {"city": "Paris", "days": 1})[0]  # the default, given
    assert _one({"city": "Paris", "days": 1}, {"city": "Paris"})[0]  # the default, left out
    ok, reason = _one({"city": "Paris"}, {"city": "Paris", "days": 3})
    assert not ok and "unexpected parameter 'days'=3" in reason
    ok, reason = _one({"city": "Paris", "unit": "celsius"}, {"city": "Paris"})
    assert not ok and "missing parameter 'unit'" in reason


@pytest.mark.parametrize("value, ok", [(2, True), (2.0, False), ("2", False), (True, False)])
def test_integer_takes_only_an_integer(value, ok):
    result, reason = _one({"city": "Paris", "days": 2}, {"city": "Paris", "days": value})
    assert result is ok, reason
    if not ok:
        assert "expected type integer" in reason


@pytest.mark.parametrize(
    "expected, value, ok",
    [(2, 2.0, True), (2.0, 2, True), (2.5, 2.5, True), (2.5, 2, False), (1, True, False), (2, "2", False)],
)
def test_number_takes_any_number_by_value_and_never_a_bool(expected, value, ok):
    assert _one({"amount": expected, "currency": "EUR"}, {"amount": value, "currency": "EUR"}, CONVERT)[0] is ok


def test_boolean_takes_only_a_bool():
    expected = {"amount": 1, "currency": "EUR", "exact": True}
    assert _one(expected, {**expected, "exact": True}, CONVERT)[0]
    ok, reason = _one(expected, {**expected, "exact": 1}, CONVERT)
    assert not ok and "expected type boolean, got integer" in reason
    assert not _one(expected, {**expected, "exact": False}, CONVERT)[0]


def test_enum_is_exact_even_where_normalised_strings_would_match():
    assert _one({"city": "Paris", "unit": "celsius"}, {"city": "Paris", "unit": "celsius"})[0]
    ok, reason = _one({"city": "Paris", "unit": "celsius"}, {"city": "Paris", "unit": "Celsius"})
    assert not ok and "not one of the schema's enum" in reason
    assert not _one({"city": "Paris", "unit": "celsius"}, {"city": "Paris", "unit": "fahrenheit"})[0]


@pytest.mark.parametrize(
    "predicted, ok",
    [
        ("new york", True),
        ("New-York", True),
        ("NEW_YORK.", True),
        ("New  York", True),
        ("Newark", False),
        ("York", False),
    ],
)
def test_strings_compare_after_bfcl_normalisation(predicted, ok):
    assert _one({"city": "New York"}, {"city": predicted})[0] is ok
    assert fc_check.standardize_string("April 1, 2024") == fc_check.standardize_string("april 1 2024")


def test_nested_arrays_and_objects_are_checked_with_the_same_rules():
    expected = {"guests": [{"name": "Ann Lee", "age": 30}, {"name": "Bo"}], "options": {"late": True}}
    assert _one(
        expected, {"guests": [{"name": "ann-lee", "age": 30}, {"name": "BO"}], "options": {"late": True}}, BOOK
    )[0]
    failures = {
        "item order": {**expected, "guests": expected["guests"][::-1]},
        "item count": {**expected, "guests": expected["guests"][:1]},
        "nested required": {**expected, "guests": [{"age": 30}, {"name": "Bo"}]},
        "nested undeclared": {**expected, "guests": [{"name": "Ann Lee", "age": 30, "vip": True}, {"name": "Bo"}]},
        "nested type": {**expected, "guests": [{"name": "Ann Lee", "age": "30"}, {"name": "Bo"}]},
        "nested value": {**expected, "options": {"late": False}},
        "nested extra key": {**expected, "options": {"late": True, "note": "x"}},
        "array for object": {**expected, "options": [True]},
    }
    for what, predicted in failures.items():
        ok, reason = _one(expected, predicted, BOOK)
        assert not ok, what
        assert reason.startswith("book.guests") or reason.startswith("book.options"), (what, reason)


def test_arguments_as_json_text_or_the_openai_wire_shape_and_malformed_ones():
    row = _row([_call("get_weather", city="Paris")], [WEATHER])
    assert fc_check.check(row, [{"name": "get_weather", "arguments": '{"city": "Paris"}'}], None)[0]
    wire = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert fc_check.check(row, [wire], None)[0]
    ok, reason = fc_check.check(row, [{"name": "get_weather", "arguments": '{"city": '}], None)
    assert not ok and "not valid JSON" in reason
    ok, reason = fc_check.check(row, [{"name": "get_weather", "arguments": '["Paris"]'}], None)
    assert not ok and "not a JSON object" in reason


def test_one_call_expected_means_exactly_one():
    row = _row([_call("get_weather", city="Paris")], [WEATHER])
    ok, reason = fc_check.check(row, [_call("get_weather", city="Paris")] * 2, None)
    assert not ok and "expected 1 call(s)" in reason
    ok, reason = fc_check.check(row, [], "It is sunny in Paris.")
    assert not ok and "got 0" in reason


# --- parallel ---


def test_parallel_calls_match_in_any_order_each_to_a_distinct_call():
    paris, oslo = _call("get_weather", city="Paris"), _call("get_weather", city="Oslo", unit="celsius")
    row = _row([paris, oslo], [WEATHER, CONVERT])
    assert fc_check.category(row) == "parallel"
    assert fc_check.check(row, [paris, oslo], None) == (True, "every expected call matched")
    assert fc_check.check(row, [oslo, paris], None)[0]
    assert fc_check.exact(row, [oslo, paris], None)
    ok, reason = fc_check.check(row, [paris, paris], None)  # one predicted call cannot answer two
    assert not ok and "expected call 1 (get_weather)" in reason
    assert not fc_check.check(row, [paris], None)[0]
    assert not fc_check.check(row, [paris, oslo, paris], None)[0]


# --- text answers: irrelevance, multi_turn ---


def test_irrelevance_any_call_is_wrong_and_an_empty_answer_too():
    row = _row("Sorry, none of my tools can do that.", [WEATHER])
    assert fc_check.category(row) == "irrelevance"
    assert fc_check.check(row, None, "I can't book hotels.") == (True, "text answer, no call")
    ok, reason = fc_check.check(row, [_call("get_weather", city="Paris")], "")
    assert not ok and "got a call to get_weather" in reason
    assert fc_check.check(row, [], "  ") == (False, "expected a text answer, got an empty message")


def test_after_a_tool_result_a_call_is_scored_by_its_calls_and_text_by_its_words():
    """Issue 44: the answer to a tool result passed with any text (both models writing byte noise scored 100%);
    a call after a tool result is a call (multiple here), not a category of its own."""
    history = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": _call("get_weather", city="Paris")}],
        },
        {"role": "tool", "content": '{"temperature": 18}'},
    ]
    text_row = _row("It is 18 degrees in Paris.", [WEATHER], history)
    call_row = _row([_call("convert", amount=18, currency="EUR")], [WEATHER, CONVERT], history)
    assert fc_check.category(text_row) == "multi_turn" and fc_check.category(call_row) == "multiple"
    assert fc_check.check(text_row, [], "In Paris it is 18 degrees now.")[0]  # reworded: ROUGE-L 0.83
    for garbage in ("Paris.", "\x00\x9c\xff ÿÿ", "I cannot help with that.", "It is what it is."):
        ok, why = fc_check.check(text_row, [], garbage)
        assert not ok and why.startswith("answer to the tool result: ROUGE-L") and "< 0.5" in why, (garbage, why)
    assert not fc_check.check(text_row, [_call("get_weather", city="Paris")], "")[0]
    assert fc_check.check(call_row, [_call("convert", amount=18.0, currency="eur")], None)[0]
    assert not fc_check.check(call_row, [], "18 degrees.")[0]
    assert fc_check.exact(text_row, [], "it is 18 degrees in paris") and not fc_check.exact(text_row, [], "18 degrees")


def test_rouge_l_is_the_longest_common_word_run_against_both_lengths():
    assert fc_check.rouge_l("the cat sat", "The cat sat.") == 1.0
    assert fc_check.rouge_l("cat the sat", "the cat sat") == pytest.approx(2 / 3)  # LCS 2 of 3 both ways
    assert fc_check.rouge_l("a b c d", "a b") == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert fc_check.rouge_l("", "x") == 0.0 and fc_check.rouge_l("x y", "z") == 0.0


def test_categories_from_the_row():
    call = [_call("get_weather", city="Paris")]
    assert fc_check.category(_row(call, [WEATHER])) == "simple"
    assert fc_check.category(_row(call, [WEATHER, CONVERT])) == "multiple"
    assert fc_check.category(_row("Hello!", [])) == fc_check.CHAT
    # a last assistant turn of weight 0 is not the one scored (as in trainer.evaluate)
    row = _row(call, [WEATHER])
    row["messages"].append({"role": "assistant", "content": "Done.", "weight": 0})
    assert fc_check.category(row) == "simple"


# --- exact match beside AST ---


def test_exact_match_is_strict_where_the_ast_check_normalises():
    row = _row([_call("convert", amount=5, currency="EUR")], [CONVERT])
    assert fc_check.exact(row, [_call("convert", amount=5.0, currency="EUR")], None)  # JSON numbers
    assert not fc_check.exact(row, [_call("convert", amount=5, currency="eur")], None)
    assert fc_check.check(row, [_call("convert", amount=5, currency="eur")], None)[0]
    bool_row = _row([_call("convert", amount=1, currency="EUR", exact=True)], [CONVERT])
    assert not fc_check.exact(bool_row, [_call("convert", amount=1, currency="EUR", exact=1)], None)


# --- summary ---


def test_absent_categories_are_not_measured_never_zero():
    row = _row([_call("get_weather", city="Paris")], [WEATHER, CONVERT])
    results = [
        fc_check.score(row, [_call("get_weather", city="paris")], None),
        fc_check.score(row, [], "no"),
        fc_check.score(_row("Hi", []), [], "Hi"),
    ]  # chat: in no fc_ metric
    summary = fc_check.summarize(results)
    assert summary["categories"]["multiple"] == {"rows": 2, "correct": 1, "exact": 0, "accuracy": 0.5}
    assert all(summary["categories"][c]["accuracy"] is None for c in fc_check.CATEGORIES if c != "multiple")
    assert (summary["fc_rows"], summary["fc_ast_accuracy"], summary["fc_exact_accuracy"]) == (2, 0.5, 0.0)
    metrics = fc_check.metrics(summary)
    assert set(metrics) == {
        "fc_rows",
        "fc_ast_accuracy",
        "fc_exact_accuracy",
        "fc_multiple_accuracy",
        *(f"fc_{c}_rows" for c in fc_check.CATEGORIES),
    }
    assert metrics["fc_parallel_rows"] == 0
    empty = fc_check.summarize([])
    assert empty["fc_ast_accuracy"] is None and fc_check.metrics(empty) == {
        "fc_rows": 0,
        **{f"fc_{c}_rows": 0 for c in fc_check.CATEGORIES},
    }


# --- the built-in dataset's categories, scored by the checker ---


@pytest.fixture(scope="module")
def with_categories():
    return builtin_data.generate(300, 100, seed=5, categories=True)


def test_builtin_categories_leave_the_current_rows_alone_and_spread_through_eval(with_categories):
    plain = builtin_data.generate(300, 100, seed=5)
    assert json.dumps(builtin_data.generate(300, 100, seed=5, categories=False)) == json.dumps(plain)
    assert json.dumps(with_categories["train"][:300]) == json.dumps(plain["train"])  # train: appended
    kept = [r for r in with_categories["eval"] if fc_check.category(r) == "multiple"]
    assert json.dumps(kept) == json.dumps(plain["eval"])  # eval: the same rows in the same order, others among them
    for first in (30, 60):  # eval_max_rows scores a prefix: it holds every category, in proportion
        head = [fc_check.category(r) for r in with_categories["eval"][:first]]
        assert set(head) == set(fc_check.CATEGORIES) and head.count("multiple") >= first * 0.8, head
    assert json.dumps(builtin_data.generate(300, 100, seed=5, categories=True)) == json.dumps(with_categories)
    bfcl = builtin_data.dataset("function-calling-bfcl")  # what builtin:function-calling-bfcl delivers
    assert {fc_check.category(r) for r in bfcl["eval"][:200]} == set(fc_check.CATEGORIES)
    # the demo's data holds them all (builtin:function-calling-bfcl, the older name, the same rows)
    assert json.dumps(builtin_data.dataset()) == json.dumps(builtin_data.generate(categories=True)) == json.dumps(bfcl)
    counts = {
        s: {c: sum(fc_check.category(r) == c for r in rows) for c in fc_check.CATEGORIES}
        for s, rows in with_categories.items()
    }
    assert counts == {
        "train": {"multiple": 300, "simple": 15, "parallel": 15, "irrelevance": 15, "multi_turn": 15},
        "eval": {"multiple": 100, "simple": 5, "parallel": 5, "irrelevance": 5, "multi_turn": 5},
    }


def test_builtin_category_rows_are_valid_learnable_and_disjoint(with_categories):
    from tests.unit.test_builtin import _leaves

    train, evals = with_categories["train"], with_categories["eval"]
    assert data.validate_rows(train + evals, "builtin")
    eval_requests = [r["messages"][0]["content"] for r in evals]
    assert len(set(eval_requests)) == len(eval_requests)
    assert not set(eval_requests) & {r["messages"][0]["content"] for r in train}
    for row in train[300:] + [r for r in evals if fc_check.category(r) != "multiple"]:
        request, answer = row["messages"][0]["content"], row["messages"][-1]
        for call in answer.get("tool_calls") or []:  # every value readable from the request
            assert all(str(v) in request for v in _leaves(call["function"]["arguments"])), (request, call)
        if fc_check.category(row) == "multi_turn":  # the answer reports the tool's result
            result = json.loads(row["messages"][2]["content"])
            values = [v for v in result.values() if not isinstance(v, list)] + [
                v for f in result.get("flights", []) for v in f.values()
            ]
            assert all(str(v) in answer["content"] for v in values if v not in ("set", "booked")), row


def test_never_calling_model_scores_zero_on_calls_and_full_on_irrelevance(with_categories):
    rows = with_categories["eval"]
    never = fc_check.summarize([fc_check.score(r, [], "I cannot help with that.") for r in rows])
    cats = never["categories"]
    assert [cats[c]["accuracy"] for c in ("simple", "multiple", "parallel")] == [0.0, 0.0, 0.0]
    assert cats["irrelevance"]["accuracy"] == 1.0
    # the built-in multi_turn rows expect an answer that reports the tool's result: a stock refusal is not one
    assert cats["multi_turn"]["accuracy"] == 0.0
    perfect = fc_check.summarize(
        [
            fc_check.score(
                r, [m["function"] for m in r["messages"][-1].get("tool_calls", [])], r["messages"][-1]["content"]
            )
            for r in rows
        ]
    )
    assert perfect["fc_ast_accuracy"] == perfect["fc_exact_accuracy"] == 1.0
    always_call = fc_check.summarize(
        [fc_check.score(r, [_call("get_weather", city="Paris", unit="celsius")], "") for r in rows]
    )
    assert always_call["categories"]["irrelevance"]["accuracy"] == 0.0


@pytest.mark.parametrize(
    "got, want, at_least, below",
    [
        (
            "今天东京的天气是晴天。",
            "今天东京的天气是晴天",
            1.0,
            None,
        ),  # issue 57 F16: the final 。 alone differed: scored 0
        ("東京は晴れです。", "東京は晴れです", 1.0, None),
        ("วันนี้อากาศดี", "วันนี้อากาศดี.", 1.0, None),
        ("今天东京下雨", "今天东京的天气是晴天", 0.4, 0.6),  # partly right: partly scored, not all or nothing
        ("你好", "今天东京的天气是晴天", None, 0.01),
        ("It is 20 degrees, sunny in Paris.", "It is 20 degrees and sunny in Paris", 0.8, 1.0),
    ],
)
def test_rouge_l_counts_the_characters_of_scripts_written_without_spaces(got, want, at_least, below):
    from trainer.chat.fc_check import rouge_l

    score = rouge_l(got, want)
    assert (at_least is None or score >= at_least) and (below is None or score < below), score
