"""Reading a dataset source into checked `{"train": rows, "eval": rows}` (trainer.config.sources' grammar): a file
(JSONL, JSON, CSV, Parquet, gzipped text), a folder of split files, a `datasets` save_to_disk folder or Hub clone, a
Hub dataset, the built-in rows, or a mix of these. Every reader ends in trainer.data.rows' checks; delivery
(trainer.store.delivery) uploads what this returns, and the parameters' check reads local sources with it first.
"""

from __future__ import annotations

import gzip
import random
import re
from pathlib import Path
from typing import Callable

from trainer.chat.types import Row
from trainer.config.sources import Source, mix_parts, parse
from trainer.core import hub
from trainer.core.errors import UserError, brief, collect
from trainer.data import builtin_data, mix
from trainer.data.formats import quiet_conversions
from trainer.data.preflight import conversation_key
from trainer.data.readers import FILE_TYPES, read_rows, suffix_of
from trainer.data.rows import validate_rows


def _split(rows: list[Row], eval_fraction: float, seed: int) -> dict[str, list[Row]]:
    rows = rows[:]
    random.Random(seed).shuffle(rows)
    n_eval = max(1, int(len(rows) * eval_fraction))
    return {"train": rows[n_eval:], "eval": rows[:n_eval]}


def load(
    src: Source, revision: str = "", eval_fraction: float = 0.1, seed: int = 0, shown: str = ""
) -> dict[str, list[Row]]:
    """Validated, non-empty `{"train": rows, "eval": rows}` from any source (see _read). `shown`: what the
    messages call a local file (an uploaded object's URI for its downloaded copy); its path otherwise."""
    splits = _read(src, revision, eval_fraction, seed, shown)
    name = shown or src.ref
    empty = [name for name, rows in splits.items() if not rows]
    if empty == ["train"] and len(splits["eval"]) == 1:  # split from one row: no eval_fraction keeps it in train
        raise UserError(
            f"dataset {name} has one row, which the split puts into eval, leaving nothing to train on: "
            "add rows (at least 2: one to train on, one to evaluate), or give a directory with its own "
            "train.jsonl and eval.jsonl"
        )
    if empty:
        raise UserError(
            f"dataset {name} has an empty {' and '.join(empty)} split "
            f"({len(splits['train'])} train / {len(splits['eval'])} eval rows); add rows or change "
            "eval_fraction"
        )
    return splits


def _read(src: Source, revision: str, eval_fraction: float, seed: int, shown: str = "") -> dict[str, list[Row]]:
    """Validated `{"train": rows, "eval": rows}` from any source.

    A single file (JSONL, JSON, CSV, Parquet) is split into train/eval with `eval_fraction`
    (seeded); a directory holds a train file and may hold an eval / validation / test file, or
    is a `datasets` save_to_disk directory; a Hub or saved dataset uses its train split and its
    validation/eval/test split when there is one.
    """
    if src.kind == "builtin":
        return builtin_data.dataset(src.ref)
    if src.kind == "mix":  # without the bucket: the parts' checks before a run (parts in S3 are the deliver step's)
        parts = [(name, weight, _part(name, eval_fraction, seed)) for name, weight in mix_parts(src.ref)]
        return mix.mix(parts, seed)[0]
    if src.kind == "local":
        path = Path(src.ref)
        if kind := _special_file(path):  # reading it could block forever or never end
            raise UserError(
                f"dataset {path} is {kind}, not a file or a folder: pass a .jsonl (or .json, .csv, .tsv, "
                ".parquet) file, or a folder holding train.jsonl"
            )
        if path.is_file():
            return _split(read_rows(path, shown), eval_fraction, seed)
        if any((path / name).is_file() for name in SAVED_DATASET_FILES):
            ds = _load_from_disk(path)
            if not hasattr(ds, "keys"):  # one Dataset, no splits
                return _split(validate_rows(ds.to_list(), str(path), columnar=True), eval_fraction, seed)
        elif _hub_layout(path):  # a clone of a Hub dataset repo: datasets reads its layout as on the Hub
            ds = _load_dataset(str(path), "")
        else:
            train, held_out = _split_files(path)
            return (
                {"train": read_rows(train), "eval": read_rows(held_out)}
                if held_out
                else _split(read_rows(train), eval_fraction, seed)
            )
    else:
        ds = _load_dataset(src.ref, revision)
    if "train" not in ds:  # e.g. HuggingFaceH4/ultrachat_200k: train_sft, test_sft, train_gen, test_gen
        fix = (
            "name the training split 'train'"
            if src.kind == "local"
            else f"a split cannot be chosen here: download the one to train on (`hf download --repo-type dataset "
            f"{src.ref} --local-dir DIR`) and pass its file as the dataset path"
        )
        raise UserError(f"dataset {src.ref} has no 'train' split (it has {list(ds)}): {fix}")
    rows = validate_rows(ds["train"].to_list(), f"{src.ref}[train]", columnar=True)
    eval_split = next((s for s in SPLIT_NAMES["eval"] if s in ds), None)
    if eval_split is None:
        return _split(rows, eval_fraction, seed)
    return {"train": rows, "eval": validate_rows(ds[eval_split].to_list(), f"{src.ref}[{eval_split}]", columnar=True)}


