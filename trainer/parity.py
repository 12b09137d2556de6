"""Train/serve parity: what training teaches is what the served model's parser reads back.

The most reported fine-tuning failure in LLaMA-Factory and Axolotl is a chat template that renders
tools or tool calls differently from serving (or not at all): training then teaches empty answers,
or calls in a format the server's tool-call parser never turns into `message.tool_calls`. This
module checks, before any training, on the rows that will be trained (the first CHECK_ROWS):

  - the template renders every row (any exception is a refusal, TypeError included);
  - for rows with tools, every tool's name appears in the prompt the server would render;
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
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.chat.calls import message_calls, same_calls
from trainer.chat.messages import openai_messages
from trainer.chat.parsers import END_MARKERS, Parsed, parse, stop_texts, tool_call_parser, vllm_parse
from trainer.chat.turns import target_index, trained_turns

CHECK_ROWS = 1000  # a second or two on 2 cores; such problems are systematic

@dataclass
class Verdict:
    """What the check found: rows per problem kind, with the first example of each."""
    checked: int = 0
    with_tools: int = 0
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


def check(rows: Sequence[dict[str, Any]], tokenizer, parser: str, eos_ids: Sequence[int] = (),
          parse_fn: Callable[[str, str], Parsed | None] | None = None, limit: int = CHECK_ROWS) -> Verdict:
    """Check the first `limit` rows (see the module docstring); `parse_fn(parser, text)` defaults to
    `parse`."""
    parse_fn = parse_fn or parse
    stops = stop_texts(tokenizer, eos_ids) or list(END_MARKERS)
    verdict = Verdict()
    for row in rows[:limit]:
        verdict.checked += 1
        messages, tools = row["messages"], row.get("tools") or None
        try:
            _render(tokenizer, messages, tools, False)
        except Exception as err:  # noqa: BLE001 - a template is code: anything it raises is a refusal
            verdict.add("refused", f"{type(err).__name__}: {_short(str(err), 120)} (first message "
                                   f"{_short(messages[0].get('content'), 60)!r})")
            continue
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


def _check_turn(verdict: Verdict, tokenizer, messages, i: int, tools, parser: str, stops: list[str],
                parse_fn) -> None:
    message = messages[i]
    prompt = _render(tokenizer, messages[:i], tools, True)
    full = _render(tokenizer, messages[: i + 1], tools, False)
    if not full.startswith(prompt):
        verdict.add("prompt mismatch", f"the training text of turn {i} does not start with the prompt the server "
                                       f"renders (it renders ...{_short(prompt[-60:])!r})")
        return
    target = full[len(prompt):]
    ends = [target.find(s) for s in stops if s and s in target]
    answer = target[: min(ends)] if ends else target
    want = message_calls(message)
    if want and not all(c["name"] in answer for c in want):
        verdict.add("calls dropped", f"the calls {[c['name'] for c in want]} render as {_short(answer, 80)!r}")
        return
    if not ends:
        verdict.add("no stop", f"the assistant turn {_short(target, 80)!r} does not end with a token generation "
                               f"stops at ({', '.join(stops[:3])})")
        return
    got = parse_fn(parser, answer)
    if got is None:
        verdict.add("unknown parser", f"no check for the {parser!r} parser here")
        return
    if want and not same_calls(got.calls, want):
        verdict.add("calls unreadable", f"{parser} reads {_short(got.calls) if got.calls else 'no call'} from "
                                        f"{_short(answer, 100)!r}; the row has {_short(want)}")
    elif not want and got.calls:
        verdict.add("text read as call", f"{parser} reads the text answer {_short(answer, 80)!r} as calls")
    elif not want and (got.content or "").strip() != (message.get("content") or "").strip():
        verdict.add("text changed", f"the text answer {_short(message.get('content'), 60)!r} comes back as "
                                    f"{_short(got.content or '', 60)!r}")


_FIX = {
    "refused": "change those rows, or give a template that accepts them",
    "tools dropped": "the model would never see its tools",
    "calls dropped": "the model would learn empty answers where the calls belong",
    "calls unreadable": "the served model's calls would come back as plain text, not message.tool_calls",
    "text read as call": "text answers would come back as tool calls",
    "text changed": "text answers would come back changed",
    "prompt mismatch": "the served prompt differs from the trained one",
    "no stop": "the served model would not stop after its answer",
    "unknown parser": "the parser's reading cannot be checked",
}
_COUNTED_BY = {"refused": "checked", "tools dropped": "with_tools"}


def problems(verdict: Verdict, where: str, parser: str, chatml: bool = True) -> list[str]:
    """One line per problem kind with counts, an example and the fix; [] when the rows pass.
    `chatml`: the tokenizer has ChatML's turn tokens, so the built-in chatml-tools template fits it."""
    if verdict.ok:
        return []
    lines = []
    for kind, examples in verdict.problems.items():
        total = getattr(verdict, _COUNTED_BY.get(kind, "turns"))
        unit = {"checked": "rows", "with_tools": "rows with tools"}.get(_COUNTED_BY.get(kind, ""), "assistant turns")
        lines.append(f"{kind}: {len(examples)} of {total} {unit} ({_FIX[kind]}); e.g. {examples[0]}")
    fix = ("chat_template=chatml-tools (the built-in ChatML template with <tool_call> JSON, which this tokenizer's "
           "<|im_start|>/<|im_end|> tokens fit), or a .jinja file of your own" if chatml else
           "chat_template=FILE.jinja, a template in the model's own turn format that renders tools and tool calls "
           "(<tool_call> JSON reads back with vLLM's hermes parser)")
    return [f"{where}: the chat template fails the train/serve check with the {parser!r} tool-call parser: "
            + "; ".join(lines) + f". Nothing was trained. Fix: {fix}"]


