"""make gpu-check   (on the GPU machine, in the repository root: python3 -m benchmarks.gpu_check --wheels .whl)
   make gpu-wheels  (here, before: the few wheels that machine lacks, into .whl/)
   CPU dry run of every part (tiny shapes, figures meaningless; make test runs it):
       python -m benchmarks.gpu_check --dry-run --out /tmp/gpu-check

The GPU path proven in one command, within a time budget (`--budget-s`, default 480 s), on the
GPU machine's own torch / transformers / peft (their versions are printed and recorded), writing
every figure as JSON under `--out` (default `$OUT`, the device tool's folder that comes back):

1. `env`: versions, the GPU, and its two ceilings measured here (an 8192^3 bf16 matmul, a 2 GiB
   device-to-device copy), so that MFU's denominator is a reading, not only a data sheet.
2. `tests`: tests/integration/test_gpu.py (every CUDA path we ship: flex-attention packing,
   fused LoRA against peft, the chunked loss, Liger, bf16 autocast, NCCL, inductor), per test.
3. `lora-1b`: LoRA r16 on a Llama-3.2-1B shape, this trainer against HF Trainer and TRL's
   SFTTrainer (benchmarks.gpu_compare: random weights, the built-in rows' real token lengths),
   then torch.profiler's top kernels of this trainer's step.
4. `lora-8b`: LoRA on a Llama-3.1-8B shape, this trainer alone.
5. `full-1b`: full fine-tuning of the 1B shape, this trainer against HF Trainer.
6. `qlora-1b`: QLoRA (bitsandbytes' CUDA build, where it imports) on the 1B shape.
7. `compile-1b`: `compile=true` with its compiled-vs-eager trial (trainer.recipe.compile_trial.CompileTrial).

Parts run in this order, each in its own processes with a time limit cut from what is left of the
budget; a part that fails or runs out of time costs only itself, and `gpu-check.json` (the
summary: every part's status, figures and the targets of issue 38, met or missed) is rewritten
after each part, so a command stopped by the device's limit still returns what it finished.
The logs of every run come back as logs.tar.gz. Exit status 0 when every part ran, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What the GPU machine's image lacks (../shared/NOTES.md, the device tool's KINDS.md), pinned to the
# versions `make test` runs here; all pure Python or abi3 except bitsandbytes, whose wheel carries
# libraries for every CUDA and ROCm release (43 MB): `make gpu-wheels` keeps only CUDA 13's, which the
# machine's torch (cu130) loads, and the CPU one.
GPU_WHEELS = (
    "minio==7.2.20",
    "argon2-cffi==25.1.0",
    "argon2-cffi-bindings==26.2.0",
    "cffi==2.1.1",
    "pycparser==3.12",
    "pycryptodome==4.4.0",  # minio: its S3 client
    "moto==5.2.5",
    "boto3==1.44.8",
    "botocore==1.44.8",
    "s3transfer==0.19.3",
    "jmespath==1.1.0",
    "cryptography==50.0.2",
    "xmltodict==1.0.4",
    "responses==0.26.3",
    "flask==3.1.3",
    "blinker==1.9.0",
    "itsdangerous==2.2.0",
    "flask-cors==6.0.5",  # moto: the S3 stand-in the trainer reads from, as in every CPU test
    "liger-kernel==0.8.5",  # this trainer's (and the baselines') fused kernels on CUDA
    "trl==1.16.0",
    "datasets==5.2.0",
    "dill==0.4.1",
    "multiprocess==0.70.19",  # the TRL baseline
    "bitsandbytes==0.50.2",  # method=qlora
)
WHEEL_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
WHEELS_LIMIT_MB = 48  # the device tool carries 64 MiB in all, the working tree (~9 MB) included
BNB_KEEP = ("libbitsandbytes_cuda130.so", "libbitsandbytes_cpu.so")

# Issue 38's targets, checked against the figures (name, part, what, predicate on the figures)
MFU_LORA_1B, VS_HF_LORA_1B, PEAK_GB_LORA_1B, MFU_LORA_8B = 0.45, 2.5, 30.0, 0.50


@dataclass
class Part:
    name: str
    what: str
    cap_s: float  # at most this long on a GPU, whatever is left of the budget
    args: list[str] = field(default_factory=list)  # benchmarks.gpu_compare's, for the compare parts
    dry_args: list[str] = field(default_factory=list)  # replacing the shape arguments on a --dry-run


COMPARE = ["--runs", "1", "--batch-tokens", "16384", "--batch-tokens-8b", "8192"]
DRY = ["--allow-cpu", "--shapes", "tiny", "--steps", "2", "--batch-tokens", "512"]
PARTS = (
    Part("env", "versions, the GPU, its measured matmul rate and copy bandwidth", 60),
    Part(
        "lora-1b",
        "LoRA 1B shape: this trainer, HF Trainer, TRL SFTTrainer; profile",
        240,
        ["--shapes", "1b", "--variants", "default", "--baselines", "hf,trl", "--profile"],
        ["--variants", "default", "--baselines", "hf,trl", "--profile"],
    ),
    Part(
        "lora-8b",
        "LoRA 8B shape, this trainer",
        200,
        ["--shapes", "8b", "--variants", "default", "--no-hf"],
        ["--variants", "default", "--no-hf"],
    ),
    # this trainer's run ends with a 7.4 GB checkpoint (weights and AdamW states): 63 s into the S3 stand-in
    Part(
        "full-1b",
        "full fine-tuning, 1B shape: this trainer, HF Trainer",
        270,
        ["--shapes", "1b", "--method", "full", "--variants", "default", "--baselines", "hf"],
        ["--method", "full", "--variants", "default", "--baselines", "hf"],
    ),
    # after the figures: with cold kernel caches the file took over 150 s on an H200 (flex attention and
    # inductor compile), with warm ones 93 s (2026-11-27)
    Part("tests", "tests/integration/test_gpu.py", 240),
    Part(
        "qlora-1b",
        "QLoRA 1B shape, this trainer (bitsandbytes' CUDA build)",
        120,
        ["--shapes", "1b", "--variants", "method=qlora", "--no-hf"],
        ["--variants", "method=qlora", "--no-hf"],
    ),
    Part(
        "compile-1b",
        "compile=true 1B shape, with its compiled-vs-eager trial",
        300,
        ["--shapes", "1b", "--variants", "compile=true", "--no-hf"],
    ),
)
MIN_PART_S = 45  # a part with less than this left is not started: it could not finish


def _env_part(cuda: bool) -> dict:
    """Versions, the GPU and its ceilings measured here (median of CUDA-event timings)."""
    out = {"python": sys.version.split()[0]}
    for name in (
        "torch",
        "transformers",
        "peft",
        "triton",
        "accelerate",
        "liger-kernel",
        "trl",
        "datasets",
        "bitsandbytes",
        "minio",
        "moto",
    ):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    import torch

    out["cuda"] = torch.version.cuda
    if not cuda:
        out["gpu"] = None
        return out
    props = torch.cuda.get_device_properties(0)
    out.update(
        gpu=props.name,
        gpus=torch.cuda.device_count(),
        memory_gb=round(props.total_memory / 2**30, 1),
        multiprocessors=props.multi_processor_count,
    )

    def timed(fn, reps: int = 10) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        return sorted(times)[len(times) // 2]

    def matmul_tflops(n: int = 8192) -> float:  # random data: zeros run faster than real data on these chips
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        return 2 * n**3 / timed(lambda: a @ b) / 1e12

    def copy_tb_per_s() -> float:
        src = torch.randn(2**30 // 2, device="cuda", dtype=torch.bfloat16)  # 1 GiB: read + written = 2 GiB
        dst = torch.empty_like(src)
        return 2 * src.numel() * 2 / timed(lambda: dst.copy_(src)) / 1e12

    out["matmul_bf16_tflops"], out["copy_tb_per_s"] = round(matmul_tflops(), 1), round(copy_tb_per_s(), 2)
    torch.cuda.empty_cache()  # the tensors went with the functions: the runs after this one get the memory
    return out


def _tests_part(junit: Path, log: Path) -> dict:
    """Per test: outcome, seconds, and the first line of a failure's message; from pytest's
    verbose lines when it was stopped before writing its report (a time limit)."""
    tests = []
    if not junit.exists():
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            if got := re.match(r"\S+\.py::(\S+)\s+(PASSED|FAILED|SKIPPED|ERROR)\b", line):
                tests.append({"test": got[1], "outcome": got[2].lower(), "seconds": None, "message": ""})
        counts = {o: sum(t["outcome"] == o for t in tests) for o in ("passed", "failed", "error", "skipped")}
        return {"counts": counts, "tests": tests, "complete": False}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            if (node := case.find(kind)) is not None:
                outcome, message = {"failure": "failed"}.get(kind, kind), (node.get("message") or "")[:300]
        tests.append(
            {"test": case.get("name"), "outcome": outcome, "seconds": float(case.get("time") or 0), "message": message}
        )
    counts = {o: sum(t["outcome"] == o for t in tests) for o in ("passed", "failed", "error", "skipped")}
    return {"counts": counts, "tests": tests, "complete": True}


def targets(parts: dict) -> list[dict]:
    """Issue 38's targets, each met, missed, or not measured (the part did not give the figure)."""

    def figure(part: str, trainer_prefix: str) -> dict | None:
        figures = (parts.get(part) or {}).get("figures") or []
        return next((f for f in figures if f["trainer"].startswith(trainer_prefix) and "error" not in f), None)

    out = []

    def check(name: str, value, goal: float, higher: bool, unit: str = "") -> None:
        met = None if value is None else (value >= goal if higher else value <= goal)
        out.append({"target": name, "value": value, "goal": f"{'>=' if higher else '<='} {goal:g}{unit}", "met": met})

    ours_1b = figure("lora-1b", "this trainer (default)")
    check("LoRA 1B MFU", ours_1b and round(ours_1b["mfu"], 4), MFU_LORA_1B, True)
    check(
        "LoRA 1B tokens/s vs HF Trainer (pad to longest)",
        ours_1b and ours_1b.get("vs_hf") and round(ours_1b["vs_hf"], 3),
        VS_HF_LORA_1B,
        True,
        "x",
    )
    check("LoRA 1B peak GB", ours_1b and round(ours_1b["peak_memory_gb"], 2), PEAK_GB_LORA_1B, False, " GB")
    ours_8b = figure("lora-8b", "this trainer (default)")
    check("LoRA 8B MFU", ours_8b and round(ours_8b["mfu"], 4), MFU_LORA_8B, True)
    trial = next(
        (
            r
            for r in ((parts.get("compile-1b") or {}).get("runs", {}).get("1b", {}).get("compile=true") or [])
            if r and "compile_trial_compiled_tokens_per_second" in r
        ),
        None,
    )
    # "never slower than eager after its trial": what it kept runs at least as fast as eager did in the trial
    kept = trial and (
        trial["compile_trial_compiled_tokens_per_second"]
        if trial["compiled_layers"]
        else trial["compile_trial_eager_tokens_per_second"]
    )
    check(
        "compile=true kept / eager tokens/s in its trial",
        trial and round(kept / trial["compile_trial_eager_tokens_per_second"], 3),
        1.0,
        True,
        "x",
    )
    return out


