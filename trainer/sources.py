"""Where models and datasets come from, and delivering them into the bucket.

Source strings (the same grammar for models and datasets):
  builtin:tiny-llama | builtin:function-calling   generated here, offline
  /abs/path, ./rel/path, file:///abs/path           a local directory or .jsonl file
  org/name  (revision as a separate parameter)      the Hugging Face Hub
  s3://bucket/models/sha256-...                     a tree delivered before (e.g. by
                                                    `python -m trainer deliver-dataset`)
"""

from __future__ import annotations

import os
import random
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.errors import UserError

BUILTIN_MODELS = ("tiny-llama",)
BUILTIN_DATASETS = ("function-calling",)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class Source:
    kind: str  # "builtin" | "local" | "hub" | "s3"
    ref: str  # builtin name, local path, or hub repo id


def parse(source: str, what: str) -> Source:
    """Classify a source string, or raise one UserError that shows the accepted forms.

    `what` is "model" or "dataset". Local paths must exist: a missing file fails here,
    before any download or training starts.
    """
    builtins = BUILTIN_MODELS if what == "model" else BUILTIN_DATASETS
    forms = (f"builtin:{'|'.join(builtins)}, a local path (/abs, ./rel or file:///abs), "
             "a Hugging Face Hub id like org/name, or an s3:// URI printed by deliver")
    source = (source or "").strip()
    if source.startswith("s3://"):
        if not re.fullmatch(r"s3://[a-z0-9.-]{3,63}/\S+", source):
            raise UserError(f"malformed {what} URI {source!r}: expected s3://bucket/prefix")
        return Source("s3", source.rstrip("/"))
    if source.startswith("builtin:"):
        name = source.split(":", 1)[1]
        if name not in builtins:
            raise UserError(f"unknown built-in {what} {source!r}; use one of: "
                            + ", ".join(f"builtin:{b}" for b in builtins))
        return Source("builtin", name)
    if source.startswith("file://"):
        source = source[len("file://"):]
    looks_local = source.startswith(("/", "./", "../", "~")) or source.endswith((".jsonl", ".json"))
    if looks_local or (source and Path(source).exists()):
        path = Path(source).expanduser()
        if not path.exists():
            raise UserError(f"{what} path not found: {path}. Check the path, or use {forms}")
        return Source("local", str(path.resolve()))
    if _HUB_ID.match(source):
        return Source("hub", source)
    raise UserError(f"unknown {what} source {source!r}: use {forms}")


def model_max_length(source: str) -> int | None:
    """The context length of a model known without downloading it (builtin or local), else None."""
    import json

    src = parse(source, "model")
    if src.kind == "builtin":
        from trainer import builtin_model

        return builtin_model.MAX_POSITIONS
    config = Path(src.ref) / "config.json"
    if src.kind == "local" and config.is_file():
        return json.loads(config.read_text()).get("max_position_embeddings")
    return None


def materialize_model(src: Source, revision: str, workdir: Path) -> Path:
    """A local directory holding the model (built, given, or downloaded from the Hub)."""
    if src.kind == "builtin":
        from trainer import builtin_model

        return builtin_model.build(workdir / "model")
    if src.kind == "local":
        path = Path(src.ref)
        if not (path / "config.json").is_file():
            raise UserError(f"model directory {path} has no config.json; pass a Hugging Face model directory")
        return path
    from huggingface_hub import snapshot_download  # reads HF_TOKEN from the environment

    # The standard HF cache (HF_HUB_CACHE) rather than a temporary copy: a re-run, or a
    # machine with HF_HUB_OFFLINE=1 and a pre-filled cache, needs no download.
    return Path(snapshot_download(src.ref, revision=revision or None,
                                  allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]))


def _split(rows: list[dict[str, Any]], eval_fraction: float, seed: int) -> dict[str, list[dict[str, Any]]]:
    rows = rows[:]
    random.Random(seed).shuffle(rows)
    n_eval = max(1, int(len(rows) * eval_fraction))
    return {"train": rows[n_eval:], "eval": rows[:n_eval]}


