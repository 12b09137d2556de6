"""python -m benchmarks.bfcl_speed [--rows N] [--dtypes float32,bfloat16] [--generate 8,32] [--no-hf] [--json OUT] [--quick]

How fast BFCL's prompts are read on this machine (issue 35 item 7), beside the machine's own matmul rate, in one
run. BFCL's prompts are long (the function documents: most are 400-1,500 tokens), so prefill is what an evaluation
with eval_suites=bfcl waits for. SmolLM2-135M-Instruct (the PyPI GGUF, converted once into a cache by
tests/real_models.py) with the chatml-tools template, and BFCL's rows (tests/real_bfcl.py: --rows per category,
seed 0, every category):

- the baseline: torch's matmul rate here, float32 and bfloat16 (4096 x 4096, all threads), in GFLOP/s;
- vLLM's CPU server as trainer.serving.local starts it (eager, the worker in the engine core's process), once per
  --dtypes entry: every prompt with max_tokens=1 (prefill alone), 8 in flight: prompt tokens/s, rows/s, and the
  matmul work done as a fraction of the baseline (2 x the weights used per token, the embedding table excepted:
  vLLM takes the logits of the last position only);
- whole answers (up to trainer.evaluate.bfcl.ANSWER_TOKENS new tokens) on the float32 server at each --generate
  count of requests in flight: seconds, rows/s, tokens generated (the base model writes code where BFCL wants a
  call, so answers run long);
- HF forward passes over the same prompts (float32, batches of similar length, no generation) as a reference.

The server's start is timed apart. --quick: 2 rows per category, the figures mean little. Every server it starts
is stopped before it ends.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from trainer.evaluate import bfcl as bfcl_eval
from trainer.serving import client, local

TEMPLATE = "chatml-tools"


def matmul_gflops(dtype: torch.dtype, n: int = 4096, repeat: int = 5) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeat):
        a @ b
    return 2 * n**3 * repeat / (time.perf_counter() - t0) / 1e9


def model_dir(work: Path) -> Path:
    """SmolLM2 with the chatml-tools template written in (as deliver-model writes it)."""
    from tests.real_models import smollm2_model_dir
    from trainer.chat import templates

    return templates.with_template(smollm2_model_dir(), templates.resolve(TEMPLATE, None), work / "model")


def matmul_params(path: Path) -> int:
    """Weights a prefill token passes through: every parameter but the embedding table."""
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(path)
    h, i, layers = c.hidden_size, c.intermediate_size, c.num_hidden_layers
    kv = c.num_key_value_heads * (h // c.num_attention_heads)
    return layers * (2 * h * h + 2 * h * kv + 3 * h * i)


def _ask(url: str, asked: list[dict], max_tokens: int, in_flight: int) -> tuple[float, int]:
    """Seconds to answer every row, `in_flight` at a time, and the tokens generated."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        replies = list(
            pool.map(
                lambda r: client.chat(url, "m", r["messages"][:-1], r["tools"], max_tokens=max_tokens, timeout=1200),
                asked,
            )
        )
    return time.perf_counter() - t0, sum(r.get("usage", {}).get("completion_tokens", 0) for r in replies)


def served(
    path: Path, asked: list[dict], prompts: list[int], dtype: str, work: Path, generate: tuple[int, ...]
) -> dict[str, float]:
    """Prefill alone (max_tokens=1, 8 in flight), then whole answers (bfcl.ANSWER_TOKENS) at each of `generate`
    requests in flight, on one server."""
    t0 = time.perf_counter()
    server = local.start(
        path,
        "m",
        max_model_len=max(prompts) + bfcl_eval.ANSWER_TOKENS,
        log_path=work / f"vllm-{dtype}.log",
        dtype=dtype,
    )
    try:
        client.wait_ready(server.url, server, timeout=900)
        start_s = time.perf_counter() - t0
        seconds, _ = _ask(server.url, asked, 1, 8)
        out = {
            "start_s": start_s,
            "seconds": seconds,
            "rows_per_s": len(asked) / seconds,
            "prompt_tokens_per_s": sum(prompts) / seconds,
        }
        for n in generate:
            seconds, tokens = _ask(server.url, asked, bfcl_eval.ANSWER_TOKENS, n)
            out[f"answers_{n}_in_flight"] = {
                "seconds": seconds,
                "rows_per_s": len(asked) / seconds,
                "generated_tokens": tokens,
            }
    finally:
        server.stop()
    return out


