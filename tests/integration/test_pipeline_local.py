"""The whole pipeline under kfp.local, as `make demo` runs it (defaults: built-in tiny model
and data; 300 training steps instead of the demo's 800),
checking that the tuned model beats the base one, that the console stays short while the log
file keeps everything, and that the run is kept under the runs directory."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.console import PROGRESS


ROOT = Path(__file__).resolve().parents[2]
# Progress bars print on a clock (every few seconds): how many lines they take depends on the machine's speed
# (20 on 2026-12-07 with another training beside the run, which made 86 lines in all), so they are counted apart;
# every other line the console shows is fixed by the run (67 then, the register step's three included).
MAX_CONSOLE_LINES = 70


def test_run_local_end_to_end(tmp_path, s3_env):
    """Against an S3 endpoint given on the command line (as with a real MinIO), registering the
    model in a (fake) Kubeflow Model Registry."""
    from tests.fakes.registry_fake_api import FakeRegistry

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": "very-secret-value-42", "TMPDIR": str(tmp)}
    runs_dir = tmp_path / "runs"
    with FakeRegistry() as registry:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.run_local",
                "--pipeline-root",
                str(tmp_path / "root"),
                "--output-dir",
                str(tmp_path / "out"),
                "--runs-dir",
                str(runs_dir),
                "--s3-endpoint",
                s3_env["S3_ENDPOINT"],
                "--param",
                "eval_max_rows=100",
                "--param",
                "max_steps=300",
                # 300 steps call tools on some irrelevance rows (62.5% of them answered in text, against the random
                # base's 100%): the per-category gate is the gate tests', this run must deploy and register
                "--param",
                "max_category_drop=1.0",
                "--param",
                f"registry_address={registry.url}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    assert not list(tmp.iterdir()), list(tmp.iterdir())  # kfp.local's workspace and the tasks' files went too
    [version] = registry.state.versions.values()  # the register step ran, with the run's lineage
    assert version["customProperties"]["base_model_source"]["string_value"] == "builtin:tiny-llama"
    assert "eval_tuned_fc_accuracy" in version["customProperties"]
    out = proc.stdout
    lines = (out + proc.stderr).splitlines()
    fixed = [line for line in lines if not PROGRESS.match(line.strip())]  # the console's own tqdm pattern
    assert len(fixed) <= MAX_CONSOLE_LINES, f"{len(fixed)} console lines besides progress bars:\n" + out
    assert len(lines) - len(fixed) >= 4  # the bars are there: training, eval loss, base, tuned
    for task in (
        "validate-params",
        "deliver-model",
        "deliver-dataset",
        "finetune",
        "evaluate",
        "merge-lora",
        "deploy",
        "register",
    ):
        assert re.search(rf"✓ {task} \(\d+\.\ds\)", out), task
    assert "executor_input" not in out and "parameterValues" not in out
    # every assistant turn asked: 100 rows, 104 turns (the 4 multi_turn rows' calls too); 96 of them calls
    acc = re.search(r"function-calling accuracy \(96 turns\)\s+([\d.]+)%\s+([\d.]+)%", out)
    loss = re.search(r"eval loss\s+([\d.]+)\s+([\d.]+)", out)
    assert acc and loss, out[-3000:]
    assert float(acc.group(2)) > float(acc.group(1)) + 20, acc.group(0)
    assert float(loss.group(2)) < float(loss.group(1)), loss.group(0)
    # the BFCL-style table: AST accuracy over every category, then each category (the built-in eval split has all)
    assert re.search(r"function-calling AST accuracy \(104 turns\)\s+[\d.]+%\s+[\d.]+%", out), out[-3000:]
    for category, rows in (("simple", 5), ("multiple", 87), ("parallel", 4), ("irrelevance", 4), ("multi_turn", 4)):
        assert re.search(rf"(?m)^  {category} \({rows} turns\)\s+[\d.]+%", out), category
    # The server is stopped after the run: no URL to a dead endpoint, and the verdict is the smoke test's.
    assert "endpoint: stopped after the run (smoke test passed in" in out
    assert not re.search(r"http://127\.0\.0\.1:\d+/v1", out.split("== base vs tuned ==")[1])
    merged = tmp_path / "out" / "merged-model"
    assert (merged / "config.json").exists() and (merged / "model.safetensors").exists()

    # The run is kept: record, full log (path printed), HTML reports, TensorBoard events.
    (run_dir,) = [p for p in runs_dir.iterdir() if (p / "run.json").exists()]
    assert f"full log: {run_dir / 'run.log'}" in out
    log = (run_dir / "run.log").read_text()
    assert "Got executor_input" in log and len(log.splitlines()) > len(lines)
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "succeeded" and record["params"]["eval_max_rows"] == 100
    assert record["params"]["max_steps"] == 300
    assert record["metrics"]["evaluate"]["fc_rows"] == 96 and record["metrics"]["evaluate"]["eval_turns"] == 104
    assert record["metrics"]["deploy"]["smoke_ok"] == 1
    assert record["dataset"]["rows"] == {"train": 3600, "eval": 240} and record["dataset"]["irrelevance_share"] == 0
    assert {p.name for p in (run_dir / "reports").glob("*.html")} >= {"finetune-report.html", "evaluate-examples.html"}
    assert list((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    # the model server's log, which kfp.local's clean-up of its workspace took away with TMPDIR's files
    assert f"component logs (the model server's too): {run_dir / 'logs'}" in out
    [server_log] = (run_dir / "logs").glob("vllm-*-server.log")
    assert "/v1/chat/completions" in server_log.read_text(errors="replace")
    # credentials handed to components through env must not leak into logs or artifacts
    assert "very-secret-value-42" not in out + proc.stderr
    for path in [*(tmp_path / "root").rglob("*"), *runs_dir.rglob("*")]:
        if path.is_file():
            assert b"very-secret-value-42" not in path.read_bytes(), path


@pytest.mark.slow  # three trials trained and served: 5 min; tests/integration/test_sweep.py runs the sweep in make test
def test_local_sweep_copies_the_winner_out_and_shows_each_trials_lines(tmp_path, s3_env):
    """A sweep that deploys its winner (picked by eval loss) ends like a finetune run: the merged
    model copied out, the endpoint's smoke verdict; the console shows each trial's own messages
    and none of kfp.local's `----` rules."""
    from tests.integration.test_sweep import statuses

    runs_dir, out_dir = tmp_path / "runs", tmp_path / "out"
    trials = '[{"lora_r": 4, "lora_alpha": 8, "learning_rate": 0.003}, {"lora_r": 8, "lora_alpha": 16, "learning_rate": 0.001}]'
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.run_local",
            "--pipeline",
            "sweep",
            "--parallelism",
            "2",
            "--pipeline-root",
            str(tmp_path / "root"),
            "--output-dir",
            str(out_dir),
            "--runs-dir",
            str(runs_dir),
            "--s3-endpoint",
            s3_env["S3_ENDPOINT"],
            "--param",
            f"trials={trials}",
            "--param",
            "max_steps=40",
            "--param",
            "eval_max_rows=20",
            "--param",
            "nodes=1",
            "--param",
            "select_metric=eval_loss",
            "--param",
            "min_gain=0.5",
            "--param",
            "max_category_drop=1.0",
        ],  # 40 steps may call tools where the random base answered text
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    out = proc.stdout
    # both trials trained and scored, the winner (eval loss at least 0.5 under the base's) merged and deployed
    done = statuses(tmp_path / "root")
    assert done.count(("finetune", "SUCCESS")) == 2 and done.count(("evaluate", "SUCCESS")) == 2
    assert done.count(("evaluate-base", "SUCCESS")) == 1  # the base scored once, not in each trial
    assert out.count("✓ evaluate (") == 2 and out.count("✓ finetune (") == 2  # no trial's line lost
    assert ("deploy", "SUCCESS") in done and ("merge-lora", "SUCCESS") in done
    assert not any(t == "not-deployed" for t, _ in done)
    assert "deploying trial" in out and "| 0" in out and "| 1" in out
    reports = list((tmp_path / "root").rglob("finetune/report"))
    assert len(reports) == 2 and all("data:image/png;base64," in r.read_text() for r in reports)
    assert (out_dir / "merged-model" / "config.json").exists(), out[-3000:]
    assert f"copied to {out_dir / 'merged-model'}" in out
    # 40 steps may leave the winner too undertrained to call tools: the endpoint's line either way, as for finetune.
    assert "endpoint: stopped after the run (" in out, out[-3000:]
    assert not re.search(r"(?m)^\s*-{20,}\s*$", out), out
    # Each trial's evaluation says its numbers ("held-out: 20 rows (20 tool-call, ...)"), once per trial.
    assert len(re.findall(r"(?m)^    held-out: \d+ rows \(\d+ tool-call", out)) == 2, out
    (run_dir,) = [p for p in runs_dir.iterdir() if (p / "run.json").exists()]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "succeeded" and record["merged_model"].startswith("s3://")


