"""The chat_template parameter and the train/serve parity check (trainer.chat.templates, trainer.parity)
on the built-in model's tokenizer; real templates are in test_real_templates.py."""

import json

import pytest

from trainer.data import builtin_data
from trainer import data, parity
from trainer.store import delivery
from trainer.chat import templates
from trainer.chat import parsers
from trainer.core.errors import UserError
from trainer.validate import on_cluster_problems, pipeline_problems

TOOL_ROWS = [
    r
    for r in builtin_data.generate(n_train=200, n_eval=0, seed=3)["train"]
    if any(m.get("tool_calls") for m in r["messages"])
][:20]
# The built-in data has calls only: text answers (no tool fits) beside the same tools.
TEXT_ROWS = [
    {"tools": r["tools"], "messages": [r["messages"][0], {"role": "assistant", "content": f"No tool for that {i}."}]}
    for i, r in enumerate(TOOL_ROWS[:10])
]
NO_TOOLS = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture
def tok(tokenizer):
    saved = tokenizer.chat_template
    yield tokenizer
    tokenizer.chat_template = saved


def test_the_builtin_models_own_template_passes(tok):
    verdict = parity.check(TOOL_ROWS + TEXT_ROWS, tok, "hermes")
    assert verdict.ok and verdict.turns == 30 and verdict.with_tools == 30


def test_a_template_that_drops_tools_and_calls_is_refused_with_counts_and_the_fix(tok):
    tok.chat_template = NO_TOOLS
    [line] = parity.template_problems(TOOL_ROWS + TEXT_ROWS, tok, "here")
    assert "tools dropped: 30 of 30 rows with tools" in line
    assert "calls dropped: 20 of 30 assistant turns" in line
    assert "Nothing was trained" in line and "chat_template=" in line


def test_calls_in_a_format_the_parser_does_not_read_are_refused(tok):
    # renders the call, but as a bare JSON object that the hermes parser returns as plain content
    tok.chat_template = tok.chat_template.replace("<tool_call>", "").replace("</tool_call>", "")
    verdict = parity.check(TOOL_ROWS, tok, "hermes")
    assert set(verdict.problems) == {"calls unreadable"} and len(verdict.problems["calls unreadable"]) == 20


def test_a_turn_without_a_stop_token_is_refused(tok):
    tok.chat_template = tok.chat_template.replace("<|end|>{% endgeneration %}", "{% endgeneration %}")
    assert "no stop" in parity.check(TEXT_ROWS, tok, "hermes").problems


def test_the_chatml_template_on_a_model_that_stops_elsewhere_is_refused(tok):
    # tiny-llama stops at <|end|>, not ChatML's <|im_end|>: the served model would never stop
    tok.chat_template = templates.CHATML_TOOLS
    [line] = parity.model_problems(TOOL_ROWS, tok, "here")
    assert "no stop: 20 of 20" in line and "chat_template=FILE.jinja" in line


def test_template_exceptions_of_any_type_are_refusals(tok):
    tok.chat_template = "{{ messages[0].content + 1 }}"  # TypeError, not jinja's TemplateError
    [line] = parity.template_problems(TOOL_ROWS[:3], tok, "here")
    assert "refuses 3 of 3 rows (TypeError" in line
    with pytest.raises(UserError, match="refuses 3 of 3 rows"):
        data.encode_rows(TOOL_ROWS[:3], tok, 512)


def test_a_template_that_does_not_parse_is_said_so_once_not_as_rows_to_change(tok):
    """Every row was "refused" for a syntax error, with the advice to change the rows."""
    tok.chat_template = "{% for m in messages %}{{ m.content }"
    [line] = parity.template_problems(TOOL_ROWS[:3], tok, "here")
    assert line.startswith("here: the model's chat template is not valid Jinja (unexpected '}', line 1)")
    assert "chat_template=" in line and "rows" not in line
    [line] = parity.template_problems(TOOL_ROWS[:3], tok, "here", template="mine.jinja")
    assert line == "chat_template 'mine.jinja' is not valid Jinja (unexpected '}', line 1): fix the template"
    # a template that parses but raises names the user's file and its fix too
    tok.chat_template = "{{ messages[0].content + 1 }}"
    [line] = parity.template_problems(TOOL_ROWS[:3], tok, "here", template="mine.jinja")
    assert "chat_template 'mine.jinja' refuses 3 of 3 rows (TypeError" in line and "fix the template" in line


