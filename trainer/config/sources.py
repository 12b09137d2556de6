"""Where models and datasets come from: the source grammar (delivery is trainer.store.delivery).

Source strings (the same grammar for models and datasets):
  builtin:tiny-llama | builtin:function-calling   generated here, offline
  /abs/path, ./rel/path, file:///abs/path           a local directory or .jsonl file
  org/name  (revision as a separate parameter)      the Hugging Face Hub
  s3://bucket/models/sha256-...                     a tree delivered before (e.g. by
                                                    `python -m trainer deliver-dataset`)
  s3://bucket/uploads/chats.jsonl                   (datasets) a file uploaded to the run's
                                                    bucket as it is: read like a local file
  /x/model.Q4_1.gguf, s3://bucket/uploads/m.gguf,   (models) a GGUF file, local, uploaded to the
  org/name/model.Q4_1.gguf                          run's bucket, or in a Hub repo: de-quantized
                                                    into a model directory (trainer.models.gguf)
  [{"source": "org/name", "weight": 3},             (datasets) several sources mixed, each any of the
   {"source": "./mine.jsonl", "weight": 1}]          above but a mix; weights are shares of the training
                                                    rows (trainer.data.mix)
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from trainer.core.errors import UserError
from trainer.core.jsontext import loads, repeated_key


BUILTIN_MODELS = ("tiny-llama",)

# builtin:<name> -> the rows it delivers (trainer.data.builtin_data.dataset). function-calling-bfcl, which added the other
# categories before the demo's data held them, is another name for the same rows (runs and scripts name it).
# function-calling-wide calls 33 more tools across domains beside the five (trainer.data.tool_library).
BUILTIN_DATASETS = {
    "function-calling": "function-calling",
    "function-calling-bfcl": "function-calling",
    "function-calling-wide": "function-calling-wide",
}

LOCAL_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet", ".gz")  # a name ending so is a file, never a Hub id

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

GGUF_SUFFIX = ".gguf"

# A file in a Hub model repo: org/name/file.gguf (or org/name/folder/file.gguf). A shorter name ending
# .gguf (m.gguf, dir/m.gguf) is a local path.
HUB_GGUF = re.compile(r"^([A-Za-z0-9][\w.-]*/[\w.-]+)/((?:[\w.-]+/)*[\w.-]+\.gguf)$", re.IGNORECASE)


@dataclass(frozen=True)
class Source:
    kind: str  # "builtin" | "local" | "hub" | "s3" | "mix"
    ref: str  # builtin name, local path, hub repo id (or repo id/file.gguf), s3:// URI, or a mix's JSON


MIX_MAX = 8  # sources in one mix: each is read and checked in full


def mix_parts(source: str) -> list[tuple[str, float]]:
    """A mixed dataset_source, `[{"source": ..., "weight": ...}, ...]` (JSON), as (source, weight) pairs, each
    source checked by `parse`; one UserError naming every problem."""
    example = '[{"source": "org/name", "weight": 3}, {"source": "./mine.jsonl", "weight": 1}]'
    try:
        items, repeated = loads(source)
    except json.JSONDecodeError as err:  # a number of over 4300 digits too
        raise UserError(
            f"dataset_source starts with '[' but is not a JSON list ({err.msg} at character {err.pos}): "
            f"a mix of sources is written {example}"
        ) from None
    except RecursionError:  # lists nested thousands deep
        raise UserError(
            "dataset_source starts with '[' but does not read as a JSON list (nested too deep): a mix of "
            f"sources is written {example}"
        ) from None
    if repeated:
        raise UserError(f"dataset_source: an item {repeated_key(repeated[0])}; a mix of sources is written {example}")
    if not isinstance(items, list) or not 1 <= len(items) <= MIX_MAX:
        raise UserError(f"dataset_source: a mix is a JSON list of 1 to {MIX_MAX} sources, e.g. {example}")
    problems, parts, keys = [], [], set()
    for k, item in enumerate(items):
        if not isinstance(item, dict) or set(item) != {"source", "weight"}:
            problems.append(f"dataset_source[{k}] must be {{\"source\": ..., \"weight\": ...}}, got {json.dumps(item)}")
            continue
        name, weight = item["source"], item["weight"]
        if not _finite_positive(weight):
            shown = json.dumps(weight)
            problems.append(
                f"dataset_source[{k}].weight must be a finite number above 0 (a share of the training "
                f"rows, relative to the others), got {shown if len(shown) < 40 else shown[:20] + '...'}"
            )
        if not isinstance(name, str) or name.strip().startswith("["):
            problems.append(f"dataset_source[{k}].source must be one source's text (not a mix), got {json.dumps(name)}")
            continue
        key: str | tuple[str, str] = name.strip()
        try:  # a local path as the absolute one it names: the steps that read it may run in another folder
            part = parse(name, "dataset")
            name = part.ref if part.kind in ("local", "s3") else name.strip()
            # the same data however it is written: s3://b/x/ and s3://b/x, a built-in under another name
            key = (part.kind, BUILTIN_DATASETS[part.ref] if part.kind == "builtin" else part.ref)
        except UserError as err:
            problems.append(f"dataset_source[{k}]: {err}")
        if key in keys:
            problems.append(
                f"dataset_source[{k}] names {name.strip()!r} again: give each source once, with the sum of the weights"
            )
        keys.add(key)
        parts.append((name.strip(), weight))
    if problems:
        raise UserError("; ".join(problems))
    return parts


def _finite_positive(weight: Any) -> bool:
    """A mix weight: a number above 0 whose float is finite (an integer of 400 digits is not)."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        return False
    try:
        return math.isfinite(float(weight)) and weight > 0
    except OverflowError:
        return False


