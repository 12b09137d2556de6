"""The s3:// values of a run against the run's bucket, before anything is delivered: one in another bucket (the
components read and write one bucket, S3_BUCKET) or naming no object there (one HEAD each). Known from the values
and the bucket, these were refused only by the step that reads them, after the steps before it (a model's
conversion and upload: minutes), and with exit 1. Asked where the bucket answers: the validate-params step, and
run_local with --s3-endpoint; not by submit, whose machine may not reach the cluster's MinIO."""

from __future__ import annotations

from typing import Any

from trainer.config import sources
from trainer.store.delivery import delivered_share_problem
from trainer.core.errors import UserError
from trainer.core.storage import MANIFEST, Store, split_uri

# parameter -> what an s3:// value of it names: an uploaded object, a delivered tree (its manifest), or either
_S3_VALUES = {
    "model_source": "a .gguf upload or a delivered model tree",
    "dataset_source": "a dataset file upload or a delivered dataset tree",
    "chat_template": "a .jinja template",
    "bfcl_source": "BFCL's wheel or data upload",
}


def object_problems(params: dict[str, Any], store: Store | None = None) -> list[str]:
    """One line per s3:// value in another bucket than the run's (`store`, else the environment's: asked only when
    there is an s3:// value) or naming nothing there; [] when all are found."""
    values = [
        (name, value.strip().rstrip("/"))
        for name in _S3_VALUES
        for value in (sources.dataset_parts(params.get(name)) if name == "dataset_source" else [params.get(name)])
        if isinstance(value, str) and value.strip().startswith("s3://")
    ]  # a mix's parts one by one
    if not values:
        return []
    try:
        store = store or Store.from_env()
    except UserError as err:  # no keys or endpoint here: what every step after would say
        return [str(err)]
    problems = []
    for name, value in values:
        names = _S3_VALUES[name]
        try:
            bucket, key = split_uri(value)
        except UserError:
            continue  # malformed: the value checks say so
        if bucket != store.bucket:
            problems.append(
                f"{name} {value} is in bucket {bucket!r}, but this run reads and writes bucket "
                f"{store.bucket!r} (S3_BUCKET): copy it there (mc cp), or set S3_BUCKET to {bucket!r} "
                "for the whole run"
            )
            continue
        try:
            upload = store.exists(key)
            tree = not upload and name != "chat_template" and store.exists(f"{key}/{MANIFEST}")
        except UserError as err:  # the endpoint does not answer, or the keys are refused: said once
            return problems + [str(err)]
        found = upload or tree
        if (
            tree
            and name == "dataset_source"
            and value == (params.get(name) or "").strip().rstrip("/")
            and isinstance(share := params.get("irrelevance_share"), (int, float))
            and (problem := delivered_share_problem(value, share, _number(params.get("name_masking"))))
        ):
            problems.append(problem)  # a delivered tree alone (not a mix's part): what deliver-dataset would refuse
        if not found:
            problems.append(
                f"{name} {value}: no such object in bucket {bucket!r} (it should be {names}); check the "
                f"key (mc ls {bucket}/{key.rsplit('/', 1)[0] if '/' in key else ''}), or upload it"
            )
    return problems


def _number(value: object) -> float:
    """A share as given, or 0 where it is not a number (its own check names that)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
