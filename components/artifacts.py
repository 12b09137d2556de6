"""How a KFP artifact points at its content in the bucket (one convention for all components).

Weights and data live once, content-addressed, in the project bucket; the KFP artifact
file holds a small JSON pointer (`uri` + file manifest) and its metadata holds a summary
that the KFP UI shows. So KFP never copies multi-GB weights into its pipeline root, and
pods that KFP does not launch (PyTorchJob, vLLM) read the same S3 objects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SUMMARY_KEYS = (
    "source",
    "revision",
    "tree_sha256",
    "total_bytes",
    "uploaded_bytes",
    "rows",
    "irrelevance_share",
    "irrelevance_rows",
    "irrelevance_reply",
    "irrelevance_distractors",
    "name_masking",
    "name_masked_rows",
    "mix",
    "method",
    "merge_scale",
    "tensorboard_uri",
)


def write_pointer(artifact, uri: str, meta: dict[str, Any]) -> None:
    """Record `uri` and `meta` on an Output artifact: metadata summary + pointer file."""
    artifact.metadata["uri"] = uri
    artifact.metadata.update({k: meta[k] for k in SUMMARY_KEYS if k in meta})
    if "files" in meta:
        artifact.metadata["n_files"] = len(meta["files"])
    Path(artifact.path).parent.mkdir(parents=True, exist_ok=True)
    Path(artifact.path).write_text(json.dumps({"uri": uri, **meta}, indent=1))


def read_uri(artifact) -> str:
    """The S3 URI an Input artifact points at."""
    uri = artifact.metadata.get("uri")
    if uri:
        return uri
    return json.loads(Path(artifact.path).read_text())["uri"]


def log_metrics(metrics, values: dict[str, float], prefix: str = "") -> None:
    """Log numbers on an Output[Metrics] under stable names (the Compare view lines them up)."""
    for name, value in values.items():
        metrics.log_metric(prefix + name, float(value))