@pytest.mark.parametrize(
    "text,parser,calls,content",
    [
        (
            '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>',
            "hermes",
            [{"name": "f", "arguments": {"a": 1}}],
            None,
        ),
        ("Hello there", "hermes", [], "Hello there"),
        (
            '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call><tool_call>{"name": "g", "arguments": {}}'
            '</tool_call>',
            "hermes",
            [{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}],
            None,
        ),
        ("<tool_call>not json</tool_call>", "hermes", [], "<tool_call>not json</tool_call>"),
        (
            '<|python_tag|>{"name": "f", "parameters": {"a": 1}}',
            "llama3_json",
            [{"name": "f", "arguments": {"a": 1}}],
            None,
        ),
        (
            '{"name": "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {}}',
            "llama3_json",
            [{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}],
            None,
        ),
        ('[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}]', "mistral", [{"name": "f", "arguments": {"a": 1}}], None),
        ('[f(a=1, b="x")]', "pythonic", [{"name": "f", "arguments": {"a": 1, "b": "x"}}], None),
        (
            '[f(a=-1.5), g(b=[1, "two"], c={"k": true, "n": null}, d=False)]',
            "pythonic",
            [
                {"name": "f", "arguments": {"a": -1.5}},
                {"name": "g", "arguments": {"b": [1, "two"], "c": {"k": True, "n": None}, "d": False}},
            ],
            None,
        ),
        ("Sure: [f(a=1)]", "pythonic", [], "Sure: [f(a=1)]"),
        ("[f(1)]", "pythonic", [], "[f(1)]"),
        ("[f(a=1), 3]", "pythonic", [], "[f(a=1), 3]"),
        ("[f(a=x)]", "pythonic", [], "[f(a=x)]"),  # a name that is no literal: the parser raises, the text stays
    ],
)
def test_the_projects_parsers_agree_with_vllms(tok, text, parser, calls, content):
    ours = parsers.parse(parser, text)
    assert ours.calls == calls and ours.content == content
    if parser in ("hermes", "pythonic"):  # vLLM's llama3_json and mistral parsers need their model's special
        # tokens: with real tokenizers in test_real_templates.py
        theirs = parsers.vllm_parse(parser, text, tok, None)
        assert theirs.calls == ours.calls and (theirs.content or None) == (ours.content or None)
        assert (theirs.error is None) == (ours.error is None) == ("not json" not in text and "=x)" not in text)


def test_an_answer_cut_off_inside_a_pythonic_call_is_text_at_once(monkeypatch):
    """Issue 57 F9: vLLM's pythonic pattern backtracks exponentially under Python's `re` on an answer cut off
    mid-call (69 s at 148 characters here, 2026-12-02); matched with the `regex` module, as vLLM matches it, it
    answers at once, and within VLLM_TOOL_PARSE_REGEX_TIMEOUT_SECONDS in any case, where the answer is read as text as
    vLLM reads it."""
    cut = "[get_time(" + 'city="Oslo", ' * 40 + 'city="Os'  # 530 characters: hours under `re`
    assert parsers.parse("pythonic", cut) == parsers.Parsed([], cut)
    whole = "[get_time(" + 'city="Oslo", ' * 40 + 'tz="CET")]'
    assert parsers.parse("pythonic", whole).calls == [{"name": "get_time", "arguments": {"city": "Oslo", "tz": "CET"}}]

    class Slow:
        def match(self, text, timeout):
            assert timeout == 0.5  # vLLM's setting, read as vLLM reads it
            raise TimeoutError

    monkeypatch.setattr(parsers, "_PYTHONIC", Slow())
    monkeypatch.setenv("VLLM_TOOL_PARSE_REGEX_TIMEOUT_SECONDS", "0.5")
    got = parsers.parse("pythonic", whole)
    assert got.calls == [] and got.content == whole and "timed out after 0.5 s" in got.error
    for bad in ("0", "-1", "nan", "soon"):
        monkeypatch.setenv("VLLM_TOOL_PARSE_REGEX_TIMEOUT_SECONDS", bad)
        assert parsers.regex_timeout() == 1.0


