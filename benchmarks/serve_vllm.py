"""python -m benchmarks.serve_vllm [--model MERGED_DIR] [--requests 20]

The local OpenAI endpoint as `trainer serve` / the deploy step start it (vLLM's CPU build,
eager mode, float32): seconds until /v1/models answers, then the latency of tool requests
(the built-in tools, the deploy smoke test's request) non-streaming, and the time to the
first streamed chunk. Without --model it serves the built-in tiny model untrained, which
measures the server, not the answers (its replies are not tool calls).

Run on a quiet machine: start-up is CPU-bound, and on 2 cores any other work stretches it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks.common import median
from trainer import builtin_data
from trainer.serving import client, local


def first_chunk_s(url: str, model: str, messages: list, tools: list) -> float:
    body = {"model": model, "messages": messages, "tools": tools, "max_tokens": 64, "temperature": 0.0,
            "stream": True}
    req = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        r.readline()
        first = time.perf_counter() - t0
        r.read()
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="a merged model directory (default: tiny, untrained)")
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    model = args.model
    if model is None:
        from trainer import builtin_model

        model = builtin_model.build(Path(tempfile.mkdtemp()) / "tiny")
    rows = builtin_data.generate(0, 50, seed=1)["eval"]
    messages, tools = client.smoke_request(rows)
    t0 = time.perf_counter()
    server = local.start(model, "bench")
    try:
        client.wait_ready(server.url, server, timeout=600)
        ready = time.perf_counter() - t0
        results = [client.smoke_test(server.url, "bench", messages, tools) for _ in range(args.requests)]
        firsts = [first_chunk_s(server.url, "bench", messages, tools) for _ in range(args.requests)]
    finally:
        server.stop()
    lat = sorted(r["latency_s"] for r in results)
    print(f"model: {model}")
    print(f"vLLM ready (/v1/models 200): {ready:.1f} s")
    print(f"tool request, non-streaming: median {median(lat):.3f} s, p90 {lat[int(0.9 * (len(lat) - 1))]:.3f} s "
          f"({sum(r['ok'] for r in results)}/{len(results)} well-formed tool calls; reply: {results[0]['reply'][:80]})")
    print(f"tool request, streaming: first chunk after median {median(firsts):.3f} s")


if __name__ == "__main__":
    main()
