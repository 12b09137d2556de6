"""python -m benchmarks.gpu_compare [--steps 40] [--runs 2] [--batch-tokens 16384] [--batch-tokens-8b 8192]
       [--shapes 1b,8b] [--variants "default;compile=true;FINETUNE_FUSED_LORA=0;FINETUNE_LIGER=0"]
       [--peak-tflops auto] [--profile] [--json out.json]

This trainer vs the Hugging Face Trainer on one CUDA GPU, same process conditions, runs
interleaved (ours, HF, ours, HF, ...) so that clock and thermal drift hit both alike:

- models with Llama-3.2-1B's shape (and Llama-3.1-8B's, this trainer alone), random weights,
  bf16, LoRA r16 alpha 32 on all linear layers, the built-in function-calling data (~100-token rows);
- this trainer: `--batch-tokens` tokens per micro-batch (`--batch-tokens-8b` on the 8B shape, whose
  activations at 16,384 tokens would not fit in 80 GB next to its 16 GB of weights without
  gradient checkpointing), one variant per `--variants` entry (space-separated TrainConfig fields
  or trainer.settings names, "default" for none);
- HF Trainer + peft (benchmarks/baseline_hf_trainer.py), each batch padded to its longest row,
  bf16, as many rows per step as hold `--batch-tokens` real tokens on average.

A `compile=true` run times its compiled layers against eager early on and keeps the faster
(trainer.train._CompileTrial); its row notes both rates and what was kept. To time compiled
layers as such, add FINETUNE_COMPILE_TRIAL=0 to the variant.

Prints, with the GPU's name: real (non-pad) tokens/s over the second half of each run's steps
(after compilation and kernel JIT; median of the runs), MFU, peak GPU memory,
and the ratio to HF. MFU = tokens/s x (6 x parameters + attention) / the GPU's dense bf16 peak,
attention counted as 12 x layers x hidden x mean row length per token (the PaLM convention;
LoRA skips the frozen weights' gradients, so the hardware does about 2/3 of the 6N work).
Every run is a separate process, so peak memory is each run's own. Needs CUDA: without it,
exits with a message.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Dense bf16 tensor-core peaks (TFLOP/s, no sparsity) from the vendors' data sheets; SXM parts.
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


@dataclass(frozen=True)
class Shape:
    """A Llama-architecture shape (GQA, SwiGLU MLP, no biases)."""

    layers: int
    hidden: int
    mlp: int
    heads: int
    kv_heads: int
    vocab: int = 128256
    tied: bool = True

    def params(self) -> int:
        head_dim = self.hidden // self.heads
        attn = self.hidden * head_dim * (2 * self.heads + 2 * self.kv_heads)  # q, o; k, v
        per_layer = attn + 3 * self.hidden * self.mlp + 2 * self.hidden  # + two RMSNorm weights
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * per_layer + embeddings + self.hidden  # + final norm

    def flops_per_token(self, seq_len: float) -> float:
        return 6 * self.params() + 12 * self.layers * self.hidden * seq_len

    def config(self, tokenizer):
        from transformers import LlamaConfig

        return LlamaConfig(vocab_size=self.vocab, hidden_size=self.hidden, intermediate_size=self.mlp,
                           num_hidden_layers=self.layers, num_attention_heads=self.heads,
                           num_key_value_heads=self.kv_heads, max_position_embeddings=4096,
                           tie_word_embeddings=self.tied, bos_token_id=tokenizer.bos_token_id,
                           eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                           rope_theta=500000.0)


SHAPES = {
    "1b": Shape(layers=16, hidden=2048, mlp=8192, heads=32, kv_heads=8, tied=True),  # Llama-3.2-1B
    "8b": Shape(layers=32, hidden=4096, mlp=14336, heads=32, kv_heads=8, tied=False),  # Llama-3.1-8B
}


def mfu(tokens_per_second: float, shape: Shape, seq_len: float, peak_tflops: float) -> float:
    return tokens_per_second * shape.flops_per_token(seq_len) / (peak_tflops * 1e12)


def steady(result: dict) -> float:
    """Tokens/s over the second half of a run's steps (after compilation and JIT warm-up)."""
    return result.get("steady_tokens_per_second") or result["tokens_per_second"]


