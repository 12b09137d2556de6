"""The `chat_template` parameter: which chat template a run trains, evaluates and serves with.

  --param chat_template=model          the model's own template (default)
  --param chat_template=auto           the model's own where it passes the train/serve check on tool rows,
                                       else the built-in one of its tokenizer's family (trainer.parity.auto)
  --param chat_template=chatml-tools   a built-in template (BUILTIN below: one per family)
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
from dataclasses import dataclass
from pathlib import Path

from trainer.core.errors import UserError
from trainer.core.storage import split_uri

MODEL = "model"
AUTO = "auto"
TEMPLATE_FILE = "chat_template.jinja"
GENERATION_CONFIG = "generation_config.json"

# Every built-in template's start: `nl`, and the system text (`system`, '' without one) apart from the turns (`rest`).
_SPLIT_SYSTEM = (
    "{%- set nl = '\\n' %}"
    "{%- if messages and messages[0].role == 'system' %}{%- set system = messages[0].content or '' %}"
    "{%- set rest = messages[1:] %}{%- else %}{%- set system = '' %}{%- set rest = messages %}{%- endif %}"
)

# ChatML with tools, the format Qwen2.5 and Hermes models use: the tool list as JSON inside
# <tools></tools> in the system turn, each call as <tool_call>{"name": ..., "arguments": {...}}
# </tool_call> (what vLLM's hermes parser reads back), tool results as <tool_response> in a user
# turn. `{% generation %}` marks what the assistant writes, <|im_end|> included (the model learns to
# stop), so the loss mask is exact for every assistant turn. `content: null` beside tool calls is
# rendered as nothing (SmolLM2's own ChatML template raises TypeError on it).
CHATML_TOOLS = (
    _SPLIT_SYSTEM + "{%- if tools %}"
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

# The tool instructions and list the hermes-format templates put before the conversation (ChatML's system turn,
# Gemma's first user turn): the same words as CHATML_TOOLS.
_HERMES_TOOLS = (
    "{{- '# Tools' + nl + nl + 'You may call one or more functions to assist with the user query.' + nl + nl }}"
    "{{- 'You are provided with function signatures within <tools></tools> XML tags:' + nl + '<tools>' }}"
    "{%- for tool in tools %}{{ nl }}{{ (tool.function if tool.function is defined else tool) | tojson }}{% endfor %}"
    "{{- nl + '</tools>' + nl + nl + 'For each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:' + nl + '<tool_call>' + nl }}"
    "{{- '{\"name\": <function-name>, \"arguments\": <args-json-object>}' + nl + '</tool_call>' }}"
)
_HERMES_CALLS = (
    "{%- if m.content %}{{ m.content }}{% endif %}"
    "{%- for tc in m.tool_calls or [] %}{% if m.content or not loop.first %}{{ nl }}{% endif %}"
    "{{- '<tool_call>' + nl + '{\"name\": ' }}{{ tc.function.name | tojson }}{{ ', \"arguments\": ' }}"
    "{{- tc.function.arguments | tojson }}{{ '}' + nl + '</tool_call>' }}"
    "{%- endfor %}"
)

# Gemma's turns (`<start_of_turn>user` / `<start_of_turn>model`, each closed by <end_of_turn>), with tools, calls and
# results in the hermes format (vLLM parser hermes): Gemma has no system role, so the system text and the tool list
# open the first user turn, and a tool result is a user turn holding <tool_response>. Fits Gemma 1-3, base models
# included: their generation config stops at <eos> only, so delivery adds <end_of_turn> (`turn_end`) to it.
GEMMA_TOOLS = (
    _SPLIT_SYSTEM + "{{- bos_token }}"
    "{%- set ns = namespace(first=true) %}"
    "{%- for m in rest %}"
    "{%- if m.role == 'assistant' %}{{ '<start_of_turn>model' + nl }}{% generation %}"
    + _HERMES_CALLS
    + "{{- '<end_of_turn>' }}{% endgeneration %}{{ nl }}"
    "{%- else %}{{ '<start_of_turn>user' + nl }}"
    "{%- if ns.first %}{% if system %}{{ system + nl + nl }}{% endif %}"
    "{%- if tools %}" + _HERMES_TOOLS + "{{ nl + nl }}{% endif %}{% set ns.first = false %}{% endif %}"
    "{%- if m.role == 'tool' %}{{ '<tool_response>' + nl + m.content + nl + '</tool_response>' }}"
    "{%- else %}{{ m.content or '' }}{% endif %}{{ '<end_of_turn>' + nl }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<start_of_turn>model' + nl }}{% endif %}"
)

# Llama 3.x's header turns, tool results in the `ipython` role, the tools as JSON in the first user turn (Llama
# 3.1's default, `tools_in_user_message`), each call a bare {"name", "parameters"} object, several joined by "; "
# (vLLM parser llama3_json, which needs the <|python_tag|> token of Llama 3.1 and later vocabularies).
_LLAMA3_HEAD = _SPLIT_SYSTEM + "{{- bos_token }}"
_LLAMA3_TURNS = (
    "{%- for m in rest %}"
    "{%- if m.role == 'assistant' %}{{ '<|start_header_id|>assistant<|end_header_id|>' + nl + nl }}{% generation %}"
    "{%- if m.tool_calls %}CALLS{% else %}{{ m.content or '' }}{% endif %}"
    "{{- '<|eot_id|>' }}{% endgeneration %}"
    "{%- else %}{{ '<|start_header_id|>' + ('ipython' if m.role == 'tool' else m.role) + '<|end_header_id|>' + nl + nl }}"
    "{%- if loop.first and tools and m.role == 'user' %}TOOLS{% endif %}"
    "{{- (m.content or '') + '<|eot_id|>' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>' + nl + nl }}{% endif %}"
)
_LLAMA3_SYSTEM = (
    "{%- if system %}{{ '<|start_header_id|>system<|end_header_id|>' + nl + nl + system + '<|eot_id|>' }}{%- endif %}"
)
LLAMA3_JSON = (
    _LLAMA3_HEAD
    + _LLAMA3_SYSTEM
    + _LLAMA3_TURNS.replace(
        "TOOLS",
        (
            "{{- 'Given the following functions, please respond with a JSON for a function call with its proper arguments that "
            "best answers the given prompt.' + nl + nl + 'Respond in the format {\"name\": function name, \"parameters\": "
            "dictionary of argument name and its value}. Do not use variables.' + nl + nl }}"
            "{%- for tool in tools %}{{ (tool.function if tool.function is defined else tool) | tojson + nl + nl }}{% endfor %}"
        ),
    ).replace(
        "CALLS",
        (
            "{%- for tc in m.tool_calls %}{% if not loop.first %}{{ '; ' }}{% endif %}"
            "{{- '{\"name\": ' }}{{ tc.function.name | tojson }}{{ ', \"parameters\": ' }}{{ tc.function.arguments | tojson }}"
            "{{- '}' }}{% endfor %}"
        ),
    )
)

# Llama 3.2's pythonic calls in Llama 3's header turns: `[get_weather(city="Paris"), ...]` (vLLM parser pythonic,
# which needs no special token: it fits Llama 3.0 vocabularies too). Values are written as Python literals.
_PY_VALUE = (
    "{%- macro py(v) -%}"
    "{%- if v is string -%}{{ v | tojson }}"
    "{%- elif v is boolean -%}{{ 'True' if v else 'False' }}"
    "{%- elif v is none -%}None"
    "{%- elif v is mapping -%}{{ '{' }}{%- for k, x in v.items() -%}{{ k | tojson }}: {{ py(x) }}"
    "{{- ', ' if not loop.last }}{%- endfor -%}{{ '}' }}"
    "{%- elif v is iterable -%}[{%- for x in v -%}{{ py(x) }}{{ ', ' if not loop.last }}{%- endfor -%}]"
    "{%- else -%}{{ v | tojson }}"
    "{%- endif -%}"
    "{%- endmacro -%}"
)
LLAMA3_PYTHONIC = (
    _PY_VALUE
    + _LLAMA3_HEAD
    + (
        "{%- if tools %}{{ '<|start_header_id|>system<|end_header_id|>' + nl + nl }}"
        "{%- if system %}{{ system + nl + nl }}{% endif %}"
        "{{- 'You are an expert in composing functions. If you decide to invoke any of the function(s), you MUST put it '"
        "'in the format of [func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]' "
        "+ nl + 'You SHOULD NOT include any other text in the response if you call a function.' + nl + 'Here is a list of "
        "functions in JSON format that you can invoke.' + nl + nl }}"
        "{{- (tools | map(attribute='function') | list if tools[0].function is defined else tools) | tojson }}"
        "{{- '<|eot_id|>' }}{% else %}" + _LLAMA3_SYSTEM + "{% endif %}"
    )
    + _LLAMA3_TURNS.replace("TOOLS", "").replace(
        "CALLS",
        (
            "{{- '[' }}{%- for tc in m.tool_calls %}{{ tc.function.name + '(' }}"
            "{%- for k, v in tc.function.arguments.items() %}{{ k + '=' + py(v) }}{{ ', ' if not loop.last }}{% endfor %}"
            "{{- ')' }}{{ ', ' if not loop.last }}{% endfor %}{{ ']' }}"
        ),
    )
)


# Mistral's [INST] turns with its control tokens (the tekken vocabularies before v11: Mistral Nemo, Pixtral, Mistral
# Small 2409): the tool list as [AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS] before the first user turn (Mistral's own
# templates put it before the last, which would change the rendering of every earlier prefix), the system text
# opening the first user turn, calls as [TOOL_CALLS][{"name", "arguments"}, ...] and results as
# [TOOL_RESULTS]{"content": ...}[/TOOL_RESULTS] (vLLM parser mistral, which needs the [TOOL_CALLS] token), each
# assistant turn ending with </s>, the tokenizer's EOS.
MISTRAL_TOOLS = (
    _SPLIT_SYSTEM + "{{- bos_token }}"
    "{%- set ns = namespace(first=true) %}"
    "{%- for m in rest %}"
    "{%- if m.role == 'assistant' %}{% generation %}"
    "{%- if m.content %}{{ m.content }}{% endif %}"
    "{%- if m.tool_calls %}{{ '[TOOL_CALLS][' }}{%- for tc in m.tool_calls %}{{ ', ' if not loop.first }}"
    "{{- '{\"name\": ' }}{{ tc.function.name | tojson }}{{ ', \"arguments\": ' }}{{ tc.function.arguments | tojson }}"
    "{{- '}' }}{%- endfor %}{{ ']' }}{% endif %}{{ '</s>' }}{% endgeneration %}"
    "{%- elif m.role == 'tool' %}{{ '[TOOL_RESULTS]{\"content\": ' }}{{ (m.content or '') | tojson }}"
    "{{- '}[/TOOL_RESULTS]' }}"
    "{%- else %}"
    "{%- if ns.first and tools %}{{ '[AVAILABLE_TOOLS][' }}{%- for tool in tools %}{{ ', ' if not loop.first }}"
    "{{- (tool if tool.function is defined else {'type': 'function', 'function': tool}) | tojson }}{%- endfor %}"
    "{{- '][/AVAILABLE_TOOLS]' }}{% endif %}"
    "{{- '[INST]' }}{% if ns.first and system %}{{ system + nl + nl }}{% endif %}{{ (m.content or '') + '[/INST]' }}"
    "{%- set ns.first = false %}"
    "{%- endif %}"
    "{%- endfor %}"
)


@dataclass(frozen=True)
class Builtin:
    """A built-in template: its text, what it is for, the token each assistant turn ends with (`turn_end`: a stop
    token of the delivered model, added to its generation config where the tokenizer's EOS is another, as in base
    models), and the vocabulary tokens of the family it fits (`markers`, all present: trainer.parity.auto)."""

    text: str
    about: str
    turn_end: str
    markers: tuple[str, ...]


# name -> Builtin. Names are what users type as chat_template=. One per family; `family_template` picks by vocabulary,
# so a family's entry comes before any whose markers are a subset of its own.
BUILTIN = {
    "chatml-tools": Builtin(
        CHATML_TOOLS,
        "ChatML with <tool_call> JSON (Qwen2.5/Hermes format; vLLM parser hermes): "
        "for ChatML models whose own template drops tools, e.g. SmolLM2-Instruct",
        "<|im_end|>",
        ("<|im_start|>", "<|im_end|>"),
    ),
    "gemma-tools": Builtin(
        GEMMA_TOOLS,
        "Gemma's <start_of_turn> turns with <tool_call> JSON (vLLM parser hermes): Gemma 1-3, base models included",
        "<end_of_turn>",
        ("<start_of_turn>", "<end_of_turn>"),
    ),
    "llama3-json": Builtin(
        LLAMA3_JSON,
        "Llama 3.1+ header turns with JSON calls (vLLM parser llama3_json; needs the <|python_tag|> token)",
        "<|eot_id|>",
        ("<|start_header_id|>", "<|eot_id|>", "<|python_tag|>"),
    ),
    "mistral-tools": Builtin(
        MISTRAL_TOOLS,
        "Mistral's [INST] turns with [TOOL_CALLS] JSON (vLLM parser mistral; needs the [TOOL_CALLS] token): "
        "tekken vocabularies before v11, e.g. Mistral Nemo",
        "</s>",
        ("[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]"),
    ),
    "llama3-pythonic": Builtin(
        LLAMA3_PYTHONIC,
        "Llama 3 header turns with pythonic calls [f(a=1)] (Llama 3.2 format; "
        "vLLM parser pythonic): any Llama 3 vocabulary",
        "<|eot_id|>",
        ("<|start_header_id|>", "<|eot_id|>"),
    ),
}


def family_template(vocab, besides: str = "") -> str | None:
    """The built-in template whose family's tokens `vocab` (a tokenizer's vocabulary) holds; None for none.
    `besides`: a template that was just tried and failed, never the answer (a refusal's fix must be another thing to
    try): the next built-in that fits, or None."""
    return next(
        (name for name, b in BUILTIN.items() if name != besides.strip() and all(t in vocab for t in b.markers)), None
    )


def extra_stop_ids(tokenizer, spec: str, eos_ids=()) -> list[int]:
    """The ids a built-in template adds to the tokens generation stops at: its `turn_end` where the tokenizer has it
    and neither its EOS nor `eos_ids` (the generation config's) is that token already (a base model: Gemma 3 270M
    stops at <eos>, the template ends turns with <end_of_turn>). [] for any other template."""
    builtin = BUILTIN.get((spec or MODEL).strip())
    if builtin is None:
        return []
    token_id = tokenizer.get_vocab().get(builtin.turn_end)
    if token_id is None or token_id == tokenizer.eos_token_id or token_id in eos_ids:
        return []
    return [token_id]


def stop_ids(value) -> list[int]:
    """A generation config's `eos_token_id` (one id, a list of them, or absent) as a list of ids."""
    return [i for i in (value if isinstance(value, list) else [value]) if isinstance(i, int)]