def test_each_builtin_templates_calls_are_read_by_the_parser_it_declares():
    """tool_call_parser reads the format off each template's rendering: hermes for the <tool_call> ones,
    llama3_json where the vocabulary has <|python_tag|> (hermes otherwise: vLLM's llama3_json refuses to start
    without it, and the check then refuses the template), pythonic for [f(a=1)], mistral where the vocabulary has
    [TOOL_CALLS] (the same fallback otherwise)."""
    declared = {
        "chatml-tools": "hermes",
        "gemma-tools": "hermes",
        "llama3-json": "llama3_json",
        "mistral-tools": "mistral",
        "llama3-pythonic": "pythonic",
    }
    assert set(declared) == set(templates.BUILTIN)
    for name, parser in declared.items():
        assert parsers.tool_call_parser(templates.BUILTIN[name].text, ["<|python_tag|>", "[TOOL_CALLS]"]) == parser
    assert parsers.tool_call_parser(templates.BUILTIN["llama3-json"].text, []) == "hermes"
    assert parsers.tool_call_parser(templates.BUILTIN["mistral-tools"].text, []) == "hermes"
    assert templates.family_template({"<|im_start|>": 1, "<|im_end|>": 2}) == "chatml-tools"
    assert templates.family_template({"<|start_header_id|>": 1, "<|eot_id|>": 2}) == "llama3-pythonic"
    assert templates.family_template({"<|start_header_id|>": 1, "<|eot_id|>": 2, "<|python_tag|>": 3}) == "llama3-json"
    assert (
        templates.family_template(
            {t: i for i, t in enumerate(["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]"])}
        )
        == "mistral-tools"
    )
    assert templates.family_template({"<|end|>": 1}) is None


