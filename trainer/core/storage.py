"""Object storage (MinIO / any S3) through the `minio` client.

Layout in the bucket:
  models/sha256-<tree>/...     content-addressed trees (base models, adapters, merged models)
  datasets/sha256-<tree>/...   content-addressed datasets (train.jsonl, eval.jsonl)
  runs/<run id>/...            per-run files (training results, history)
  base_scores/sha256-<key>.json the base model's evaluation, keyed by what decides it (trainer.evaluate.kept_base)

A tree's `_manifest.json` lists every file with its sha256 and is written last: a
prefix without it is an interrupted upload and is never read. The tree hash covers
paths and file hashes only, so the same content always lands at the same prefix,
re-delivering uploads nothing, and local download caches never go stale.

Hashing, uploads and downloads of trees larger than trainer.core.progress.QUIET_BELOW_BYTES
show a byte progress bar (rate, ETA) on stderr.
"""

from __future__ import annotations

import concurrent.futures
import errno
import hashlib
import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from trainer.core import settings
from trainer.core.errors import Unavailable, UserError
from trainer.core.progress import TransferProgress

MANIFEST = "_manifest.json"
FIRST_CONTACT_S = 10.0  # seconds the endpoint has to answer its first request (transfers get 300 s a read)
_CHUNK = 8 << 20


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def tree_manifest(local_dir: str | Path) -> dict[str, Any]:
    """Files (relative path, sha256, size) under `local_dir` and the tree hash over them."""
    root = Path(local_dir)
    paths = [p for p in sorted(root.rglob("*")) if p.is_file() and p.name != MANIFEST]
    files: list[dict[str, Any]] = []
    with TransferProgress(sum(p.stat().st_size for p in paths), f"hash {len(paths)} files") as progress:
        for p in paths:
            files.append({"path": p.relative_to(root).as_posix(), "sha256": sha256_file(p), "bytes": p.stat().st_size})
            progress.update(files[-1]["bytes"])
    tree = hashlib.sha256("".join(f"{f['path']}\0{f['sha256']}\n" for f in files).encode()).hexdigest()
    return {"format": 1, "tree_sha256": tree, "total_bytes": sum(f["bytes"] for f in files), "files": files}


def _short(name: str) -> str:
    """A prefix for a progress line: long hashes cut to 12 characters."""
    return "/".join(part[:19] + "…" if part.startswith("sha256-") else part for part in name.split("/"))


