"""Delivering models and datasets into the bucket, content-addressed: a source (trainer.config.sources'
grammar) materialized on this machine (a Hub download, a GGUF de-quantized; a dataset read, checked and split
by trainer.data.loading, then masked), then uploaded once under its tree's hash."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

from trainer.chat.types import Row
from trainer.models import builtin_model, gguf, weights
from trainer import data
from trainer.chat import templates
from trainer.data import bfcl, masking, mix
from trainer.data import name_masking as name_masking_mod
from trainer.config.training import SEED_MAX
from trainer.core.errors import UserError, brief, collect
from trainer.models.model_tree import model_dir_problems, model_tree_problems
from trainer.parity import choose_template
from trainer.config.sources import HUB_GGUF, GGUF_SUFFIX, LOCAL_SUFFIXES, Source, is_gguf, mix_parts, parse
from trainer.core import hub
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

    hub.offline_if_hub_unresolvable()
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
        splits = data.load(src, revision, eval_fraction, seed)
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
        return data.load(Source("local", str(path)), "", eval_fraction, seed, shown=src.ref)


def _part_splits(name: str, store, eval_fraction: float, seed: int) -> dict[str, list[Row]]:
    """One part of a mix as `{"train", "eval"}`: an s3:// part from the bucket, any other read and split as alone
    (trainer.data.loading, which reads mixes without a bucket, as the parameters' check does)."""
    part = parse(name, "dataset")
    if part.kind != "s3":
        return data.load(part, "", eval_fraction, seed)
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
