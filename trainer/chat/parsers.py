"""The tool-call parsers: what a served model's answer means as calls and text.

- `tool_call_parser`: the vLLM `--tool-call-parser` a chat template calls for (rendering one call
  with it), and `chat_template_text`, a model tree's template;
- `parse`: the project's reading of vLLM's hermes, llama3_json, mistral and pythonic parsers (the images
  without vLLM use it), and `vllm_parse`, vLLM's own parser classes where vLLM is installed
  (tests hold the two to the same verdicts on real templates);
- `parse_tool_call`: the first call in raw generated text, whatever the format (HF generate).
"""

from __future__ import annotations

import ast
import json
import logging
import math
import os
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from trainer.chat.calls import arguments_or_raw, decode_arguments
from trainer.chat.types import ToolCall
from trainer.core.deadline import TEMPLATE_BUDGET_S, OverBudget, time_limit

DEFAULT_TOOL_PARSER = "hermes"
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)

# End-of-turn markers of common templates, for tokenizers whose EOS is another token (Llama 3's
# <|end_of_text|> vs its turn end <|eot_id|>): generation configs list them as extra EOS ids.
END_MARKERS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<｜end▁of▁sentence｜>",
    "</s>",
    "<|endoftext|>",
)


@dataclass
class Parsed:
    calls: list[ToolCall]
    content: str | None
    error: str | None = None  # what the parser raised (vLLM logs it with a traceback and returns the text)