def _run(cmd: list[str], log: Path, timeout_s: float, env: dict[str, str] | None = None) -> tuple[int, bool]:
    """(exit status, timed out): `cmd` with its output in `log`, stopped with its whole process tree
    (trainers, torchrun's workers, inductor's compile workers) after `timeout_s`, and on our own exit."""
    from benchmarks.gpu_compare import RunFailed, run_logged

    try:
        run_logged(cmd, log, timeout_s, env=env)
        return 0, False
    except RunFailed as err:
        return (124 if "timed out" in err.why else 1), "timed out" in err.why


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None,
        help="where the JSON figures go (default: $OUT)",
    )
    parser.add_argument("--budget-s", type=float, default=480, help="the whole check's time limit (default 480)")
    parser.add_argument(
        "--steps", type=int, default=20, help="training steps of each timed run (the second half is timed)"
    )
    parser.add_argument("--parts", default=",".join(p.name for p in PARTS), help="which parts, in order")
    parser.add_argument("--dry-run", action="store_true", help="on CPU, tiny shapes: checks this script end to end")
    parser.add_argument(
        "--wheels",
        type=Path,
        help="install these wheels (make gpu-wheels) into a temporary folder first, for this process and its children",
    )
    parser.add_argument(
        "--fetch-wheels",
        type=Path,
        help="download GPU_WHEELS for the GPU machine into this folder, then exit (make gpu-wheels)",
    )
    args = parser.parse_args()
    if args.fetch_wheels:
        return fetch_wheels(args.fetch_wheels)
    names = [p.strip() for p in args.parts.split(",") if p.strip()]
    problems = [
        f"--parts: unknown {n!r} (known: {', '.join(p.name for p in PARTS)})"
        for n in names
        if n not in {p.name for p in PARTS}
    ]
    if args.out is None:
        problems.append("--out: where should the figures go? Pass --out DIR (on the device tool, $OUT is set)")
    if not (60 <= args.budget_s <= 3600):
        problems.append(f"--budget-s must be between 60 and 3600, got {args.budget_s:g}")
    if args.steps < 4:
        problems.append(f"--steps must be at least 4 (the second half is timed), got {args.steps}")
    if args.wheels and not sorted(args.wheels.glob("*.whl")):
        problems.append(
            f"--wheels {args.wheels}: no .whl files there; run make gpu-wheels first (on a machine "
            "with a package index)"
        )
    if problems:
        print("gpu_check: " + "; ".join(problems), file=sys.stderr)
        return 2
    if args.wheels and not os.environ.get("GPU_CHECK_SITE"):
        return reexec_with_wheels(args.wheels)

    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.dry_run:
        print(
            "gpu_check: no CUDA GPU is visible (torch.cuda.is_available() is False). Run it on a GPU machine "
            "(make gpu-check), or here with --dry-run to check the script",
            file=sys.stderr,
        )
        return 2
    deadline = time.monotonic() + args.budget_s
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a time limit's SIGTERM unwinds: children stopped
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    logs = work / "logs"
    logs.mkdir()
    summary: dict = {
        "dry_run": args.dry_run,
        "budget_s": args.budget_s,
        "steps": args.steps,
        "parts": {},
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    figures: dict[str, dict] = {}

    def save() -> None:
        summary["targets"] = targets(figures)
        (args.out / "gpu-check.json").write_text(json.dumps(summary, indent=1))
        with tarfile.open(args.out / "logs.tar.gz", "w:gz") as tar:
            tar.add(logs, arcname="logs")

    failed = 0
    try:
        for part in (p for p in PARTS if p.name in names):
            left = deadline - time.monotonic()
            status = {"what": part.what}
            summary["parts"][part.name] = status
            if part.name == "compile-1b" and args.dry_run:
                status.update(
                    status="skipped",
                    why="inductor on CPU takes minutes; tests/unit/test_compile_trial.py covers the trial",
                )
                continue
            if part.name == "lora-8b" and args.dry_run:
                status.update(status="skipped", why="on the tiny shape, lora-1b's run of this trainer")
                continue
            if part.name == "qlora-1b" and not qlora_ready(cuda):
                status.update(
                    status="skipped", why="bitsandbytes is not importable with this torch (make gpu-wheels carries it)"
                )
                continue
            if left < MIN_PART_S:
                status.update(
                    status="skipped",
                    why=f"{max(left, 0):.0f} s of the --budget-s left: make gpu-check "
                    f"GPU_CHECK_ARGS='--parts {part.name}' runs it",
                )
                failed += 1
                continue
            limit = left if args.dry_run else min(part.cap_s, left)
            print(f"▶ {part.name}: {part.what} (at most {limit:.0f} s)", flush=True)
            start = time.monotonic()
            try:
                status.update(run_part(part, args, cuda, limit, work, logs, figures))
            except Exception as err:  # noqa: BLE001 - one part's failure must not cost the others
                status.update(status="failed", error=f"{type(err).__name__}: {err}")
            status["seconds"] = round(time.monotonic() - start, 1)
            failed += status["status"] != "ok"
            print(
                f"  {part.name}: {status['status']} ({status['seconds']:.0f} s)"
                + (f": {status.get('error')}" if status.get("error") else ""),
                flush=True,
            )
            save()
    finally:
        summary["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        save()
        shutil.rmtree(work, ignore_errors=True)
    print_summary(summary, figures)
    return 1 if failed else 0


def run_part(part: Part, args, cuda: bool, limit: float, work: Path, logs: Path, figures: dict) -> dict:
    if part.name == "env":
        env = _env_part(cuda)
        figures["env"] = env
        print("  " + ", ".join(f"{k} {v}" for k, v in env.items() if v is not None), flush=True)
        return {"status": "ok", "env": env}
    if part.name == "tests":
        junit = work / "junit.xml"
        code, timed_out = _run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-v",
                "-p",
                "no:cacheprovider",
                "-o",
                "addopts=",
                "tests/integration/test_gpu.py",
                f"--junitxml={junit}",
            ],
            logs / "tests.log",
            limit,
        )
        got = _tests_part(junit, logs / "tests.log")
        (args.out / "tests.json").write_text(json.dumps(got, indent=1))
        bad = got["counts"].get("failed", 0) + got["counts"].get("error", 0)
        return {"status": "timed out" if timed_out else ("failed" if code or bad else "ok"), "counts": got["counts"]}
    out = args.out / f"{part.name}.json"
    compare = [
        sys.executable,
        "-m",
        "benchmarks.gpu_compare",
        *COMPARE,
        "--steps",
        str(args.steps),
        "--json",
        str(out),
        "--log-dir",
        str(logs / part.name),
    ]
    if args.dry_run:
        compare += [*part.dry_args, *DRY]
    else:
        compare += [*part.args, "--run-timeout-s", f"{limit:.0f}"]
    code, timed_out = _run(compare, logs / f"{part.name}.log", limit)
    got = json.loads(out.read_text()) if out.exists() else {}
    figures[part.name] = got
    status = "timed out" if timed_out else ("ok" if code == 0 and got.get("complete") else "failed")
    return {
        "status": status,
        "figures": got.get("figures", []),
        **(
            {"failures": [{k: f[k] for k in ("run", "error") if k in f} for f in got["failures"]]}
            if got.get("failures")
            else {}
        ),
    }


