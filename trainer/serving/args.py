"""vLLM's server arguments, the same for every backend, and what is read off a model to build them.

`vllm_args` builds the server's arguments once for every backend (the local process,
trainer.serving.local; the cluster Deployment, trainer.deploy.deployment; KServe and its LLMInferenceService),
so the tool-call parser, served names and LoRA adapters are the same everywhere. What those depend on
is read off the model here: the tool-call parser off its chat template (a directory on this machine,
or a tree in the bucket without downloading its weights), whether it carries chat_template.jinja,
the adapters' rank, and the one rule for a served name.

A module of its own so the local backend and the cluster backends share it without importing each
other (the cluster ones need no local process code). Kept light: the trainer CLI and the KFP
components import it; transformers is imported only when a template is rendered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.chat.parsers import DEFAULT_TOOL_PARSER, chat_template_text, tool_call_parser
from trainer.core.errors import UserError, brief
from trainer.core.jsontext import config_text
from trainer.core.storage import MANIFEST, split_uri
from trainer.chat.templates import TEMPLATE_FILE

# vLLM accepts only these LoRA ranks for --max-lora-rank.
_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_args(
    model: str,
    served_model_name: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    lora_modules: Mapping[str, str] | None = None,
    max_lora_rank: int = 0,
    max_model_len: int = 0,
    dtype: str = "auto",
    tensor_parallel_size: int = 1,
    enforce_eager: bool = False,
    tool_call_parser: str = DEFAULT_TOOL_PARSER,
    chat_template: str = "",
    kv_cache_bytes: int = 0,
) -> list[str]:
    """Arguments for vLLM's OpenAI server, the same for every backend.

    They follow `vllm serve` (cluster image `vllm/vllm-openai`) and
    `python -m trainer.serving.vllm_server` (local CPU build: vLLM's api_server, tied) alike: the model is
    passed as `--model`, which both accept.

    Args:
        model: model directory (or Hub id / path inside the pod) to load.
        served_model_name: the name clients pass as `model`; listed by /v1/models.
        host, port: where to listen ("0.0.0.0" in a pod, loopback locally).
        lora_modules: {served name: adapter directory}; adds --enable-lora, so the base model
            (as `served_model_name`) and each adapter answer side by side by name.
        max_lora_rank: the largest adapter rank (rounded up to a rank vLLM accepts); 0 leaves
            vLLM's default (16).
        max_model_len: context length to reserve KV cache for; 0 leaves the model's own.
        dtype: "auto", "float32", "bfloat16", ...
        tensor_parallel_size: GPUs to shard one replica over.
        enforce_eager: skip graph capture / compilation (start-up 34 s instead of 100 s on CPU).
        tool_call_parser: vLLM's parser for the model's tool-call format (`tool_call_parser()`
            reads it off the chat template).
        chat_template: path of the template file to render prompts with (the delivered tree's
            chat_template.jinja, the one training used: trainer.chat.templates); empty: the tokenizer's.
        kv_cache_bytes: the KV cache's size (`--kv-cache-memory-bytes`); 0 leaves vLLM's own, a fraction of
            the device's memory (on CPU, of the node's: trainer.deploy.server.cpu_kv_cache_bytes says why a pod sets it).

    Returns:
        The argument list, without the program (`vllm serve` / `python -m ...`). Everything from
        `--tool-call-parser` on depends on the model and the deploy; what comes before it does not
        (the KServe ServingRuntime holds that part, trainer.deploy.server.split_args).
    """
    args = [
        "--model",
        str(model),
        "--served-model-name",
        served_model_name,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        dtype,
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        tool_call_parser,
    ]
    if chat_template:
        args += ["--chat-template", chat_template]
    if kv_cache_bytes:
        args += ["--kv-cache-memory-bytes", str(kv_cache_bytes)]
    if max_model_len:
        args += ["--max-model-len", str(max_model_len)]
    if tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(tensor_parallel_size)]
    if enforce_eager:
        args.append("--enforce-eager")
    if lora_modules:
        args += [
            "--enable-lora",
            "--max-loras",
            str(len(lora_modules)),
            "--lora-modules",
            *(f"{name}={path}" for name, path in lora_modules.items()),
        ]
        if max_lora_rank:
            args += ["--max-lora-rank", str(next((r for r in _LORA_RANKS if r >= max_lora_rank), max_lora_rank))]
    return args


def tree_tool_call_parser(read: Callable[[str], str | None]) -> str:
    """tool_call_parser() for a model tree; `read(path)` returns one of its files' text or None."""
    # The added tokens wherever a tree keeps them, as transformers' get_added_vocab reads them (training and the
    # evaluation choose the parser from that): tokenizer.json, tokenizer_config.json's added_tokens_decoder, and
    # added_tokens.json (a tree with only a SentencePiece tokenizer.model has the last two).
    tokenizer, config, extra = (read(name) for name in ("tokenizer.json", "tokenizer_config.json", "added_tokens.json"))
    added = [t.get("content") for t in json.loads(tokenizer).get("added_tokens", [])] if tokenizer else []
    added += (
        [t.get("content") for t in (json.loads(config).get("added_tokens_decoder") or {}).values()] if config else []
    )
    added += list(json.loads(extra)) if extra else []
    return tool_call_parser(chat_template_text(read), added)


