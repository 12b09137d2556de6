"""The benchmarks' checkable parts: the GPU benchmark's FLOP accounting and command line without CUDA, eval_speed's
figures and command line, and (marked bench) the benchmarks' --quick runs end to end."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.unit.test_benchmarks import _gone


def test_a_run_past_its_time_limit_is_killed_with_its_children_and_reported(tmp_path):
    """The timeout's own path (its message), and no child left: decided by what happened, not by the clock."""
    from benchmarks.gpu_compare import RunFailed, run_logged

    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(c.pid)); print('step 1\\rstep 2', flush=True); time.sleep(60)"
    )
    with pytest.raises(RunFailed, match=r"timed out after 10 s") as err:  # time to start under load
        run_logged([sys.executable, "-c", script], tmp_path / "run.log", timeout_s=10)
    assert err.value.tail() == "step 2"  # a progress bar's last state
    assert _gone(int(pid_file.read_text()))  # no orphan


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path of the script; on a GPU run it for real")
def test_every_path_runs_on_cpu_and_a_failing_variant_costs_only_its_row(tmp_path):
    """The script end to end (--allow-cpu, the tiny shape): this trainer, the HF baseline, a
    variant that fails (exit 2), --json, and the per-run logs."""
    import json

    import os

    out = tmp_path / "gc.json"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    fixed = Path("/tmp/baseline-hf")  # where the HF baseline wrote, whatever TMPDIR said
    fixed_before = fixed.exists()
    # the baselines' runs are gpu_check's dry run's (below)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.gpu_compare",
            "--allow-cpu",
            "--shapes",
            "tiny",
            "--steps",
            "2",
            "--runs",
            "1",
            "--batch-tokens",
            "512",
            "--variants",
            "default;lora_r=0",
            "--no-hf",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the HF baseline left /tmp/baseline-hf behind; torch's compile cache (torchinductor_<user>) stays on purpose
    left = [p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_")]
    assert not left and (fixed_before or not fixed.exists()), left
    assert "tiny lora_r=0 run 1: FAILED, exit status 2" in proc.stdout and "lora_r must be > 0" in proc.stdout
    got = json.loads(out.read_text())
    assert got["complete"] and [f["run"] for f in got["failures"]] == ["tiny lora_r=0 run 1"]
    trainers = {f["trainer"]: f for f in got["figures"]}
    assert trainers["this trainer (default)"]["tokens_per_second"] > 0
    assert trainers["this trainer (lora_r=0); 1 of 1 run(s) failed"]["error"] == "every run failed"
    assert (tmp_path / "gc-logs" / "compare-tiny-0-0.log").exists()


@pytest.mark.bench  # tiny HF Trainer and TRL runs beside ours: ~3 min of make test's 15; make test-bench
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path of the script; on a GPU run make gpu-check")
def test_gpu_checks_dry_run_runs_every_part_on_cpu_and_writes_its_figures(tmp_path):
    """make gpu-check's script end to end on CPU (tiny shapes), so that what runs on a lent GPU
    once in a while has run here on every commit: each part's processes (this trainer, HF
    Trainer, TRL, full fine-tuning, QLoRA, the profiler), the JSON the device tool brings back,
    the targets read from it, the logs, and nothing left behind."""
    import json
    import os
    import tarfile

    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--dry-run", "--steps", "4", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    got = json.loads((out / "gpu-check.json").read_text())
    status = {name: part["status"] for name, part in got["parts"].items()}
    assert status == {
        "env": "ok",
        "lora-1b": "ok",
        "lora-8b": "skipped",
        "tests": "ok",
        "full-1b": "ok",
        "qlora-1b": "ok",
        "compile-1b": "skipped",
    }, status
    assert got["parts"]["tests"]["counts"]["skipped"] >= 7  # CUDA-only tests, each collected and skipped
    trainers = {f["trainer"] for f in got["parts"]["lora-1b"]["figures"]}
    assert trainers == {
        "this trainer (default)",
        "HF Trainer, pad to longest, bf16",
        "TRL SFTTrainer, pad to longest, bf16",
    }, trainers
    assert {f["trainer"] for f in got["parts"]["full-1b"]["figures"]} == {
        "this trainer (default)",
        "HF Trainer, pad to longest, bf16",
    }
    assert all(
        f["tokens_per_second"] > 0 for p in ("lora-1b", "full-1b", "qlora-1b") for f in got["parts"][p]["figures"]
    )
    lora = json.loads((out / "lora-1b.json").read_text())
    assert "default" in lora["profiles"] and "error" not in lora["profiles"]["default"]
    targets = {t["target"]: t for t in got["targets"]}
    assert targets["LoRA 1B peak GB"]["met"] is True and targets["LoRA 8B MFU"]["met"] is None  # not measured
    with tarfile.open(out / "logs.tar.gz") as tar:
        assert "logs/lora-1b/trl-tiny-0.log" in tar.getnames()
    # the device tool brings back at most 8 files, none deeper than 2 folders
    assert len(list(out.iterdir())) <= 8 and all(p.is_file() for p in out.iterdir())
    left = [p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_")]
    assert not left, left
    assert "TRL SFTTrainer" in proc.stdout and "LoRA 1B MFU" in proc.stdout


@pytest.mark.bench
def test_real_model_quick_run_prints_every_figure_and_leaves_no_process(tmp_path):
    """benchmarks.real_model --quick end to end (SmolLM2 from the PyPI cache, the whole pipeline, vLLM, TRL where the
    `bench` extra is installed): the printed table's structure, not its figures, and nothing left running.
    `make test-bench` (4-5 min); `make test` has the same model trained and served in
    tests/test_real_model_serving.py."""
    import importlib.util
    import json

    import psutil

    from tests.real_models import smollm2_model_dir

    # the cached conversion of the GGUF (tests/test_gguf.py delivers the .gguf itself): the run skips converting it
    model = smollm2_model_dir()
    work, out = tmp_path / "work", tmp_path / "rm.json"
    trl = importlib.util.find_spec("trl") is not None
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.real_model",
            "--quick",
            "--work-dir",
            str(work),
            "--model-source",
            str(model),
            "--json",
            str(out),
            *([] if trl else ["--skip-trl"]),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    table = proc.stdout[proc.stdout.index("== real-model benchmark: SmolLM2-135M-Instruct") :]
    assert re.search(r"^date \d{4}-\d\d-\d\d \d\d:\d\d.*; machine \d+ CPU cores", table, re.M)
    stages = dict(
        re.findall(
            r"^(validate-params|deliver-model|deliver-dataset|finetune|evaluate|merge-lora|deploy)"
            r"\s+(\d+\.\d)\s*$",
            table,
            re.M,
        )
    )
    assert set(stages) == {
        "validate-params",
        "deliver-model",
        "deliver-dataset",
        "finetune",
        "evaluate",
        "merge-lora",
        "deploy",
    }, table
    assert re.search(r"^pipeline \(run_local\) wall time\s+\d+\.\d", table, re.M)
    assert re.search(r"^trainer: 2 steps, [\d,]+ tokens in", table, re.M)
    assert "held-out tool-call exact match through the endpoint (http://127.0.0.1:" in table
    for model in ("base", "tuned"):  # rows, exact, accuracy, answered with a tool call, seconds
        assert re.search(rf"^{model}\s+8\s+\d\s+\d+\.\d%\s+\d\s+\d+\s*$", table, re.M), table
    # issue 18's parity: the served model (base and trained adapter) renders each held-out prompt with its tools
    # into exactly the token ids the training encoder made of it (vLLM's /tokenize)
    assert "== the training encoder's: 16/16 (row, model) pairs" in table and "first difference" not in table
    if trl:
        assert re.search(r"^\s+this trainer\s+TRL SFTTrainer \(pad to longest, fp32\)\s+ratio", table, re.M)
        assert re.search(r"^median\s+\d+\s+\d+\s+\d+\.\d\dx\s*$", table, re.M), table
        assert re.search(r"^tokens per step\s+\d+\s+\d+", table, re.M)
    else:
        assert "training tokens/s beside TRL: skipped (--skip-trl)" in table
    got = json.loads(out.read_text())
    assert got["quick"] and got["accuracy"]["rows"] == 8 and got["settings"]["steps"] == 2
    assert got["prompt_parity"]["equal"] == got["prompt_parity"]["rows"] == 16
    assert (got["throughput"] is not None) == trl
    leftovers = [
        p.info for p in psutil.process_iter(["pid", "cmdline"]) if str(work) in " ".join(p.info["cmdline"] or [])
    ]
    assert not leftovers  # the kept vLLM server, trainers and TRL runs are all stopped


@pytest.mark.bench
def test_eval_speed_quick_run_measures_both_paths_and_leaves_no_process(tmp_path):
    """benchmarks.eval_speed --quick end to end (SmolLM2 from the PyPI cache, a 2-step adapter, evaluate() with
    engine=hf and engine=vllm on the same rows): the report's structure, not its figures, and nothing left running.
    ~2-3 min here."""
    import json

    import psutil

    from tests.real_models import smollm2_model_dir

    work, out = tmp_path / "work", tmp_path / "es.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.eval_speed",
            "--quick",
            "--work-dir",
            str(work),
            "--model-source",
            str(smollm2_model_dir()),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    text = proc.stdout[proc.stdout.index("== evaluation speed: SmolLM2-135M-Instruct") :]
    assert re.search(r"^HF generate\s+8\s+\d+\.\d\s+\d+\.\d{3}\s", text, re.M), text
    assert re.search(r"^endpoint \(vLLM\)\s+8\s+\d+\.\d\s+\d+\.\d{3}\s", text, re.M), text
    assert re.search(r"^endpoint / HF\s+\d+\.\d\dx\s+\d+\.\d\dx", text, re.M), text
    assert re.search(r"^same answer on both paths .*: base \d/4, tuned \d/4$", text, re.M), text
    got = json.loads(out.read_text())
    assert [got["paths"][e]["engine"] for e in ("hf", "vllm")] == ["hf", "vllm"]
    assert got["paths"]["vllm"]["profile"]["server_start_s"] > 0 and got["paths"]["hf"]["profile"]["rows"] == 4
    assert set(got["agreement"]["same_answers"]) == {"base", "tuned"}
    leftovers = [
        p.info for p in psutil.process_iter(["pid", "cmdline"]) if str(work) in " ".join(p.info["cmdline"] or [])
    ]
    assert not leftovers  # the trainer and the vLLM server are stopped