def is_gguf(ref: str) -> bool:
    """A model source that names a GGUF file (local, in a Hub repo, or uploaded to the bucket)."""
    return ref.lower().endswith(GGUF_SUFFIX)


def parse(source: str, what: str) -> Source:
    """Classify a source string, or raise one UserError that shows the accepted forms.

    `what` is "model" or "dataset". Local paths must exist: a missing file fails here,
    before any download or training starts.
    """
    builtins = BUILTIN_MODELS if what == "model" else BUILTIN_DATASETS
    forms = (
        f"builtin:{'|'.join(builtins)}, a local path (/abs, ./rel or file:///abs), "
        "a Hugging Face Hub id like org/name, or an s3:// URI printed by deliver"
    )
    if what == "model":
        forms += " (or a .gguf file: a path, an s3:// object or org/name/file.gguf on the Hub)"
    source = (source or "").strip()
    if not source:
        raise UserError(f"{what}_source is empty: give {forms}")
    if what == "dataset" and source.startswith("["):
        parts = mix_parts(source)
        return Source("mix", json.dumps([{"source": s, "weight": w} for s, w in parts]))
    if source.startswith("s3://"):
        if not re.fullmatch(r"s3://[a-z0-9.-]{3,63}/\S+", source):
            raise UserError(f"malformed {what} URI {source!r}: expected s3://bucket/prefix")
        return Source("s3", source.rstrip("/"))
    if source.startswith("builtin:"):
        name = source.split(":", 1)[1]
        if name not in builtins:
            raise UserError(
                f"unknown built-in {what} {source!r}; use one of: " + ", ".join(f"builtin:{b}" for b in builtins)
            )
        return Source("builtin", name)
    if source.startswith("file://localhost/"):  # RFC 8089: the host 'localhost' is this machine
        source = "file://" + source[len("file://localhost") :]
    if source.startswith("file://") and not source.startswith("file:///"):  # file://a/b names the host 'a'
        raise UserError(
            f"{what}_source {source}: a file:// URL names a file on this machine with an absolute "
            f"path (file:///abs/path, or file://localhost/abs/path), not on host "
            f"{source[len('file://') :].split('/')[0]!r}; for a path relative to this folder write "
            f"./{source[len('file://') :]}"
        )
    try:
        if looks_local(source) or (source and Path(source).exists()):
            # a URL's path is percent-encoded (%20 a space); a plain path is taken as it is
            source = unquote(source.removeprefix("file://")) if source.startswith("file://") else source
            path = Path(source).expanduser()
            if not path.exists():
                raise UserError(f"{what} path not found: {path}. Check the path, or use {forms}")
            return Source("local", str(path.resolve()))
    except OSError as err:  # ENAMETOOLONG: a name above the file system's 255 bytes (pasted text)
        raise UserError(
            f"{what}_source {source[:48]!r}... ({len(source)} characters) is no path this machine can "
            f"open ({err.strerror}; a name between slashes has at most 255 bytes): check the value, "
            f"or use {forms}"
        ) from None
    if _HUB_ID.match(source) or (what == "model" and HUB_GGUF.match(source)):
        return Source("hub", source)
    if (hub := re.match(r"([A-Za-z0-9][\w.-]*/[\w.-]+)\s*([:@\[].*)", source)) and not hub[1].endswith("."):
        # datasets' `load_dataset(id, config, split="train[:10%]")` and pip's `@rev`: not this grammar
        fix = (
            f"give the revision as {what}_revision"
            if hub[2].startswith("@")
            else "a config or split cannot be chosen: the default config's train split is trained on, and the first "
            "of its eval/validation/valid/test splits evaluates (another config or split: download its files, "
            f"`hf download --repo-type {what} {hub[1]} --local-dir DIR`, and pass the file or folder as a path)"
            if what == "dataset"
            else "a model source is the repository id alone"
        )
        raise UserError(f"{what}_source {source!r}: a Hub {what} is its id alone ({hub[1]}); {fix}")
    raise UserError(f"unknown {what} source {source!r}: use {forms}")


def dataset_parts(source: Any) -> list[str]:
    """The sources a dataset_source names: a mix's parts, or the value itself; [] for a mix that does not parse
    (parse says why), so that checks of each part's kind (a path, an s3:// object) see the parts."""
    if not isinstance(source, str) or not source.strip().startswith("["):
        return [source] if isinstance(source, str) else []
    try:
        return [name for name, _ in mix_parts(source.strip())]
    except UserError:
        return []


def looks_local(source: str) -> bool:
    """A path on this machine (as `parse` reads it), whether or not it exists."""
    source = (source or "").strip()
    if source.startswith(("s3://", "builtin:")):
        return False
    if source.startswith("file://"):
        return True
    try:
        return (
            source.startswith(("/", "./", "../", "~"))
            or source.endswith(LOCAL_SUFFIXES)
            or Path(source).exists()
            or (is_gguf(source) and not HUB_GGUF.match(source))
        )
    except OSError:  # a name too long to be a path: parse says so
        return False
