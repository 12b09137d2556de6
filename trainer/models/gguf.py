"""A GGUF file (llama.cpp's one-file format) turned into a plain model directory.

    python -m trainer deliver-model /path/SmolLM2-135M-Instruct.Q4_1.gguf   (trainer.store.delivery calls convert)

transformers reads a GGUF itself: `from_pretrained(dir, gguf_file=name)`, the `gguf` package de-quantizing every
tensor. By default (transformers 5.19) the model it returns is flagged as GGUF-quantized and `save_pretrained`
refuses it; asked with `quantization_config=GgufConfig(dequantize=True)` it returns a plain dense model (the same
weights: Llama and most architectures are de-quantized either way, a few would otherwise keep packed blocks), which
saves as safetensors like any other. The tokenizer and its chat template come from the GGUF metadata. The result is a
directory every later stage (training, merge, vLLM) reads like any other, delivered and content-addressed like any
other.

The dtype is the one transformers gives a GGUF's header (transformers.integrations.gguf.reader.GgufHeader.dtype;
its older loader, which Llama and most architectures still take, uses float32 for every file): bfloat16 or float16
for a file of unquantized BF16 or F16 tensors (the F32 ones beside them are norms), which hold them exactly at half
the size; float32 for a quantized file (Q4_1, Q8_0, K-quants, ...), whose de-quantized values (a 16-bit scale times
a small integer, plus an offset) need float32's mantissa. Either way the saved model computes what the GGUF-loaded
one does.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from pathlib import Path
from typing import Any, cast

from trainer.core.errors import UserError, brief, collect

# Part of what keys a cached conversion (tests/real_models.py): raise it when the output of convert changes.
CONVERTER_VERSION = 1
MAGIC = b"GGUF"
_INSTALL = "pip install gguf (a dependency of this project: `pip install -e .` installs it)"
# llama.cpp's architecture names where transformers spells the model_type otherwise
# (transformers.modeling_gguf_pytorch_utils.load_gguf_checkpoint renames them the same way).
_MODEL_TYPES = {
    "qwen2moe": "qwen2_moe",
    "qwen3moe": "qwen3_moe",
    "gpt-oss": "gpt_oss",
    "minimax-m2": "minimax_m2",
    "t5encoder": "t5",
    "gemma3": "gemma3_text",
    "gemma4": "gemma4_text",
}


def file_problems(path: str | Path, check_tokenizer: bool = True, shown: str = "") -> list[str]:
    """Every reason `path` cannot be converted, from its header and metadata (a few seconds for a
    100k-token vocabulary, once per file and process): not GGUF, damaged or cut short, an architecture
    transformers cannot read or that is not a text generator, no tokenizer or (check_tokenizer) no chat template.
    `shown`: what the messages call the file (an uploaded object's URI for its downloaded copy)."""
    path = Path(path)
    name = shown or str(path)
    try:
        with path.open("rb") as f:
            head = f.read(len(MAGIC))
    except OSError as err:
        return [f"cannot read {name}: {err.strerror}"]
    if head != MAGIC:
        return [
            f"{name} is not a GGUF file (it does not start with the bytes 'GGUF'; a Git LFS pointer or a saved "
            "error page often has the name): download the file itself again, or pass a model directory "
            "(config.json, *.safetensors, tokenizer files)"
        ]
    info = metadata(path, name)
    if "problem" in info:
        return [info["problem"]]
    problems = []
    arch = info["architecture"]
    if not info["transformers_reads"]:
        problems.append(
            f"{name} holds a {arch!r} model, an architecture the installed transformers cannot "
            "de-quantize from GGUF: use the original Hugging Face model (a directory or Hub id), or a "
            "GGUF of a supported architecture (Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3, ...)"
        )
    elif not info["causal_lm"]:
        problems.append(
            f"{name} holds a {arch!r} model, not a decoder-only causal language model "
            "(AutoModelForCausalLM cannot load it): fine-tune a text-generating model such as Llama, "
            "Qwen or Mistral"
        )
    if not info["has_tokenizer"]:
        problems.append(
            f"{name} has no tokenizer in its metadata (tokenizer.ggml.*): convert the model again with "
            "llama.cpp's convert_hf_to_gguf.py, which writes it, or pass the original model directory"
        )
    elif check_tokenizer and not info["has_chat_template"]:
        problems.append(
            f"{name} has no chat template in its metadata (tokenizer.chat_template), which training "
            "needs to render conversations: give one with chat_template= (auto: the built-in template of the "
            "model's family, a built-in name such as gemma-tools, or a .jinja file), or use the GGUF of an instruct/chat model"
        )
    return problems


@functools.lru_cache(maxsize=1)
def _shared_reader(path: str, mtime_ns: int, size: int):
    """The parsed file (a few seconds for a large vocabulary) that, within a read_once block, `metadata` and the reads
    of transformers share; let go when the outermost block ends."""
    import gguf

    return gguf.GGUFReader.unpatched(path)  # read_once's patch sets it


def _parse(path: str, mtime_ns: int, size: int):
    """A reader of `path`: within a read_once block the shared one, else one of its own (not kept: a parsed file
    holds ~140 MB for SmolLM2's vocabulary and keeps the file open)."""
    import gguf

    if hasattr(gguf.GGUFReader, "unpatched"):
        return _shared_reader(path, mtime_ns, size)
    return gguf.GGUFReader(path)


def _current_reader(path: str | Path):
    stat = os.stat(path)
    return _shared_reader(os.path.realpath(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _metadata(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    from gguf import GGMLQuantizationType
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    try:
        reader = _parse(os.path.realpath(path), mtime_ns, size)
        arch = str(reader.fields["general.architecture"].contents())
    except (ValueError, IndexError, KeyError, OSError) as err:  # what GGUFReader raises on a cut-off or damaged file
        what = "has no general.architecture" if isinstance(err, KeyError) else f"does not read as GGUF ({brief(err)})"
        return {  # `metadata` names the file: this answer is cached for every name it is read under
            "damage": f"{what}: the file is damaged or cut short ({size:,} bytes); download it again "
            "(a partial download is the usual cause)"
        }
    model_type = _MODEL_TYPES.get(arch, arch.replace("-", "_"))
    context = reader.fields.get(f"{arch}.context_length")
    types = {GGMLQuantizationType(t.tensor_type).name for t in reader.tensors}
    return {
        "architecture": arch,
        "model_type": model_type,
        "transformers_reads": model_type.removesuffix("_text") in GGUF_SUPPORTED_ARCHITECTURES,
        "causal_lm": model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        "context_length": int(context.contents()) if context is not None else None,
        "has_tokenizer": "tokenizer.ggml.model" in reader.fields,
        "has_chat_template": "tokenizer.chat_template" in reader.fields,
        "tensor_types": sorted(types),
        "tensors": len(reader.tensors),
    }


def metadata(path: str | Path, shown: str = "") -> dict[str, Any]:
    """What convert needs to know about a GGUF file, read once per file version (path, mtime, size):
    architecture, model_type, context_length, the tensors' types, tokenizer and chat template
    present; or {"problem": "..."} when the gguf package is missing or the file does not read (naming it `shown`,
    else its path)."""
    name = shown or str(path)
    try:
        import gguf  # noqa: F401 - transformers needs it too, and says so less plainly
    except ImportError:
        return {"problem": f"reading {name} needs the gguf package, which is not installed: {_INSTALL}"}
    stat = os.stat(path)
    info = _metadata(str(path), stat.st_mtime_ns, stat.st_size)
    return {"problem": f"{name} {info['damage']}"} if "damage" in info else info


def dtype_name(tensor_types: list[str]) -> str:
    """The dtype the converted model is saved in, from the GGUF tensor types (see the module docstring)."""
    if not set(tensor_types) <= {"F32", "F16", "BF16"}:  # quantized blocks somewhere
        return "float32"
    return "bfloat16" if "BF16" in tensor_types else "float16" if "F16" in tensor_types else "float32"


@contextlib.contextmanager
def read_once(path: str | Path):
    """transformers reads a GGUF three times (config, tokenizer, weights), each time with a new
    gguf.GGUFReader, which parses every metadata field (for SmolLM2's 49k-token vocabulary and merges,
    ~2.5 s), and it rebuilds gguf's tensor-name table for every module of the model (~4 s for 30 layers).
    Both are pure functions of their arguments and only read: within this block one reader of `path`
    (`metadata`'s too: validation reads the metadata, then the tokenizer, in one block) and one table per
    (architecture, layers) serve every call. transformers looks both names up in the
    gguf module when it calls them (modeling_gguf_pytorch_utils imports them inside its functions), so
    replacing the module's names reaches it; they are restored on leaving. Blocks nest (an inner one's
    reader comes from the outer one's); one conversion at a time per process, as the deliver step and the
    CLI run them (the names are the module's, not a thread's)."""
    import gguf

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    ours = os.path.realpath(path)

    def reader(p, mode="r"):
        if mode != "r" or os.path.realpath(p) != ours:
            return reader_class(p, mode)
        return _current_reader(p)  # the one `metadata` parsed, if it read this version of the file

    reader.unpatched = getattr(reader_class, "unpatched", reader_class)  # type: ignore[attr-defined]
    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map
        if not hasattr(reader_class, "unpatched"):  # the outermost block: the parsed file is not kept past it
            _shared_reader.cache_clear()


def _incomplete(name: str, arch: str, report: dict[str, Any]) -> str | None:
    """The load report's missing, unexpected or mismatched weights, said as a refusal: transformers fills a missing
    one with newly initialized values and carries on, so the model would train (and be uploaded) with random layers."""
    kinds = {"missing": "missing_keys", "unexpected": "unexpected_keys", "of the wrong shape": "mismatched_keys"}
    found = {
        what: sorted(str(k[0] if isinstance(k, tuple) else k) for k in report.get(key) or ())
        for what, key in kinds.items()
    }
    said = [
        f"{len(keys)} {what} ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
        for what, keys in found.items()
        if keys
    ]
    if not said:
        return None
    return (
        f"model {name}: its tensors do not make a whole {arch!r} model: weights {'; '.join(said)}. transformers "
        "would fill the missing ones with random values and training would start from them; nothing was "
        "uploaded. Download the file again (or convert it again with llama.cpp's convert_hf_to_gguf.py), or use "
        "the original Hugging Face model (a directory or Hub id)"
    )


# Architectures whose tensors transformers maps one to one by name (its TensorProcessor, or one that only permutes or
# offsets values): a tensor's shape and name say what it must be. Mixture-of-experts and fused-QKV processors split or
# rename tensors on the way, so their files are left to the load report.
_ONE_TO_ONE = ("TensorProcessor", "LlamaTensorProcessor", "Gemma2TensorProcessor")
# What llama.cpp writes beside the weights that transformers derives from the config instead (RoPE scaling factors).
_DERIVED = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


def tensor_problems(path: str | Path, shown: str = "") -> list[str]:
    """Every tensor of the GGUF file whose shape is not what its metadata's config gives the parameter it loads into,
    and every tensor that loads into none (transformers drops it without a word), from the header alone and a model
    built on the meta device (no weights read). A wrong shape was converted and uploaded, and training then failed
    with a traceback on every rank."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
        load_gguf_checkpoint,
    )

    path = Path(path)
    name = shown or str(path)
    arch = metadata(path)["architecture"]
    processor_class = TENSOR_PROCESSORS.get(arch, TensorProcessor)
    if processor_class.__name__ not in _ONE_TO_ONE:
        return []
    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    parsed = load_gguf_checkpoint(str(path), return_tensors=False)
    names = get_gguf_hf_weights_map(model, processor_class(config=parsed.get("config", {})))
    shapes = {name: tuple(value.shape) for name, value in model.state_dict().items()}
    fix = (
        "the file is damaged or holds a model of another architecture than its metadata says: download it again, "
        "or use the original Hugging Face model (a directory or Hub id)"
    )
    problems = []
    stat = os.stat(path)
    for tensor in _parse(os.path.realpath(path), stat.st_mtime_ns, stat.st_size).tensors:
        stored = tuple(int(n) for n in reversed(tensor.shape))  # GGUF lists the fastest-moving dimension first
        target = names.get(tensor.name)
        if target is None:
            if tensor.name not in _DERIVED:
                problems.append(
                    f"model {name}: tensor {tensor.name} {list(stored)} is no parameter of a {arch!r} "
                    f"model with this metadata's config (it would be dropped without a word): {fix}"
                )
        elif target in shapes and stored != shapes[target]:
            problems.append(
                f"model {name}: tensor {tensor.name} is {list(stored)}, but the config in its metadata "
                f"makes {target} {list(shapes[target])}: {fix}"
            )
    return problems


def convert(path: str | Path, out_dir: str | Path, shown: str = "") -> Path:
    """De-quantize the GGUF file `path` into the model directory `out_dir` (config.json, model.safetensors,
    generation_config.json, tokenizer files, chat_template.jinja); returns out_dir. `shown`: what the messages call
    the file (an uploaded object's URI for its downloaded copy), else its path.

    Raises:
        UserError: the file is not a GGUF transformers can read (see file_problems), its tensors do not
            de-quantize, or they are not the whole model (weights missing, unexpected or of the wrong shape).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        from transformers import GgufConfig
    except ImportError:  # a transformers without a GGUF quantizer (5.16) always returns a plain de-quantized model
        dense: dict[str, Any] = {}
    else:
        dense = {"quantization_config": GgufConfig(dequantize=True)}

    path, out = Path(path), Path(out_dir)
    name = shown or str(path)
    start = time.monotonic()
    where = {"pretrained_model_name_or_path": str(path.parent), "gguf_file": path.name}  # a local file: no network
    with read_once(path):
        # The chat template is the caller's to require (delivery.deliver_model checks the converted directory).
        collect(file_problems(path, check_tokenizer=False, shown=name), what=f"model {name} cannot be converted")
        info = metadata(path)
        collect(
            tensor_problems(path, name), what=f"model {name} cannot be converted"
        )  # before de-quantizing every tensor
        dtype = dtype_name(info["tensor_types"])
        try:
            tokenizer = AutoTokenizer.from_pretrained(**where)
            model, report = cast(  # output_loading_info: (model, {"missing_keys", ...})
                tuple[Any, dict[str, Any]],
                AutoModelForCausalLM.from_pretrained(
                    **where, dtype=getattr(torch, dtype), **dense, output_loading_info=True
                ),
            )
        except NotImplementedError as err:  # gguf's dequantize for a tensor type it does not know
            raise UserError(
                f"model {name}: {brief(err)}: re-quantize it with llama.cpp to a type "
                f"the gguf package de-quantizes (Q8_0, Q4_K_M, F16, ...) or upgrade gguf ({_INSTALL})"
            ) from None
        except (ValueError, KeyError, IndexError, OSError) as err:  # metadata transformers does not follow
            raise UserError(
                f"model {name} does not load with transformers ({type(err).__name__}: "
                f"{brief(err)}): use the original Hugging Face model (a directory "
                "or Hub id) instead of its GGUF"
            ) from None
    if problem := _incomplete(name, info["architecture"], report):
        raise UserError(problem)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.model_max_length = info["context_length"] or tokenizer.model_max_length
    tokenizer.save_pretrained(out)
    print(
        f"converted {path.name} ({info['architecture']}, {info['tensors']} tensors: "
        f"{'/'.join(info['tensor_types'])}) into a {dtype} model directory in {time.monotonic() - start:.0f} s",
        flush=True,
    )
    return out
