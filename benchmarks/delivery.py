"""python -m benchmarks.delivery [--size-mb 1024] [--runs 3]

Delivery throughput: putting a ~1 GB model directory (4 safetensors-sized shards of random,
incompressible bytes + small JSON files) into the bucket with `Store.put_tree` (sha256 of
every file, then parallel multipart uploads, manifest last) vs a plain local copy of the
same directory (shutil.copytree), interleaved, medians and their ratio.

The S3 server is moto on loopback in a separate process (the local stand-in for MinIO),
so the server competes with the uploader for this machine's cores, as a MinIO pod on the
same node would.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import median


def make_model_dir(root: Path, size_mb: int, shards: int = 4) -> int:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "llama"}')
    (root / "tokenizer.json").write_text("{}" * 1000)
    chunk = os.urandom(1 << 20)
    for i in range(shards):
        with open(root / f"model-{i:05d}-of-{shards:05d}.safetensors", "wb") as f:
            for k in range(size_mb // shards):
                f.write(chunk[k % 7 :] + chunk[: k % 7])  # distinct 1 MiB blocks, incompressible
    return sum(p.stat().st_size for p in root.iterdir())


def start_s3() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "import logging, time; from moto.server import ThreadedMotoServer; "
        "logging.getLogger('werkzeug').setLevel(logging.WARNING); "
        f"s = ThreadedMotoServer(ip_address='127.0.0.1', port={port}, verbose=False); s.start(); "
        "print('ready', flush=True); time.sleep(3600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc, f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[2])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8, help="parallel file uploads")
    args = parser.parse_args()

    server, endpoint = start_s3()
    os.environ.update(
        S3_ENDPOINT=endpoint, S3_BUCKET="bench", AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="x" * 16
    )
    from trainer.evaluate.report import table
    from trainer.core.storage import Store

    store = Store.from_env()
    copy_s, upload_s = [], []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "model"
            total = make_model_dir(src, args.size_mb)
            for i in range(args.runs):
                dst = Path(tmp) / f"copy-{i}"
                t = time.perf_counter()
                shutil.copytree(src, dst)
                copy_s.append(time.perf_counter() - t)
                shutil.rmtree(dst)
                t = time.perf_counter()
                uri, meta = store.put_tree(src, "models", workers=args.workers)
                upload_s.append(time.perf_counter() - t)
                assert meta["uploaded_bytes"] == total
                store.delete_prefix(uri.split("/", 3)[3])  # so the next run uploads again
                print(
                    f"run {i + 1}: copy {total / 2**20 / copy_s[-1]:.0f} MB/s, "
                    f"upload {total / 2**20 / upload_s[-1]:.0f} MB/s",
                    flush=True,
                )
    finally:
        server.kill()
    mb = total / 2**20
    c, u = median(copy_s), median(upload_s)
    print(f"\n{mb:.0f} MB model directory, {args.runs} interleaved runs, medians")
    print(
        table(
            [
                ("local copy (shutil.copytree)", f"{c:.2f}", f"{mb / c:.0f}", "1.00"),
                (
                    f"put_tree to S3 (sha256 + {args.workers} parallel multipart)",
                    f"{u:.2f}",
                    f"{mb / u:.0f}",
                    f"{c / u:.2f}",
                ),
            ],
            ("", "seconds", "MB/s", "ratio"),
        )
    )


if __name__ == "__main__":
    main()
