"""The parity check on delivered inputs: a model tree and a dataset in the bucket, read only as far
as the check needs (the tokenizer files and the first rows), and a passed pair recorded there."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path


from trainer.core import settings
from trainer.chat import templates
from trainer.core.errors import collect
from trainer.parity.check import CHECK_ROWS
from trainer.parity.preflight import template_problems
from trainer.core.storage import MANIFEST, split_uri


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "generation_config.json",
    "config.json",
)
_HEAD_BYTES = 64 << 20  # enough for CHECK_ROWS rows of any sane chat data


def delivered_problems(store, model_uri: str, dataset_uri: str) -> list[str]:
    """The parity check on a delivered model tree and dataset (the finetune step, before a job
    starts, for every dataset kind): only the tokenizer files and the first rows are read."""
    from transformers import AutoTokenizer  # here: importing trainer.parity (validate, the CLIs) stays light

    _, model_prefix = split_uri(model_uri)
    _, data_prefix = split_uri(dataset_uri)
    manifest = store.get_json(f"{model_prefix}/{MANIFEST}")
    present = {f["path"] for f in manifest["files"]}
    # a tree already in this machine's cache (get_tree's, named by its hash) is read there, not fetched again
    cached = Path(settings.get("FINETUNE_CACHE_DIR")) / str(manifest.get("tree_sha256"))
    with tempfile.TemporaryDirectory() as tmp:
        for name in TOKENIZER_FILES:
            if name in present:
                Path(tmp, name).write_bytes(
                    (cached / name).read_bytes()
                    if (cached / MANIFEST).is_file()
                    else store.get_bytes(f"{model_prefix}/{name}")
                )
        tokenizer = AutoTokenizer.from_pretrained(tmp, local_files_only=True)
        eos = templates.generation_stop_ids(tmp)
    rows = []
    for split in ("train", "eval"):
        head = store.get_bytes(f"{data_prefix}/{split}.jsonl", length=_HEAD_BYTES).decode("utf-8", errors="replace")
        lines = head.splitlines()
        if len(head.encode()) >= _HEAD_BYTES:
            lines = lines[:-1]  # the last line may be cut
        rows += [json.loads(line) for line in lines[:CHECK_ROWS] if line.strip()]
    return template_problems(rows, tokenizer, "the delivered dataset with the delivered model", eos)


CHECKED = "template-check.json"  # under a run's output prefix: the pair of inputs the check passed
# Content-addressed inputs (deliver's sha256-<tree hash> URIs) passed once pass for every run: recorded here in the
# bucket, by version of the check (a check that asks more checks every pair again).
CHECKS, CHECK_VERSION = "template-checks", 1
_ADDRESSED = re.compile(r"s3://[^/]+/(?:.+/)?sha256-([0-9a-f]{64})/?")


def record_key(model_uri: str, dataset_uri: str, output_prefix: str) -> str:
    """Where a passed check of this pair is recorded: by the two trees' hashes, else under the run's prefix."""
    model, data = _ADDRESSED.fullmatch(model_uri), _ADDRESSED.fullmatch(dataset_uri)
    if model and data:
        return f"{CHECKS}/v{CHECK_VERSION}/{model[1]}-{data[1]}.json"
    return f"{output_prefix}/{CHECKED}"


def check_delivered(store, model_uri: str, dataset_uri: str, output_prefix: str) -> None:
    """`delivered_problems` for a training run, raised as one UserError before anything trains. A passed pair is
    recorded (`record_key`), so the job's own `trainer train` processes, which check too for those who run them
    without the pipeline, and later runs of the same inputs do not check the same trees again (each rank would
    import vLLM's parsers: ~3 CPU-s)."""
    for uri in (dataset_uri, model_uri):  # as training reads them: a missing one is named, not a traceback
        store.check_tree(uri)
    record = record_key(model_uri, dataset_uri, output_prefix)
    pair = {"model_uri": model_uri, "dataset_uri": dataset_uri}
    if store.exists(record) and store.get_json(record) == pair:
        return
    collect(delivered_problems(store, model_uri, dataset_uri), what="the chat template does not fit the data")
    store.put_json(record, pair)
