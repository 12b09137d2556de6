"""Shared setup for benchmarks: a throwaway S3 server on loopback and the built-ins in it."""

from __future__ import annotations

import logging
import os
import secrets
import statistics


def local_s3(bucket: str = "bench"):
    """Start moto on loopback and point this process's S3 settings at it; returns the server."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        S3_ENDPOINT=f"http://{host}:{port}",
        S3_BUCKET=bucket,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY=secrets.token_hex(8),
    )
    return server


def median(values: list[float]) -> float:
    return statistics.median(values)
