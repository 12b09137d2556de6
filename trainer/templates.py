"""The `chat_template` parameter: which chat template a run trains, evaluates and serves with.

  --param chat_template=model          the model's own template (default)
  --param chat_template=chatml-tools   a built-in template (BUILTIN below)
  --param chat_template=./my.jinja     a Jinja file on this machine (run_local)
  --param chat_template=s3://bucket/templates/my.jinja   an object in the run's bucket

The template is chosen once, at delivery: deliver-model writes it into the delivered model tree as
`chat_template.jinja` (which transformers and vLLM both prefer over tokenizer_config.json's), so
the tree's content hash covers it and every later stage reads the same file: training encodes rows
with it, the adapter and the merged model carry it, vLLM is started with `--chat-template` on it,
and the tool-call parser is read off it (trainer.chat.parsers.tool_call_parser). Nothing downstream can
pick up another template by accident.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from trainer.errors import UserError
from trainer.storage import split_uri

MODEL = "model"
TEMPLATE_FILE = "chat_template.jinja"

# ChatML with tools, the format Qwen2.5 and Hermes models use: the tool list as JSON inside
# <tools></tools> in the system turn, each call as <tool_call>{"name": ..., "arguments": {...}}
# </tool_call> (what vLLM's hermes parser reads back), tool results as <tool_response> in a user
# turn. `{% generation %}` marks what the assistant writes, <|im_end|> included (the model learns to
# stop), so the loss mask is exact for every assistant turn. `content: null` beside tool calls is
# rendered as nothing (SmolLM2's own ChatML template raises TypeError on it).
CHATML_TOOLS = (
    "{%- set nl = '\\n' %}"
    "{%- if messages and messages[0].role == 'system' %}{%- set system = messages[0].content or '' %}"
    "{%- set rest = messages[1:] %}{%- else %}{%- set system = '' %}{%- set rest = messages %}{%- endif %}"
    "{%- if tools %}"
    "{{- '<|im_start|>system' + nl }}{% if system %}{{ system + nl + nl }}{% endif %}"
    "{{- '# Tools' + nl + nl + 'You may call one or more functions to assist with the user query.' + nl + nl }}"
    "{{- 'You are provided with function signatures within <tools></tools> XML tags:' + nl + '<tools>' }}"
    "{%- for tool in tools %}{{ nl }}{{ (tool.function if tool.function is defined else tool) | tojson }}{% endfor %}"
    "{{- nl + '</tools>' + nl + nl + 'For each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:' + nl + '<tool_call>' + nl }}"
    "{{- '{\"name\": <function-name>, \"arguments\": <args-json-object>}' + nl + '</tool_call><|im_end|>' + nl }}"
    "{%- elif system %}{{ '<|im_start|>system' + nl + system + '<|im_end|>' + nl }}{%- endif %}"
    "{%- for m in rest %}"
    "{%- if m.role == 'assistant' %}{{ '<|im_start|>assistant' + nl }}{% generation %}"
    "{%- if m.content %}{{ m.content }}{% endif %}"
    "{%- for tc in m.tool_calls or [] %}{% if m.content or not loop.first %}{{ nl }}{% endif %}"
    "{{- '<tool_call>' + nl + '{\"name\": ' }}{{ tc.function.name | tojson }}{{ ', \"arguments\": ' }}"
    "{{- tc.function.arguments | tojson }}{{ '}' + nl + '</tool_call>' }}"
    "{%- endfor %}{{ '<|im_end|>' }}{% endgeneration %}{{ nl }}"
    "{%- elif m.role == 'tool' %}{{ '<|im_start|>user' + nl + '<tool_response>' + nl + m.content + nl }}"
    "{{- '</tool_response><|im_end|>' + nl }}"
    "{%- else %}{{ '<|im_start|>' + m.role + nl + (m.content or '') + '<|im_end|>' + nl }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant' + nl }}{% endif %}"
)

# name -> (template, what it is for). Names are what users type as chat_template=.
BUILTIN = {
    "chatml-tools": (CHATML_TOOLS, "ChatML with <tool_call> JSON (Qwen2.5/Hermes format; vLLM parser hermes): "
                                   "for ChatML models whose own template drops tools, e.g. SmolLM2-Instruct"),
}
_S3 = re.compile(r"s3://[a-z0-9.-]{3,63}/\S+")


# `{% generation %}` in every whitespace-control spelling Jinja has ({%- generation %}, {% generation -%},
# {%- generation -%}): the pattern transformers' apply_chat_template looks for before it returns
# assistant_masks, so a template it marks from is one the loss mask is read from.
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


def has_generation_block(text: object) -> bool:
    """Whether a chat template marks the assistant's tokens with a `{% generation %}` block."""
    return isinstance(text, str) and bool(_GENERATION.search(text))