def test_a_builtin_templates_turn_end_is_added_to_the_generation_config_where_it_is_not_a_stop(
    tiny_model_dir, tmp_path
):
    """A base model stops at its EOS only: the built-in template's turn end joins generation_config.json's
    eos_token_id (a link into the source tree is replaced, not written through); nothing is added where the
    token is a stop already, is not in the vocabulary, or the template is not a built-in one."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)  # a copy: a token is added to it
    source = tmp_path / "source.json"
    source.write_text(json.dumps({"eos_token_id": 7, "max_new_tokens": 5}))
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / templates.GENERATION_CONFIG).symlink_to(source)
    vocab = tok.get_vocab()
    end = templates.BUILTIN["chatml-tools"].turn_end
    assert end not in vocab  # tiny-llama's turns end with <|end|>
    assert templates.with_stops(tree, tok, "chatml-tools") == []
    tok.add_special_tokens({"additional_special_tokens": [end]})
    added = templates.with_stops(tree, tok, "chatml-tools")
    assert added == [tok.convert_tokens_to_ids(end)]
    assert json.loads((tree / templates.GENERATION_CONFIG).read_text()) == {
        "eos_token_id": [7, added[0]],
        "max_new_tokens": 5,
    }
    assert json.loads(source.read_text())["eos_token_id"] == 7 and not (tree / "generation_config.json").is_symlink()
    assert templates.with_stops(tree, tok, "chatml-tools") == []  # a stop already
    assert templates.with_stops(tree, tok, "model") == [] and templates.extra_stop_ids(tok, "x.jinja") == []
    fresh = tmp_path / "fresh"
    fresh.mkdir()  # no generation config: written with the tokenizer's EOS first
    assert templates.with_stops(fresh, tok, "chatml-tools") == added
    assert json.loads((fresh / "generation_config.json").read_text())["eos_token_id"] == [tok.eos_token_id, *added]


def test_template_values(tmp_path):
    good = tmp_path / "t.jinja"
    good.write_text("{{ messages }}")
    assert templates.spec_problems("model") == templates.spec_problems("chatml-tools") == []
    assert templates.spec_problems("auto") == templates.spec_problems("gemma-tools") == []
    assert "did you mean llama3-json" in templates.spec_problems("llama3_json")[0]
    assert templates.spec_problems(str(good)) == []
    assert "did you mean chatml-tools" in templates.spec_problems("chatml_tools")[0]
    assert "not found" in templates.spec_problems(str(tmp_path / "missing.jinja"))[0]
    assert "is empty" in templates.spec_problems(" ")[0]
    assert templates.resolve("model") is None and templates.resolve(str(good)) == "{{ messages }}"
    [cluster] = [p for p in on_cluster_problems({"chat_template": str(good)}) if "chat_template" in p]
    assert "upload it to the run's bucket" in cluster


def test_validate_params_checks_the_chosen_template_against_local_data(tmp_path):
    rows = tmp_path / "rows.jsonl"
    data.write_jsonl(TOOL_ROWS + TEXT_ROWS, rows)
    plain = tmp_path / "plain.jinja"
    plain.write_text(NO_TOOLS)
    assert pipeline_problems({"dataset_source": str(rows)}) == []
    [problem] = pipeline_problems({"dataset_source": str(rows), "chat_template": str(plain)})
    assert "tools dropped: 30 of 30" in problem and "calls dropped" in problem


def test_delivery_writes_the_template_into_a_new_tree_and_the_finetune_check_reads_it(store, tmp_path):
    model_uri, meta = delivery.deliver_model("builtin:tiny-llama", "", store)
    data_uri, _ = delivery.deliver_dataset("builtin:function-calling", "", store)
    assert meta["chat_template"] == "model"
    assert parity.delivered_problems(store, model_uri, data_uri) == []
    plain = tmp_path / "plain.jinja"
    plain.write_text(NO_TOOLS)
    other_uri, other = delivery.deliver_model("builtin:tiny-llama", "", store, chat_template=str(plain))
    assert other_uri != model_uri and other["chat_template"] == str(plain)
    files = {f["path"] for f in other["files"]}
    prefix = other_uri.split("/", 3)[3]
    assert store.get_bytes(f"{prefix}/chat_template.jinja").decode() == NO_TOOLS
    assert "chat_template" not in json.loads(store.get_bytes(f"{prefix}/tokenizer_config.json"))
    assert {f["path"] for f in meta["files"]} <= files | {"chat_template.jinja"}
    [problem] = parity.delivered_problems(store, other_uri, data_uri)
    assert "tools dropped" in problem and "Nothing was trained" in problem
    # an already delivered tree with another template: a new tree again, the same as from the source
    again_uri, _ = delivery.deliver_model(model_uri, "", store, chat_template=str(plain))
    assert again_uri == other_uri
    with pytest.raises(UserError, match="unknown chat_template"):
        delivery.deliver_model("builtin:tiny-llama", "", store, chat_template="chatm-tools")


def test_trainer_train_run_alone_refuses_a_template_that_drops_tools_and_the_launchers_pass_is_not_redone(
    store, tmp_path, monkeypatch, capsys
):
    """`python -m trainer train` without the pipeline (its documented use) checks the delivered template against the
    rows before anything trains, as the pipeline's launch does; a pair of content-addressed trees that passed is
    recorded in the bucket, so the job's ranks and later runs do not check the same trees again."""
    import signal

    from trainer.recipe import train as recipe
    from trainer.__main__ import main

    model_uri, _ = delivery.deliver_model("builtin:tiny-llama", "", store)
    data_uri, _ = delivery.deliver_dataset("builtin:function-calling", "", store)
    plain = tmp_path / "plain.jinja"
    plain.write_text(NO_TOOLS)
    dropping_uri, _ = delivery.deliver_model("builtin:tiny-llama", "", store, chat_template=str(plain))
    monkeypatch.setattr(recipe, "train", lambda *a, **kw: pytest.fail("trained"))
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # the CLI's SIGTERM handler stays out of pytest
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--model-uri", dropping_uri, "--dataset-uri", data_uri, "--output-prefix", "runs/cli-parity"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "tools dropped" in err and "Traceback" not in err, err
    assert not store.exists(parity.record_key(dropping_uri, data_uri, "runs/cli-parity"))  # a refusal is not recorded

    import uuid

    monkeypatch.setattr(
        parity.delivered, "CHECK_VERSION", uuid.uuid4().hex
    )  # no pass recorded by an earlier test counts
    checked = []
    real = parity.delivered_problems
    monkeypatch.setattr(parity.delivered, "delivered_problems", lambda *a: checked.append(a[1:]) or real(*a))
    parity.check_delivered(store, model_uri, data_uri, "runs/p")  # the launch: checked, recorded
    parity.check_delivered(store, model_uri, data_uri, "runs/p")  # the job's ranks: the record answers
    parity.check_delivered(store, model_uri, data_uri, "runs/q")  # another run of the same trees: the same
    assert checked == [(model_uri, data_uri)]
    with pytest.raises(UserError, match="tools dropped"):  # another pair is checked anew
        parity.check_delivered(store, dropping_uri, data_uri, "runs/p")
    assert checked == [(model_uri, data_uri), (dropping_uri, data_uri)]
    # inputs that are not content-addressed: recorded for the run's prefix alone
    assert parity.record_key("s3://b/mine/model", data_uri, "runs/r") == f"runs/r/{parity.CHECKED}"