def _parse_fn(tokenizer) -> Callable[[str, str], Parsed | None]:
    """vLLM's own parser classes where vLLM is installed (the local server), else `parse`."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return parse
    return lambda parser, text: vllm_parse(parser, text, tokenizer, None)


def model_problems(rows: Sequence[dict[str, Any]], tokenizer, where: str, eos_ids: Sequence[int] = ()) -> list[str]:
    """The check with the parser this tokenizer's template will be served with (trainer.serving.args reads
    it off the template, as every deploy does)."""
    if not rows:
        return []
    parser = tool_call_parser(tokenizer.chat_template, list(tokenizer.get_added_vocab()))
    verdict = check(rows, tokenizer, parser, eos_ids, parse_fn=_parse_fn(tokenizer))
    vocab = tokenizer.get_vocab()
    return problems(verdict, where, parser, chatml="<|im_start|>" in vocab and "<|im_end|>" in vocab)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json", "generation_config.json",
                   "config.json")
_HEAD_BYTES = 64 << 20  # enough for CHECK_ROWS rows of any sane chat data


def delivered_problems(store, model_uri: str, dataset_uri: str) -> list[str]:
    """The parity check on a delivered model tree and dataset (the finetune step, before a job
    starts, for every dataset kind): only the tokenizer files and the first rows are read."""
    import tempfile
    from pathlib import Path

    from transformers import AutoTokenizer

    from trainer import data
    from trainer.storage import MANIFEST, split_uri

    from trainer import settings

    _, model_prefix = split_uri(model_uri)
    _, data_prefix = split_uri(dataset_uri)
    manifest = store.get_json(f"{model_prefix}/{MANIFEST}")
    present = {f["path"] for f in manifest["files"]}
    # a tree already in this machine's cache (get_tree's, named by its hash) is read there, not fetched again
    cached = Path(settings.get("FINETUNE_CACHE_DIR")) / str(manifest.get("tree_sha256"))
    with tempfile.TemporaryDirectory() as tmp:
        for name in TOKENIZER_FILES:
            if name in present:
                Path(tmp, name).write_bytes((cached / name).read_bytes() if (cached / MANIFEST).is_file()
                                            else store.get_bytes(f"{model_prefix}/{name}"))
        tokenizer = AutoTokenizer.from_pretrained(tmp, local_files_only=True)
        eos = []
        if (gen := Path(tmp, "generation_config.json")).is_file():
            ids = json.loads(gen.read_text()).get("eos_token_id")
            eos = ids if isinstance(ids, list) else [ids] if isinstance(ids, int) else []
    rows = []
    for split in ("train", "eval"):
        head = store.get_bytes(f"{data_prefix}/{split}.jsonl", length=_HEAD_BYTES).decode("utf-8", errors="replace")
        lines = head.splitlines()
        if len(head.encode()) >= _HEAD_BYTES:
            lines = lines[:-1]  # the last line may be cut
        rows += [json.loads(line) for line in lines[:CHECK_ROWS] if line.strip()]
    return data.template_problems(rows, tokenizer, "the delivered dataset with the delivered model", eos)



CHECKED = "template-check.json"  # under a run's output prefix: the pair of inputs the check passed
# Content-addressed inputs (deliver's sha256-<tree hash> URIs) passed once pass for every run: recorded here in the
# bucket, by version of the check (a check that asks more checks every pair again).
CHECKS, CHECK_VERSION = "template-checks", 1
_ADDRESSED = re.compile(r"s3://[^/]+/(?:.+/)?sha256-([0-9a-f]{64})/?")


def _record(model_uri: str, dataset_uri: str, output_prefix: str) -> str:
    """Where a passed check of this pair is recorded: by the two trees' hashes, else under the run's prefix."""
    model, data = _ADDRESSED.fullmatch(model_uri), _ADDRESSED.fullmatch(dataset_uri)
    if model and data:
        return f"{CHECKS}/v{CHECK_VERSION}/{model[1]}-{data[1]}.json"
    return f"{output_prefix}/{CHECKED}"


def check_delivered(store, model_uri: str, dataset_uri: str, output_prefix: str) -> None:
    """`delivered_problems` for a training run, raised as one UserError before anything trains. A passed pair is
    recorded (`_record`), so the job's own `trainer train` processes, which check too for those who run them
    without the pipeline, and later runs of the same inputs do not check the same trees again (each rank would
    import vLLM's parsers: ~3 CPU-s)."""
    from trainer.errors import collect

    for uri in (dataset_uri, model_uri):  # as training reads them: a missing one is named, not a traceback
        store.check_tree(uri)
    record = _record(model_uri, dataset_uri, output_prefix)
    pair = {"model_uri": model_uri, "dataset_uri": dataset_uri}
    if store.exists(record) and store.get_json(record) == pair:
        return
    collect(delivered_problems(store, model_uri, dataset_uri), what="the chat template does not fit the data")
    store.put_json(record, pair)


# --- the running server against the training encoder ----------------------------------------------------------

def prompt_ids(row: dict[str, Any], tokenizer, max_seq_len: int) -> list[int] | None:
    """The training encoder's prompt for a row's scored turn: its token ids before that turn's first trained label
    (trainer.data.encode, as the trainer encodes the row), or None for a row the trainer skips as too long."""
    from trainer.data import encode

    enc = encode(row, tokenizer, max_seq_len)
    if enc is None:
        return None
    trained = [label != -100 for label in enc["labels"]]
    end = max(i for i, t in enumerate(trained) if t)  # the scored turn is the last run of trained tokens
    start = end
    while start > 0 and trained[start - 1]:
        start -= 1
    return enc["input_ids"][:start]


def served_prompts(base_url: str, tokenizer, rows: Sequence[dict[str, Any]], models: Sequence[str],
                   max_seq_len: int, timeout_s: float = 60.0) -> dict[str, Any]:
    """vLLM's own rendering of each row's conversation before its scored turn, with the row's tools (a running
    server's /tokenize endpoint: messages + tools + add_generation_prompt, the path chat completions render
    through), beside the training encoder's prompt ids, for each served model name. Returns the (row, model)
    pairs compared, how many were equal, and the first difference decoded (None when all were equal)."""
    import urllib.request


    root = base_url.removesuffix("/").removesuffix("/v1")
    out: dict[str, Any] = {"rows": 0, "equal": 0, "first_difference": None}
    for model in models:
        for row in rows:
            want = prompt_ids(row, tokenizer, max_seq_len)
            if want is None:
                continue
            body = {"model": model, "messages": openai_messages(row["messages"][:target_index(row)]),
                    "tools": row.get("tools"), "add_generation_prompt": True}
            req = urllib.request.Request(f"{root}/tokenize", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                got = json.loads(resp.read())["tokens"]
            out["rows"] += 1
            if got == want:
                out["equal"] += 1
            elif out["first_difference"] is None:
                at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                out["first_difference"] = {"model": model, "token": at, "vllm": tokenizer.decode(got[at:at + 12]),
                                           "training": tokenizer.decode(want[at:at + 12])}
    return out
