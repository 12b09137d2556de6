"""Where models and datasets come from: the source grammar (delivery is trainer.delivery).

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
                                                    into a model directory (trainer.gguf)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from trainer.errors import UserError


BUILTIN_MODELS = ("tiny-llama",)

BUILTIN_DATASETS = ("function-calling", "function-calling-bfcl")  # trainer.builtin_data.DATASETS

LOCAL_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet", ".gz")  # a name ending so is a file, never a Hub id

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

GGUF_SUFFIX = ".gguf"

# A file in a Hub model repo: org/name/file.gguf (or org/name/folder/file.gguf). A shorter name ending
# .gguf (m.gguf, dir/m.gguf) is a local path.
_HUB_GGUF = re.compile(r"^([A-Za-z0-9][\w.-]*/[\w.-]+)/((?:[\w.-]+/)*[\w.-]+\.gguf)$", re.IGNORECASE)


@dataclass(frozen=True)
class Source:
    kind: str  # "builtin" | "local" | "hub" | "s3"
    ref: str  # builtin name, local path, hub repo id (or repo id/file.gguf), or s3:// URI


def is_gguf(ref: str) -> bool:
    """A model source that names a GGUF file (local, in a Hub repo, or uploaded to the bucket)."""
    return ref.lower().endswith(GGUF_SUFFIX)


def parse(source: str, what: str) -> Source:
    """Classify a source string, or raise one UserError that shows the accepted forms.

    `what` is "model" or "dataset". Local paths must exist: a missing file fails here,
    before any download or training starts.
    """
    builtins = BUILTIN_MODELS if what == "model" else BUILTIN_DATASETS
    forms = (f"builtin:{'|'.join(builtins)}, a local path (/abs, ./rel or file:///abs), "
             "a Hugging Face Hub id like org/name, or an s3:// URI printed by deliver")
    if what == "model":
        forms += " (or a .gguf file: a path, an s3:// object or org/name/file.gguf on the Hub)"
    source = (source or "").strip()
    if not source:
        raise UserError(f"{what}_source is empty: give {forms}")
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
    if source.startswith("file://localhost/"):  # RFC 8089: the host 'localhost' is this machine
        source = "file://" + source[len("file://localhost"):]
    if source.startswith("file://") and not source.startswith("file:///"):  # file://a/b names the host 'a'
        raise UserError(f"{what}_source {source}: a file:// URL names a file on this machine with an absolute "
                        f"path (file:///abs/path, or file://localhost/abs/path), not on host "
                        f"{source[len('file://'):].split('/')[0]!r}; for a path relative to this folder write "
                        f"./{source[len('file://'):]}")
    try:
        if looks_local(source) or (source and Path(source).exists()):
            # a URL's path is percent-encoded (%20 a space); a plain path is taken as it is
            source = unquote(source.removeprefix("file://")) if source.startswith("file://") else source
            path = Path(source).expanduser()
            if not path.exists():
                raise UserError(f"{what} path not found: {path}. Check the path, or use {forms}")
            return Source("local", str(path.resolve()))
    except OSError as err:  # ENAMETOOLONG: a name above the file system's 255 bytes (pasted text)
        raise UserError(f"{what}_source {source[:48]!r}... ({len(source)} characters) is no path this machine can "
                        f"open ({err.strerror}; a name between slashes has at most 255 bytes): check the value, "
                        f"or use {forms}") from None
    if _HUB_ID.match(source) or (what == "model" and _HUB_GGUF.match(source)):
        return Source("hub", source)
    if (hub := re.match(r"([A-Za-z0-9][\w.-]*/[\w.-]+)\s*([:@\[].*)", source)) and not hub[1].endswith("."):
        # datasets' `load_dataset(id, config, split="train[:10%]")` and pip's `@rev`: not this grammar
        fix = (f"give the revision as {what}_revision" if hub[2].startswith("@") else
               "a config or split cannot be chosen: the default config's train split is trained on, and the first "
               "of its eval/validation/valid/test splits evaluates (another config or split: download its files, "
               f"`hf download --repo-type {what} {hub[1]} --local-dir DIR`, and pass the file or folder as a path)"
               if what == "dataset" else "a model source is the repository id alone")
        raise UserError(f"{what}_source {source!r}: a Hub {what} is its id alone ({hub[1]}); {fix}")
    raise UserError(f"unknown {what} source {source!r}: use {forms}")


def looks_local(source: str) -> bool:
    """A path on this machine (as `parse` reads it), whether or not it exists."""
    source = (source or "").strip()
    if source.startswith(("s3://", "builtin:")):
        return False
    if source.startswith("file://"):
        return True
    try:
        return (source.startswith(("/", "./", "../", "~")) or source.endswith(LOCAL_SUFFIXES) or Path(source).exists()
                or (is_gguf(source) and not _HUB_GGUF.match(source)))
    except OSError:  # a name too long to be a path: parse says so
        return False
