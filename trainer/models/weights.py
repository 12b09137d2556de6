"""Weights checked before training, cheaply: safetensors headers, file sizes, tensor names.

An interrupted download (a truncated `model.safetensors`), a header that claims more bytes than
the file has, weights only in pickle (`pytorch_model.bin`), and weights whose names do not match
the config (a `module.` prefix from a DDP wrapper, one model's weights under another's config)
all passed validation and delivery before, then failed on every rank after minutes, or trained
from random initialisation without a word. This module reads only what tells:

  - a safetensors file is an 8-byte little-endian header length, a JSON header of
    `{name: {dtype, shape, data_offsets: [begin, end]}}` and the data: every tensor must lie within
    the data and have the bytes its dtype and shape need (the header and the file's size, no data);
  - pickle weights are refused, never unpickled (loading one runs code from the file);
  - the header's tensor names against the parameters of the model built from config.json on the
    meta device (no memory), with transformers' own key renames and ignore rules; a tied output
    embedding may be absent. Quantized checkpoints (other keys by design) are not compared.

Used by trainer.config.sources at validate (local model directories) and at delivery (the directory about
to be uploaded, or an already delivered tree in the bucket, read by ranged requests).
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path
from typing import Any, Callable

from trainer.core.storage import split_uri

HEADER_MAX = 100_000_000  # the safetensors format's own limit on the header
_DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
SHOWN = 3  # keys named in a message


def _convert_fix(where: str) -> str:
    return (
        f"convert them to safetensors on a machine you trust (`python -c \"from transformers import "
        f"AutoModelForCausalLM as M; M.from_pretrained('{where}').save_pretrained('{where}-safetensors')\"`, then "
        "copy the tokenizer files beside them), or download the model's *.safetensors files"
    )


def header_problem(name: str, size: int, read: Callable[[int], bytes]) -> tuple[dict[str, Any] | None, str | None]:
    """(the header's tensors, None), or (None, what is wrong with the file), from its first bytes
    (`read(n)` returns the first n) and its size."""
    redo = "download it again (an interrupted download?)"
    if size < 8:
        return None, f"{name} is {size} bytes, too short for a safetensors file: {redo}"
    length = int.from_bytes(read(8)[:8], "little")
    if length > size - 8 or length > HEADER_MAX:
        return None, (
            f"{name}'s header claims {length:,} bytes but the file has {size:,}: it is truncated or not a "
            f"safetensors file; {redo}"
        )
    try:
        header = json.loads(read(8 + length)[8:].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        header = None
    if not isinstance(header, dict):
        return None, f"{name}'s header is not a safetensors JSON header: the file is corrupt or not safetensors; {redo}"
    data = size - 8 - length
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    beyond, wrong, end = [], [], 0
    for key, info in tensors.items():
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(o) is int for o in offsets)
            and 0 <= offsets[0] <= offsets[1]
        ):
            wrong.append(f"{key!r} has no valid data_offsets")
            continue
        end = max(end, offsets[1])
        if offsets[1] > data:
            beyond.append((key, offsets[1]))
            continue
        shape, width = info.get("shape"), _DTYPE_BYTES.get(info.get("dtype"))
        if (
            width
            and isinstance(shape, list)
            and all(type(d) is int and d >= 0 for d in shape)
            and offsets[1] - offsets[0] != math.prod(shape) * width
        ):
            wrong.append(
                f"{key!r} ({info['dtype']} {shape}) needs {math.prod(shape) * width:,} bytes but has "
                f"{offsets[1] - offsets[0]:,}"
            )
    if beyond:
        key, at = beyond[0]
        return None, (
            f"{name} is truncated: {len(beyond)} of its {len(tensors)} tensors lie beyond the end of the file "
            f"(e.g. {key!r} ends at byte {at:,} of the data, which has {data:,}); {redo}"
        )
    if wrong:
        return None, f"{name} is corrupt: {'; '.join(wrong[:SHOWN])}; {redo}"
    if end != data:  # safetensors itself refuses data that its header does not cover exactly
        return None, f"{name} has {data - end:,} bytes after its last tensor: it is corrupt; {redo}"
    return tensors, None


def problems(
    where: str, sizes: dict[str, int], read: Callable[[str, int], bytes], config: dict[str, Any] | None
) -> list[str]:
    """Every problem of the weights among the files `sizes` (top-level name -> bytes) of a model
    tree at `where`; `read(name, n)` returns a file's first n bytes."""
    index = "model.safetensors.index.json"
    if index in sizes:
        try:
            weight_map = json.loads(read(index, sizes[index])).get("weight_map")
        except (ValueError, AttributeError):
            return []  # model_dir_problems says what is wrong with the index
        files = sorted({f for f in weight_map.values() if f in sizes}) if isinstance(weight_map, dict) else []
    else:
        files = ["model.safetensors"] if "model.safetensors" in sizes else []
    if not files:
        pickles = sorted(n for n in sizes if n.lower().endswith(PICKLE_SUFFIXES) and not n.startswith("training_args"))
        if pickles:
            return [
                f"{where} has its weights only as pickle ({', '.join(pickles[:SHOWN])}): loading a pickle runs "
                f"code from the file, which this trainer never does; {_convert_fix(where)}"
            ]
        return []  # no weights at all: model_tree_problems says so
    found: list[str] = []
    tensors: dict[str, Any] = {}
    for name in files:
        header, problem = header_problem(f"{where}/{name}", sizes[name], functools.partial(read, name))
        if problem:
            found.append(problem)
        else:
            tensors.update(header or {})
    if found or config is None:
        return found
    return key_problems(where, set(tensors), config)


def dir_problems(root: str | Path, config: dict[str, Any] | None) -> list[str]:
    """`problems` for a model directory on this machine (its top-level files)."""
    root = Path(root)

    def read(name: str, n: int) -> bytes:
        with open(root / name, "rb") as f:
            return f.read(n)

    sizes = {p.name: p.stat().st_size for p in root.iterdir() if p.is_file()}
    return problems(str(root), sizes, read, config)


def store_problems(store, uri: str, manifest: dict[str, Any]) -> list[str]:
    """`problems` for a tree already delivered to the bucket: headers by ranged reads, sizes and
    config.json from the manifest and the tree, no weights downloaded."""
    _, prefix = split_uri(uri)
    sizes = {f["path"]: f["bytes"] for f in manifest.get("files", []) if "/" not in f["path"]}
    if "config.json" not in sizes:
        return []
    config = store.get_json(f"{prefix}/config.json")
    return problems(
        uri,
        sizes,
        lambda name, n: store.get_bytes(f"{prefix}/{name}", length=n),
        config if isinstance(config, dict) else None,
    )


def key_problems(where: str, names: set[str], config: dict[str, Any]) -> list[str]:
    """The tensor names against the parameters of the model built from `config` on the meta
    device, after transformers' own key renames (LayerNorm.gamma, the base model's prefix, ...)
    and ignore rules; a tied output embedding may be absent."""
    if config.get("quantization_config") or not isinstance(config.get("model_type"), str):
        return []  # quantized weights have other keys by design; a missing model_type is refused elsewhere
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the config's own warnings are loading's to give, not this check's
    try:
        cfg = CONFIG_MAPPING[config["model_type"]].from_dict(config)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
    except Exception:  # noqa: BLE001 - a config transformers cannot build: causal_lm_problem and loading say why
        return []
    finally:
        hf_logging.set_verbosity(verbosity)
    expected = model.state_dict(keep_vars=True)
    rename, converted = _renamer(model, expected)
    loaded = {rename(n) for n in names}
    ignore_missing, ignore_unexpected = _ignored(model)
    missing = sorted(
        k
        for k in set(expected) - loaded
        if not (ignore_missing and ignore_missing.search(k))
        and not any(re.search(p, k) for p in converted)
        and not any(expected[k] is expected[t] for t in loaded if t in expected)
    )  # tied to a loaded one
    unexpected = sorted(
        n
        for n in names
        if rename(n) not in expected and not (ignore_unexpected and ignore_unexpected.search(rename(n)))
    )
    if not missing and not unexpected:
        return []
    hint = ""
    if unexpected and all(n.startswith("module.") for n in unexpected):
        hint = (
            " The weights' names start with 'module.' (saved from a DDP or DataParallel wrapper): save the "
            "unwrapped model (model.module.save_pretrained), or strip the prefix."
        )
    elif len(unexpected) > len(names) // 2:
        hint = (
            f" None of the weights fits a {config['model_type']!r} model: config.json and the weights are of "
            "different models; use the config.json that came with the weights."
        )
    shown = lambda keys: ", ".join(keys[:SHOWN]) + (f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else "")  # noqa: E731
    what = [
        f"{len(missing)} of the model's {len(expected)} weights are missing ({shown(missing)})" if missing else "",
        f"{len(unexpected)} of the file's {len(names)} tensors fit no weight of the model ({shown(unexpected)})"
        if unexpected
        else "",
    ]
    return [
        f"{where}: the weights do not match config.json: {'; '.join(w for w in what if w)}. Training would start "
        f"those weights from random values.{hint} Pass the model's own files (config.json and weights together)"
    ]


def _renamer(model, expected: dict[str, Any]) -> tuple[Callable[[str], str], list[str]]:
    """(checkpoint name -> model name as transformers loads it, target patterns of the converters
    used: their outputs come from several tensors or go to several, so their names are not compared)."""
    prefix = model.base_model_prefix
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    except ImportError:  # transformers 4.x: the base model's prefix is added or dropped, nothing else

        def rename4(name: str) -> str:
            if name not in expected and prefix and f"{prefix}.{name}" in expected:
                return f"{prefix}.{name}"
            if (
                name not in expected
                and prefix
                and name.startswith(f"{prefix}.")
                and name[len(prefix) + 1 :] in expected
            ):
                return name[len(prefix) + 1 :]
            return name

        return rename4, []

    mapping = get_model_conversion_mapping(model)
    renamings = [m for m in mapping if isinstance(m, WeightRenaming)]
    converters = [m for m in mapping if isinstance(m, WeightConverter)]
    used: list[str] = []

    def rename(name: str) -> str:
        renamed, pattern = rename_source_key(name, renamings, converters, prefix, expected)
        if renamed not in expected and name in expected:
            renamed, pattern = rename_source_key(name, [], [], prefix, expected)
        if pattern is not None:
            used.extend(str(p) for c in converters if pattern in c.source_patterns for p in c.target_patterns)
        return renamed

    return rename, used


def _ignored(model) -> tuple[re.Pattern | None, re.Pattern | None]:
    """transformers' own rules for keys that may be missing or extra (and old checkpoints'
    rotary_emb.inv_freq and position_ids buffers, which it drops too)."""
    missing = set(getattr(model, "_keys_to_ignore_on_load_missing", None) or [])
    unexpected = set(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or []) | {
        r"rotary_emb\.inv_freq",
        r"(^|\.)position_ids$",
    }
    join = lambda patterns: re.compile("|".join(f"({p})" for p in patterns)) if patterns else None  # noqa: E731
    return join(missing), join(unexpected)


def _dir_tensors(root: Path) -> dict[str, Any]:
    """Every tensor's header entry in a local directory's safetensors files (headers only; a broken file adds none:
    the checks above name it)."""
    tensors: dict[str, Any] = {}
    for path in sorted(Path(root).glob("*.safetensors")):

        def read(n: int, path: Path = path) -> bytes:
            with open(path, "rb") as f:
                return f.read(n)

        header, _ = header_problem(str(path), path.stat().st_size, read)
        tensors.update(header or {})
    return tensors


_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<side>[AB])(?:\.[^.]+)?\.weight$")


