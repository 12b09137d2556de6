"""python -m benchmarks.train_throughput [--runs 3] [--steps 60]

Real-token training throughput of our trainer vs the usual Kubernetes LoRA trainer
(benchmarks/baseline_hf_trainer.py: HF Trainer + peft, rows padded to 512), same tiny
model, same data, same LoRA settings and step count, one process each on this machine.
Runs are interleaved (ours, baseline, ours, ...) so machine noise hits both alike; the
table shows each run, the medians and the ratio of medians, and peak memory (RSS).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import local_s3, median


def run_ours(model_uri: str, data_uri: str, steps: int, batch_tokens: int, i: int) -> dict:
    from trainer.core.storage import Store

    prefix = f"runs/bench-{i}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "train",
            f"--model-uri={model_uri}",
            f"--dataset-uri={data_uri}",
            f"--output-prefix={prefix}",
            f"--max-steps={steps}",
            f"--batch-tokens={batch_tokens}",
            "--lora-train-embeddings=true",
            f"--checkpoint-every={steps}",
            "--log-every=10",
        ],
        check=True,
        capture_output=True,
    )
    return Store.from_env().get_json(f"{prefix}/result.json")["metrics"]


def run_baseline(model_dir: Path, train_jsonl: Path, steps: int, batch_size: int, out: Path) -> dict:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.baseline_hf_trainer",
            str(model_dir),
            str(train_jsonl),
            f"--steps={steps}",
            f"--batch-size={batch_size}",
            "--train-embeddings",
            f"--out={out}",
        ],
        check=True,
        capture_output=True,
    )
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[2])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=8, help="baseline rows per step")
    parser.add_argument("--batch-tokens", type=int, default=1024, help="our token budget per step (~8-10 rows)")
    args = parser.parse_args()

    server = local_s3()
    from trainer.store import delivery
    from trainer.evaluate.report import table
    from trainer.core.storage import Store

    store = Store.from_env()
    model_uri, _ = delivery.deliver_model("builtin:tiny-llama", "", store)
    data_uri, _ = delivery.deliver_dataset("builtin:function-calling", "", store)
    model_dir, data_dir = store.get_tree(model_uri), store.get_tree(data_uri)
    ours, base = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            ours.append(run_ours(model_uri, data_uri, args.steps, args.batch_tokens, i))
            base.append(
                run_baseline(
                    model_dir, data_dir / "train.jsonl", args.steps, args.batch_size, Path(tmp) / f"base-{i}.json"
                )
            )
            print(
                f"run {i + 1}/{args.runs}: ours {ours[-1]['tokens_per_second']:.0f} tok/s, "
                f"baseline {base[-1]['tokens_per_second']:.0f} tok/s",
                flush=True,
            )
    server.stop()
    o, b = median([r["tokens_per_second"] for r in ours]), median([r["tokens_per_second"] for r in base])
    rows = [
        (
            f"run {i + 1}",
            f"{x['tokens_per_second']:.0f}",
            f"{y['tokens_per_second']:.0f}",
            f"{x['tokens_per_second'] / y['tokens_per_second']:.2f}x",
        )
        for i, (x, y) in enumerate(zip(ours, base))
    ]
    rows.append(("median", f"{o:.0f}", f"{b:.0f}", f"{o / b:.2f}x"))
    rows.append(
        (
            "peak memory (MB)",
            f"{median([r['peak_memory_mb'] for r in ours]):.0f}",
            f"{median([r['peak_memory_mb'] for r in base]):.0f}",
            "",
        )
    )
    print(f"\nreal (non-pad) tokens/s, {args.steps} steps, tiny model, 1 process, {len(ours)} interleaved runs each")
    print(table(rows, ("", "ours (token batches)", "HF Trainer, pad 512", "ratio")))


if __name__ == "__main__":
    main()