def parse(parser: str, text: str) -> Parsed | None:
    """The calls and content vLLM's `parser` extracts from a complete model output; None for a
    parser this module does not know (only vLLM itself can say)."""
    if parser == "hermes":
        if "<tool_call>" not in text:
            return Parsed([], text)
        calls: list[ToolCall] = []
        for closed, open_ in re.findall(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", text, re.DOTALL):
            try:
                obj = json.loads(closed or open_)
                calls.append(ToolCall(name=obj["name"], arguments=arguments_or_raw(obj["arguments"])))
            except (ValueError, KeyError, TypeError) as err:
                return Parsed([], text, _error(err))  # vLLM logs the error and returns the text as content
        content = text[: text.find("<tool_call>")]
        return Parsed(calls, content or None)
    if parser == "llama3_json":
        body = text.split("<|python_tag|>", 1)[-1].lstrip() if "<|python_tag|>" in text else text.lstrip()
        if not body.startswith("{"):
            return Parsed([], text)
        calls, decoder, pos = list[ToolCall](), json.JSONDecoder(), 0
        try:
            while pos < len(body):
                obj, end = decoder.raw_decode(body, pos)
                args = obj.get("arguments", obj.get("parameters"))
                calls.append(ToolCall(name=obj["name"], arguments=arguments_or_raw(args)))
                pos = end
                rest = body[pos:].lstrip()
                if not rest:
                    break
                if not rest.startswith(";"):
                    return Parsed([], text)
                pos = len(body) - len(rest) + 1
                while pos < len(body) and body[pos].isspace():
                    pos += 1
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            return Parsed([], text, _error(err))
        return Parsed(calls, None)
    if parser == "pythonic":
        return _parse_pythonic(text)
    if parser == "mistral":
        if "[TOOL_CALLS]" not in text:
            return Parsed([], text)
        content, raw = text.split("[TOOL_CALLS]", 1)
        try:
            items = json.loads(raw.strip())
            items = items if isinstance(items, list) else [items]
            calls = [ToolCall(name=c["name"], arguments=arguments_or_raw(c["arguments"])) for c in items]
        except (ValueError, KeyError, TypeError) as err:
            return Parsed([], text, _error(err))
        return Parsed(calls, content or None)
    return None


# vLLM's pythonic parser first matches this shape (a list of name(key=value, ...) calls), then reads it with `ast`.
# The pattern backtracks exponentially on an answer cut off inside a call (2.2 s at 122 characters, over 150 s at
# 170: a small model stopped by max tokens hung the evaluate step), so vLLM matches it with the `regex` module's
# time limit, VLLM_TOOL_PARSE_REGEX_TIMEOUT_SECONDS (1 s by default), and reads an answer past it as text: so here.
_PYTHONIC = regex.compile(
    r"\[([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s)?\),\s*)*([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,"
    r"\s*)*([a-zA-Z]+\w*=.*\s*)?\)\s*)+\]",
    regex.DOTALL,
)


def regex_timeout() -> float:
    """vLLM's limit on the pythonic pattern's match, in seconds (its env var; 1 when unset or not a number > 0)."""
    try:
        value = float(os.environ.get("VLLM_TOOL_PARSE_REGEX_TIMEOUT_SECONDS", "1"))
    except ValueError:
        return 1.0
    return value if value > 0 and math.isfinite(value) else 1.0


_JSON_NAMES = {"true": True, "false": False, "null": None}


def _literal(node: ast.expr) -> Any:
    """A call argument as vLLM's pythonic parser reads it: constants, lists, dicts with literal keys, and JSON's
    true / false / null written as names."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float))):
        return node.value
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
        return {k.value: _literal(v) for k, v in zip(node.keys, node.values)}  # type: ignore[union-attr]
    if isinstance(node, ast.List):
        return [_literal(v) for v in node.elts]
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
    ):
        return -node.operand.value
    raise ValueError(f"not a literal: {ast.dump(node)[:80]}")


def _parse_pythonic(text: str) -> Parsed:
    """`[f(a=1), g(b="x")]`: the whole output a list of calls, else it is text (an answer the pattern cannot be
    matched against within `regex_timeout`, as vLLM reads it, too)."""
    try:
        shaped = _PYTHONIC.match(text, timeout=regex_timeout())
    except TimeoutError:
        return Parsed(
            [], text, f"the pythonic call pattern timed out after {regex_timeout():g} s, read as text as vLLM does"
        )
    if not shaped:
        return Parsed([], text)
    try:
        value = getattr(ast.parse(text.strip()).body[0], "value", None)
        if not isinstance(value, ast.List) or not all(
            isinstance(e, ast.Call) and isinstance(e.func, ast.Name) for e in value.elts
        ):
            raise ValueError("Tool output must be a list of function calls")
        calls = [
            ToolCall(name=e.func.id, arguments={k.arg: _literal(k.value) for k in e.keywords})  # type: ignore
            for e in value.elts
        ]
    except (SyntaxError, ValueError, IndexError) as err:
        return Parsed([], text, _error(err))
    return Parsed(calls, None)


def _error(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


class _Held(logging.Filter):
    """Keeps a logger's records instead of printing them: vLLM's parsers log each failure with a traceback
    (`logger.exception`), one per row checked, which buried the check's one-line verdict."""

    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


def _vllm_parser_classes():
    """vLLM's request and parser classes, imported without vLLM's notes about this platform ("Triton is
    installed, but doesn't include CPU backend"), which printed before a refusal's message: they are logged
    during the import, before vLLM configures its loggers, so Python's last-resort handler printed them."""
    vllm_logger = logging.getLogger("vllm")
    level = vllm_logger.level
    vllm_logger.setLevel(logging.ERROR)
    try:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.tool_parsers import ToolParserManager
    finally:
        if vllm_logger.level == logging.ERROR:  # as it was, unless vLLM set its own level meanwhile
            vllm_logger.setLevel(level)
    return ChatCompletionRequest, ToolParserManager


def vllm_parse(parser: str, text: str, tokenizer, tools: list | None) -> Parsed | None:
    """The same through vLLM's own parser class; None where vLLM is not installed."""
    try:
        ChatCompletionRequest, ToolParserManager = _vllm_parser_classes()
    except ImportError:
        return None
    request = ChatCompletionRequest(model="parity", messages=[{"role": "user", "content": "-"}], tools=tools or None)
    instance = ToolParserManager.get_tool_parser(parser)(tokenizer)
    held, log = _Held(), logging.getLogger(type(instance).__module__)
    log.addFilter(held)
    try:
        info = instance.extract_tool_calls(text, request)
    finally:
        log.removeFilter(held)
    calls = (
        [ToolCall(name=c.function.name, arguments=arguments_or_raw(c.function.arguments)) for c in info.tool_calls]
        if info.tools_called
        else []
    )
    raised = next((r.exc_info[1] for r in held.records if r.exc_info and r.exc_info[1]), None)
    return Parsed(calls, info.content, _error(raised) if raised else None)


def stop_texts(tokenizer, eos_ids: Sequence[int] = ()) -> list[str]:
    """The texts of the tokens generation stops at: the EOS token and the generation config's ids."""
    ids = {i for i in (tokenizer.eos_token_id, *eos_ids) if isinstance(i, int)}
    return sorted({tokenizer.convert_ids_to_tokens(i) for i in ids} - {None}, key=len, reverse=True)


def parse_tool_call(text: str) -> ToolCall | None:
    """The first tool call in a model's output, as {"name", "arguments"}, or None.

    Accepts `<tool_call>{...}</tool_call>` (our template, Qwen, Hermes) and a bare JSON
    object (Llama 3 style, which says "parameters" instead of "arguments").
    """
    m = _TOOL_CALL.search(text)
    candidate = m.group(1) if m else text.strip()
    start = candidate.find("{")
    if start < 0:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(candidate[start:])
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    try:
        args = decode_arguments(args)
    except ValueError:
        return None
    return {"name": obj["name"], "arguments": args}


# A fine-tuned model writes tool calls the way its chat template rendered them in training, so the
# template decides which vLLM parser turns them back into `message.tool_calls`: hermes reads
# <tool_call>{...}</tool_call> (the built-in template, Qwen, Hermes), llama3_json a bare
# {"name": ..., "parameters": ...} (Llama 3.x), mistral [TOOL_CALLS][...]. With hermes on a Llama
# model every tool call would come back as plain `content`.
_PROBE_TOOL, _PROBE_ARGS = "probe_tool_fn", {"probe_arg": "probe-value"}


def tool_call_parser(chat_template: str | None, special_tokens: Collection[str] = ()) -> str:
    """The vLLM `--tool-call-parser` that reads tool calls in the format `chat_template` writes
    them, found by rendering one assistant tool call with it; hermes when the template writes none
    of the known formats (or cannot render a tool call at all). `special_tokens`: the tokenizer's
    added tokens (some parsers need one of them)."""
    if not chat_template:
        return DEFAULT_TOOL_PARSER
    from transformers.utils.chat_template_utils import render_jinja_template

    tool = {
        "type": "function",
        "function": {
            "name": _PROBE_TOOL,
            "description": "A probe.",
            "parameters": {
                "type": "object",
                "properties": {"probe_arg": {"type": "string"}},
                "required": ["probe_arg"],
            },
        },
    }
    user: list[dict[str, Any]] = [{"role": "user", "content": "Call the probe."}]
    call: dict[str, Any] = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call00001", "type": "function", "function": {"name": _PROBE_TOOL, "arguments": _PROBE_ARGS}}
        ],
    }
    own = False
    try:
        with time_limit(TEMPLATE_BUDGET_S) as own:  # a template that loops on tools: no format read, not a hang
            render = [
                render_jinja_template(
                    conversations=[conv],
                    tools=[tool],
                    chat_template=chat_template,
                    add_generation_prompt=gen,
                    bos_token="",
                    eos_token="",
                )[0][0]
                for conv, gen in ((user, True), ([*user, call], False))
            ]
    except OverBudget:
        if not own:
            raise  # an outer check's budget ran out here: that check says so
        return DEFAULT_TOOL_PARSER
    except Exception:  # noqa: BLE001 - a template that cannot render a tool call: no format to read
        return DEFAULT_TOOL_PARSER
    # Only what the assistant's turn adds: the tool list in the prompt also names the tool.
    answer = render[1][len(os.path.commonprefix(render)) :]
    if "<tool_call>" in answer:
        return "hermes"
    # vLLM's mistral parser refuses to start without the [TOOL_CALLS] token, as llama3_json without <|python_tag|>.
    if "[TOOL_CALLS]" in answer and "[TOOL_CALLS]" in special_tokens:
        return "mistral"
    if answer.lstrip().startswith(f"[{_PROBE_TOOL}("):
        return "pythonic"
    # vLLM's llama3_json parser refuses to start without Llama 3's <|python_tag|> token.
    if "<|python_tag|>" in special_tokens and re.search(r'\{\s*"name"\s*:\s*"' + _PROBE_TOOL + '"', answer):
        return "llama3_json"
    return DEFAULT_TOOL_PARSER


def chat_template_text(read: Callable[[str], str | None]) -> str | None:
    """A model tree's chat template: chat_template.jinja, else tokenizer_config.json's (its
    `tool_use` template when it names several). `read(path)` returns a file's text or None."""
    if text := read("chat_template.jinja"):
        return text
    config = read("tokenizer_config.json")
    template = json.loads(config).get("chat_template") if config else None
    if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("tool_use") or named.get("default")
    return template if isinstance(template, str) else None