def split_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/key` -> (bucket, key)."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise UserError(f"not an s3:// URI: {uri!r}")
    return parsed.netloc, parsed.path.lstrip("/")


@dataclass
class Store:
    """A bucket on an S3 endpoint. Credentials come from the environment, never from arguments
    that could end up in pipeline parameters or logs."""

    endpoint: str
    bucket: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    @classmethod
    def from_env(cls) -> "Store":
        missing = [k for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not os.environ.get(k)]
        if missing:
            raise UserError(
                f"S3 credentials missing: set {' and '.join(missing)} (on a cluster they come from the "
                f"Secret {settings.get('S3_SECRET_NAME')!r}; locally run_local sets them)"
            )
        return cls(
            endpoint=settings.get("S3_ENDPOINT"),
            bucket=settings.get("S3_BUCKET"),
            access_key=os.environ["AWS_ACCESS_KEY_ID"],
            secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
            region=settings.get("S3_REGION"),
        )

    def __post_init__(self) -> None:
        import minio
        import urllib3
        from minio.helpers import check_bucket_name

        try:
            check_bucket_name(self.bucket, strict=True)
        except ValueError:
            raise UserError(
                f"invalid bucket name {self.bucket!r}: S3_BUCKET must be 3-63 characters of "
                "lowercase letters, digits, '-' and '.'"
            ) from None
        if masked := settings.url_credentials(self.endpoint):  # minio would send them as a host name
            raise UserError(
                f"S3_ENDPOINT {masked!r} carries a user name or password in the URL, which would show in "
                "messages and logs: set it to the endpoint alone, and the keys in AWS_ACCESS_KEY_ID and "
                f"AWS_SECRET_ACCESS_KEY (on a cluster the Secret {settings.get('S3_SECRET_NAME')!r})"
            )
        if problem := settings.url_problem(self.endpoint, need_scheme=False, path=False):
            raise UserError(
                f"S3_ENDPOINT {self.endpoint!r} is not an S3 endpoint ({problem}): set it to "
                "http(s)://HOST:PORT of the S3/MinIO (the bucket is S3_BUCKET), e.g. http://127.0.0.1:9000"
            )
        url = urlparse(self.endpoint if "://" in self.endpoint else f"http://{self.endpoint}")

        def client(timeout: urllib3.Timeout, retries: urllib3.Retry) -> minio.Minio:
            http = urllib3.PoolManager(timeout=timeout, maxsize=16, retries=retries)
            return minio.Minio(
                url.netloc,
                access_key=self.access_key,
                secret_key=self.secret_key,
                secure=url.scheme == "https",
                region=self.region,
                http_client=http,
            )

        # Transfers: bounded retries with backoff for flaky networks, a long read for large objects
        # on a busy server; a dead endpoint fails in ~10 s.
        self.client = client(
            urllib3.Timeout(connect=5, read=300),
            urllib3.Retry(total=3, backoff_factor=0.5, status_forcelist=[500, 502, 503, 504]),
        )
        # The first contact (ensure_bucket) is a few bytes: an endpoint that accepts connections and
        # never answers (a wrong port, a hung proxy) fails in FIRST_CONTACT_S, not 300 s x 4 tries.
        self._first_contact = client(
            urllib3.Timeout(connect=min(5.0, FIRST_CONTACT_S), read=FIRST_CONTACT_S),
            urllib3.Retry(total=2, read=0, backoff_factor=0.5, status_forcelist=[500, 502, 503, 504]),
        )

    def __repr__(self) -> str:  # keep keys out of logs and tracebacks
        return f"Store(endpoint={self.endpoint!r}, bucket={self.bucket!r})"

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _call(self, what: str, fn, *args, **kwargs):
        """Run a client call, turning connection and auth failures into one clear UserError."""
        from minio.error import InvalidResponseError, S3Error
        from urllib3.exceptions import HTTPError, ReadTimeoutError

        try:
            return fn(*args, **kwargs)
        except S3Error as err:
            if err.code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied"):
                raise UserError(
                    f"S3 refused {what} at {self.endpoint} ({err.code}): check AWS_ACCESS_KEY_ID / "
                    f"AWS_SECRET_ACCESS_KEY (Secret {settings.get('S3_SECRET_NAME')!r})"
                ) from None
            raise
        except InvalidResponseError as err:  # a web server, a console or a proxy's page: not S3's XML
            status = str(err).split("Response code: ", 1)[-1].split(",", 1)[0]
            raise UserError(
                f"{self.endpoint} answered the {what} with something that is not S3 (HTTP {status}, not "
                "S3's XML): check S3_ENDPOINT / --s3-endpoint points at the S3 API (MinIO's is port 9000, "
                "not its web console)"
            ) from None
        except HTTPError as err:
            if ReadTimeoutError in (type(err), type(getattr(err, "reason", None))):
                first = getattr(fn, "__self__", None) is self._first_contact
                raise Unavailable(
                    f"S3 endpoint {self.endpoint} accepted the connection but did not answer the {what} "
                    f"within {FIRST_CONTACT_S if first else 300:g} s: check S3_ENDPOINT / --s3-endpoint "
                    "is the S3 API (MinIO's is port 9000) and that the server is not hung"
                ) from None
            raise Unavailable(
                f"S3 endpoint {self.endpoint} unreachable during {what} after retries "
                f"({type(err).__name__}): check S3_ENDPOINT and that MinIO is running"
            ) from None

    def ensure_bucket(self) -> None:
        """The bucket, created when missing: the first request to the endpoint, under FIRST_CONTACT_S."""
        if not self._call("bucket check", self._first_contact.bucket_exists, self.bucket):
            self._call("bucket creation", self.client.make_bucket, self.bucket)

    def exists(self, key: str) -> bool:
        from minio.error import S3Error

        try:
            self._call("stat", self.client.stat_object, self.bucket, key)
            return True
        except S3Error as err:
            if err.code in ("NoSuchKey", "NoSuchObject", "NoSuchBucket"):
                return False
            raise

    def put_json(self, key: str, obj: Any) -> str:
        data = json.dumps(obj, indent=1).encode()
        self._call(
            "upload",
            self.client.put_object,
            self.bucket,
            key,
            io.BytesIO(data),
            len(data),
            content_type="application/json",
        )
        return self.uri(key)

    def get_file(self, key: str, dest: str | Path) -> Path:
        """One object into a local file: a user's own upload, which has no manifest to verify."""
        self._call("download", self.client.fget_object, self.bucket, key, str(dest))
        return Path(dest)

    def get_bytes(self, key: str, length: int = 0) -> bytes:
        """An object's bytes; with `length`, at most its first `length` bytes."""
        resp = self._call(
            "download", self.client.get_object, self.bucket, key, **({"length": length} if length else {})
        )
        try:
            return resp.read()
        finally:
            resp.close()
            resp.release_conn()

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))

    def put_tree(self, local_dir: str | Path, kind: str, workers: int = 8) -> tuple[str, dict[str, Any]]:
        """Upload `local_dir` to `<kind>/sha256-<tree>/`; returns (uri, manifest).

        Idempotent: when the prefix already holds a complete manifest nothing is sent.
        """
        manifest = tree_manifest(local_dir)
        prefix = f"{kind}/sha256-{manifest['tree_sha256']}"
        self.ensure_bucket()
        if self.exists(f"{prefix}/{MANIFEST}"):
            return self.uri(prefix), {**manifest, "uploaded_bytes": 0}
        return self.put_dir(local_dir, prefix, workers, manifest)

    def put_dir(
        self, local_dir: str | Path, prefix: str, workers: int = 8, manifest: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Upload `local_dir` under `prefix` (run-scoped, e.g. a checkpoint); returns (uri, manifest).

        Files go up in parallel (each multipart on its own), the manifest last: until it
        exists the prefix is an incomplete upload that readers ignore.
        """
        manifest = manifest or tree_manifest(local_dir)
        self.ensure_bucket()
        with (
            concurrent.futures.ThreadPoolExecutor(workers) as pool,
            TransferProgress(manifest["total_bytes"], f"upload {_short(prefix)}") as progress,
        ):
            futures = [
                pool.submit(
                    self._call,
                    "upload",
                    self.client.fput_object,
                    self.bucket,
                    f"{prefix}/{f['path']}",
                    str(Path(local_dir) / f["path"]),
                    part_size=64 << 20,
                    progress=progress,
                )
                for f in manifest["files"]
            ]
            for fut in concurrent.futures.as_completed(futures):
                fut.result()
        self.put_json(f"{prefix}/{MANIFEST}", manifest)
        return self.uri(prefix), {**manifest, "uploaded_bytes": manifest["total_bytes"]}

    def complete_children(self, prefix: str) -> list[str]:
        """Names of the sub-prefixes of `prefix` that hold a manifest (complete trees), sorted."""
        children = self._call(
            "list",
            lambda: [o.object_name for o in self.client.list_objects(self.bucket, prefix=prefix.rstrip("/") + "/")],
        )
        names = [c.rstrip("/").rsplit("/", 1)[-1] for c in children if c.endswith("/")]
        return sorted(n for n in names if self.exists(f"{prefix.rstrip('/')}/{n}/{MANIFEST}"))

    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under `prefix`, the manifest first so it never looks complete."""
        from minio.deleteobjects import DeleteObject

        prefix = prefix.rstrip("/") + "/"
        self._call("delete", self.client.remove_object, self.bucket, prefix + MANIFEST)
        names = self._call(
            "list",
            lambda: [o.object_name for o in self.client.list_objects(self.bucket, prefix=prefix, recursive=True)],
        )
        errors = list(self.client.remove_objects(self.bucket, [DeleteObject(n) for n in names]))
        if errors:
            raise RuntimeError(f"could not delete {len(errors)} objects under {prefix}: {errors[0]}")

    def check_tree(self, uri: str) -> str:
        """The key prefix of a complete delivered tree at `uri`; UserError naming the fix otherwise."""
        bucket, prefix = split_uri(uri)
        if bucket != self.bucket:
            raise UserError(f"{uri} is not in bucket {self.bucket!r} (set S3_BUCKET)")
        if not self.exists(f"{prefix}/{MANIFEST}"):
            raise UserError(f"{uri} is incomplete or missing (no {MANIFEST}); deliver it again")
        return prefix

    def get_tree(self, uri: str, local_dir: str | Path | None = None, workers: int = 8) -> Path:
        """Download a complete tree, verifying every file's sha256.

        Without `local_dir` the tree goes to the local cache (FINETUNE_CACHE_DIR), keyed by
        its tree hash, and a cached copy is reused. Files land in a temporary directory that
        is renamed into place only when all are verified: no half-written cache entries.
        """
        prefix = self.check_tree(uri)
        manifest = self.get_json(f"{prefix}/{MANIFEST}")
        target = Path(local_dir) if local_dir else Path(settings.get("FINETUNE_CACHE_DIR")) / manifest["tree_sha256"]
        if (target / MANIFEST).exists() and (not local_dir or _tree_sha(target) == manifest["tree_sha256"]):
            return target  # a cache entry is named by its hash; an explicit folder must hold this very tree
        target.parent.mkdir(parents=True, exist_ok=True)
        space_problem(target.parent, manifest["total_bytes"], uri)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".partial-"))

        try:

            def fetch(f: dict[str, Any]) -> None:
                dest = tmp / f["path"]
                self._call(
                    "download",
                    self.client.fget_object,
                    self.bucket,
                    f"{prefix}/{f['path']}",
                    str(dest),
                    progress=progress,
                )
                if sha256_file(dest) != f["sha256"]:
                    raise UserError(f"checksum mismatch for {uri}/{f['path']}: the stored object is corrupt")

            with (
                concurrent.futures.ThreadPoolExecutor(workers) as pool,
                TransferProgress(manifest["total_bytes"], f"download {_short(prefix)}") as progress,
            ):
                list(pool.map(fetch, manifest["files"]))
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
            old = None
            if local_dir and target.exists():
                # An explicit folder holding another tree (e.g. the previous run's model): moved
                # aside, not deleted first, so that the folder holds the old tree or the new one
                # (between two renames, nothing), never half of either.
                old = Path(tempfile.mkdtemp(dir=target.parent, prefix=".replaced-"))
                os.replace(target, old / "tree")
            try:
                os.replace(tmp, target)
            except OSError:
                # Another process (e.g. a second rank) filled the same cache entry first;
                # its content is identical by construction.
                if not (target / MANIFEST).exists():
                    raise
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
            raise UserError(
                f"no space left in {target.parent} while downloading {uri} "
                f"({manifest['total_bytes'] / 1e6:.1f} MB): free space there or choose another "
                "folder; nothing was left half-written"
            ) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return target


def space_problem(folder: Path, size: int, what: str) -> None:
    """Refuse before writing `size` bytes into `folder` when the disk has less free (a margin kept)."""
    free = shutil.disk_usage(folder).free
    if free < size + (16 << 20):  # the filesystem's own bookkeeping, a log line or two
        raise UserError(
            f"not enough space in {folder} for {what}: it needs {size / 1e6:.1f} MB, "
            f"{free / 1e6:.1f} MB are free; free space there or choose another folder"
        )


def _tree_sha(local_dir: Path) -> str | None:
    """The tree hash a downloaded folder's manifest records (None when unreadable)."""
    try:
        return json.loads((local_dir / MANIFEST).read_text()).get("tree_sha256")
    except (OSError, ValueError, AttributeError):
        return None