def generation_stop_ids(model_dir: str | Path) -> list[int]:
    """The stop ids of `model_dir`'s generation_config.json ([] without one)."""
    path = Path(model_dir) / GENERATION_CONFIG
    return stop_ids(json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")) if path.is_file() else []


def with_stops(model_dir: str | Path, tokenizer, spec: str) -> list[int]:
    """Add `extra_stop_ids` to `model_dir`'s generation_config.json (written if missing): the ids generation stops
    at, as transformers' generate and vLLM read them. Returns the ids added."""
    path = Path(model_dir) / GENERATION_CONFIG
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    eos = stop_ids(config.get("eos_token_id", tokenizer.eos_token_id))
    added = extra_stop_ids(tokenizer, spec, eos)
    if added:
        if path.is_symlink():  # a link into the source tree (with_template): written as a file of its own
            path.unlink()
        config["eos_token_id"] = eos + added
        path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return added


_S3 = re.compile(r"s3://[a-z0-9.-]{3,63}/\S+")


# `{% generation %}` in every whitespace-control spelling Jinja has ({%- generation %}, {% generation -%},
# {%- generation -%}): the pattern transformers' apply_chat_template looks for before it returns
# assistant_masks, so a template it marks from is one the loss mask is read from.
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


def has_generation_block(text: object) -> bool:
    """Whether a chat template marks the assistant's tokens with a `{% generation %}` block, in any spelling Jinja
    takes (`{%+ generation %}`, `{% generation +%}`, `{%generation%}` too): read with Jinja's own lexer, as
    transformers' AssistantTracker reads the block whatever its whitespace control. transformers' own pattern (the
    one above) misses `+`, and only warns: its assistant_masks still mark every assistant turn, where a template
    this called blockless trained the last turn alone (9 label tokens where transformers marks 29)."""
    if not isinstance(text, str) or "generation" not in text:
        return False
    if _GENERATION.search(text):
        return True
    import jinja2

    try:
        previous = None
        for _, kind, value in jinja2.Environment().lex(text):
            if kind == "whitespace":
                continue
            if previous == "block_begin" and kind == "name" and value == "generation":
                return True
            previous = kind
    except jinja2.TemplateSyntaxError:  # a template Jinja cannot read: the template checks say so
        return False
    return False


def describe() -> str:
    """The accepted forms, for messages and help texts."""
    names = ", ".join(BUILTIN)
    return (
        f"'{MODEL}' (the model's own), '{AUTO}' (the model's own where it renders tools, else its family's "
        f"built-in), a built-in name ({names}), a .jinja file path, or an s3:// URI of one in the run's bucket"
    )


def spec_problems(spec: object, check_local_files: bool = True) -> list[str]:
    """What is wrong with a chat_template value, from the value alone (and a local file's presence)."""
    if not isinstance(spec, str):
        return []  # the type check names it
    value = spec.strip()
    if value in (MODEL, AUTO, *BUILTIN):
        return []
    if not value:
        return [f"chat_template is empty: give {describe()}"]
    if value.startswith("s3://"):
        return [] if _S3.fullmatch(value) else [f"chat_template={value!r} is not an s3://bucket/key URI"]
    path = Path(value[len("file://") :] if value.startswith("file://") else value).expanduser()
    if value.endswith((".jinja", ".j2", ".jinja2")) or "/" in value:
        if check_local_files and not path.is_file():
            return [f"chat_template file not found: {path}; give {describe()}"]
        if check_local_files:
            try:
                path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                return [
                    f"chat_template file {path} cannot be read as UTF-8 text ({type(err).__name__}): save the "
                    "template as a plain .jinja text file"
                ]
        return []
    import difflib

    close = difflib.get_close_matches(value, [MODEL, AUTO, *BUILTIN], n=1)
    return [
        f"unknown chat_template {value!r}" + (f"; did you mean {close[0]}?" if close else "") + f": give {describe()}"
    ]


def is_local(spec: str) -> bool:
    value = spec.strip()
    return value not in (MODEL, AUTO, *BUILTIN) and not value.startswith("s3://")


def resolves_to_model(spec: str) -> bool:
    """`spec` keeps the model's own template (so the model must have one)."""
    return (spec or MODEL).strip() == MODEL


def resolve(spec: str, store=None) -> str | None:
    """The template text `spec` names; None for `model` (keep the model's own)."""
    value = (spec or MODEL).strip()
    if resolves_to_model(value):
        return None
    if value in BUILTIN:
        return BUILTIN[value].text
    if value.startswith("s3://"):
        bucket, key = split_uri(value)
        if store is None or bucket != store.bucket:
            raise UserError(
                f"chat_template {value} is not in this run's bucket"
                + (f" {store.bucket!r}" if store is not None else "")
                + ": copy it there, or give a local .jinja file to run_local"
            )
        if not store.exists(key):
            raise UserError(f"chat_template {value}: no such object in bucket {bucket!r}; check the key")
        text = store.get_bytes(key).decode("utf-8", errors="strict")
    else:
        problems = spec_problems(value)
        if problems:
            raise UserError(problems[0])
        text = Path(value[len("file://") :] if value.startswith("file://") else value).expanduser().read_text("utf-8")
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
        if (
            not path.is_file()
            or rel.as_posix() in (TEMPLATE_FILE, "tokenizer_config.json")
            or rel.parts[0] == "additional_chat_templates"
        ):
            continue
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(path.resolve(), out / rel)
    out.mkdir(parents=True, exist_ok=True)
    config_path = src / "tokenizer_config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config.pop("chat_template", None)
        (out / "tokenizer_config.json").write_text(
            json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    (out / TEMPLATE_FILE).write_text(text, encoding="utf-8")
    return out


def apply_to_tokenizer(tokenizer, spec: str, store=None):
    """`tokenizer` with the template `spec` names (itself for `model`), for checks that run before
    delivery (validate-params) on a tokenizer loaded from the source."""
    text = resolve(spec, store)
    if text is not None:
        tokenizer.chat_template = text
    return tokenizer