def hf_forward(path: Path, token_ids: list[list[int]]) -> dict[str, float]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    order = sorted(range(len(token_ids)), key=lambda i: len(token_ids[i]))
    t0 = time.perf_counter()
    with torch.no_grad():
        for k in range(0, len(order), 4):
            batch = [token_ids[i] for i in order[k : k + 4]]
            width = max(map(len, batch))
            ids = torch.tensor([[0] * (width - len(b)) + b for b in batch])
            mask = torch.tensor([[0] * (width - len(b)) + [1] * len(b) for b in batch])
            model(input_ids=ids, attention_mask=mask, logits_to_keep=1)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "prompt_tokens_per_s": sum(map(len, token_ids)) / seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--rows", type=int, default=5, help="BFCL rows per category (10 categories)")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="vLLM --dtype values to compare")
    parser.add_argument("--no-hf", action="store_true", help="skip the HF forward reference")
    parser.add_argument(
        "--generate",
        default="8,32",
        help="requests in flight for whole answers (float32 server only); empty: prefill alone",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    from tests.real_bfcl import bfcl_tree
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="bfcl-speed-") as tmp:
        work = Path(tmp)
        path = model_dir(work)
        tok = AutoTokenizer.from_pretrained(path)
        asked = bfcl_eval.rows(bfcl_tree(), 2 if args.quick else args.rows, 0)
        token_ids = [
            tok.apply_chat_template(
                r["messages"][:-1], tools=r["tools"], add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
            for r in asked
        ]
        prompts = [len(t) for t in token_ids]
        flop = 2 * matmul_params(path)
        res = {
            "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "rows": len(asked),
            "prompt_tokens": sum(prompts),
            "longest_prompt": max(prompts),
            "gflop_per_token": flop / 1e9,
            "matmul_gflops": {str(d).split(".")[1]: matmul_gflops(d) for d in (torch.float32, torch.bfloat16)},
            "served": {},
        }
        for dtype in args.dtypes.split(","):
            gen = tuple(int(n) for n in args.generate.split(",") if n) if dtype == "float32" else ()
            res["served"][dtype] = served(path, asked, prompts, dtype, work, gen)
        if not args.no_hf:
            res["hf_float32"] = hf_forward(path, token_ids)
    base = res["matmul_gflops"]
    print(
        f"machine: {res['cpus']} cores, torch {res['threads']} threads; matmul float32 {base['float32']:.0f} "
        f"GFLOP/s, bfloat16 {base['bfloat16']:.0f} GFLOP/s"
    )
    print(
        f"BFCL: {res['rows']} rows, {res['prompt_tokens']:,} prompt tokens (longest {res['longest_prompt']}), "
        f"{res['gflop_per_token']:.3f} GFLOP per token"
    )
    runs = [(f"vLLM {d}", r) for d, r in res["served"].items()] + (
        [("HF forward float32", res["hf_float32"])] if "hf_float32" in res else []
    )
    for name, r in runs:
        dtype = "bfloat16" if "bfloat16" in name else "float32"
        gflops = r["prompt_tokens_per_s"] * res["gflop_per_token"]
        r["fraction_of_matmul"] = gflops / base[dtype]
        start = f", server start {r['start_s']:.0f} s" if "start_s" in r else ""
        print(
            f"{name:<20} {r['prompt_tokens_per_s']:8.0f} prompt tokens/s  {r['seconds']:6.1f} s  "
            f"{gflops:6.1f} GFLOP/s = {r['fraction_of_matmul']:.0%} of {dtype} matmul{start}"
        )
    for n, g in ((k.split("_")[1], v) for k, v in res["served"].get("float32", {}).items() if k.startswith("answers_")):
        print(
            f"vLLM float32 answers, {n:>2} in flight: {g['seconds']:6.1f} s, {g['rows_per_s']:.2f} rows/s, "
            f"{g['generated_tokens']} tokens generated ({g['generated_tokens'] / g['seconds']:.0f}/s)"
        )
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