def model_tool_call_parser(model_dir: str | Path) -> str:
    """tool_call_parser() for a model directory on this machine."""

    def read(name: str) -> str | None:
        path = Path(model_dir) / name
        return path.read_text() if path.is_file() else None

    return tree_tool_call_parser(read)


def stored_has_template(store: Any, uri: str) -> bool:
    """Whether a model tree in S3 carries chat_template.jinja (then vLLM is told to use that file)."""
    _, prefix = split_uri(uri)
    return any(f["path"] == TEMPLATE_FILE for f in store.get_json(f"{prefix}/{MANIFEST}")["files"])


def stored_tool_call_parser(store: Any, uri: str) -> str:
    """tool_call_parser() for a model tree in S3 (trainer.core.storage), reading only its tokenizer
    files: a cluster deploy decides the flag without downloading the weights."""
    _, prefix = split_uri(uri)
    files = {f["path"] for f in store.get_json(f"{prefix}/{MANIFEST}")["files"]}

    def read(name: str) -> str | None:
        return store.get_bytes(f"{prefix}/{name}").decode() if name in files else None

    return tree_tool_call_parser(read)


def adapter_config(adapter_dir: str | Path, label: str = "") -> dict[str, Any]:
    """An adapter directory's adapter_config.json ({} when it has none), read once for every caller; a file that is
    not a JSON object, or whose rank `r` is no whole number above 0, is a UserError naming it and the fix (peft
    and vLLM would fail on it with a traceback)."""

    cfg = Path(adapter_dir) / "adapter_config.json"
    if not cfg.exists():
        return {}
    fix = (
        "it is damaged (a copy cut short, a hand edit): copy the adapter directory again from its run's output, "
        "or pass another adapter"
    )
    where = f"{label}: " if label else ""
    try:
        text = config_text(cfg)
    except OSError as err:  # not a regular file (a FIFO, a link to a device), or larger than any config
        raise UserError(f"{where}{err}; copy the adapter directory again from its run's output") from None
    except UnicodeDecodeError as err:
        raise UserError(f"{where}{cfg} cannot be read ({brief(err, 120)}): {fix}") from None
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise UserError(f"{where}{cfg} cannot be read ({brief(err, 120)}): {fix}") from None
    if not isinstance(config, dict):
        raise UserError(f"{where}{cfg} holds no JSON object: {fix}")
    rank = config.get("r", 1)
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise UserError(f"{where}{cfg} gives the rank r={rank!r}, not a whole number above 0: {fix}")
    return config


def lora_rank(adapter_dir: str | Path) -> int:
    """The adapter's rank `r` from its adapter_config.json (0 when absent)."""
    return int(adapter_config(adapter_dir).get("r", 0))


def served_name_problems(name: Any, what: str = "served_model_name") -> list[str]:
    """The one rule for a name vLLM serves (the pipeline's served_model_name, `serve
    --served-model-name`, a `--lora NAME`), wherever it is given: not empty, no leading '-'
    (vLLM would read it as an option and fail at deploy, after training) and no whitespace (it
    is the `model` clients pass). A cluster adds the Service name rule (trainer.k8s.rules)."""
    if not isinstance(name, str) or not name.strip():
        return [f"{what} is empty: give the name clients will ask for as `model`, e.g. 'llm-finetune'"]
    if name.startswith("-") or name.split() != [name]:
        return [
            f"{what}={name!r} must not start with '-' or hold spaces (it is the name clients pass as `model`): "
            f"e.g. {'-'.join(name.split()).strip('-') or 'llm-finetune'!r}"
        ]
    return []


def default_served_name(model_dir: str | Path) -> str:
    """The directory's name, made a valid served name ('my model' -> 'my-model')."""
    return "-".join(Path(model_dir).resolve().name.split()).strip("-") or "model"


def parse_loras(
    specs: Sequence[str], flag: str = "--lora", form: str = "NAME=ADAPTER_DIR", served_name: str = ""
) -> tuple[dict[str, str], list[str]]:
    """`name=path` strings (the CLI's --lora; deploy-k8s's --adapter) -> ({name: path}, problems). A name
    given twice, or the same as `served_name` (the base model's), is refused: vLLM would serve only the
    last adapter of a name, and fail at start-up (a traceback after its load) on the base's own name."""
    out: dict[str, str] = {}
    problems: list[str] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            problems.append(f"{flag} expects {form}, got {spec!r}")
        elif name_problems := served_name_problems(name, f"{flag} name"):
            problems += name_problems
        elif name in out:
            problems.append(
                f"{flag} {name}= is given twice ({out[name]} and {path}): vLLM would serve only the "
                "last; give each adapter its own name"
            )
        elif served_name and name == served_name:
            problems.append(
                f"{flag} {name}={path}: {name!r} is the base model's served name too; give the "
                "adapter another name, or the base another --served-model-name"
            )
        else:
            out[name] = path
    return out, problems