def _hermes_file(path: Path) -> Path:
    """Built-in tool rows written as NousResearch's hermes-function-calling-v1 writes them (a user's own data in a
    public set's format): <tools> in the system turn, each call a <tool_call> of the gpt turn."""
    from trainer.data import builtin_data

    rows = []
    for r in builtin_data.generate(120, 0, seed=11)["train"]:
        user, answer = r["messages"][0], r["messages"][-1]
        if len(r["messages"]) == 2 and answer.get("tool_calls"):
            calls = "".join(f"<tool_call>{json.dumps(c['function'])}</tool_call>" for c in answer["tool_calls"])
            rows.append(
                {
                    "conversations": [
                        {
                            "from": "system",
                            "value": f"You are a function calling AI model. <tools>{json.dumps(r['tools'])}</tools>",
                        },
                        {"from": "human", "value": user["content"]},
                        {"from": "gpt", "value": calls},
                    ]
                }
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_model_that_fails_the_gate_is_neither_deployed_nor_registered_and_bfcl_is_scored_per_category(
    tmp_path, bfcl_wheel, bfcl_tree
):
    """One 5-step run, with eval_suites=heldout,bfcl and min_fc_accuracy no 5-step model reaches: the run ends green,
    says why, and nothing is served or registered (the registry is set, so the only thing keeping register out is
    the gate). Its data is a two-source weighted mix (the built-in rows and a Hermes-format file), reported per
    source; BFCL's data is delivered from the wheel given as bfcl_source, both suites printed per category for base
    and tuned, the metrics in the run's record. Then a dataset one of whose training rows is a BFCL question (case
    and spaces changed): exit 2 before anything runs."""
    from tests.fakes.registry_fake_api import FakeRegistry
    from trainer import data
    from trainer.data import bfcl, builtin_data

    def run(name, *params):
        return _five_step_bfcl_run(tmp_path / name, bfcl_wheel, *params)

    hermes = _hermes_file(tmp_path / "hermes.jsonl")
    mixed = json.dumps([{"source": "builtin:function-calling", "weight": 3}, {"source": str(hermes), "weight": 1}])
    with FakeRegistry() as registry:
        proc = run(
            "gated",
            "--param",
            f"dataset_source={mixed}",
            "--param",
            "min_fc_accuracy=0.99",
            "--param",
            f"registry_address={registry.url}",
        )
        assert not registry.state.versions
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    root, runs_dir, out_dir = (tmp_path / "gated" / d for d in ("root", "runs", "out"))
    # the mix: both sources read (the Hermes rows converted), weighted, and scored apart
    assert re.search(r"\d+ Hermes function calling \(ShareGPT with <tools>.* rows converted", out), out[-5000:]
    assert "dataset_source: a mix of 2 sources" in out and f"[1] {hermes} (weight 1)" in out
    assert "== by source of the mix" in proc.stdout
    assert re.search(r"(?m)^\[0\] builtin:function-calling\s+\d+\s", proc.stdout), proc.stdout[-3000:]
    assert re.search(rf"(?m)^\[1\] {re.escape(str(hermes))}\s+\d+\s", proc.stdout), proc.stdout[-3000:]
    assert re.search(r"not promoted: fc_ast_accuracy [\d.]+% -> [\d.]+% .*< min_fc_accuracy 99\.0%", out), out[-3000:]
    done = {p.parent.name for p in root.rglob("executor_output.json")}
    assert {"evaluate", "not-deployed"} <= done and not {"deploy", "register"} & done, done
    # BFCL: delivered, and every category printed for base and tuned
    assert re.search(r"✓ deliver-bfcl \(\d+\.\ds\)", out) and f"\nBFCL {bfcl.VERSION}  " in out, out[-3000:]
    for c in bfcl.CATEGORIES:
        assert re.search(rf"\n  {c} \(1 rows\)\s+[\d.]+%\s+[\d.]+%", out), c
    assert re.search(r"\n  non_live_ast\s+[\d.]+%\s+[\d.]+%", out)
    assert re.search(r"function-calling accuracy \(19 rows\)", out) and "not promoted:" in out  # 1 irrelevance row
    (run_dir,) = [p for p in runs_dir.iterdir() if (p / "run.json").exists()]
    record = json.loads((run_dir / "run.json").read_text())
    metrics = record["metrics"]["evaluate"]
    assert record["status"] == "succeeded" and metrics["promoted"] == 0
    assert [(m["source"], m["weight"]) for m in record["dataset"]["mix"]] == [
        ("builtin:function-calling", 3),
        (str(hermes), 1),
    ]
    assert {"mix0_rows", "mix1_rows", "tuned_mix1_fc_ast_accuracy"} <= set(metrics)
    assert metrics["bfcl_simple_python_rows"] == 1 and "base_bfcl_irrelevance_accuracy" in metrics
    assert metrics["bfcl_version"] == 20260323
    assert "BFCL" in (run_dir / "reports" / "evaluate-examples.html").read_text()
    assert "not promoted: the tuned model failed the gate" in proc.stdout and "endpoint:" not in proc.stdout
    # not copied out over the last promoted model with "serve it" (it was), but kept with the run's record: the
    # throwaway S3 server, and the model in it, are gone when the command ends
    assert not (out_dir / "merged-model").exists() and "serve it" not in proc.stdout
    assert (run_dir / "merged-model" / "config.json").exists()
    assert (
        f"copied to {run_dir / 'merged-model'}  (not promoted, so not to {out_dir / 'merged-model'}" in proc.stdout
    ), proc.stdout[-3000:]
    # its deliveries and the base's scores kept for the next run in the same folder (pipelines.local_store)
    assert re.search(r"local store \S+: \d+ objects added \(\d+ MB\) for later runs", proc.stdout), proc.stdout[-2000:]
    assert (runs_dir / "store").is_dir()

    splits = builtin_data.generate(n_train=40, n_eval=10, seed=1)
    question = bfcl.read(bfcl_tree, "multiple")[3]["messages"][-1]["content"]
    splits["train"][7]["messages"] = [
        {"role": "user", "content": "  " + question.upper()},
        {"role": "assistant", "content": "An answer."},
    ]
    (tmp_path / "mine").mkdir()
    for name, split in splits.items():  # split files: the row stays in train
        data.write_jsonl(split, tmp_path / "mine" / f"{name}.jsonl")
    proc = run("contaminated", "--param", f"dataset_source={tmp_path / 'mine'}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-5000:]
    assert "1 training row asks BFCL" in out, out[-3000:]
    assert f"{tmp_path / 'mine' / 'train.jsonl'}:8: its user message holds BFCL multiple_3 (" in out, out[-3000:]
    assert "Traceback" not in out and "Running pipeline" not in out  # refused by the parameters' check: nothing ran


@pytest.mark.slow  # two runs: the first run above asserts what it keeps; test_local_store.py the restore itself
def test_a_second_run_restores_what_the_first_kept_and_asks_the_base_nothing(tmp_path, bfcl_wheel):
    """Issue 56: the same run twice, as a user iterates: the second's throwaway S3 starts with what the first kept
    (.runs/store), so it uploads nothing it delivered before and the base is asked nothing (both parts reused)."""
    outs = []
    for _ in range(2):
        proc = _five_step_bfcl_run(tmp_path, bfcl_wheel, "--param", "min_fc_accuracy=0.99")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
        outs.append(proc.stdout + proc.stderr)
    first, again = outs
    assert re.search(r"local store \S+: \d+ objects added \(\d+ MB\) for later runs", first), first[-2000:]
    assert re.search(r"local store \S+: 3 delivered trees and \d+ kept objects \(\d+ MB\) restored in", again)
    assert (
        again.count("base scores reused from") == 2
        and "(heldout, scored by run" in again
        and "(bfcl, scored by" in again
    )
    assert re.search(r"model builtin:tiny-llama -> s3://\S+ \(\d+ bytes, 0 uploaded\)", again), again[-5000:]
    assert "objects added" not in again  # everything it delivered was there already


def _five_step_bfcl_run(where, bfcl_wheel, *params):
    """run_local as `make demo` runs it (a throwaway S3 of its own), 5 steps, both suites on one BFCL row per
    category from `bfcl_wheel`, its folders under `where` (the same `where` twice: the same runs folder)."""
    throwaway_s3 = {k: v for k, v in os.environ.items() if k != "S3_ENDPOINT"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.run_local",
            *("--pipeline-root", str(where / "root"), "--output-dir", str(where / "out")),
            *("--runs-dir", str(where / "runs")),
            *("--param", "max_steps=5", "--param", "eval_max_rows=20", "--param", "nodes=1"),
            *("--param", "eval_suites=heldout,bfcl", "--param", "bfcl_rows=1", "--param", f"bfcl_source={bfcl_wheel}"),
            *params,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=throwaway_s3,
    )
