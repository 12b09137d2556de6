"""python -m benchmarks.serve_vllm [--model MERGED_DIR] [--requests 20]

The local OpenAI endpoint as `trainer serve` / the deploy step start it (vLLM's CPU build,
eager mode, float32): seconds until /v1/models answers, then the latency of tool requests
(the built-in tools, the deploy smoke test's request) non-streaming, and the time to the
first streamed chunk. Without --model it serves the built-in tiny model untrained, which
measures the server, not the answers (its replies are not tool calls).

Twice, in one run: as trainer.serving.local starts it on CPU (the worker in the engine core's
process, VLLM_ENABLE_V1_MULTIPROCESSING=0: the API server and the engine core), and with vLLM's
default of a worker process of its own (the baseline); the last lines are the ratios.

Run on a quiet machine: start-up is CPU-bound, and on 2 cores any other work stretches it.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import median
from trainer.data import builtin_data
from trainer.serving import client, local


def first_chunk_s(url: str, model: str, messages: list, tools: list) -> float:
    body = {"model": model, "messages": messages, "tools": tools, "max_tokens": 64, "temperature": 0.0, "stream": True}
    req = urllib.request.Request(
        f"{url}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
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
        from trainer.models import builtin_model

        model = builtin_model.build(Path(tempfile.mkdtemp()) / "tiny")
    rows = builtin_data.generate(0, 50, seed=1)["eval"]
    messages, tools = client.smoke_request(rows)
    print(f"model: {model}")
    got = {}
    for label, multiprocessing in (("engine in the server's process", "0"), ("vLLM's default, a process each", "1")):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = multiprocessing  # local.start keeps a value set here
        got[label] = measure(model, messages, tools, args.requests)
        print(f"== {label}")
        ready, lat, firsts, results, batch_s = got[label]
        print(f"vLLM ready (/v1/models 200): {ready:.1f} s")
        print(
            f"tool request, non-streaming: median {median(lat):.3f} s, p90 {lat[int(0.9 * (len(lat) - 1))]:.3f} s "
            f"({sum(r['ok'] for r in results)}/{len(results)} well-formed tool calls; reply: {results[0]['reply'][:80]})"
        )
        print(f"tool request, streaming: first chunk after median {median(firsts):.3f} s")
        print(f"{4 * args.requests} tool requests, 8 in flight: {batch_s:.2f} s")
    (ours, base) = got.values()
    print(
        f"start-up: {base[0] / ours[0]:.2f}x faster without the worker process; median latency ratio "
        f"(default / ours): {median(base[1]) / median(ours[1]):.2f}, "
        f"first chunk: {median(base[2]) / median(ours[2]):.2f}, "
        f"8 in flight: {base[4] / ours[4]:.2f} (above 1: ours faster)"
    )


def measure(model: Path, messages: list, tools: list, requests: int):
    t0 = time.perf_counter()
    server = local.start(model, "bench")
    try:
        client.wait_ready(server.url, server, timeout=600)
        ready = time.perf_counter() - t0
        results = [client.smoke_test(server.url, "bench", messages, tools) for _ in range(requests)]
        firsts = [first_chunk_s(server.url, "bench", messages, tools) for _ in range(requests)]
        t1 = time.perf_counter()  # 8 in flight, as the evaluate step sends them (trainer.evaluate.CONCURRENCY)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: client.smoke_test(server.url, "bench", messages, tools), range(4 * requests)))
        batch_s = time.perf_counter() - t1
    finally:
        server.stop()
    return ready, sorted(r["latency_s"] for r in results), firsts, results, batch_s


if __name__ == "__main__":
    main()