def parse_variants(text: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """"default;compile=true packing=flatten FINETUNE_LIGER=0" -> {name: (trainer CLI args,
    environment)}: lower-case keys are TrainConfig fields, upper-case ones trainer.settings names."""
    from trainer import settings
    from trainer.config import TrainConfig

    known = {f.replace("_", "-") for f in TrainConfig.__dataclass_fields__}
    out = {}
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        pairs = [] if entry == "default" else entry.split()
        args, env = [], {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if sep and key in settings._DEFAULTS:
                env[key] = value
            elif sep and key.replace("_", "-") in known:
                args.append(f"--{key.replace('_', '-')}={value}")
            else:
                raise SystemExit(f"--variants: {pair!r} is not FIELD=VALUE with a TrainConfig field "
                                 f"(or a trainer.settings name such as FINETUNE_LIGER=0)")
        out[entry] = (args, env)
    return out


def seed_model(store, model_dir: Path) -> str:
    """The model's URI, with the tree put straight into the trainer's local cache and only its
    manifest into the (throwaway, in-memory) S3: the trainer finds the cached copy and downloads
    nothing. Spares the 8B shape a 16 GB upload and download through moto (minutes) that says
    nothing about training speed."""
    from trainer import settings
    from trainer.storage import MANIFEST, tree_manifest

    manifest = tree_manifest(model_dir)
    # not under models/: a manifest without its files must never stand where deliveries look
    prefix = f"seeded-models/sha256-{manifest['tree_sha256']}"
    cached = Path(settings.get("FINETUNE_CACHE_DIR")) / manifest["tree_sha256"]
    cached.parent.mkdir(parents=True, exist_ok=True)
    if not (cached / MANIFEST).exists():
        shutil.copytree(model_dir, cached, dirs_exist_ok=True)
        (cached / MANIFEST).write_text(json.dumps(manifest, indent=1))
    store.ensure_bucket()
    store.put_json(f"{prefix}/{MANIFEST}", manifest)
    return store.uri(prefix)


def build_model(shape: Shape, out: Path) -> Path:
    """Random weights of `shape` in bf16, with the built-in tokenizer, saved to `out`."""
    import torch
    from transformers import LlamaForCausalLM

    from trainer import builtin_model

    tok = builtin_model.build_tokenizer()
    with torch.device("cuda"):
        model = LlamaForCausalLM(shape.config(tok)).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    del model
    torch.cuda.empty_cache()
    return out


def _train(model_uri: str, data_uri: str, prefix: str, steps: int, batch_tokens: int,
           extra: tuple[list[str], dict[str, str]], *more: str, **run) -> None:
    """One `python -m trainer train` process (its own peak memory), the variant's args and env."""
    extra_args, env = extra
    subprocess.run([sys.executable, "-m", "trainer", "train", f"--model-uri={model_uri}", f"--dataset-uri={data_uri}",
                    f"--output-prefix={prefix}", f"--max-steps={steps}", f"--batch-tokens={batch_tokens}",
                    "--learning-rate=2e-4", "--max-seq-len=512", "--log-every=10", "--eval-every=100000",
                    "--checkpoint-every=100000", *more, *extra_args], check=True, env={**os.environ, **env}, **run)


def run_ours(model_uri: str, data_uri: str, args, extra: tuple[list[str], dict[str, str]], tag: str,
             batch_tokens: int) -> dict:
    from trainer.storage import Store

    prefix = f"runs/compare-{tag}"
    _train(model_uri, data_uri, prefix, args.steps, batch_tokens, extra)
    return Store.from_env().get_json(f"{prefix}/result.json")["metrics"]


KERNEL_KINDS = (  # (category, regex on CUDA kernel names), first match wins
    ("attention", r"flash|fmha|attention|flex|sdpa|mha"),
    ("matmul", r"gemm|cutlass|xmma|nvjet|cublas|matmul|mm_|wgmma"),
    ("loss (cross-entropy)", r"cross_entropy|logsumexp|log_softmax|nll|liger_.*ce|_ce_"),
    ("optimizer", r"adam|multi_tensor|foreach|l2norm|clip"),
    ("fused (triton / inductor)", r"^triton|_kernel$"),
    ("elementwise / norm / copies", r"."),
)


def profile_breakdown(trace: dict, steps: int) -> dict[str, float]:
    """GPU kernel time per step (ms) by kind, from a torch.profiler Chrome trace."""
    import re

    out = {kind: 0.0 for kind, _ in KERNEL_KINDS}
    for event in trace.get("traceEvents", []):
        if event.get("cat") != "kernel":
            continue
        name = event.get("name", "").lower()
        kind = next(k for k, pattern in KERNEL_KINDS if re.search(pattern, name))
        out[kind] += event.get("dur", 0) / 1000 / steps
    return out


def trial_note(results: list[dict]) -> str:
    """For compile=true runs: what the trainer's own compiled-vs-eager trial measured and kept
    (its steady figure is then the kept setting's, which may be eager)."""
    trials = [r for r in results if "compile_trial_compiled_tokens_per_second" in r]
    if not trials:
        return ""
    from benchmarks.common import median

    compiled = median([r["compile_trial_compiled_tokens_per_second"] for r in trials])
    eager = median([r["compile_trial_eager_tokens_per_second"] for r in trials])
    kept = sum(r["compiled_layers"] for r in trials)
    return (f"; trial: compiled {compiled:,.0f} vs eager {eager:,.0f} tok/s, kept compiled in "
            f"{kept:.0f} of {len(trials)} run(s)")


def run_profiled(model_uri: str, data_uri: str, args, extra, tag: str, steps: int = 3) -> dict[str, float]:
    """One more run of a variant with torch.profiler on `steps` steps; its kernel time by kind."""
    from trainer.storage import Store

    prefix = f"runs/profile-{tag}"
    _train(model_uri, data_uri, prefix, steps + 3, args.batch_tokens, extra, f"--profile-steps={steps}",
           stdout=subprocess.DEVNULL)
    return profile_breakdown(Store.from_env().get_json(f"{prefix}/profile/trace.json"), steps)


def run_hf(model_dir: Path, train_jsonl: Path, args, rows_per_step: int, out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "benchmarks.baseline_hf_trainer", str(model_dir), str(train_jsonl),
                    f"--steps={args.steps}", f"--batch-size={rows_per_step}", "--padding=longest", "--bf16",
                    f"--out={out}"], check=True)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[2])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--runs", type=int, default=2, help="interleaved runs of each trainer (median reported)")
    parser.add_argument("--batch-tokens", type=int, default=16384)
    parser.add_argument("--batch-tokens-8b", type=int, default=8192, help="tokens per micro-batch on the 8b shape")
    parser.add_argument("--shapes", default="1b,8b", help="1b: both trainers; 8b: this trainer alone")
    parser.add_argument("--variants", default="default", help='this trainer\'s variants, e.g. "default;compile=true"')
    parser.add_argument("--peak-tflops", default="auto", help="the GPU's dense bf16 TFLOPs (auto: known GPUs)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--profile", action="store_true",
                        help="after the timed runs, profile each variant on the 1b shape: GPU time per step by kernel kind")
    args = parser.parse_args()
    variants = parse_variants(args.variants)
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if unknown := [s for s in shapes if s not in SHAPES]:
        raise SystemExit(f"--shapes: unknown {unknown}; choose from {sorted(SHAPES)}")

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_compare needs a CUDA GPU; none is visible here (torch.cuda.is_available() is False). "
                         "Run it on a GPU machine; on CPU use python -m benchmarks.train_throughput")
    gpu = torch.cuda.get_device_name()
    peak = float(args.peak_tflops) if args.peak_tflops != "auto" else next(
        (v for k, v in PEAK_BF16_TFLOPS.items() if k in gpu), None)
    if peak is None:
        raise SystemExit(f"unknown GPU {gpu!r}: pass --peak-tflops (its dense bf16 TFLOPs)")

    from transformers import AutoTokenizer

    from benchmarks.common import local_s3, median
    from trainer import data, sources
    from trainer.report import table
    from trainer.storage import Store

    server = local_s3()
    store = Store.from_env()
    cache = tempfile.TemporaryDirectory(prefix="gpu-compare-cache-")  # the trainer processes inherit it
    os.environ["FINETUNE_CACHE_DIR"] = cache.name
    data_uri, _ = sources.deliver_dataset("builtin:function-calling", "", store)
    train_jsonl = store.get_tree(data_uri) / "train.jsonl"
    rows, figures, profiles = [], [], {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in shapes:
                shape = SHAPES[name]
                model_dir = build_model(shape, Path(tmp) / name)
                model_uri = seed_model(store, model_dir)
                batch_tokens = args.batch_tokens_8b if name == "8b" else args.batch_tokens
                tok = AutoTokenizer.from_pretrained(model_dir)
                lengths = [len(e["input_ids"]) for e in data.encode_all(data.read_jsonl(train_jsonl), tok, 512)[0]]
                mean_len = sum(lengths) / len(lengths)
                runs: dict[str, list[dict]] = {v: [] for v in variants}
                if name == "1b":
                    runs["HF Trainer, pad to longest, bf16"] = []
                for i in range(args.runs):
                    for k, (v, extra) in enumerate(variants.items()):
                        runs[v].append(run_ours(model_uri, data_uri, args, extra, f"{name}-{i}-{k}", batch_tokens))
                    if name == "1b":
                        runs["HF Trainer, pad to longest, bf16"].append(
                            run_hf(model_dir, train_jsonl, args, round(batch_tokens / mean_len),
                                   Path(tmp) / f"hf-{i}.json"))
                hf = runs.get("HF Trainer, pad to longest, bf16")
                hf_tps = median([steady(r) for r in hf]) if hf else None
                for label, results in runs.items():
                    tps = median([steady(r) for r in results])
                    mem = max(r["peak_memory_mb"] for r in results) / 1024
                    trial = trial_note(results)
                    fig = {"shape": name, "batch_tokens": batch_tokens,
                           "trainer": label if label.startswith("HF") else f"this trainer ({label}){trial}",
                           "tokens_per_second": tps, "mfu": mfu(tps, shape, mean_len, peak), "peak_memory_gb": mem,
                           "vs_hf": tps / hf_tps if hf_tps else None, "runs": len(results)}
                    figures.append(fig)
                    rows.append((f"{name} @ {batch_tokens}", fig["trainer"], f"{tps:,.0f}", f"{fig['mfu']:.1%}",
                                 f"{mem:.1f}", f"{fig['vs_hf']:.2f}x" if fig["vs_hf"] else ""))
                print(table(rows, ("shape @ tokens", "trainer", "real tokens/s", "MFU (6N + attn)", "peak GB", "vs HF")),
                      flush=True)  # so far: the profiling runs below take minutes
                if args.profile and name == "1b":
                    profiles.update({v: run_profiled(model_uri, data_uri, args, extra, f"{name}-{k}")
                                for k, (v, extra) in enumerate(variants.items())})
                store.delete_prefix(model_uri.split("/", 3)[3])  # moto keeps objects in memory
                shutil.rmtree(model_dir)
    finally:
        server.stop()
        cache.cleanup()
    print(f"\n{gpu}, {args.steps} steps, tokens per micro-batch as in the shape column, median of {args.runs} "
          f"interleaved run(s), peak {peak:g} TFLOPs bf16")
    print(table(rows, ("shape @ tokens", "trainer", "real tokens/s", "MFU (6N + attn)", "peak GB", "vs HF")))
    if profiles:
        kinds = [k for k, _ in KERNEL_KINDS]
        print(f"\nGPU kernel time per step (ms), 1b shape, torch.profiler over 3 steps after warm-up")
        print(table([(v, *(f"{p[k]:.1f}" for k in kinds), f"{sum(p.values()):.1f}") for v, p in profiles.items()],
                    ("variant", *kinds, "total")))
    if args.json:
        args.json.write_text(json.dumps({"gpu": gpu, "figures": figures, "profiles": profiles}, indent=1))


if __name__ == "__main__":
    main()
