"""python -m benchmarks.gpu_compare [--steps 40] [--runs 2] [--batch-tokens 16384] [--batch-tokens-8b 8192]
       [--shapes 1b,8b] [--variants "default;compile=true;FINETUNE_FUSED_LORA=0;FINETUNE_LIGER=0"]
       [--peak-tflops auto] [--profile] [--json out.json] [--log-dir DIR] [--run-timeout-s 0] [--baselines hf,trl | --no-hf]
       [--method lora|full]
   smoke test of this script on CPU (figures meaningless, a minute or two):
       python -m benchmarks.gpu_compare --allow-cpu --shapes tiny --steps 4 --runs 1 --batch-tokens 512 \
           --variants "default;compile=true" --profile --json /tmp/gc.json

This trainer vs the Hugging Face Trainer on one CUDA GPU, same process conditions, runs
interleaved (ours, HF, ours, HF, ...) so that clock and thermal drift hit both alike:

- models with Llama-3.2-1B's shape (and Llama-3.1-8B's, this trainer alone), random weights,
  bf16, LoRA r16 alpha 32 on all linear layers, the built-in function-calling data (~100-token rows);
- this trainer: `--batch-tokens` tokens per micro-batch (`--batch-tokens-8b` on the 8B shape, whose
  activations at 16,384 tokens would not fit in 80 GB next to its 16 GB of weights without
  gradient checkpointing), one variant per `--variants` entry (space-separated TrainConfig fields
  or trainer.core.settings names, "default" for none);
- the baselines (`--baselines`, benchmarks/baseline_hf_trainer.py): HF Trainer + peft and TRL's
  SFTTrainer, each batch padded to its longest row, bf16, Liger's kernels where liger-kernel is
  installed (each one's best settings on a GPU without flash-attn), as many rows per step as hold
  `--batch-tokens` real tokens on average.

`--method full` trains every weight, in this trainer and the baselines alike (learning rate 1e-5:
random weights under a LoRA rate diverge, and this trainer stops on a non-finite loss).

A `compile=true` run times its compiled layers against eager early on and keeps the faster
(trainer.recipe.compile_trial.CompileTrial); its row notes both rates and what was kept. To time compiled
layers as such, add FINETUNE_COMPILE_TRIAL=0 to the variant.

Prints, with the GPU's name: real (non-pad) tokens/s over the second half of each run's steps
(after compilation and kernel JIT; median of the runs), MFU, peak GPU memory,
and the ratio to HF. MFU = tokens/s x (6 x parameters + attention) / the GPU's dense bf16 peak,
attention counted as 12 x layers x hidden x mean row length per token (the PaLM convention;
LoRA skips the frozen weights' gradients, so the hardware does about 2/3 of the 6N work).
Every run is a separate process, so peak memory is each run's own. Needs CUDA: without it,
exits with a message (`--allow-cpu` runs the same steps on CPU, to check this script itself).

Device time is scarce, so a failed or timed-out run (`--run-timeout-s`) costs only its own row:
it is reported with its exit status and the last lines of its log, the other runs go on, and
the command exits 1 at the end. Each run's output goes to its own log file (`--log-dir`; by
default next to `--json`), one summary line per run to the console, and `--json` is rewritten
after every run, so a command stopped by a time limit still leaves the runs it finished.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
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

        return LlamaConfig(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.mlp,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            max_position_embeddings=4096,
            tie_word_embeddings=self.tied,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            rope_theta=500000.0,
        )


SHAPES = {
    "1b": Shape(layers=16, hidden=2048, mlp=8192, heads=32, kv_heads=8, tied=True),  # Llama-3.2-1B
    "8b": Shape(layers=32, hidden=4096, mlp=14336, heads=32, kv_heads=8, tied=False),  # Llama-3.1-8B
    # the built-in tokenizer's vocabulary: for checking this script (--allow-cpu), not for figures
    "tiny": Shape(layers=2, hidden=64, mlp=128, heads=4, kv_heads=2, vocab=1024, tied=True),
}
HF_LABEL = "HF Trainer, pad to longest, bf16"
TRL_LABEL = "TRL SFTTrainer, pad to longest, bf16"
BASELINES = {"hf": HF_LABEL, "trl": TRL_LABEL}
LEARNING_RATE = {"lora": 2e-4, "full": 1e-5}  # full: random weights diverge at a LoRA rate
MAX_SEQ_LEN = 512  # the trainer's, for every run; a micro-batch's token budget must hold one row
TAIL_LINES = 25  # of a failed run's log, printed and kept in --json


def mfu(tokens_per_second: float, shape: Shape, seq_len: float, peak_tflops: float) -> float:
    return tokens_per_second * shape.flops_per_token(seq_len) / (peak_tflops * 1e12)


def steady(result: dict) -> float:
    """Tokens/s over the second half of a run's steps (after compilation and JIT warm-up)."""
    return result.get("steady_tokens_per_second") or result["tokens_per_second"]