def _part(name: str, eval_fraction: float, seed: int) -> dict[str, list[Row]]:
    """One part of a mix read and split as alone (a Hub part at its main branch: one dataset_revision cannot name
    a revision of each). An s3:// part needs the bucket: trainer.store.delivery reads those."""
    part = parse(name, "dataset")
    if part.kind == "s3":
        raise UserError(f"dataset_source part {name} is in S3: a mix with one is read by the deliver-dataset step")
    return load(part, "", eval_fraction, seed)


def _special_file(path: Path) -> str | None:
    """What `path` is when it is neither a regular file nor a folder (a FIFO, a device, a socket)."""
    import stat

    mode = path.stat().st_mode
    return next(
        (
            kind
            for test, kind in (
                (stat.S_ISFIFO, "a FIFO (named pipe)"),
                (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"),
                (stat.S_ISSOCK, "a socket"),
            )
            if test(mode)
        ),
        None,
    )


SAVED_DATASET_FILES = ("dataset_dict.json", "state.json")  # what datasets' save_to_disk writes

# The held-out split: the first of these present, for files in a directory and for splits of a
# `datasets` dataset alike (eval.jsonl is what deliver writes; validation is the Hub's name).
SPLIT_NAMES = {"train": ("train",), "eval": ("eval", "validation", "valid", "test")}


def _split_files(path: Path) -> tuple[Path, Path | None]:
    """A directory's train file and held-out file (the first of eval, validation, valid, test
    there, as a Hub dataset's), each in any of FILE_TYPES; one UserError when there is no
    train file, or one split name in two formats (train.jsonl and train.csv)."""
    found = {
        name: [
            path / f"{name}{ext}{gz}"
            for ext in FILE_TYPES
            for gz in ("", ".gz")
            if (path / f"{name}{ext}{gz}").is_file()
        ]
        for names in SPLIT_NAMES.values()
        for name in names
    }
    problems = [
        f"dataset directory {path} has {name} in {len(files)} formats ({', '.join(f.name for f in files)}): keep one"
        for name, files in found.items()
        if len(files) > 1
    ]
    if not found["train"] and (path / "config.json").is_file() and any(path.glob("*.safetensors*")):
        # config.json beside weights: a model, most likely passed in the wrong slot
        problems.append(
            f"dataset directory {path} is a model folder (config.json and weights), not a dataset: pass it "
            "as model_source, and a file or directory of chat rows (train.jsonl [+ eval.jsonl]) as "
            "dataset_source"
        )
    elif not found["train"]:
        present = sorted(p.name for p in path.iterdir())[:6] if path.is_dir() else []
        problems.append(
            f"dataset directory {path} has no train file (train.jsonl, .json, .csv, .tsv or .parquet, "
            f"the text ones optionally .gz; it "
            f"holds {present or 'nothing'}) and is not a `datasets` save_to_disk directory: add train.jsonl "
            "[+ eval.jsonl], or pass a single file"
        )
    collect(problems, what=f"cannot read dataset directory {path}")
    held_out = next((found[name][0] for name in SPLIT_NAMES["eval"] if found[name]), None)
    return found["train"][0], held_out


def _load_dataset(ref: str, revision: str):
    """`datasets.load_dataset` (a Hub id, or a local clone of a Hub repo), its failures as UserError."""
    import datasets

    hub.offline_if_hub_unresolvable()
    try:
        return datasets.load_dataset(ref, revision=revision or None)
    except datasets.exceptions.DatasetNotFoundError:
        raise UserError(
            f"no dataset {ref!r} on the Hugging Face Hub (or it is private: set HF_TOKEN); if it "
            "is a model, pass it as model_source"
        ) from None
    except ConnectionError as err:  # offline, or the Hub unreachable, and not in the local cache
        raise UserError(
            f"dataset {ref!r} is not in the local Hugging Face cache and the Hub cannot be reached "
            f"({brief(err)}); download it first (`hf download --repo-type dataset "
            f"{ref}`), allow network access, or pass a local file"
        ) from None
    except ValueError as err:
        if str(err).startswith("Config name is missing"):  # a dataset of several configs and no default
            configs = re.search(r"configs: (\[.*?\])", str(err))
            fetch = (
                ""
                if Path(ref).is_dir()
                else f"download them (`hf download --repo-type dataset {ref} --local-dir DIR`) and "
            )
            raise UserError(
                f"dataset {ref!r} has several configs ({configs[1] if configs else 'see its card'}) and no "
                f"default one, and a config cannot be chosen here: {fetch}pass one config's folder or file "
                "as the dataset path"
            ) from None
        raise UserError(
            f"dataset {ref!r} does not load with `datasets` ({type(err).__name__}: "
            f"{brief(err)}); check its files, or pass a single .jsonl file"
        ) from None
    except (datasets.exceptions.DatasetGenerationError, FileNotFoundError) as err:
        raise UserError(
            f"dataset {ref!r} does not load with `datasets` ({type(err).__name__}: "
            f"{brief(err)}); check its files, or pass a single .jsonl file"
        ) from None


def _hub_layout(path: Path) -> bool:
    """Split files the way Hub dataset repos lay them out (data/train-00000-of-00001.parquet,
    train-*.jsonl, ...), not named plainly train.jsonl."""
    if any(
        suffix_of(p) in FILE_TYPES for pattern in ("data/train*", "train-*", "data/train/*") for p in path.glob(pattern)
    ):
        return True
    card = path / "README.md"  # a dataset card whose YAML header maps files to configs and splits
    head = card.read_text(encoding="utf-8", errors="replace")[: 1 << 16] if card.is_file() else ""
    return head.startswith("---") and re.search(r"^configs:", head, re.MULTILINE) is not None


def _load_from_disk(path: Path):
    """A `datasets.save_to_disk` directory (a Dataset or a DatasetDict)."""
    import datasets

    try:
        return datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError, OSError) as err:
        raise UserError(
            f"{path} looks like a `datasets` save_to_disk directory but does not load "
            f"({type(err).__name__}: {brief(err)}); save it again"
        ) from None


