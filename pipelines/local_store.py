"""The throwaway S3's reusable contents kept on disk between `run_local` runs (`--store-dir`, default .runs/store).

run_local without --s3-endpoint starts an empty moto server, so every run delivered and converted its model again
and asked the base model everything again, though both are content-addressed and kept in the bucket for exactly
that (trainer.evaluate.kept_base: 10 of the 26 minutes of a SmolLM2 evaluation with BFCL). What a later run can
reuse is kept here, under the same keys as in the bucket: the trees the run's deliver steps wrote (models/,
datasets/, bfcl/: each `<kind>/sha256-<tree>/`, complete with its manifest, or not at all) and the small objects kept
for later runs (base_scores/, template-checks/). The trees a run makes (adapters, merged models, checkpoints) are not
kept: they are the run's outputs (.runs/outputs), and would grow the folder by a model per run.

At start (`restore`) every kept object goes into the fresh server, trees manifest last, as put_tree writes them; at
the end (`keep`) what is missing on disk is copied there, each tree into a temporary folder renamed into place once
verified (Store.get_tree), each object renamed into place whole. `python -m pipelines.runs clear-store` empties it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from trainer.core.storage import MANIFEST, split_uri

# Single objects kept for later runs (not trees): the base's scores and the template checks' verdicts
OBJECT_PREFIXES = ("base_scores/", "template-checks/")
# The steps whose output trees later runs take as they are (content-addressed: the same input, the same key)
DELIVERY_TASKS = ("deliver-model", "deliver-dataset", "deliver-bfcl")


def size(root: Path) -> tuple[int, int]:
    """(files, bytes) under `root` (0, 0 when it does not exist)."""
    files = [p for p in Path(root).rglob("*") if p.is_file()] if Path(root).is_dir() else []
    return len(files), sum(p.stat().st_size for p in files)


def _trees(folder: Path) -> list[Path]:
    """The complete trees kept in a bucket's folder: `<kind>/sha256-*` folders holding a manifest."""
    return sorted(p.parent for p in folder.glob(f"*/sha256-*/{MANIFEST}"))


def restore(store, root: Path) -> str:
    """Put every kept tree and object of `store`'s bucket into it; one line that says what and how long."""
    folder = Path(root) / store.bucket
    if not folder.is_dir():
        return f"local store {root}: empty (the first run fills it)"
    start = time.perf_counter()
    store.ensure_bucket()
    trees = 0
    for tree in _trees(folder):
        prefix = tree.relative_to(folder).as_posix()
        if not store.exists(f"{prefix}/{MANIFEST}"):
            store.put_dir(tree, prefix, manifest=json.loads((tree / MANIFEST).read_text()))
        trees += 1
    objects = 0
    for kind in OBJECT_PREFIXES:
        for path in sorted((folder / kind).glob("*")) if (folder / kind).is_dir() else []:
            if path.is_file() and not path.name.startswith("."):
                store.client.fput_object(store.bucket, f"{kind}{path.name}", str(path))
                objects += 1
    files, total = size(folder)
    return (
        f"local store {root}: {trees} delivered trees and {objects} kept objects ({total / 1e6:.0f} MB) restored in "
        f"{time.perf_counter() - start:.1f} s; `python -m pipelines.runs clear-store` empties it"
    )


def delivered_uris(kfp_run_dir: Path | None) -> list[str]:
    """The s3:// URIs of the trees the run's deliver steps output (a sweep's too)."""
    from pipelines import runs

    if kfp_run_dir is None:
        return []
    found = []
    for task, _, artifact in runs.task_artifacts(Path(kfp_run_dir)):
        uri = (artifact.get("metadata") or {}).get("uri", "")
        if task.rsplit(".", 1)[-1] in DELIVERY_TASKS and isinstance(uri, str) and uri.startswith("s3://"):
            found.append(uri)
    return sorted(set(found))


def keep(store, root: Path, kfp_run_dir: Path | None) -> str:
    """Copy what a later run can reuse from `store`'s bucket to `root` (`delivered_uris`' trees, OBJECT_PREFIXES'
    objects), what is there already left as it is; one line that says what was added."""
    folder = Path(root) / store.bucket
    added, bytes_added = 0, 0
    for uri in delivered_uris(kfp_run_dir):
        bucket, prefix = split_uri(uri)
        target = folder / prefix
        if bucket != store.bucket or (target / MANIFEST).is_file():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".partial-"))
        try:
            store.get_tree(uri, staging)  # every file's sha256 verified
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        added += 1
        bytes_added += size(target)[1]
    for kind in OBJECT_PREFIXES:
        for obj in store.client.list_objects(store.bucket, prefix=kind, recursive=True):
            path = folder / obj.object_name
            if path.is_file() and path.stat().st_size == obj.size:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.partial")
            store.client.fget_object(store.bucket, obj.object_name, str(partial))
            os.replace(partial, path)
            added += 1
            bytes_added += obj.size
    return f"local store {root}: {added} objects added ({bytes_added / 1e6:.0f} MB) for later runs" if added else ""


def clear(root: Path) -> str:
    """Empty the local store; one line that says what was removed."""
    files, total = size(root)
    if not files:
        return f"local store {root}: already empty"
    shutil.rmtree(root)
    return f"local store {root}: {files} files ({total / 1e6:.0f} MB) removed"
