"""Train/serve parity: what training teaches is what the served model's parser reads back.

The most reported fine-tuning failure in LLaMA-Factory and Axolotl is a chat template that renders
tools or tool calls differently from serving (or not at all): training then teaches empty answers,
or calls in a format the server's tool-call parser never turns into `message.tool_calls`. This
module checks, before any training, on the rows that will be trained (the first CHECK_ROWS):

  - the template renders every row (any exception is a refusal, TypeError included);
  - for rows with tools, every tool's name appears in the prompt the server would render;
  - every tool result (`role: tool` content) appears in the rendered row, in order: a template that
    renders results as nothing trains multi-turn rows straight from the call to the final answer;
  - every assistant turn trained on is the continuation of that prompt (vLLM renders the prompt
    with add_generation_prompt and the model continues it), and ends with a token the server
    stops at (the tokenizer's EOS or the generation config's);
  - the tool-call parser the model will be served with (read off the same template) parses that
    rendered turn back into the message's own calls, names and arguments, and a text answer into
    the same text with no call.

The parsers are trainer.chat.parsers': `parse`, the project's reading of vLLM's hermes, llama3_json
and mistral parsers (the image without vLLM uses it), and with vLLM installed (locally) `vllm_parse`,
vLLM's own parser classes; tests hold the two to the same verdicts on real templates.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.chat.types import Row
from trainer.chat import templates
from trainer.chat.calls import message_calls, same_calls
from trainer.chat.parsers import END_MARKERS, Parsed, parse, stop_texts, tool_call_parser, vllm_parse
from trainer.chat.turns import trained_turns

CHECK_ROWS = 1000  # a second or two on 2 cores; such problems are systematic


@dataclass
class Verdict:
    """What the check found: rows per problem kind, with the first example of each."""

    checked: int = 0
    with_tools: int = 0
    with_results: int = 0
    turns: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)  # kind -> example descriptions

    def add(self, kind: str, example: str) -> None:
        self.problems.setdefault(kind, []).append(example)

    @property
    def ok(self) -> bool:
        return not self.problems


def _render(tokenizer, messages, tools, generation: bool) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=generation)


def _short(value: Any, n: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= n else text[: n - 3] + "..."


def check(
    rows: list[Row],
    tokenizer,
    parser: str,
    eos_ids: Sequence[int] = (),
    parse_fn: Callable[[str, str], Parsed | None] | None = None,
    limit: int = CHECK_ROWS,
) -> Verdict:
    """Check the first `limit` rows (see the module docstring); `parse_fn(parser, text)` defaults to
    `parse`."""
    parse_fn = parse_fn or parse
    stops = stop_texts(tokenizer, eos_ids) or list(END_MARKERS)
    verdict = Verdict()
    for row in rows[:limit]:
        verdict.checked += 1
        messages, tools = row["messages"], row.get("tools") or None
        try:
            whole = _render(tokenizer, messages, tools, False)
        except Exception as err:  # noqa: BLE001 - a template is code: anything it raises is a refusal
            verdict.add(
                "refused",
                f"{type(err).__name__}: {_short(str(err), 120)} (first message "
                f"{_short(messages[0].get('content'), 60)!r})",
            )
            continue
        verdict.with_results += any(m.get("role") == "tool" for m in messages)
        if lost := _results_dropped(messages, whole):
            verdict.add("tool results dropped", lost)
        answers = trained_turns(messages)
        if tools:
            verdict.with_tools += 1
            prompt = _render(tokenizer, messages[: answers[0]] if answers else messages, tools, True)
            missing = [t["function"]["name"] for t in tools if t["function"]["name"] not in prompt]
            if missing:
                verdict.add("tools dropped", f"tools {missing[:3]} are not in the rendered prompt")
        for i in answers:
            verdict.turns += 1
            _check_turn(verdict, tokenizer, messages, i, tools, parser, stops, parse_fn)
    return verdict


def _results_dropped(messages, rendered: str) -> str | None:
    """The first tool result that is not in the rendered row after the one before it, described; None when
    all are. Templates write a result as it is or as JSON (Llama 3.1's `| tojson`), trimmed or not."""
    at = 0
    for n, m in enumerate(m for m in messages if m.get("role") == "tool"):
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        forms = [f for f in (text, text.strip(), json.dumps(text, ensure_ascii=False)[1:-1].strip()) if f]
        found = [(i, len(f)) for f in forms if (i := rendered.find(f, at)) >= 0]
        if forms and not found:
            return f"tool result {n + 1} {_short(text, 60)!r} is not in the rendered row"
        if found:
            i, size = min(found)
            at = i + size
    return None


def _check_turn(verdict: Verdict, tokenizer, messages, i: int, tools, parser: str, stops: list[str], parse_fn) -> None:
    message = messages[i]
    prompt = _render(tokenizer, messages[:i], tools, True)
    full = _render(tokenizer, messages[: i + 1], tools, False)
    if not full.startswith(prompt):
        verdict.add(
            "prompt mismatch",
            f"the training text of turn {i} does not start with the prompt the server "
            f"renders (it renders ...{_short(prompt[-60:])!r})",
        )
        return
    target = full[len(prompt) :]
    ends = [target.find(s) for s in stops if s and s in target]
    answer = target[: min(ends)] if ends else target
    want = message_calls(message)
    if want and not all(c["name"] in answer for c in want):
        verdict.add("calls dropped", f"the calls {[c['name'] for c in want]} render as {_short(answer, 80)!r}")
        return
    if not ends:
        verdict.add(
            "no stop",
            f"the assistant turn {_short(target, 80)!r} does not end with a token generation "
            f"stops at ({', '.join(stops[:3])})",
        )
        return
    got = parse_fn(parser, answer)
    if got is None:
        verdict.add("unknown parser", f"no check for the {parser!r} parser here")
        return
    if got.error:  # counted like any kind: vLLM's own traceback per row buried the verdict
        verdict.add("parser error", f"{parser} raised {_short(got.error, 100)} reading {_short(answer, 80)!r}")
        return
    if want and not same_calls(got.calls, want):
        verdict.add(
            "calls unreadable",
            f"{parser} reads {_short(got.calls) if got.calls else 'no call'} from "
            f"{_short(answer, 100)!r}; the row has {_short(want)}",
        )
    elif not want and got.calls:
        verdict.add("text read as call", f"{parser} reads the text answer {_short(answer, 80)!r} as calls")
    elif not want and (got.content or "").strip() != (message.get("content") or "").strip():
        verdict.add(
            "text changed",
            f"the text answer {_short(message.get('content'), 60)!r} comes back as {_short(got.content or '', 60)!r}",
        )


_FIX = {
    "refused": "change those rows, or give a template that accepts them",
    "tools dropped": "the model would never see its tools",
    "tool results dropped": "multi-turn rows would train from the call straight to the answer, the result unseen",
    "calls dropped": "the model would learn empty answers where the calls belong",
    "parser error": "the server's parser would fail on every such answer and return it as plain text",
    "calls unreadable": "the served model's calls would come back as plain text, not message.tool_calls",
    "text read as call": "text answers would come back as tool calls",
    "text changed": "text answers would come back changed",
    "prompt mismatch": "the served prompt differs from the trained one",
    "no stop": "the served model would not stop after its answer",
    "unknown parser": "the parser's reading cannot be checked",
}
_COUNTED_BY = {"refused": "checked", "tools dropped": "with_tools", "tool results dropped": "with_results"}


def problems(
    verdict: Verdict, where: str, parser: str, family: str | None = "chatml-tools", tried: str = ""
) -> list[str]:
    """One line per problem kind with counts, an example and the fix; [] when the rows pass.
    `family`: the built-in template whose family's turn tokens the tokenizer has (templates.family_template), never
    `tried`, the built-in that was just checked and failed: then the rows' own shape is named as the other fix (a
    tool or parameter name the format cannot carry)."""
    if verdict.ok:
        return []
    lines = []
    for kind, examples in verdict.problems.items():
        total = getattr(verdict, _COUNTED_BY.get(kind, "turns"))
        unit = {"checked": "rows", "with_tools": "rows with tools", "with_results": "rows with tool results"}.get(
            _COUNTED_BY.get(kind, ""), "assistant turns"
        )
        lines.append(f"{kind}: {len(examples)} of {total} {unit} ({_FIX[kind]}); e.g. {examples[0]}")
    fix = (
        f"chat_template={family} (the built-in template of this tokenizer's family: {templates.BUILTIN[family].about}; "
        f"its turns end with {templates.BUILTIN[family].turn_end}, added to the delivered model's stop tokens where "
        "it is not one yet), or a .jinja file of your own"
        if family
        else "chat_template=FILE.jinja, a template in the model's own turn format that renders tools and tool calls "
        "(<tool_call> JSON reads back with vLLM's hermes parser)"
    )
    if tried:  # the built-in just checked: its own format cannot carry these rows as they are
        fix = (
            f"the rows' tool and parameter names as {tried}'s format can carry them (its calls are read back by "
            f"the {parser!r} parser: e.g. a Python keyword or a '-' in a name breaks a pythonic call), or {fix}"
        )
    return [
        f"{where}: the chat template fails the train/serve check with the {parser!r} tool-call parser: "
        + "; ".join(lines)
        + f". Nothing was trained. Fix: {fix}"
    ]


def _parse_fn(tokenizer) -> Callable[[str, str], Parsed | None]:
    """vLLM's own parser classes where vLLM is installed (the local server), else `parse`."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return parse
    return lambda parser, text: vllm_parse(parser, text, tokenizer, None)


def model_problems(
    rows: list[Row], tokenizer, where: str, eos_ids: Sequence[int] = (), template: str = ""
) -> list[str]:
    """The check with the parser this tokenizer's template will be served with (trainer.serving.args reads
    it off the template, as every deploy does). `template`: the chat_template that was checked (a built-in name
    under `auto` too), which the refusal's fix never names again."""
    if not rows:
        return []
    parser = tool_call_parser(tokenizer.chat_template, list(tokenizer.get_added_vocab()))
    verdict = check(rows, tokenizer, parser, eos_ids, parse_fn=_parse_fn(tokenizer))
    family = templates.family_template(tokenizer.get_vocab(), besides=template)
    return problems(verdict, where, parser, family, tried=template if template in templates.BUILTIN else "")