def row_origins(dataset_source: str) -> Callable[[list[Row]], list[str]]:
    """Where training rows (after the split and the mix) are in the dataset's own files, for a refusal that
    names them (trainer.data.bfcl.contamination): "data.jsonl:17" in JSON Lines, "data.csv row 5" in other
    formats; a row of a source not read from a file here (`datasets`, built in) is named by its source. The
    files are read again only when called, with the rows found: a rare, short path."""

    def origins(rows: list[Row]) -> list[str]:
        places: dict[str, list[str]] = {}
        for path in _source_files(parse(dataset_source, "dataset")):
            for place, row in _numbered_rows(path):
                places.setdefault(conversation_key(row), []).append(place)
        found = [list(dict.fromkeys(places.get(conversation_key(r), []))) for r in rows]  # a part mixed in twice
        return [
            ", ".join(at[:5]) + (f" and {len(at) - 5} more" if len(at) > 5 else "")
            if at
            else f"a row of {dataset_source.strip()}"
            for at in found
        ]

    return origins


def _source_files(src: Source) -> list[Path]:
    """The files here that a source's training rows are read from, in the order read."""
    if src.kind == "mix":
        return [f for name, _ in mix_parts(src.ref) for f in _source_files(parse(name, "dataset"))]
    path = Path(src.ref)
    if src.kind != "local" or not path.exists():
        return []
    if path.is_file():
        return [path]
    if any((path / name).is_file() for name in SAVED_DATASET_FILES) or _hub_layout(path):
        return []  # read through `datasets`
    return [_split_files(path)[0]]


def _numbered_rows(path: Path) -> list[tuple[str, Row]]:
    """(where, row) for every row of a dataset file in its order: "path:line" where each row is one line of
    its own (JSON Lines), else "path row N"."""
    with quiet_conversions():
        rows = read_rows(path)
    lines: list[int] = []
    if suffix_of(path) not in (".csv", ".tsv", ".parquet"):
        first = ""
        with gzip.open(path, "rb") if path.suffix.lower() == ".gz" else path.open("rb") as f:
            for n, raw in enumerate(f, 1):
                if text := raw.decode("utf-8", "replace").lstrip("\ufeff").strip():
                    first = first or text
                    lines.append(n)
        if first.startswith("[") or len(lines) != len(rows):  # a JSON list, or a row over several lines
            lines = []
    return [(f"{path}:{lines[i]}" if lines else f"{path} row {i + 1}", row) for i, row in enumerate(rows)]