def qlora_ready(cuda: bool) -> bool:
    """bitsandbytes imports and, on a GPU, found its CUDA library (else method=qlora cannot run)."""
    if importlib.util.find_spec("bitsandbytes") is None:
        return False
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import bitsandbytes, torch; from bitsandbytes.cextension import "
            "lib; assert not torch.cuda.is_available() or lib.compiled_with_cuda",
        ],
        capture_output=True,
        timeout=120,
    )
    return proc.returncode == 0


def print_summary(summary: dict, figures: dict) -> None:
    from trainer.evaluate.report import table

    env = figures.get("env") or {}
    print(
        f"\n{env.get('gpu') or 'CPU (dry run: figures meaningless)'}; torch {env.get('torch')}, transformers "
        f"{env.get('transformers')}, peft {env.get('peft')}; measured {env.get('matmul_bf16_tflops')} TFLOP/s "
        f"bf16 matmul, {env.get('copy_tb_per_s')} TB/s copy"
    )

    def note(p: dict) -> str:
        failures = "; ".join(f"{f['run']}: {f['error']}" for f in p.get("failures", []))
        return (
            p.get("why")
            or p.get("error")
            or failures
            or ", ".join(f"{v} {k}" for k, v in p.get("counts", {}).items() if v)
        )[:100]

    print(
        table(
            [(n, p.get("status", ""), f"{p.get('seconds', '')}", note(p)) for n, p in summary["parts"].items()],
            ("part", "status", "seconds", "note"),
        )
    )
    rows = [
        (
            name,
            f["trainer"][:70],
            f"{f['tokens_per_second']:,.0f}",
            f"{f['mfu']:.1%}",
            f"{f['peak_memory_gb']:.1f}",
            f"{f['vs_hf']:.2f}x" if f.get("vs_hf") else "",
        )
        for name, got in figures.items()
        if name != "env"
        for f in got.get("figures", [])
        if "error" not in f
    ]
    if rows:
        print(table(rows, ("part", "trainer", "real tokens/s", "MFU", "peak GB", "vs HF")))
    print(
        table(
            [
                (
                    t["target"],
                    "" if t["value"] is None else f"{t['value']:g}",
                    t["goal"],
                    {True: "met", False: "MISSED", None: "not measured"}[t["met"]],
                )
                for t in summary["targets"]
            ],
            ("target", "value", "goal", ""),
        )
    )


