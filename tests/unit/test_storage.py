"""Content-addressed trees in S3 through the real minio client, against moto on loopback."""

import json
import os

import pytest

from trainer.core.errors import UserError
from trainer.core.storage import MANIFEST, Store, tree_manifest


def make_tree(root, files):
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)
    return root


def test_roundtrip_is_content_addressed_and_idempotent(store, tmp_path):
    src = make_tree(tmp_path / "a", {"config.json": b"{}", "sub/w.bin": os.urandom(3 << 20)})
    uri, first = store.put_tree(src, "models")
    assert uri.endswith(f"models/sha256-{first['tree_sha256']}") and first["uploaded_bytes"] == (3 << 20) + 2
    again_uri, again = store.put_tree(
        make_tree(tmp_path / "b", {"config.json": b"{}", "sub/w.bin": (src / "sub/w.bin").read_bytes()}), "models"
    )
    assert again_uri == uri and again["uploaded_bytes"] == 0  # same content: nothing sent
    out = store.get_tree(uri, tmp_path / "out")
    assert (out / "sub/w.bin").read_bytes() == (src / "sub/w.bin").read_bytes()
    assert json.loads((out / MANIFEST).read_text())["tree_sha256"] == first["tree_sha256"]


def test_different_content_gets_a_different_prefix(store, tmp_path):
    a, _ = store.put_tree(make_tree(tmp_path / "a", {"x": b"1"}), "models")
    b, _ = store.put_tree(make_tree(tmp_path / "b", {"x": b"2"}), "models")
    renamed, _ = store.put_tree(make_tree(tmp_path / "c", {"y": b"1"}), "models")
    assert len({a, b, renamed}) == 3


def test_prefix_without_manifest_is_never_read(store, tmp_path):
    """An interrupted upload (files but no manifest) must not look complete."""
    import io

    store.ensure_bucket()
    store.client.put_object(store.bucket, "models/sha256-partial/config.json", io.BytesIO(b"{}"), 2)
    with pytest.raises(UserError, match="incomplete or missing"):
        store.get_tree(store.uri("models/sha256-partial"))


