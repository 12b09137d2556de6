"""Local serving with `transformers serve` and the OpenAI-API smoke test.

Run: python -m trainer serve MODEL_DIR [--port 8000]   (serves until Ctrl-C)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from trainer.errors import UserError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(model_dir: Path, port: int = 0, host: str = "127.0.0.1", detach: bool = False,
          log_path: Path | None = None) -> tuple[subprocess.Popen, str]:
    """Start `transformers serve` on `model_dir`; returns (process, base URL).

    `detach` puts the server in its own session so it outlives the caller (the pipeline's
    deploy step), for users who want to keep talking to the model after the run.
    """
    if "@" in str(model_dir):  # transformers serve reads `@` as a revision separator
        raise UserError(f"model directory {model_dir} contains '@'; move it to a path without one")
    port = port or free_port()
    cli = Path(sys.executable).with_name("transformers")
    cmd = [str(cli) if cli.exists() else "transformers", "serve", str(model_dir), "--host", host,
           "--port", str(port), "--device", "cpu" if not _cuda() else "auto"]
    # /v1/models scans the Hub cache and answers 500 when that directory does not exist
    # (a fresh machine that never downloaded from the Hub), so make sure it exists.
    from huggingface_hub import constants

    Path(constants.HF_HUB_CACHE).mkdir(parents=True, exist_ok=True)
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=detach,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return proc, f"http://{host}:{port}"


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def wait_ready(url: str, proc: subprocess.Popen | None = None, timeout: float = 180.0) -> None:
    """Poll /v1/models (readiness, not just liveness) until it answers 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise UserError(f"model server exited with status {proc.returncode} before becoming ready")
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    raise UserError(f"model server at {url} not ready after {timeout:.0f}s")


def chat(url: str, model: str, messages: list[dict[str, Any]], tools: list | None = None,
         max_tokens: int = 64, timeout: float = 120.0) -> dict[str, Any]:
    """One OpenAI chat completion; returns the response JSON plus `latency_s`."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0}
    if tools:
        body["tools"] = tools
    req = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start_t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            resp = json.loads(r.read())
    except urllib.error.HTTPError as err:
        raise UserError(f"chat completion failed: HTTP {err.code}: {err.read()[:500]!r}") from None
    resp["latency_s"] = time.perf_counter() - start_t
    return resp


def smoke_test(url: str, model: str, messages: list[dict[str, Any]], tools: list | None = None) -> dict[str, Any]:
    """Send one chat completion and check an answer came back; returns latency and reply."""
    resp = chat(url, model, messages, tools)
    choice = (resp.get("choices") or [{}])[0].get("message") or {}
    reply = choice.get("content") or json.dumps(choice.get("tool_calls") or "")
    if not reply:
        raise UserError(f"smoke test got an empty reply from {url}: {json.dumps(resp)[:500]}")
    return {"latency_s": resp["latency_s"], "reply": reply, "model": resp.get("model", model)}


def deploy_local(model_dir: Path, messages: list[dict[str, Any]], tools: list | None = None,
                 keep_serving: bool = False, port: int = 0, log_path: Path | None = None) -> dict[str, Any]:
    """Serve `model_dir` on loopback, run the smoke test, and stop unless `keep_serving`.

    Returns endpoint (OpenAI base URL), latency_s, reply, and pid when still serving.
    """
    proc, url = start(model_dir, port=port, detach=keep_serving, log_path=log_path)
    try:
        wait_ready(url, proc)
        result = smoke_test(url, str(model_dir), messages, tools)
    except BaseException:
        proc.terminate()
        raise
    if keep_serving:
        return {**result, "endpoint": f"{url}/v1", "pid": proc.pid}
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    return {**result, "endpoint": f"{url}/v1", "pid": None}