def adapter_fit_problems(model_dir: str | Path, adapter_dir: str | Path, label: str) -> list[str]:
    """A LoRA adapter against the base model it is about to be served or merged on, from the two directories'
    safetensors headers: a module it adapts that the base stores under the same name must have the input (lora_A)
    and output (lora_B) sizes the adapter was trained for. An adapter of another model loaded for half a minute in
    vLLM, then failed with "The size of tensor a (128) must match the size of tensor b (576)" (or peft's
    size-mismatch traceback). Only a size that differs refuses: a module stored under another name (a checkpoint's
    own prefix, a tied lm_head), a quantized base or a model this cannot read are not judged here."""
    try:
        base_config = json.loads((Path(model_dir) / "config.json").read_text())
        adapter_config = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    except (OSError, ValueError):
        return []  # the directory checks say what is missing
    if (
        not isinstance(base_config, dict)
        or not isinstance(adapter_config, dict)
        or base_config.get("quantization_config")
    ):
        return []  # packed weights (AWQ, GPTQ, ...): their stored shapes are not the module's
    adapter, base = _dir_tensors(Path(adapter_dir)), _dir_tensors(Path(model_dir))
    # fan_in_fan_out (GPT-2's Conv1D): the base stores its weight as [in, out], not [out, in]
    out_at, in_at = (1, 0) if adapter_config.get("fan_in_fan_out") else (0, 1)
    wrong: dict[str, str] = {}
    for key, info in adapter.items():
        m = _LORA_KEY.match(key)
        target = base.get(f"{m['module']}.weight") if m else None
        if (
            m is None
            or target is None
            or m["module"] in wrong
            or len(info.get("shape") or []) != 2
            or len(target.get("shape") or []) != 2
        ):
            continue  # not a LoRA matrix, or not stored under that name: not judged
        side, stored = (1, target["shape"][in_at]) if m["side"] == "A" else (0, target["shape"][out_at])
        if info["shape"][side] != stored:  # lora_A: [r, in]; lora_B: [out, r]
            wrong[m["module"]] = (
                f"{m['module']} has {stored} {'inputs' if m['side'] == 'A' else 'outputs'} in the "
                f"base, {info['shape'][side]} in the adapter"
            )
        if len(wrong) == SHOWN:
            break
    if not wrong:
        return []
    trained_on = adapter_config.get("base_model_name_or_path")
    return [
        f"{label} was not trained on this base model ({'; '.join(wrong.values())}): use it with the model it "
        "was trained from" + (f" (its adapter_config.json names {trained_on!r})" if trained_on else "")
    ]