def parse_variants(text: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """ "default;compile=true packing=flatten FINETUNE_LIGER=0" -> {name: (trainer CLI args,
    environment)}: lower-case keys are TrainConfig fields, upper-case ones trainer.core.settings names."""
    from trainer.core import settings
    from trainer.config.training import TrainConfig

    known = {f.replace("_", "-") for f in TrainConfig.__dataclass_fields__}
    out = {}
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        pairs = [] if entry == "default" else entry.split()
        args, env = [], {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if sep and key in settings.SETTING_DEFAULTS:
                env[key] = value
            elif sep and key.replace("_", "-") in known:
                args.append(f"--{key.replace('_', '-')}={value}")
            else:
                raise SystemExit(
                    f"--variants: {pair!r} is not FIELD=VALUE with a TrainConfig field "
                    f"(or a trainer.core.settings name such as FINETUNE_LIGER=0)"
                )
        out[entry] = (args, env)
    return out


def seed_model(store, model_dir: Path) -> str:
    """The model's URI, with the tree put straight into the trainer's local cache and only its
    manifest into the (throwaway, in-memory) S3: the trainer finds the cached copy and downloads
    nothing. Spares the 8B shape a 16 GB upload and download through moto (minutes) that says
    nothing about training speed. Files are hard-linked into the cache where the file system
    allows (no second 16 GB write)."""
    from trainer.core import settings
    from trainer.core.storage import MANIFEST, tree_manifest

    manifest = tree_manifest(model_dir)
    # not under models/: a manifest without its files must never stand where deliveries look
    prefix = f"seeded-models/sha256-{manifest['tree_sha256']}"
    cached = Path(settings.get("FINETUNE_CACHE_DIR")) / manifest["tree_sha256"]
    cached.parent.mkdir(parents=True, exist_ok=True)
    if not (cached / MANIFEST).exists():
        shutil.copytree(model_dir, cached, dirs_exist_ok=True, copy_function=_link_or_copy)
        (cached / MANIFEST).write_text(json.dumps(manifest, indent=1))
    store.ensure_bucket()
    store.put_json(f"{prefix}/{MANIFEST}", manifest)
    return store.uri(prefix)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


def build_model(shape: Shape, out: Path) -> Path:
    """Random weights of `shape` in bf16, with the built-in tokenizer, saved to `out`."""
    import torch
    from transformers import LlamaForCausalLM

    from trainer.models import builtin_model

    tok = builtin_model.build_tokenizer()
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(shape.config(tok)).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


class RunFailed(Exception):
    """A benchmark process that failed or ran out of time: why, and where its log is."""

    def __init__(self, why: str, log: Path):
        super().__init__(why)
        self.why, self.log = why, log

    def tail(self, lines: int = TAIL_LINES) -> str:
        text = self.log.read_bytes().decode(errors="replace") if self.log.exists() else ""  # keeps \r
        # tqdm redraws its bar with carriage returns: keep each line's last state
        return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.rstrip("\n").split("\n")[-lines:])


def run_logged(cmd: list[str], log: Path, timeout_s: float = 0, env: dict[str, str] | None = None) -> None:
    """Run `cmd` with its output in `log`; RunFailed on a non-zero status or after `timeout_s`
    (0: none), when it is killed with every process below it (inductor's compile workers too).
    It stays in this process group, so a time limit that stops this command stops it too."""
    from trainer.core.procs import descendants

    def kill(proc) -> None:
        # Each process is stopped before its children are listed, so none starts one unseen.
        seen, todo = set(), [proc.pid]
        while todo:
            pid = todo.pop()
            if pid not in seen:
                seen.add(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                todo += descendants(pid)
        for pid in seen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()

    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            code = proc.wait(timeout=timeout_s or None)
        except subprocess.TimeoutExpired:
            kill(proc)
            raise RunFailed(f"timed out after {timeout_s:g} s (--run-timeout-s)", log) from None
        except BaseException:  # Ctrl-C, or SIGTERM (main turns it into SystemExit): no orphaned GPU process
            kill(proc)
            raise
    if code:
        why = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        raise RunFailed(why, log)


def trainer_command(
    model_uri: str,
    data_uri: str,
    prefix: str,
    steps: int,
    batch_tokens: int,
    extra_args: list[str],
    *more: str,
    method: str = "lora",
) -> list[str]:
    """`python -m trainer train` for one run: the LoRA setting pinned to the HF baseline's (r16,
    alpha 32, all linear layers, no trained embedding) whatever TrainConfig's defaults (tuned
    for the built-in demo) become; the variant's arguments last, so they win."""
    lora = (
        [
            "--method=lora",
            "--lora-r=16",
            "--lora-alpha=32",
            "--lora-dropout=0",
            "--lora-target-modules=all-linear",
            "--lora-train-embeddings=false",
        ]
        if method == "lora"
        else ["--method=full"]
    )
    return [
        sys.executable,
        "-m",
        "trainer",
        "train",
        f"--model-uri={model_uri}",
        f"--dataset-uri={data_uri}",
        f"--output-prefix={prefix}",
        f"--max-steps={steps}",
        f"--batch-tokens={batch_tokens}",
        f"--learning-rate={LEARNING_RATE[method]}",
        f"--max-seq-len={MAX_SEQ_LEN}",
        *lora,
        "--log-every=10",
        "--eval-every=100000",
        "--checkpoint-every=100000",
        *more,
        *extra_args,
    ]


def _train(
    model_uri: str,
    data_uri: str,
    prefix: str,
    steps: int,
    batch_tokens: int,
    extra: tuple[list[str], dict[str, str]],
    args,
    *more: str,
) -> None:
    """One `python -m trainer train` process (its own peak memory), the variant's args and env."""
    extra_args, env = extra
    run_logged(
        trainer_command(model_uri, data_uri, prefix, steps, batch_tokens, extra_args, *more, method=args.method),
        args.log_dir / f"{prefix.split('/')[-1]}.log",
        args.run_timeout_s,
        env={**os.environ, **env},
    )


def run_ours(
    model_uri: str, data_uri: str, args, extra: tuple[list[str], dict[str, str]], tag: str, batch_tokens: int
) -> dict:
    from trainer.core.storage import Store

    prefix = f"runs/compare-{tag}"
    _train(model_uri, data_uri, prefix, args.steps, batch_tokens, extra, args)
    return _written(Store.from_env(), f"{prefix}/result.json", args.log_dir / f"compare-{tag}.log")["metrics"]


def _written(store, key: str, log: Path) -> dict:
    """A JSON object a run that exited 0 wrote; RunFailed (this run's row only) if it is not there."""
    if not store.exists(key):
        raise RunFailed(f"exited 0 without writing {key}", log)
    return store.get_json(key)


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


def top_kernels(trace: dict, steps: int, n: int = 12) -> list[dict]:
    """The `n` kernels that take the most GPU time: per step (ms), calls per step, share of all kernel time."""
    per: dict[str, list[float]] = {}
    for event in trace.get("traceEvents", []):
        if event.get("cat") == "kernel":
            got = per.setdefault(event.get("name", "?"), [0.0, 0])
            got[0] += event.get("dur", 0) / 1000
            got[1] += 1
    total = sum(ms for ms, _ in per.values()) or 1.0
    ranked = sorted(per.items(), key=lambda kv: -kv[1][0])[:n]
    return [
        {"kernel": name[:160], "ms_per_step": ms / steps, "calls_per_step": calls / steps, "share": ms / total}
        for name, (ms, calls) in ranked
    ]


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
    return (
        f"; trial: compiled {compiled:,.0f} vs eager {eager:,.0f} tok/s, kept compiled in "
        f"{kept:.0f} of {len(trials)} run(s)"
    )


def compile_note(results: list[dict]) -> str:
    """For compile=true runs: a run that compiled nothing (torch.compile fell back to eager) or
    compiled inside its timed window (compile time in the figure) is named in its row."""
    runs = [r for r in results if "compiled_graphs" in r]
    none = sum(1 for r in runs if not r["compiled_graphs"])
    late = sum(1 for r in runs if r.get("graphs_compiled_in_steady_window"))
    return (f"; compiled nothing in {none} of {len(runs)} run(s) (eager)" if none else "") + (
        f"; recompiled inside the timed window in {late} run(s)" if late else ""
    )


def run_profiled(model_uri: str, data_uri: str, args, extra, tag: str, steps: int = 3) -> dict[str, float]:
    """One more run of a variant with torch.profiler on `steps` steps; its kernel time by kind."""
    from trainer.core.storage import Store

    prefix = f"runs/profile-{tag}"
    _train(model_uri, data_uri, prefix, steps + 3, args.batch_tokens, extra, args, f"--profile-steps={steps}")
    trace = _written(Store.from_env(), f"{prefix}/profile/trace.json", args.log_dir / f"profile-{tag}.log")
    return {**profile_breakdown(trace, steps), "top_kernels": top_kernels(trace, steps)}


def run_baseline(kind: str, model_dir: Path, train_jsonl: Path, args, rows_per_step: int, out: Path) -> dict:
    """One baseline run (`kind`: hf or trl) in its own process, in its best settings here (Liger's
    kernels where liger-kernel is installed, as this trainer uses them)."""
    import importlib.util

    liger = ["--liger"] if importlib.util.find_spec("liger_kernel") and args.cuda else []
    run_logged(
        [
            sys.executable,
            "-m",
            "benchmarks.baseline_hf_trainer",
            str(model_dir),
            str(train_jsonl),
            f"--steps={args.steps}",
            f"--batch-size={rows_per_step}",
            "--padding=longest",
            "--bf16",
            f"--trainer={kind}",
            f"--method={args.method}",
            f"--learning-rate={LEARNING_RATE[args.method]}",
            *liger,
            f"--out={out}",
        ],
        args.log_dir / f"{out.stem}.log",
        args.run_timeout_s,
    )
    return json.loads(out.read_text())


def attempt(what: str, fn, failures: list[dict], summary=None):
    """fn()'s result, or None when its process failed: then the failure is printed (with the
    last lines of its log) and appended to `failures`, and the benchmark goes on."""
    import time

    start = time.perf_counter()
    try:
        result = fn()
    except RunFailed as err:
        failures.append({"run": what, "error": err.why, "log": str(err.log), "tail": err.tail()})
        print(
            f"  {what}: FAILED, {err.why} ({time.perf_counter() - start:.0f} s); last lines of {err.log}:\n"
            + "\n".join(f"    | {line}" for line in err.tail().splitlines()),
            flush=True,
        )
        return None
    print(f"  {what}: {summary(result) if summary else 'done'} ({time.perf_counter() - start:.0f} s)", flush=True)
    return result


def _summary(result: dict) -> str:
    return f"{steady(result):,.0f} real tokens/s, peak {result['peak_memory_mb'] / 1024:.1f} GB"


def figure_rows(
    name: str, shape: Shape, batch_tokens: int, mean_len: float, peak: float, runs: dict[str, list[dict | None]]
) -> tuple[list[dict], list[tuple]]:
    """The figures and table rows of one shape; a trainer whose every run failed gets a row
    saying so, one with some failed runs the median of the others and a note."""
    from benchmarks.common import median

    hf = [r for r in runs.get(HF_LABEL, []) if r]
    hf_tps = median([steady(r) for r in hf]) if hf else None
    figures, rows = [], []
    for label, results in runs.items():
        ok = [r for r in results if r]
        trainer = label if label in BASELINES.values() else f"this trainer ({label}){trial_note(ok)}{compile_note(ok)}"
        failed = len(results) - len(ok)
        if failed:
            trainer += f"; {failed} of {len(results)} run(s) failed"
        if not ok:
            figures.append(
                {
                    "shape": name,
                    "batch_tokens": batch_tokens,
                    "trainer": trainer,
                    "error": "every run failed",
                    "runs": 0,
                }
            )
            rows.append((f"{name} @ {batch_tokens}", trainer, "failed", "", "", ""))
            continue
        tps = median([steady(r) for r in ok])
        mem = max(r["peak_memory_mb"] for r in ok) / 1024
        fig = {
            "shape": name,
            "batch_tokens": batch_tokens,
            "trainer": trainer,
            "tokens_per_second": tps,
            "mfu": mfu(tps, shape, mean_len, peak),
            "peak_memory_gb": mem,
            "vs_hf": tps / hf_tps if hf_tps else None,
            "runs": len(ok),
        }
        figures.append(fig)
        rows.append(
            (
                f"{name} @ {batch_tokens}",
                trainer,
                f"{tps:,.0f}",
                f"{fig['mfu']:.1%}",
                f"{mem:.1f}",
                f"{fig['vs_hf']:.2f}x" if fig["vs_hf"] else "",
            )
        )
    return figures, rows


HEADER = ("shape @ tokens", "trainer", "real tokens/s", "MFU (6N + attn)", "peak GB", "vs HF")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[7])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--runs", type=int, default=2, help="interleaved runs of each trainer (median reported)")
    parser.add_argument("--batch-tokens", type=int, default=16384)
    parser.add_argument("--batch-tokens-8b", type=int, default=8192, help="tokens per micro-batch on the 8b shape")
    parser.add_argument(
        "--shapes", default="1b,8b", help="1b: both trainers; 8b: this trainer alone; tiny: both, for --allow-cpu"
    )
    parser.add_argument("--variants", default="default", help='this trainer\'s variants, e.g. "default;compile=true"')
    parser.add_argument("--peak-tflops", default="auto", help="the GPU's dense bf16 TFLOPs (auto: known GPUs)")
    parser.add_argument("--json", type=Path, help="also write the figures here (rewritten after every run)")
    parser.add_argument(
        "--log-dir",
        type=Path,
        help="each run's output (default: <json name>-logs/ next to --json, else a new temporary directory)",
    )
    parser.add_argument(
        "--run-timeout-s",
        type=float,
        default=0,
        help="kill a run after this many seconds and go on with the next (0: no limit)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the timed runs, profile each variant on the 1b shape: GPU time per step by kernel kind",
    )
    parser.add_argument(
        "--baselines",
        default="hf",
        help="comma-separated: hf (HF Trainer + peft), trl (TRL "
        "SFTTrainer, needs the bench extra); empty for none. Not on the 8b shape",
    )
    parser.add_argument(
        "--no-hf",
        action="store_true",
        help="no baseline (--baselines ''), e.g. when only "
        "comparing this trainer's variants; its runs take as long as this trainer's",
    )
    parser.add_argument(
        "--method",
        choices=tuple(LEARNING_RATE),
        default="lora",
        help="lora (r16 on all linear layers) or full (every weight), for every trainer compared",
    )
    parser.add_argument(
        "--allow-cpu",
        action="store_true",
        help="run on CPU when there is no GPU: checks this script end to end, figures meaningless",
    )
    args = parser.parse_args()
    # A time limit's SIGTERM (timeout, the device's command limit) unwinds like Ctrl-C: the run in
    # flight is killed, moto stopped, the cache removed, and the JSON keeps what was finished.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    variants = parse_variants(args.variants)
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if unknown := [s for s in shapes if s not in SHAPES]:
        raise SystemExit(f"--shapes: unknown {unknown}; choose from {sorted(SHAPES)}")
    baselines = [] if args.no_hf else [b.strip() for b in args.baselines.split(",") if b.strip()]
    if unknown := [b for b in baselines if b not in BASELINES]:
        raise SystemExit(f"--baselines: unknown {unknown}; choose from {', '.join(BASELINES)}")
    if clash := set(variants) & set(BASELINES.values()):
        raise SystemExit(f"--variants: {sorted(clash)} is a baseline's name")
    if min(args.batch_tokens, args.batch_tokens_8b) < MAX_SEQ_LEN:
        raise SystemExit(f"--batch-tokens and --batch-tokens-8b must be at least {MAX_SEQ_LEN} (the runs' max_seq_len)")
    if args.steps < 2 or args.runs < 1:
        raise SystemExit("--steps must be at least 2 (throughput is timed over the second half) and --runs at least 1")

    import importlib.util

    import torch

    if missing := [m for m in ("moto", "minio", "flask") if importlib.util.find_spec(m) is None]:
        raise SystemExit(
            f"gpu_compare needs {', '.join(missing)} (the S3 stand-in the trainer reads from): "
            "pip install 'moto[server]' minio, or on a machine without internet the wheels "
            "(docs/performance.md, \"For the next session with a GPU\")"
        )
    cuda = args.cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        raise SystemExit(
            "gpu_compare needs a CUDA GPU; none is visible here (torch.cuda.is_available() is False). "
            "Run it on a GPU machine; on CPU use python -m benchmarks.train_throughput (or --allow-cpu "
            "--shapes tiny to check this script itself)"
        )
    gpu = torch.cuda.get_device_name() if cuda else "CPU (--allow-cpu: figures not meaningful)"
    peak = (
        float(args.peak_tflops)
        if args.peak_tflops != "auto"
        else next((v for k, v in PEAK_BF16_TFLOPS.items() if k in gpu), None if cuda else 1.0)
    )
    if peak is None:
        raise SystemExit(f"unknown GPU {gpu!r}: pass --peak-tflops (its dense bf16 TFLOPs)")
    if args.log_dir is None:
        args.log_dir = (
            args.json.parent / f"{args.json.stem}-logs"
            if args.json
            else Path(tempfile.mkdtemp(prefix="gpu-compare-logs-"))
        )
    args.log_dir.mkdir(parents=True, exist_ok=True)
    print(f"{gpu}: each run's output in {args.log_dir}", flush=True)

    from transformers import AutoTokenizer

    from benchmarks.common import local_s3
    from trainer import data
    from trainer.store import delivery
    from trainer.evaluate.report import table
    from trainer.core.storage import Store

    rows, figures, profiles, failures = [], [], {}, []
    raw: dict[str, dict[str, list]] = {}

    def save(complete: bool = False) -> None:
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "gpu": gpu,
                        "complete": complete,
                        "figures": figures,
                        "profiles": profiles,
                        "failures": failures,
                        "runs": raw,
                        "args": sys.argv[1:],
                    },
                    indent=1,
                )
            )

    server = local_s3()
    store = Store.from_env()
    cache = tempfile.TemporaryDirectory(prefix="gpu-compare-cache-")  # the trainer processes inherit it
    os.environ["FINETUNE_CACHE_DIR"] = cache.name
    data_uri, _ = delivery.deliver_dataset("builtin:function-calling", "", store)
    train_jsonl = store.get_tree(data_uri) / "train.jsonl"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in shapes:
                shape = SHAPES[name]
                print(f"{name} shape: building a random model", flush=True)
                try:
                    model_dir = build_model(shape, Path(tmp) / name)
                except (RuntimeError, OSError) as err:  # out of memory or disk: the other shapes may still fit
                    failures.append({"run": f"{name}: building the model", "error": f"{type(err).__name__}: {err}"})
                    print(f"  {name}: FAILED to build the model ({type(err).__name__}: {str(err)[:300]})", flush=True)
                    save()
                    continue
                model_uri = seed_model(store, model_dir)
                batch_tokens = args.batch_tokens_8b if name == "8b" else args.batch_tokens
                tok = AutoTokenizer.from_pretrained(model_dir)
                encoded = data.encode_all(data.read_jsonl(train_jsonl), tok, MAX_SEQ_LEN)[0]
                lengths = [len(e["input_ids"]) for e in encoded]
                mean_len = sum(lengths) / len(lengths)
                with_base = baselines if name != "8b" else []
                runs: dict[str, list] = {v: [] for v in variants} | {BASELINES[b]: [] for b in with_base}
                raw[name] = runs
                for i in range(args.runs):
                    for k, (v, extra) in enumerate(variants.items()):
                        runs[v].append(
                            attempt(
                                f"{name} {v} run {i + 1}",
                                lambda: run_ours(model_uri, data_uri, args, extra, f"{name}-{i}-{k}", batch_tokens),
                                failures,
                                _summary,
                            )
                        )
                        save()
                    for b in with_base:
                        runs[BASELINES[b]].append(
                            attempt(
                                f"{name} {BASELINES[b].split(',')[0]} run {i + 1}",
                                lambda: run_baseline(
                                    b,
                                    model_dir,
                                    train_jsonl,
                                    args,
                                    round(batch_tokens / mean_len),
                                    Path(tmp) / f"{b}-{name}-{i}.json",
                                ),
                                failures,
                                _summary,
                            )
                        )
                        save()
                shape_figures, shape_rows = figure_rows(name, shape, batch_tokens, mean_len, peak, runs)
                figures += shape_figures
                rows += shape_rows
                save()
                print(table(rows, HEADER), flush=True)  # so far: the profiling runs below take minutes
                if args.profile and name in ("1b", "tiny"):
                    for k, (v, extra) in enumerate(variants.items()):
                        got = attempt(
                            f"{name} {v} profile",
                            lambda: run_profiled(model_uri, data_uri, args, extra, f"{name}-{k}"),
                            failures,
                        )
                        profiles[v] = got if got is not None else {"error": failures[-1]["error"]}
                        save()
                store.delete_prefix(model_uri.split("/", 3)[3])  # moto keeps objects in memory
                shutil.rmtree(model_dir)
    finally:
        server.stop()
        cache.cleanup()
    print(
        f"\n{gpu}, {args.steps} steps, tokens per micro-batch as in the shape column, median of {args.runs} "
        f"interleaved run(s), peak {peak:g} TFLOPs bf16"
    )
    print(table(rows, HEADER))
    if profiles:
        kinds = [k for k, _ in KERNEL_KINDS]
        print(
            f"\n{'GPU' if cuda else 'CPU'} kernel time per step (ms), profiled shape, torch.profiler over 3 steps "
            "after warm-up"
        )
        print(
            table(
                [
                    (v, *(f"{p[k]:.1f}" for k in kinds), f"{sum(p[k] for k in kinds):.1f}")
                    if "error" not in p
                    else (v, f"failed: {p['error']}", *[""] * len(kinds))
                    for v, p in profiles.items()
                ],
                ("variant", *kinds, "total"),
            )
        )
        for v, p in profiles.items():
            if p.get("top_kernels"):
                print(f"\ntop kernels, {v} (ms per step, calls per step, share of kernel time)")
                print(
                    table(
                        [
                            (
                                k["kernel"][:90],
                                f"{k['ms_per_step']:.1f}",
                                f"{k['calls_per_step']:.0f}",
                                f"{k['share']:.1%}",
                            )
                            for k in p["top_kernels"]
                        ],
                        ("kernel", "ms", "calls", "share"),
                    )
                )
    save(complete=True)
    if failures:
        print(
            f"\n{len(failures)} run(s) failed: "
            + "; ".join(f"{f['run']} ({f['error']})" for f in failures)
            + f". Logs: {args.log_dir}",
            flush=True,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