def describe() -> str:
    """The accepted forms, for messages and help texts."""
    names = ", ".join(BUILTIN)
    return (f"'{MODEL}' (the model's own), a built-in name ({names}), a .jinja file path, or an s3:// URI of one "
            "in the run's bucket")


def spec_problems(spec: object, check_local_files: bool = True) -> list[str]:
    """What is wrong with a chat_template value, from the value alone (and a local file's presence)."""
    if not isinstance(spec, str):
        return []  # the type check names it
    value = spec.strip()
    if value in (MODEL, *BUILTIN):
        return []
    if not value:
        return [f"chat_template is empty: give {describe()}"]
    if value.startswith("s3://"):
        return [] if _S3.fullmatch(value) else [f"chat_template={value!r} is not an s3://bucket/key URI"]
    path = Path(value[len("file://"):] if value.startswith("file://") else value).expanduser()
    if value.endswith((".jinja", ".j2", ".jinja2")) or "/" in value:
        if check_local_files and not path.is_file():
            return [f"chat_template file not found: {path}; give {describe()}"]
        if check_local_files:
            try:
                path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                return [f"chat_template file {path} cannot be read as UTF-8 text ({type(err).__name__}): save the "
                        "template as a plain .jinja text file"]
        return []
    import difflib

    close = difflib.get_close_matches(value, [MODEL, *BUILTIN], n=1)
    return [f"unknown chat_template {value!r}" + (f"; did you mean {close[0]}?" if close else "")
            + f": give {describe()}"]


def is_local(spec: str) -> bool:
    value = spec.strip()
    return value not in (MODEL, *BUILTIN) and not value.startswith("s3://")


def resolves_to_model(spec: str) -> bool:
    """`spec` keeps the model's own template (so the model must have one)."""
    return (spec or MODEL).strip() == MODEL


def resolve(spec: str, store=None) -> str | None:
    """The template text `spec` names; None for `model` (keep the model's own)."""
    value = (spec or MODEL).strip()
    if resolves_to_model(value):
        return None
    if value in BUILTIN:
        return BUILTIN[value][0]
    if value.startswith("s3://"):
        bucket, key = split_uri(value)
        if store is None or bucket != store.bucket:
            raise UserError(f"chat_template {value} is not in this run's bucket"
                            + (f" {store.bucket!r}" if store is not None else "")
                            + ": copy it there, or give a local .jinja file to run_local")
        if not store.exists(key):
            raise UserError(f"chat_template {value}: no such object in bucket {bucket!r}; check the key")
        text = store.get_bytes(key).decode("utf-8", errors="strict")
    else:
        problems = spec_problems(value)
        if problems:
            raise UserError(problems[0])
        text = Path(value[len("file://"):] if value.startswith("file://") else value).expanduser().read_text("utf-8")
    if not text.strip():
        raise UserError(f"chat_template {value} is empty: give a Jinja chat template")
    return text


def with_template(model_dir: str | Path, text: str, out_dir: str | Path) -> Path:
    """`model_dir` as `out_dir` with `text` as its chat template, without copying the weights:
    every file is a symbolic link into `model_dir` except chat_template.jinja (the template) and
    tokenizer_config.json (its own `chat_template` key removed, so no reader sees two)."""
    src, out = Path(model_dir), Path(out_dir)
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if not path.is_file() or rel.as_posix() in (TEMPLATE_FILE, "tokenizer_config.json") \
                or rel.parts[0] == "additional_chat_templates":
            continue
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(path.resolve(), out / rel)
    out.mkdir(parents=True, exist_ok=True)
    config_path = src / "tokenizer_config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config.pop("chat_template", None)
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                                                   encoding="utf-8")
    (out / TEMPLATE_FILE).write_text(text, encoding="utf-8")
    return out


def apply_to_tokenizer(tokenizer, spec: str, store=None):
    """`tokenizer` with the template `spec` names (itself for `model`), for checks that run before
    delivery (validate-params) on a tokenizer loaded from the source."""
    text = resolve(spec, store)
    if text is not None:
        tokenizer.chat_template = text
    return tokenizer