def materialize_dataset(src: Source, revision: str, eval_fraction: float = 0.1,
                        seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Validated, non-empty `{"train": rows, "eval": rows}` from any source (see _materialize)."""
    splits = _materialize(src, revision, eval_fraction, seed)
    empty = [name for name, rows in splits.items() if not rows]
    if empty:
        raise UserError(f"dataset {src.ref} has an empty {' and '.join(empty)} split "
                        f"({len(splits['train'])} train / {len(splits['eval'])} eval rows); add rows or change "
                        "eval_fraction")
    return splits


def _materialize(src: Source, revision: str, eval_fraction: float, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Validated `{"train": rows, "eval": rows}` from any source.

    A single file is split into train/eval with `eval_fraction` (seeded); a directory
    must hold train.jsonl and may hold eval.jsonl; a Hub dataset uses its train split and
    its validation/test split when there is one.
    """
    from trainer import builtin_data, data

    if src.kind == "builtin":
        return builtin_data.generate()
    if src.kind == "local":
        path = Path(src.ref)
        if path.is_file():
            return _split(data.read_jsonl(path), eval_fraction, seed)
        if not (path / "train.jsonl").is_file():
            raise UserError(f"dataset directory {path} has no train.jsonl; add it, or pass a .jsonl file")
        train = data.read_jsonl(path / "train.jsonl")
        if (path / "eval.jsonl").is_file():
            return {"train": train, "eval": data.read_jsonl(path / "eval.jsonl")}
        return _split(train, eval_fraction, seed)
    import datasets

    ds = datasets.load_dataset(src.ref, revision=revision or None)
    if "train" not in ds:
        raise UserError(f"Hub dataset {src.ref} has no 'train' split (it has {list(ds)})")
    train = data.validate_rows(ds["train"].to_list(), f"{src.ref}[train]")
    held_out = next((s for s in ("validation", "eval", "test") if s in ds), None)
    if held_out is None:
        return _split(train, eval_fraction, seed)
    return {"train": train, "eval": data.validate_rows(ds[held_out].to_list(), f"{src.ref}[{held_out}]")}


def _already_delivered(src: Source, store) -> tuple[str, dict[str, Any]]:
    """An s3:// source: a complete tree (manifest present) is passed through as is."""
    from trainer.storage import MANIFEST, split_uri

    bucket, prefix = split_uri(src.ref)
    if bucket != store.bucket or not store.exists(f"{prefix}/{MANIFEST}"):
        raise UserError(f"{src.ref} is not a complete delivered tree in bucket {store.bucket!r} "
                        f"(no {MANIFEST}); deliver it with `python -m trainer deliver-model|deliver-dataset`")
    return src.ref, {**store.get_json(f"{prefix}/{MANIFEST}"), "uploaded_bytes": 0}


def deliver_model(source: str, revision: str, store) -> tuple[str, dict[str, Any]]:
    """Put a model into the bucket; returns (s3 uri, metadata for the Model artifact)."""
    src = parse(source, "model")
    if src.kind == "s3":
        uri, manifest = _already_delivered(src, store)
        return uri, {"source": source, "revision": "", **manifest}
    with tempfile.TemporaryDirectory() as tmp:
        path = materialize_model(src, revision, Path(tmp))
        uri, manifest = store.put_tree(path, "models")
    return uri, {"source": source, "revision": revision if src.kind == "hub" else "", **manifest}


def deliver_dataset(source: str, revision: str, store, eval_fraction: float = 0.1,
                    seed: int = 0) -> tuple[str, dict[str, Any]]:
    """Put a dataset (train.jsonl + eval.jsonl) into the bucket; returns (s3 uri, metadata)."""
    from trainer import data

    src = parse(source, "dataset")
    if src.kind == "s3":
        uri, manifest = _already_delivered(src, store)
        root = store.get_tree(uri)
        counts = {p.stem: sum(1 for line in p.open() if line.strip()) for p in sorted(root.glob("*.jsonl"))}
        if set(counts) != {"train", "eval"}:
            raise UserError(f"{uri} is not a delivered dataset: expected train.jsonl and eval.jsonl, found {sorted(counts)}")
        return uri, {"source": source, "revision": "", "rows": counts, **manifest}
    splits = materialize_dataset(src, revision, eval_fraction, seed)
    with tempfile.TemporaryDirectory() as tmp:
        counts = {name: data.write_jsonl(rows, os.path.join(tmp, f"{name}.jsonl")) for name, rows in splits.items()}
        uri, manifest = store.put_tree(tmp, "datasets")
    return uri, {"source": source, "revision": revision if src.kind == "hub" else "",
                 "rows": counts, **manifest}
