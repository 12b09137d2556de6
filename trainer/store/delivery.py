"""Delivering models and datasets into the bucket, content-addressed: a source (trainer.config.sources'
grammar) materialized on this machine (a Hub download, a GGUF de-quantized, a dataset read, checked
and split), then uploaded once under its tree's hash."""

from __future__ import annotations

import contextlib
import gzip
import os
import random
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from trainer.chat.types import Row
from trainer.data import builtin_data
from trainer.models import builtin_model, gguf, weights
from trainer import data
from trainer.chat import templates
from trainer.data import bfcl, masking, mix
from trainer.data import name_masking as name_masking_mod
from trainer.data.preflight import conversation_key
from trainer.config.training import SEED_MAX
from trainer.core.errors import UserError, brief, collect
from trainer.models.model_tree import model_dir_problems, model_tree_problems
from trainer.parity import choose_template
from trainer.config.sources import HUB_GGUF, GGUF_SUFFIX, LOCAL_SUFFIXES, Source, is_gguf, mix_parts, parse
from trainer.core.storage import MANIFEST, split_uri


def materialize_model(src: Source, revision: str, workdir: Path, shown: str = "") -> Path:
    """A local directory holding the model (built, given, downloaded from the Hub, or converted from a
    GGUF file into `workdir`). `shown`: what the messages call a local file (an uploaded object's URI for its
    downloaded copy); its path otherwise."""
    if src.kind == "builtin":
        return builtin_model.cached(workdir / "model")
    if src.kind == "local":
        path, name = Path(src.ref), shown or src.ref
        a_gguf = is_gguf(src.ref) and path.is_file()
        # a .gguf's check reads its metadata, as its conversion does: once for both
        with gguf.read_once(path) if a_gguf else contextlib.nullcontext():
            collect(model_dir_problems(path, check_tokenizer=False, shown=name), what=f"model {name} cannot be trained")
            return _converted(path, workdir, name) if a_gguf else path
    from huggingface_hub import hf_hub_download, snapshot_download  # read HF_TOKEN from the environment

    offline_if_hub_unresolvable()
    # The standard HF cache (HF_HUB_CACHE) rather than a temporary copy: a re-run, or a
    # machine with HF_HUB_OFFLINE=1 and a pre-filled cache, needs no download.
    if gguf_file := HUB_GGUF.match(src.ref):
        with _hub_errors(gguf_file[1], src.ref):
            path = Path(hf_hub_download(gguf_file[1], gguf_file[2], revision=revision or None))
        return _converted(path, workdir)
    with _hub_errors(src.ref, src.ref):
        return Path(
            snapshot_download(
                src.ref,
                revision=revision or None,
                allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"],
            )
        )


def _converted(path: Path, workdir: Path, shown: str = "") -> Path:
    return gguf.convert(path, workdir / "model", shown)