def test_corrupt_object_is_detected(store, tmp_path):
    import io

    uri, manifest = store.put_tree(make_tree(tmp_path / "a", {"w.bin": b"good weights"}), "models")
    key = uri.split("/", 3)[3] + "/w.bin"
    store.client.put_object(store.bucket, key, io.BytesIO(b"evil weights"), 12)
    with pytest.raises(UserError, match="checksum mismatch"):
        store.get_tree(uri, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_cache_reuses_a_complete_download(store, tmp_path):
    uri, _ = store.put_tree(make_tree(tmp_path / "a", {"f": b"data"}), "datasets")
    first = store.get_tree(uri)
    assert first == store.get_tree(uri) and (first / MANIFEST).exists()


def test_unreachable_endpoint_is_one_clear_error(s3_env, no_retry_backoff):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = Store(endpoint=f"http://127.0.0.1:{port}", bucket="bucket", access_key="k", secret_key="s")
    with pytest.raises(UserError, match="unreachable"):
        dead.ensure_bucket()


def test_an_endpoint_that_accepts_and_never_answers_fails_at_first_contact(monkeypatch):
    """A wrong port or a hung proxy: the kernel completes the connection, nothing ever answers.
    The bucket check waited 300 s x 4 tries; it gets FIRST_CONTACT_S and names the endpoint."""
    import socket

    from trainer.core import storage

    monkeypatch.setattr(storage, "FIRST_CONTACT_S", 0.2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)  # never accepted: connections complete, requests are never read
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(UserError) as err:
            Store(endpoint=endpoint, bucket="bucket", access_key="k", secret_key="s").ensure_bucket()
    assert str(err.value).startswith(
        f"S3 endpoint {endpoint} accepted the connection but did not answer the bucket "
        "check within 0.2 s: check S3_ENDPOINT"
    )


def test_an_endpoint_that_is_not_s3_is_one_clear_error():
    """A web server (or MinIO's console) where the S3 API belongs: an HTML page, not S3's XML."""
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(
            UserError,
            match=f"{endpoint} answered the bucket creation with something that is not "
            r"S3 \(HTTP 501, not S3's XML\): check S3_ENDPOINT",
        ):
            Store(endpoint=endpoint, bucket="bucket", access_key="k", secret_key="s").ensure_bucket()
    finally:
        server.shutdown()
        server.server_close()


def test_credentials_are_required_and_never_shown(monkeypatch, s3_env):
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(UserError, match="AWS_SECRET_ACCESS_KEY"):
        Store.from_env()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2-secret")
    assert "hunter2" not in repr(Store.from_env())


def test_invalid_bucket_name_is_a_user_error():
    with pytest.raises(UserError, match="S3_BUCKET"):
        Store(endpoint="http://127.0.0.1:1", bucket="My_Bucket", access_key="k", secret_key="s")


def test_manifest_ignores_itself(tmp_path):
    root = make_tree(tmp_path, {"a": b"1", MANIFEST: b"old"})
    assert [f["path"] for f in tree_manifest(root)["files"]] == ["a"]


def test_s3_sources_pass_through_delivered_trees(store, tmp_path):
    from trainer.data import builtin_data
    from trainer import data
    from trainer.store import delivery
    from trainer.config import sources

    d = tmp_path / "ds"
    d.mkdir()
    splits = builtin_data.generate(20, 5)
    data.write_jsonl(splits["train"], d / "train.jsonl")
    data.write_jsonl(splits["eval"], d / "eval.jsonl")
    uri, meta = delivery.deliver_dataset(str(d), "", store)
    again_uri, again = delivery.deliver_dataset(uri, "", store)
    assert again_uri == uri and again["rows"] == {"train": 20, "eval": 5} and again["uploaded_bytes"] == 0
    with pytest.raises(UserError, match="not a complete delivered tree"):
        delivery.deliver_model(store.uri("models/sha256-nothing-here"), "", store)
    with pytest.raises(UserError, match=r"is in bucket 'datasets', but this run uses bucket '.+' \(S3_BUCKET\)"):
        delivery.deliver_model("s3://datasets/foo/train.jsonl", "", store)
    with pytest.raises(UserError, match="malformed model URI"):
        sources.parse("s3://", "model")


@pytest.fixture
def strict_s3(tmp_path):
    """A second S3 server that checks credentials (moto's auth mode), in its own process."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "import time; from moto.server import ThreadedMotoServer; "
        f"s = ThreadedMotoServer(ip_address='127.0.0.1', port={port}, verbose=False); s.start(); "
        "print('ready', flush=True); time.sleep(300)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
    )
    assert proc.stdout.readline().strip() == "ready"
    yield f"http://127.0.0.1:{port}"
    proc.kill()
    proc.wait()


def test_wrong_credentials_are_one_clear_error_and_nothing_is_written(strict_s3, tmp_path, monkeypatch, capsys):
    from kfp.dsl import Model

    from components.deliver_model import deliver_model

    monkeypatch.setenv("S3_ENDPOINT", strict_s3)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    out = Model(name="model", uri=str(tmp_path / "model"), metadata={})
    with pytest.raises(SystemExit) as exit_info:
        deliver_model.python_func(source="builtin:tiny-llama", revision="", model=out)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert "S3 refused" in err and "check AWS_ACCESS_KEY_ID" in err and "wrong-secret" not in err
    assert not (tmp_path / "model").exists() and not out.metadata


def test_an_explicit_folder_gets_this_tree_even_when_it_holds_another(store, tmp_path):
    """A second local run copies its model where the first one's is: the folder must hold the
    second model, whole, and nothing of the first (no stale files, no leftovers beside it)."""
    first, _ = store.put_tree(make_tree(tmp_path / "a", {"w.bin": b"first", "only-first.txt": b"x"}), "models")
    second, manifest = store.put_tree(make_tree(tmp_path / "b", {"w.bin": b"second"}), "models")
    out = tmp_path / "outputs" / "merged-model"
    store.get_tree(first, out)
    assert (out / "w.bin").read_bytes() == b"first"
    assert store.get_tree(second, out) == out
    assert (out / "w.bin").read_bytes() == b"second" and not (out / "only-first.txt").exists()
    assert json.loads((out / MANIFEST).read_text())["tree_sha256"] == manifest["tree_sha256"]
    assert [p.name for p in out.parent.iterdir()] == ["merged-model"]  # no .partial-/.replaced- left
    (out / "w.bin").write_bytes(b"edited")  # the same tree again: reused as it is (like the cache)
    store.get_tree(second, out)
    assert (out / "w.bin").read_bytes() == b"edited"


def test_a_download_that_would_not_fit_is_refused_before_writing(store, tmp_path, monkeypatch):
    import collections
    import errno
    import shutil

    from trainer.core import storage
    from trainer.core.errors import UserError

    src = tmp_path / "src"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"x" * 4096)
    uri, _ = store.put_tree(src, "models")
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10 << 20, 9 << 20, 1 << 20))
    with pytest.raises(UserError, match=r"not enough space in .* it needs 0\.0 MB, 1\.0 MB are free"):
        store.get_tree(uri, tmp_path / "out" / "model")
    assert list((tmp_path / "out").iterdir()) == []  # nothing started
    monkeypatch.undo()

    def full(*_, **__):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(storage, "sha256_file", full)  # the disk fills up during the download
    with pytest.raises(UserError, match="no space left in .* while downloading"):
        store.get_tree(uri, tmp_path / "out" / "model")
    assert list((tmp_path / "out").iterdir()) == []  # no half-written folder
