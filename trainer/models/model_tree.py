"""What makes a directory a model a run can use: config.json (a generating head), weights (one file or
the shards an index lists) and a tokenizer with a chat template; checked at delivery and before a
local server starts, because training would otherwise find out only after its pods start. The
weights' own checks (headers, sizes, keys) are trainer.models.weights', beside this module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.models import builtin_model, gguf, weights
from trainer.core.errors import UserError
from trainer.core.jsontext import config_text
from trainer.config.sources import LOCAL_SUFFIXES, is_gguf, parse

# What makes a directory a model: config.json, weights (single file or shards listed by an
# index) and a tokenizer. Checked at delivery, because training would otherwise find out
# only after its pods start, and the launcher would retry what cannot succeed.
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")
DATASET_FILES = ("train.jsonl", "eval.jsonl", "dataset_info.json", "dataset_dict.json")


def _read_json(path: Path) -> tuple[Any, str | None]:
    """(parsed JSON, None) or (None, the problem in words)."""
    import json

    try:
        return json.loads(config_text(path, "utf-8-sig")), None
    except OSError as err:  # not a regular file, or too large for a config (trainer.core.jsontext.config_text)
        return None, f"{err}; re-download the model"
    except UnicodeDecodeError:
        return None, f"{path} is not UTF-8 text; re-download the model"
    except json.JSONDecodeError as err:
        return None, (
            f"{path} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); "
            "re-download the model or repair the file"
        )
    except RecursionError:
        return None, f"{path} is nested too deeply to be a model config"


def model_tree_problems(names: set[str], where: str) -> list[str]:
    """What file names alone tell: a dataset where a model belongs, no config, no weights."""
    if "config.json" not in names:
        if any(
            n.lower().removesuffix(".gz").endswith((".jsonl", ".parquet", ".csv", ".tsv"))
            or n.rsplit("/", 1)[-1] in DATASET_FILES
            for n in names
        ):
            return [
                f"{where} holds a dataset, not a model: pass it as dataset_source, and a model (e.g. "
                "builtin:tiny-llama or a Hub id like Qwen/Qwen2.5-0.5B-Instruct) as model_source"
            ]
        if "adapter_config.json" in names:  # a training run's adapter output, passed as the model
            return [
                f"{where} is a LoRA adapter (adapter_config.json), not a whole model: merge it into its base "
                "first (python -m trainer merge, or the pipeline's merged model) and pass that, or pass the base "
                "model it was trained from"
            ]
        return [
            f"{where} has no config.json, so it is not a Hugging Face model: pass a model directory "
            "(config.json, *.safetensors, tokenizer files) or a Hub model id"
        ]
    has_weights = any(
        n.endswith(".safetensors") or (n.startswith("pytorch_model") and n.endswith(".bin")) for n in names
    )
    if not has_weights:
        return [
            f"{where} has config.json but no weights (*.safetensors or pytorch_model*.bin): download the "
            "whole model, e.g. `hf download ORG/NAME --local-dir DIR`"
        ]
    if not any(n in names for n in TOKENIZER_FILES):
        return [
            f"{where} has no tokenizer ({' or '.join(TOKENIZER_FILES)}): copy the tokenizer files of the "
            "base model into it"
        ]
    return []


def model_dir_problems(
    path: str | Path, check_tokenizer: bool = True, own_template: bool = True, shown: str = ""
) -> list[str]:
    """Every reason the directory cannot be trained: config.json that parses with a
    model_type, weights present (every shard an index lists), a tokenizer that loads and (unless
    `own_template` is False: the run gives chat_template=) has a chat template. `shown`: what a GGUF file's
    messages call it (an uploaded object's URI for its downloaded copy)."""
    root = Path(path)
    if root.is_file() and root.name.lower().endswith(LOCAL_SUFFIXES):
        return model_tree_problems({root.name}, f"model path {root}")
    if root.is_file() and is_gguf(root.name):  # converted at delivery (trainer.models.gguf); its header is checked now
        return gguf.file_problems(root, check_tokenizer and own_template, shown)
    if not root.is_dir():
        return [f"model path {root} is not a directory: pass the directory holding config.json"]
    names = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    problems = model_tree_problems(names, f"model directory {root}")
    if "config.json" not in names:
        return problems
    config, problem = _read_json(root / "config.json")
    if problem:
        return [problem]
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        return [
            f"{root}/config.json has no model_type, so transformers cannot build the model; "
            "use the config.json that came with the model"
        ]
    if problem := causal_lm_problem(config, root):
        return [problem]
    for index in WEIGHT_INDEXES:
        if index in names:
            value, problem = _read_json(root / index)
            weight_map = value.get("weight_map") if isinstance(value, dict) else None
            if problem or not isinstance(weight_map, dict):
                return [problem or f"{root}/{index} has no weight_map; re-download the model"]
            missing = sorted(set(weight_map.values()) - names)
            if missing:
                shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
                problems.append(
                    f"{root}/{index} lists {len(missing)} shard(s) that are missing ({shown}): "
                    "the download is incomplete; download again"
                )
    if not problems:  # safetensors headers and sizes, names against the config: no tensor is read
        problems = weights.dir_problems(root, config)
    if problems or not check_tokenizer:
        return problems
    return tokenizer_problems(root, own_template=own_template)


# Heads whose weights generate text; any other head (a classifier, a masked LM, a bare encoder)
# would leave AutoModelForCausalLM a randomly initialised lm_head, and training would start from noise.
_GENERATING_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


def causal_lm_problem(config: dict[str, Any], root: Path) -> str | None:
    """Why AutoModelForCausalLM cannot train this config (None when it can), from config.json
    alone: a model_type transformers lacks, an encoder-decoder or encoder-only family, or
    weights saved with another head."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    kind = config["model_type"]
    if kind not in CONFIG_MAPPING_NAMES:
        if config.get("auto_map"):
            return (
                f"{root} is a {kind!r} model that needs its own Python code (auto_map in config.json), which "
                "this trainer does not run (no trust_remote_code): use a model transformers supports natively"
            )
        return (
            f"{root}: model_type {kind!r} is unknown to the installed transformers {transformers.__version__}: "
            "upgrade transformers, or use a model it supports (Llama, Qwen, Mistral, Gemma, ...)"
        )
    if config.get("is_encoder_decoder") or kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return (
            f"{root} is a {kind!r} model, not a decoder-only causal language model (AutoModelForCausalLM "
            "cannot load it): fine-tune a text-generating model such as Llama, Qwen or Mistral"
        )
    heads = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    if heads and not any(a.endswith(_GENERATING_HEADS) for a in heads):
        return (
            f"{root} holds a {', '.join(heads)}, not a text-generating model: its language-model head would "
            "start from random weights. Use the causal LM checkpoint (architectures ...ForCausalLM), e.g. the "
            "base or instruct release of the same model"
        )
    return None


def tokenizer_problems(
    root: Path, needs: str = "training needs to render conversations", own_template: bool = True
) -> list[str]:
    """The tokenizer loads, offline, and (`own_template`) has a chat template (training renders every row with it;
    a server's /v1/chat/completions renders every request: `needs` says which)."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(root), local_files_only=True)
    except Exception as err:  # noqa: BLE001 - any failure to load is the user's files; say which
        first = (str(err).strip().splitlines() or [""])[0][:200]
        return [
            f"the tokenizer in {root} does not load ({type(err).__name__}: {first}); copy the base model's "
            "tokenizer files into the directory"
        ]
    if own_template and not tok.chat_template:
        return [
            f"the tokenizer in {root} has no chat template, which {needs}: give one with chat_template= (auto: the "
            "built-in template of the model's family, a built-in name such as gemma-tools, or a .jinja file), use an instruct/chat model, or add the base "
            "model's template as chat_template.jinja"
        ]
    return []


def model_max_length(source: str) -> int | None:
    """The context length of a model known without downloading it (builtin or local), else None."""
    src = parse(source, "model")
    if src.kind == "builtin":
        return builtin_model.MAX_POSITIONS
    if src.kind == "local" and is_gguf(src.ref) and Path(src.ref).is_file():
        return gguf.metadata(src.ref).get("context_length")
    config = Path(src.ref) / "config.json"
    if src.kind == "local" and config.is_file():
        value, problem = _read_json(config)
        if problem:
            raise UserError(problem)
        limit = value.get("max_position_embeddings") if isinstance(value, dict) else None
        return limit if isinstance(limit, int) and not isinstance(limit, bool) else None
    return None