def test_a_generation_block_that_marks_nothing_is_refused_before_training(tok):
    """A template whose {% generation %} block is empty trained with loss 0.000 on every step, a green run."""
    from trainer.parity.preflight import template_problems

    assert not [p for p in template_problems(TOOL_ROWS + TEXT_ROWS, tok, "the model") if "marks no token" in p]
    # the same template with its block moved after the assistant's content: the block holds nothing
    tok.chat_template = tok.chat_template.replace("{% generation %}", "").replace(
        "{% endgeneration %}", "{% generation %}{% endgeneration %}"
    )
    problems = template_problems(TOOL_ROWS + TEXT_ROWS, tok, "the model", template="empty.jinja")
    [line] = [p for p in problems if "marks no token" in p]
    assert (
        line.startswith(
            "chat_template 'empty.jinja' marks no token of the assistant turns as trained in any of 30 rows"
        )
        and "{% endgeneration %}" in line
    )


def test_a_template_that_renders_tool_results_as_nothing_is_refused(tok):
    """Multi-turn rows trained from the call straight to the final answer, the tool's result gone."""
    import random

    rows = [builtin_data.make_multi_turn_row(random.Random(i)) for i in range(6)]
    assert parity.check(rows, tok, "hermes").ok and parity.check(rows, tok, "hermes").with_results == 6
    # a tool result written as JSON (Llama 3.1 writes `content | tojson`) is still the result
    tok.chat_template = tok.chat_template.replace(
        "<|{{ m.role }}|>{{ m.content }}", "<|{{ m.role }}|>{{ m.content | tojson }}"
    )
    assert parity.check(rows, tok, "hermes").ok
    tok.chat_template = tok.chat_template.replace(
        "{%- else %}<|{{ m.role }}|>", "{%- elif m.role != 'tool' %}<|{{ m.role }}|>"
    )
    [line] = parity.template_problems(rows, tok, "here")
    assert "tool results dropped: 6 of 6 rows with tool results" in line and "is not in the rendered row" in line
    # a later result that repeats part of an earlier one is looked for after it, where it is
    swapped = {
        "tools": rows[0]["tools"],
        "messages": rows[0]["messages"][:3]
        + [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "call_1", **rows[1]["messages"][1]["tool_calls"][0]}],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": rows[0]["messages"][2]["content"][:5]},
            {"role": "assistant", "content": "done"},
        ],
    }
    tok.chat_template = tok.chat_template.replace("{%- elif m.role != 'tool' %}", "{%- else %}")
    assert parity.check([swapped], tok, "hermes").ok