def reexec_with_wheels(wheels: Path) -> int:
    """Install the wheels into a temporary folder (no index, no dependencies: they are the closure
    GPU_WHEELS lists) and run this command again with it first on PYTHONPATH, children included."""
    site = Path(tempfile.mkdtemp(prefix="gpu-check-site-"))
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--no-cache-dir",
                "--target",
                str(site),
                *map(str, sorted(wheels.glob("*.whl"))),
            ]
        )
        if proc.returncode:
            print(
                f"gpu_check: pip could not install the wheels in {wheels} (above); run make gpu-wheels again",
                file=sys.stderr,
            )
            return 2
        env = {
            **os.environ,
            "GPU_CHECK_SITE": str(site),
            "PYTHONPATH": os.pathsep.join(filter(None, (str(site), str(ROOT), os.environ.get("PYTHONPATH")))),
        }
        child = subprocess.Popen([sys.executable, "-m", "benchmarks.gpu_check", *sys.argv[1:]], env=env, cwd=ROOT)
        try:
            return child.wait()
        except BaseException:
            child.send_signal(signal.SIGTERM)  # it stops its own runs (its SIGTERM handler), then exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=30)
            child.kill()
            raise
    finally:
        shutil.rmtree(site, ignore_errors=True)


def fetch_wheels(folder: Path) -> int:
    """GPU_WHEELS for CPython 3.12 on x86-64 Linux (the GPU machine's), bitsandbytes slimmed."""
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        *(a for p in WHEEL_PLATFORMS for a in ("--platform", p)),
        "-d",
        str(folder),
        *GPU_WHEELS,
    ]
    if subprocess.run(cmd).returncode:
        print("gpu_check: pip could not download the wheels (above): this needs a package index", file=sys.stderr)
        return 2
    for wheel in folder.glob("bitsandbytes-*.whl"):
        slim_wheel(wheel, lambda name: not name.endswith(".so") or name.rsplit("/", 1)[-1] in BNB_KEEP)
    sizes = {w.name: w.stat().st_size for w in sorted(folder.glob("*.whl"))}
    for name, size in sizes.items():
        print(f"{size / 2**20:7.2f} MB  {name}")
    total = sum(sizes.values()) / 2**20
    print(f"{total:7.2f} MB  in all ({len(sizes)} wheels)")
    if total > WHEELS_LIMIT_MB:
        print(
            f"gpu_check: {total:.1f} MB of wheels is over {WHEELS_LIMIT_MB} MB (the device carries 64 MiB with "
            "the working tree): remove older versions from the folder",
            file=sys.stderr,
        )
        return 2
    return 0


def slim_wheel(wheel: Path, keep) -> None:
    """Rewrite `wheel` without the files `keep` rejects, its RECORD to match (pip checks it)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if not keep(info.filename):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                data = b"".join(
                    line for line in data.splitlines(keepends=True) if keep(line.split(b",", 1)[0].decode())
                )
            dst.writestr(info, data)
    wheel.write_bytes(buf.getvalue())


if __name__ == "__main__":
    sys.exit(main())
