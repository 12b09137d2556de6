"""s3:// values against the run's bucket at validate (trainer.validate.objects): refused in seconds with exit 2,
not by the step that reads them after the model's conversion and upload, with exit 1."""

import subprocess
import sys

import pytest

from trainer.core.storage import MANIFEST
from trainer.validate.objects import object_problems


def test_values_in_another_bucket_or_naming_nothing_are_named_and_found_ones_pass(store):
    store.ensure_bucket()
    store.put_json(f"models/sha256-abc/{MANIFEST}", {"files": []})
    store.put_json("uploads/chats.jsonl", {})
    store.put_json("templates/mine.jinja", {})
    b = store.bucket
    found = {
        "model_source": f"s3://{b}/models/sha256-abc/",
        "dataset_source": f"s3://{b}/uploads/chats.jsonl",
        "chat_template": f" s3://{b}/templates/mine.jinja",
        "bfcl_source": "",
        "seed": 3,
    }
    assert object_problems(found, store) == []
    problems = object_problems(
        {
            "model_source": f"s3://{b}/models/sha256-nothere",
            "dataset_source": "s3://other-bucket/uploads/chats.jsonl",
            "chat_template": f"s3://{b}/models/sha256-abc",  # a tree is no template
            "bfcl_source": f"s3://{b}/uploads/bfcl.whl",
        },
        store,
    )
    assert problems == [
        f"model_source s3://{b}/models/sha256-nothere: no such object in bucket {b!r} (it should be a .gguf upload "
        f"or a delivered model tree); check the key (mc ls {b}/models), or upload it",
        f"dataset_source s3://other-bucket/uploads/chats.jsonl is in bucket 'other-bucket', but this run reads and "
        f"writes bucket {b!r} (S3_BUCKET): copy it there (mc cp), or set S3_BUCKET to 'other-bucket' for the whole run",
        f"chat_template s3://{b}/models/sha256-abc: no such object in bucket {b!r} (it should be a .jinja template); "
        f"check the key (mc ls {b}/models), or upload it",
        f"bfcl_source s3://{b}/uploads/bfcl.whl: no such object in bucket {b!r} (it should be BFCL's wheel or data "
        f"upload); check the key (mc ls {b}/uploads), or upload it",
    ]


def test_the_validate_step_refuses_a_missing_template_with_exit_2_before_anything_is_delivered(store):
    """The finetune step refused it after the model's delivery (a GGUF's conversion and upload: ~170 s)."""
    store.ensure_bucket()
    code = (
        "from components.validate_params import validate_params; "
        f"validate_params.python_func(chat_template='s3://{store.bucket}/templates/gone.jinja')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    assert f"chat_template s3://{store.bucket}/templates/gone.jinja: no such object" in out.stderr
    assert "Traceback" not in out.stderr


def test_an_unreachable_bucket_is_one_problem(store, monkeypatch):
    from trainer.core.errors import UserError

    def refuse(key):
        raise UserError("S3 endpoint http://x unreachable")

    monkeypatch.setattr(store, "exists", refuse)
    b = store.bucket
    assert object_problems({"model_source": f"s3://{b}/m", "dataset_source": f"s3://{b}/d"}, store) == [
        "S3 endpoint http://x unreachable"
    ]


def test_irrelevance_share_beside_a_delivered_dataset_tree_is_refused_at_validate(store):
    """README promises exit 2 before any work: validate said OK, and deliver-dataset refused it while deliver-model
    ran. Now validate refuses it with deliver-dataset's own message; an upload or a share of 0 passes."""
    from trainer.store import delivery
    from trainer.core.errors import UserError

    store.ensure_bucket()
    b = store.bucket
    store.put_json(f"datasets/sha256-abc/{MANIFEST}", {"files": [{"path": "train.jsonl"}, {"path": "eval.jsonl"}]})
    store.put_json("uploads/chats.jsonl", {})
    tree = f"s3://{b}/datasets/sha256-abc"
    [problem] = object_problems({"dataset_source": tree + "/", "irrelevance_share": 0.1}, store)
    with pytest.raises(UserError) as deliver:
        delivery.deliver_dataset(tree, "", store, irrelevance_share=0.1)
    assert problem == str(deliver.value)
    assert problem.startswith(f"irrelevance_share=0.1, but dataset_source {tree} is a delivered tree")
    assert "set irrelevance_share=0" in problem
    assert object_problems({"dataset_source": tree, "irrelevance_share": 0.0}, store) == []
    assert object_problems({"dataset_source": f"s3://{b}/uploads/chats.jsonl", "irrelevance_share": 0.1}, store) == []