def test_a_template_the_tool_parser_raises_on_is_one_counted_line_not_a_traceback_per_row(tok, capfd):
    """Calls rendered as Python's repr (single quotes): vLLM's hermes parser raised on each and printed one
    traceback per row (200 tracebacks, 1,802 lines) before the refusal."""
    tok.chat_template = tok.chat_template.replace(
        "{{ {'name': tc.function.name, 'arguments': tc.function.arguments} | tojson }}",
        "{{ {'name': tc.function.name, 'arguments': tc.function.arguments} }}",
    )
    for parse_fn in (None, lambda p, text: parsers.vllm_parse(p, text, tok, None)):  # the image's, and vLLM's own
        verdict = parity.check(TOOL_ROWS + TEXT_ROWS, tok, "hermes", parse_fn=parse_fn)
        assert set(verdict.problems) == {"parser error"} and len(verdict.problems["parser error"]) == 20
        assert verdict.problems["parser error"][0].startswith("hermes raised JSONDecodeError: Expecting property name")
        [line] = parity.problems(verdict, "here", "hermes")
        assert "parser error: 20 of 30 assistant turns (the server's parser would fail" in line
    printed = capfd.readouterr()
    assert "Traceback" not in printed.out + printed.err and "Error in extracting" not in printed.out + printed.err


def test_an_empty_generation_block_with_whitespace_control_is_refused(tok):
    """`{%- generation %}{%- endgeneration %}` renders nothing as surely as `{% generation %}` does."""
    from trainer.parity.preflight import template_problems

    tok.chat_template = tok.chat_template.replace("{% generation %}", "").replace(
        "{% endgeneration %}", "{%- generation -%}{%- endgeneration %}"
    )
    problems = template_problems(TOOL_ROWS + TEXT_ROWS, tok, "the model", template="empty.jinja")
    assert [p for p in problems if "marks no token" in p]


def test_auto_on_a_template_that_loops_on_tools_is_bounded_and_falls_back_to_the_family(tok, monkeypatch):
    """Issue 57 F10: chat_template=auto rendered the model's own template outside the budget every other template check
    has (and the parser's probe rendered it with none): a template that loops on tools hung validation without
    output. Now both are under the budget, and a template over it counts as failing the check."""
    from trainer.parity import auto

    monkeypatch.setattr(auto, "TEMPLATE_BUDGET_S", 0.5)
    tok.chat_template = (
        "{% if tools %}{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}{% endif %}"
        + tok.chat_template
    )
    # the built-in model's vocabulary holds no family's turn tokens: refused, naming the loop, instead of a hang
    with pytest.raises(UserError) as err:
        auto.choose(tok)
    assert "the model's own chat template did not render 4 short tool rows within 0.5 s (a loop in the template)" in (
        str(err.value)
    )
    # with a family's turn tokens the family's built-in is chosen, and the reason says why
    monkeypatch.setattr(templates, "family_template", lambda vocab: "chatml-tools")
    spec, why = auto.choose(tok)
    assert spec == "chatml-tools" and "did not render 4 short tool rows within 0.5 s" in why


def test_a_refusal_never_names_the_template_that_just_failed_as_its_fix():
    """Issue 57 F11: a tool parameter named `from` under llama3-pythonic (a keyword breaks a pythonic call) was refused
    with "Fix: chat_template=llama3-pythonic", the template just tried (and mistral-tools under auto alike). The fix
    names another built-in of the family where one fits, and the rows' names, never the one tried."""
    from trainer.parity.check import Verdict, problems

    verdict = Verdict(checked=3, with_tools=3, turns=3)
    verdict.add("calls unreadable", "row 1: [get_time(from='Oslo')] read back as text")
    llama = {t: 1 for t in ("<|start_header_id|>", "<|eot_id|>", "<|python_tag|>")}
    assert templates.family_template(llama) == "llama3-json"
    assert templates.family_template(llama, besides="llama3-json") == "llama3-pythonic"
    no_tag = {t: 1 for t in ("<|start_header_id|>", "<|eot_id|>")}
    for tried, vocab in (("llama3-pythonic", no_tag), ("llama3-json", llama), ("mistral-tools", {})):
        family = templates.family_template(vocab, besides=tried)
        [line] = problems(verdict, "dataset_source", "pythonic", family, tried=tried)
        fix = line.split("Fix: ", 1)[1]
        assert f"chat_template={tried} " not in fix and f"chat_template={tried}," not in fix, fix
        assert fix.startswith(f"the rows' tool and parameter names as {tried}'s format can carry them"), fix
    # nothing tried (the model's own template): the family's built-in, as before
    [line] = problems(verdict, "dataset_source", "pythonic", templates.family_template(llama))
    assert "Fix: chat_template=llama3-json (the built-in template" in line