@contextlib.contextmanager
def _hub_errors(repo: str, what: str):
    """A failed Hub download of model `what` (the repo `repo`, or a file in it) as one UserError saying what to do."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    try:
        yield
    except RepositoryNotFoundError:
        raise UserError(
            f"no model {repo!r} on the Hugging Face Hub (or it is private: set HF_TOKEN); if it is a "
            "dataset, pass it as dataset_source"
        ) from None
    except LocalEntryNotFoundError as err:  # before EntryNotFoundError, its base class
        raise UserError(
            f"model {what!r} is not in the local Hugging Face cache and the Hub cannot be reached "
            f"({brief(err)}); download it first or allow network access"
        ) from None
    except EntryNotFoundError:
        raise UserError(
            f"model repo {repo!r} has no file {what[len(repo) + 1 :] or what!r}: check the file name in "
            "the repo's file list (names are case-sensitive), and model_revision"
        ) from None
    except HfHubHTTPError as err:
        raise UserError(f"downloading model {what!r} failed: {brief(err)}") from None


def offline_if_hub_unresolvable() -> bool:
    """When the Hub's host name does not resolve (no network, no DNS), work from the local HF cache
    as HF_HUB_OFFLINE=1 does; returns whether it did. huggingface_hub retries a failed connection
    5 times over about 24 s, a warning line each: right for a Hub that hiccups, useless for a name
    that does not resolve, and the cache (or the clear "not in the local cache" error) comes at once."""
    import socket
    import urllib.request
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    proxies = urllib.request.getproxies()
    if (proxies.get("https") or proxies.get("all")) and not urllib.request.proxy_bypass(host):
        return False  # a proxy resolves the name (clusters with egress through a proxy and no outside DNS)
    for attempt in range(3):
        try:
            socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
            return False
        except socket.gaierror as err:
            # "Temporary failure" (EAI_AGAIN) is both a DNS blip in a cluster and a laptop without
            # network: asked again twice, 2 s apart, so that a blip is ridden out; "no such name" is final.
            if err.errno != socket.EAI_AGAIN or attempt == 2:
                break
            time.sleep(2)
    print(f"note: {host} does not resolve (offline?): using the local Hugging Face cache only", flush=True)
    os.environ["HF_HUB_OFFLINE"] = "1"  # for what is imported later, and child processes
    constants.HF_HUB_OFFLINE = True  # huggingface_hub and datasets read these at import
    with contextlib.suppress(ImportError):
        import datasets.config

        datasets.config.HF_HUB_OFFLINE = True
    return True


def _split(rows: list[Row], eval_fraction: float, seed: int) -> dict[str, list[Row]]:
    rows = rows[:]
    random.Random(seed).shuffle(rows)
    n_eval = max(1, int(len(rows) * eval_fraction))
    return {"train": rows[n_eval:], "eval": rows[:n_eval]}


def materialize_dataset(
    src: Source, revision: str, eval_fraction: float = 0.1, seed: int = 0, shown: str = ""
) -> dict[str, list[Row]]:
    """Validated, non-empty `{"train": rows, "eval": rows}` from any source (see _materialize). `shown`: what the
    messages call a local file (an uploaded object's URI for its downloaded copy); its path otherwise."""
    splits = _materialize(src, revision, eval_fraction, seed, shown)
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


def _materialize(src: Source, revision: str, eval_fraction: float, seed: int, shown: str = "") -> dict[str, list[Row]]:
    """Validated `{"train": rows, "eval": rows}` from any source.

    A single file (JSONL, JSON, CSV, Parquet) is split into train/eval with `eval_fraction`
    (seeded); a directory holds a train file and may hold an eval / validation / test file, or
    is a `datasets` save_to_disk directory; a Hub or saved dataset uses its train split and its
    validation/eval/test split when there is one.
    """
    if src.kind == "builtin":
        return builtin_data.dataset(src.ref)
    if src.kind == "mix":  # without the bucket: the parts' checks before a run (parts in S3 are the deliver step's)
        parts = [(name, weight, _part_splits(name, None, eval_fraction, seed)) for name, weight in mix_parts(src.ref)]
        return mix.mix(parts, seed)[0]
    if src.kind == "local":
        path = Path(src.ref)
        if kind := _special_file(path):  # reading it could block forever or never end
            raise UserError(
                f"dataset {path} is {kind}, not a file or a folder: pass a .jsonl (or .json, .csv, .tsv, "
                ".parquet) file, or a folder holding train.jsonl"
            )
        if path.is_file():
            return _split(data.read_rows(path, shown), eval_fraction, seed)
        if any((path / name).is_file() for name in SAVED_DATASET_FILES):
            ds = _load_from_disk(path)
            if not hasattr(ds, "keys"):  # one Dataset, no splits
                return _split(data.validate_rows(ds.to_list(), str(path), columnar=True), eval_fraction, seed)
        elif _hub_layout(path):  # a clone of a Hub dataset repo: datasets reads its layout as on the Hub
            ds = _load_dataset(str(path), "")
        else:
            train, held_out = _split_files(path)
            return (
                {"train": data.read_rows(train), "eval": data.read_rows(held_out)}
                if held_out
                else _split(data.read_rows(train), eval_fraction, seed)
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
    rows = data.validate_rows(ds["train"].to_list(), f"{src.ref}[train]", columnar=True)
    eval_split = next((s for s in SPLIT_NAMES["eval"] if s in ds), None)
    if eval_split is None:
        return _split(rows, eval_fraction, seed)
    return {
        "train": rows,
        "eval": data.validate_rows(ds[eval_split].to_list(), f"{src.ref}[{eval_split}]", columnar=True),
    }


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
    there, as a Hub dataset's), each in any of data.FILE_TYPES; one UserError when there is no
    train file, or one split name in two formats (train.jsonl and train.csv)."""
    found = {
        name: [
            path / f"{name}{ext}{gz}"
            for ext in data.FILE_TYPES
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

    offline_if_hub_unresolvable()
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
        data.suffix_of(p) in data.FILE_TYPES
        for pattern in ("data/train*", "train-*", "data/train/*")
        for p in path.glob(pattern)
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


def delivered_share_problem(uri: str, irrelevance_share: float, name_masking: float = 0.0) -> str | None:
    """irrelevance_share or name_masking beside a delivered dataset tree, which is passed through as it is: masking
    it again would add copies to the copies a delivery may have made, or rename names already renamed
    (deliver-dataset, and validate where the bucket answers)."""
    given = [(n, v) for n, v in (("irrelevance_share", irrelevance_share), ("name_masking", name_masking)) if v]
    if not given:
        return None
    said = " and ".join(f"{n}={v:g}" for n, v in given)
    flags = " ".join(f"--{n.replace('_', '-')} {v:g}" for n, v in given)
    return (
        f"{said}, but dataset_source {uri} is a delivered tree, passed through as it is: set "
        f"{' and '.join(f'{n}=0' for n, _ in given)}, or deliver its source with "
        f"{'them' if len(given) > 1 else 'it'} (python -m trainer deliver-dataset SOURCE {flags})"
    )


def _already_delivered(src: Source, store) -> tuple[str, dict[str, Any]]:
    """An s3:// source: a complete tree (manifest present) is passed through as is."""
    bucket, prefix = split_uri(src.ref)
    if bucket != store.bucket:  # the components read and write one bucket only
        raise UserError(
            f"{src.ref} is in bucket {bucket!r}, but this run uses bucket {store.bucket!r} (S3_BUCKET): "
            "copy it there, or deliver it with `python -m trainer deliver-model|deliver-dataset`"
        )
    if not store.exists(f"{prefix}/{MANIFEST}"):
        raise UserError(
            f"{src.ref} is not a complete delivered tree in bucket {store.bucket!r} "
            f"(no {MANIFEST}); deliver it with `python -m trainer deliver-model|deliver-dataset`"
        )
    return src.ref, {**store.get_json(f"{prefix}/{MANIFEST}"), "uploaded_bytes": 0}


def deliver_model(source: str, revision: str, store, chat_template: str = "model") -> tuple[str, dict[str, Any]]:
    """Put a model into the bucket; returns (s3 uri, metadata for the Model artifact).

    `chat_template` other than "model" (trainer.chat.templates) is written into the delivered tree as
    chat_template.jinja: a new tree (its hash covers the template) that every later stage reads."""
    src = parse(source, "model")
    spec = (chat_template or templates.MODEL).strip()
    auto = spec == templates.AUTO
    text = None if auto else templates.resolve(spec, store)  # a bad template fails before any download
    meta = {"source": source, "chat_template": spec}
    upload = _uploaded_file(src, store, (GGUF_SUFFIX,), "a .gguf model") if src.kind == "s3" else None
    if src.kind == "s3" and not upload:
        uri, manifest = _already_delivered(src, store)
        collect(
            model_tree_problems({f["path"] for f in manifest.get("files", [])}, uri)
            or weights.store_problems(store, uri, manifest),
            what="not a model",
        )
        if text is None and not auto:
            return uri, {**meta, "revision": "", **manifest}
    with tempfile.TemporaryDirectory() as tmp:
        if upload:
            path = _converted_upload(src.ref, store.get_file(upload, Path(tmp) / Path(upload).name), Path(tmp))
        else:
            path = store.get_tree(src.ref) if src.kind == "s3" else materialize_model(src, revision, Path(tmp))
        if src.kind != "builtin" and (upload or src.kind != "s3"):  # built here and tested, or delivered before
            collect(
                model_dir_problems(path, own_template=text is None and not auto),
                what=f"model {source} cannot be trained",
            )
        if auto or spec in templates.BUILTIN:
            from transformers import AutoTokenizer  # here: deliver-dataset and the CLI's other verbs stay light

            tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            if auto:
                spec, why = choose_template(tokenizer, templates.generation_stop_ids(path))
                print(f"chat_template=auto -> {spec}: {why}", flush=True)
                meta.update(chat_template=spec, chat_template_auto=why)
                text = templates.resolve(spec, store)
        if text is not None:
            path = templates.with_template(path, text, Path(tmp) / "templated")
            if spec in templates.BUILTIN and (added := templates.with_stops(path, tokenizer, spec)):
                print(
                    f"chat_template={spec}: generation now also stops at {templates.BUILTIN[spec].turn_end} (id "
                    f"{added[0]}), the token its assistant turns end with, added to generation_config.json's "
                    "eos_token_id",
                    flush=True,
                )
        uri, manifest = store.put_tree(path, "models")
    return uri, {**meta, "revision": revision if src.kind == "hub" else "", **manifest}


def _converted_upload(uri: str, local: Path, workdir: Path) -> Path:
    """A .gguf object downloaded from the bucket, converted; messages name the object, not the copy."""
    return materialize_model(Source("local", str(local)), "", workdir, shown=uri)


def _uploaded_file(
    src: Source, store, suffixes: tuple[str, ...] = LOCAL_SUFFIXES, what: str = "a dataset file"
) -> str | None:
    """The key of `what` (a file whose name ends with one of `suffixes`) uploaded to the run's bucket as it is
    (`mc cp chats.jsonl minio/llm-finetune/uploads/`: no manifest), read like a local file; None for anything else."""
    bucket, key = split_uri(src.ref)
    if bucket != store.bucket or not key.lower().endswith(suffixes) or store.exists(f"{key}/{MANIFEST}"):
        return None
    if not store.exists(key):
        raise UserError(
            f"{src.ref}: no such object in bucket {bucket!r}; check the key ({what} uploaded "
            "there is read as it is, like a local file)"
        )
    return key


def deliver_dataset(
    source: str,
    revision: str,
    store,
    eval_fraction: float = 0.1,
    seed: int = 0,
    irrelevance_share: float = 0.0,
    irrelevance_reply: str = masking.IRRELEVANCE_REPLY,
    irrelevance_distractors: float = 0.0,
    name_masking: float = 0.0,
) -> tuple[str, dict[str, Any]]:
    """Put a dataset (train.jsonl + eval.jsonl) into the bucket; returns (s3 uri, metadata).

    `irrelevance_share` of each split's rows are made by function masking after the split
    (trainer.data.masking), answered `irrelevance_reply`, `irrelevance_distractors` of them offering unrelated
    tools, and counted in the metadata (`irrelevance_rows`); then `name_masking` of the training rows with tools
    get random function and parameter names (trainer.data.name_masking; `name_masked_rows`);
    a delivered tree is passed through as it is, so it takes neither."""
    src = parse(source, "dataset")
    if not 0 <= seed <= SEED_MAX:
        raise UserError(f"seed must be between 0 and {SEED_MAX}, got {seed}")
    if (
        problem := masking.share_problem(irrelevance_share)
        or masking.reply_problem(irrelevance_reply)
        or masking.distractors_problem(irrelevance_distractors)
        or name_masking_mod.share_problem(name_masking)
    ):
        raise UserError(problem)
    record = None
    if src.kind == "mix":  # each part read and split as it would be alone, then mixed (trainer.data.mix)
        parts = [(name, weight, _part_splits(name, store, eval_fraction, seed)) for name, weight in mix_parts(src.ref)]
        splits, record = mix.mix(parts, seed)
        print(mix.describe(record, "dataset_source"), flush=True)
    elif src.kind == "s3" and (upload := _uploaded_file(src, store)):
        splits = _upload_splits(src, upload, store, eval_fraction, seed)
    elif src.kind == "s3":
        uri, manifest = _already_delivered(src, store)
        names = {f["path"] for f in manifest.get("files", [])}
        if "config.json" in names:  # checked before downloading what may be gigabytes of weights
            raise UserError(
                f"{uri} is a delivered model, not a dataset: pass it as model_source, and a dataset "
                "(train.jsonl) as dataset_source"
            )
        if problem := delivered_share_problem(uri, irrelevance_share, name_masking):
            raise UserError(problem)
        root = store.get_tree(uri)
        counts = {p.stem: sum(1 for line in p.open() if line.strip()) for p in sorted(root.glob("*.jsonl"))}
        if set(counts) != {"train", "eval"}:
            raise UserError(
                f"{uri} is not a delivered dataset: expected train.jsonl and eval.jsonl, found {sorted(counts)}"
            )
        return uri, {"source": source, "revision": "", "rows": counts, **manifest}
    else:
        splits = materialize_dataset(src, revision, eval_fraction, seed)
    splits, made = masking.mask_splits(
        splits, irrelevance_share, seed, f"dataset {source}", irrelevance_reply, irrelevance_distractors
    )
    splits, renamed = name_masking_mod.mask_names(splits, name_masking, seed, f"dataset {source}")
    if overlap := data.eval_overlap(splits):  # after masking: what is delivered is what the evaluation scores
        print(f"WARNING: {overlap}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        counts = data.write_delivered(splits, tmp)  # the rows were checked once, above: CHECKED says so
        uri, manifest = store.put_tree(tmp, "datasets")
    return uri, {
        "source": source,
        "revision": revision if src.kind == "hub" else "",
        "rows": counts,
        "irrelevance_share": irrelevance_share,
        "irrelevance_rows": made,
        **(
            {"irrelevance_reply": irrelevance_reply, "irrelevance_distractors": irrelevance_distractors}
            if irrelevance_share
            else {}
        ),
        **({"name_masking": name_masking, "name_masked_rows": renamed} if name_masking else {}),
        **({"mix": record} if record else {}),
        **manifest,
    }


def _upload_splits(src: Source, upload: str, store, eval_fraction: float, seed: int) -> dict[str, list[Row]]:
    """A dataset file uploaded to the bucket, read and split like a local one."""
    with tempfile.TemporaryDirectory() as tmp:
        path = store.get_file(upload, Path(tmp) / Path(upload).name)
        # messages and the conversion line name the object, not the temporary copy
        return materialize_dataset(Source("local", str(path)), "", eval_fraction, seed, shown=src.ref)


def _part_splits(name: str, store, eval_fraction: float, seed: int) -> dict[str, list[Row]]:
    """One part of a mix as `{"train", "eval"}`: read and split as alone (a Hub part at its main branch: one
    dataset_revision cannot name a revision of each), an s3:// part from the bucket (`store`; None where there is
    none, as in the parameters' check, which leaves such mixes to the deliver step)."""
    part = parse(name, "dataset")
    if part.kind != "s3":
        return materialize_dataset(part, "", eval_fraction, seed)
    if store is None:
        raise UserError(f"dataset_source part {name} is in S3: a mix with one is read by the deliver-dataset step")
    if upload := _uploaded_file(part, store):
        return _upload_splits(part, upload, store, eval_fraction, seed)
    uri, manifest = _already_delivered(part, store)
    if not {"train.jsonl", "eval.jsonl"} <= {f["path"] for f in manifest.get("files", [])}:
        raise UserError(
            f"dataset_source part {uri} is not a delivered dataset (train.jsonl and eval.jsonl): give a "
            "dataset file or a tree deliver-dataset wrote"
        )
    root = store.get_tree(uri)
    return {split: data.read_delivered(root / f"{split}.jsonl") for split in ("train", "eval")}


def deliver_bfcl(source: str, store) -> tuple[str, dict[str, Any]]:
    """Put BFCL's data (trainer.data.bfcl: the single-turn categories, their possible answers, VERSION)
    into the bucket, content-addressed under bfcl/; returns (s3 uri, metadata: source, version, rows per
    category). `source`: empty (the pinned wheel, fetched with `pip download --no-deps`), a wheel or a
    folder here, a wheel uploaded to the run's bucket, or a tree delivered before (passed through)."""
    source = (source or "").strip()
    if problem := bfcl.source_problem(source):
        raise UserError(problem)
    with tempfile.TemporaryDirectory(prefix="bfcl-") as tmp:
        tree = Path(tmp) / "tree"
        if not source:
            bfcl.fetched(tree)
        elif source.startswith("s3://"):
            bucket, key = split_uri(source)
            if key.lower().endswith(".whl") and bucket == store.bucket and store.exists(key):
                bfcl.extract(store.get_file(key, Path(tmp) / Path(key).name), tree)
            else:
                uri, manifest = _already_delivered(Source("s3", source.rstrip("/")), store)
                if bfcl.VERSION_FILE not in {f["path"] for f in manifest.get("files", [])}:
                    raise UserError(
                        f"bfcl_source {source} is a delivered tree but not BFCL's data (no "
                        f"{bfcl.VERSION_FILE}): give the s3:// URI a run delivered BFCL to, or the wheel"
                    )
                tree = store.get_tree(uri)
        else:
            bfcl.extract(Path(source.removeprefix("file://")).expanduser(), tree)
        meta = {
            "source": source or bfcl.PACKAGE,
            "version": bfcl.version(tree),
            "rows": {c: len(bfcl.read(tree, c)) for c in bfcl.CATEGORIES},
        }
        uri, manifest = store.put_tree(tree, "bfcl")
    return uri, {**meta, **manifest}


def bfcl_contamination(dataset_uri: str, bfcl_uri: str, store) -> None:
    """Refuse (UserError) a delivered dataset whose training rows ask BFCL's questions (trainer.data.bfcl),
    naming their lines in the delivered train.jsonl (a local source was checked, by its own lines, before)."""
    train = data.read_delivered(store.get_tree(dataset_uri) / "train.jsonl")
    if problem := bfcl.contamination(train, store.get_tree(bfcl_uri), where="train.jsonl:{}"):
        raise UserError(f"dataset {dataset_uri}: {problem}")


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
    with data.quiet_conversions():
        rows = data.read_rows(path)
    lines: list[int] = []
    if data.suffix_of(path) not in (".csv", ".tsv", ".parquet"):
        first = ""
        with gzip.open(path, "rb") if path.suffix.lower() == ".gz" else path.open("rb") as f:
            for n, raw in enumerate(f, 1):
                if text := raw.decode("utf-8", "replace").lstrip("\ufeff").strip():
                    first = first or text
                    lines.append(n)
        if first.startswith("[") or len(lines) != len(rows):  # a JSON list, or a row over several lines
            lines = []
    return [(f"{path}:{lines[i]}" if lines else f"{path} row {i + 1}", row) for i, row in enumerate(rows)]
