"""Local runs: the console filter between kfp.local and the terminal, run records under
.runs/<run id>/, and listing / comparing them."""

import io
import json
import logging
import re
import os
import sys
import time

import pytest
from kfp import dsl
from kfp.local import logging_utils, status

from pipelines import runs
from pipelines.console import Console

EXECUTOR_DUMP = [
    "[KFP Executor 2026-11-22 12:50:17,483 INFO]: Got executor_input:\n",
    "{\n",
    '    "inputs": {\n',
    '        "parameterValues": {"source": "builtin:tiny-llama"}\n',
    "    }\n",
    "}\n",
]


def kfp_task(name: str, lines: list[str], ok: bool = True) -> None:
    """What kfp.local's task dispatcher prints for one task, through its own helpers."""
    task = logging_utils.format_task_name(name)
    with logging_utils.local_logger_context():
        logging.info(f"Executing task {task}")
        logging.info("Streamed logs:\n")
        with logging_utils.indented_print():
            for line in lines:
                print(line, end="")
            print("\n")
        result = status.Status.SUCCESS if ok else status.Status.FAILURE
        logging.info(f"Task {task} finished with status {logging_utils.format_status(result)}")
        if ok:
            model = dsl.Model(name="model", uri="/root/x/model", metadata={"uri": "s3://b/models/sha256-1"})
            outputs = logging_utils.make_log_lines_for_outputs({"model": model})
            logging.info("\n".join([f"Task {task} outputs:", *outputs]))
    logging_utils.print_horizontal_line()


def run_through(console: Console, fn) -> None:
    saved = sys.stdout
    sys.stdout = console
    try:
        fn()
    finally:
        sys.stdout = saved


def test_console_shows_tasks_messages_and_thinned_progress_and_logs_everything():
    term, log = io.StringIO(), io.StringIO()
    console = Console(term, log)
    lines = [
        *EXECUTOR_DUMP,
        "/venv/lib/python3.11/site-packages/x.py:10: UserWarning: something only a developer cares about\n",
        "  warnings.warn(\n",
        "Writing model shards: 100%|██████████| 1/1 [00:00<00:00, 125.60it/s]\n",  # quick: not shown
        "upload models/sha256-1:  10%|#         | 10.0M/100M [00:03<00:27, 3.33MB/s]\n",
        "upload models/sha256-1:  50%|#####     | 50.0M/100M [00:05<00:05, 10.0MB/s]\n",  # < 15 s later
        "train:  48%|####8     | 190/400 [00:33<00:29,  7.05step/s]progress: step=190 stage=train\n",
        "upload models/sha256-1: 100%|##########| 100M/100M [00:10<00:00, 10.0MB/s]\n",
        "upload models/sha256-1: 100%|##########| 100M/100M [00:10<00:00, 9.87MB/s]\n",  # tqdm's close
        '{"train_result": {"train_loss": 0.04}, "output_uri": "s3://b/models/sha256-2"}\n',
        "model builtin:tiny-llama -> s3://b/models/sha256-1\n",
    ]
    run_through(console, lambda: kfp_task("deliver-model", lines))
    shown = term.getvalue().splitlines()
    assert len(shown) == 6, shown
    assert shown[0].endswith("▶ deliver-model") and shown[-1].endswith("✓ deliver-model (0.0s)")
    assert shown[1:5] == [
        "    upload models/sha256-1:  10%|#         | 10.0M/100M [00:03<00:27, 3.33MB/s]",
        "    train:  48%|####8     | 190/400 [00:33<00:29,  7.05step/s]",
        "    upload models/sha256-1: 100%|##########| 100M/100M [00:10<00:00, 10.0MB/s]",
        "    model builtin:tiny-llama -> s3://b/models/sha256-1",
    ]
    assert console.hidden_warnings == 1
    assert "progress: step=190 stage=train" not in term.getvalue()  # the trainer's heartbeat, split off
    assert "    progress: step=190 stage=train" in log.getvalue().splitlines()
    logged = log.getvalue()
    for needle in (
        '"train_result"',
        '"parameterValues"',
        "UserWarning: something",
        "Task 'deliver-model' outputs:",
        "metadata={'uri': 's3://b/models/sha256-1'}",
        "Got executor_input",
        "-" * 40,
    ):
        assert needle in logged, needle
    assert "\x1b[" not in logged  # colour codes stay out of the file


def test_console_shows_the_failed_tasks_last_lines():
    term, log = io.StringIO(), io.StringIO()
    console = Console(term, log)
    trace = [
        "Traceback (most recent call last):\n",
        '  File "/x/serve.py", line 3, in start\n',
        "    proc = subprocess.Popen(args)\n",
        "TypeError: expected str, not list\n",
    ]
    run_through(console, lambda: kfp_task("deploy", [*EXECUTOR_DUMP, *trace], ok=False))
    shown = term.getvalue().splitlines()
    assert shown[-1].endswith("✗ deploy FAILED (0.0s)") and "    TypeError: expected str, not list" in shown
    assert '  File "/x/serve.py"' not in term.getvalue()  # frames only on request
    console.show_tail("last lines:")
    tail = term.getvalue().splitlines()
    tail = tail[tail.index("last lines (deploy):") :]
    assert tail[-4:] == [
        "    Traceback (most recent call last):",
        '      File "/x/serve.py", line 3, in start',
        "        proc = subprocess.Popen(args)",
        "    TypeError: expected str, not list",
    ]


def test_console_shows_a_components_indented_lines_and_hides_only_tracebacks_and_warnings():
    """A component's own indented lines are shown (the evaluate step's BFCL table under its heading, each merge
    scale's scores and verdict, the smoke test's answer per served name; hidden until 2026-12-07, when run E's
    terminal said "merge scale 1 scored:" and nothing under it); a warning's source line and a traceback's frames,
    indented under the line that starts them, stay in the log file."""
    term, log = io.StringIO(), io.StringIO()
    console = Console(term, log)
    lines = [
        *EXECUTOR_DUMP,
        "merge scale 1 scored:\n",
        "  BFCL 2026.3.23 (25 rows per category, seed 0, eval_engine=vllm), base -> tuned:\n",
        "    irrelevance                     25  100.0% -> 40.0%\n",
        "  gate: not promoted: bfcl_irrelevance fell 100.0% -> 40.0%\n",
        "/venv/lib/python3.11/site-packages/x.py:10: UserWarning: something only a developer cares about\n",
        "  warnings.warn(\n",
        "Traceback (most recent call last):\n",
        '  File "/x/serve.py", line 3, in start\n',
        "    proc = subprocess.Popen(args)\n",
        "RuntimeError: handled, and said below\n",
        "  tuned: ok in 0.52s: the answer\n",
    ]
    run_through(console, lambda: kfp_task("evaluate", lines))
    shown = term.getvalue().splitlines()[1:-1]
    assert shown == [
        "    merge scale 1 scored:",
        "      BFCL 2026.3.23 (25 rows per category, seed 0, eval_engine=vllm), base -> tuned:",
        "        irrelevance                     25  100.0% -> 40.0%",
        "      gate: not promoted: bfcl_irrelevance fell 100.0% -> 40.0%",
        "    RuntimeError: handled, and said below",
        "      tuned: ok in 0.52s: the answer",
    ], shown
    logged = log.getvalue()
    assert "warnings.warn(" in logged and '  File "/x/serve.py"' in logged and "parameterValues" in logged


def test_console_tail_is_the_failed_tasks_even_when_later_tasks_ran():
    # kfp.local goes on with independent tasks after one fails; their lines must not stand in
    # for the failed task's under "last lines the failed task printed".
    term, log = io.StringIO(), io.StringIO()
    console = Console(term, log)
    trace = ["Traceback (most recent call last):\n", '  File "/x/deliver.py", line 3, in main\n', "KeyError: 'x'\n"]
    run_through(console, lambda: kfp_task("deliver-model", [*EXECUTOR_DUMP, *trace], ok=False))
    run_through(console, lambda: kfp_task("deliver-dataset", [*EXECUTOR_DUMP] * 5 + ["dataset -> s3://b/d\n"]))
    assert console.show_tail("last lines the failed task printed:")
    tail = term.getvalue().splitlines()
    tail = tail[tail.index("last lines the failed task printed (deliver-model):") + 1 :]
    assert tail == [
        "    Traceback (most recent call last):",
        '      File "/x/deliver.py", line 3, in main',
        "    KeyError: 'x'",
    ], tail
    assert console.failed == ["deliver-model"] and console.last_line("deliver-model") == "KeyError: 'x'"


def test_a_failed_tasks_error_is_shown_once_without_kfps_executor_dump():
    """A component that says what went wrong in one line: that line, once, not 30 lines of kfp's
    executor input under "last lines" and the same error again."""
    term, log = io.StringIO(), io.StringIO()
    console = Console(term, log)
    big_dump = [
        EXECUTOR_DUMP[0],
        "{\n",
        '    "inputs": {\n',
        '        "parameterValues": {\n',
        '            "source": "someorg/somedata"\n',
        "        }\n",
        "    },\n",
        '    "outputs": {\n',
        '        "outputFile": "/root/x/executor_output.json"\n',
        "    }\n",
        "}\n",
    ]
    error = "error: dataset 'someorg/somedata' is not in the local Hugging Face cache and the Hub cannot be reached\n"
    run_through(console, lambda: kfp_task("finetune", ['{"train_result": {"train_loss": 1.2}}\n']))
    # kfp.local's own failure (a task it could not start): no task's lines stand in for the reason
    assert console.show_tail("last lines the failed task printed:") is False
    run_through(console, lambda: kfp_task("deliver-dataset", [*big_dump, error], ok=False))
    assert console.show_tail("last lines the failed task printed:") is False
    run_through(
        console,
        lambda: kfp_task(
            "evaluate",
            [
                "Traceback (most recent call last):\n",
                '  File "/x/evaluate.py", line 3, in main\n',
                "KeyboardInterrupt\n",
            ],
            ok=False,
        ),
    )
    shown = term.getvalue()
    assert "KeyboardInterrupt" not in shown  # Ctrl-C: run_local's own line says it once
    assert shown.count("is not in the local Hugging Face cache") == 1 and "outputFile" not in shown
    assert console.last_line("deliver-dataset") == error.strip()


def test_sweep_trials_side_by_side_show_their_own_lines_and_no_rules(tmp_path):
    """kfp.local indents a task's lines by swapping builtins.print, which two trials running in
    threads stack (their lines went 8-12 spaces deep and were hidden) and can leave swapped (its
    `----` rules then came out indented and were shown)."""
    import builtins
    import threading

    from pipelines import console as console_mod

    real_print = builtins.print
    both_inside = threading.Barrier(2)

    def trial(n: int) -> None:
        with logging_utils.indented_print():
            both_inside.wait(timeout=10)
            print(f"trial {n}: 100 rows, fc accuracy 0.0% -> 9{n}.0%\n", end="")
            both_inside.wait(timeout=10)
            if n == 1:  # the threads leave in the order that left kfp's print swapped
                time.sleep(0.05)
        logging_utils.print_horizontal_line()

    with open(tmp_path / "run.log", "w") as log:
        saved_stdout = sys.stdout
        term = io.StringIO()
        sys.stdout = term
        try:
            console, restore = console_mod.install(log)
            try:
                threads = [threading.Thread(target=trial, args=(n,)) for n in (0, 1)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(timeout=20)
                logging_utils.print_horizontal_line()
            finally:
                restore()
        finally:
            sys.stdout = saved_stdout
    shown = term.getvalue().splitlines()
    assert sorted(shown) == [
        "    trial 0: 100 rows, fc accuracy 0.0% -> 90.0%",
        "    trial 1: 100 rows, fc accuracy 0.0% -> 91.0%",
    ], shown
    assert builtins.print is real_print
    assert len(re.findall(r"(?m)^-{40,}$", (tmp_path / "run.log").read_text())) == 3  # rules: in the log


def fake_kfp_run(root, metrics: dict, examples_md: str):
    """A kfp.local run directory as kfp.local leaves it: <task>/executor_output.json + artifact files."""
    for task, outputs in {
        "evaluate": {"metrics": metrics, "examples": None},
        "finetune": {"metrics": {"train_loss": 0.1}, "adapter": {"uri": "s3://b/m", "n_files": 3}},
        "deploy": {"smoke": {"smoke_ok": 1.0, "smoke_latency_s": 0.2, "reply_x": "{...}"}},
    }.items():
        (root / task).mkdir(parents=True)
        arts = {}
        for name, meta in outputs.items():
            path = root / task / name
            path.write_text(examples_md if meta is None else "{}")
            arts[name] = {"artifacts": [{"name": name, "uri": str(path), "metadata": meta or {}}]}
        (root / task / "executor_output.json").write_text(json.dumps({"artifacts": arts}))
    return root


def record_run(runs_dir, tmp_path, lr: float, acc: float) -> str:
    """A run record made the way run_local makes one."""
    params = {"learning_rate": lr, "max_steps": 400}
    run_dir = runs.new_run("finetune", params, runs_dir, defaults={"learning_rate": 3e-3, "max_steps": 400})
    metrics, reports = runs.collect_task_outputs(
        fake_kfp_run(
            tmp_path / run_dir.name,
            {"base_fc_accuracy": 0.0, "tuned_fc_accuracy": acc, "fc_rows": 200},
            "# Evaluation: base vs tuned\n\n| metric | base | tuned |\n|---|---|---|\n| acc | 0 | 1 |\n",
        )
    )
    assert set(metrics) == {"evaluate", "finetune", "deploy"} and "n_files" not in json.dumps(metrics)
    assert metrics["deploy"] == {"smoke_ok": 1.0, "smoke_latency_s": 0.2}
    assert list(reports) == ["evaluate-examples"]
    runs.save_reports(run_dir, reports)
    (run_dir / "tensorboard" / "t1").mkdir(parents=True)
    runs.update_run(run_dir, status="succeeded", elapsed_s=12.5, metrics=metrics)
    return run_dir.name


def test_two_runs_listed_and_compared_with_one_command(tmp_path, capsys):
    runs_dir = tmp_path / "runs"
    first = record_run(runs_dir, tmp_path, 3e-3, 0.8)
    second = record_run(runs_dir, tmp_path, 1e-3, 0.6)
    assert first != second  # same second: the second gets a suffix

    assert runs.main(["list", "--runs-dir", str(runs_dir)]) == 0
    listed = capsys.readouterr().out
    assert first in listed and second in listed and "0.0% -> 80.0%" in listed and "0.0% -> 60.0%" in listed
    assert re.search(rf"{first} .* defaults", listed) and re.search(rf"{second} .* learning_rate=0.001", listed)

    assert runs.main(["compare", "--runs-dir", str(runs_dir)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert first in table[0] and second in table[0]
    row = {line.split()[0]: line.split()[1:] for line in table[2:] if line.strip()}
    assert row["learning_rate"] == ["0.003", "0.001"]  # parameters that differ ...
    assert "max_steps" not in row  # ... only
    assert "0.8" in " ".join(table) and any(line.startswith("evaluate: tuned_fc_accuracy") for line in table)

    assert runs.main(["tensorboard", "--runs-dir", str(runs_dir)]) == 0
    cmd = capsys.readouterr().out
    assert f"{first}:{runs_dir / first / 'tensorboard'}" in cmd and f"{second}:" in cmd

    page = (runs_dir / first / "reports" / "evaluate-examples.html").read_text()
    assert f"<title>Evaluation: base vs tuned — local run {first}</title>" in page and "<table>" in page

    with pytest.raises(SystemExit) as exit_info:
        runs.main(["compare", "no-such-run", "--runs-dir", str(runs_dir)])
    assert exit_info.value.code == 2 and "no local run no-such-run" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["list", "--launch"], "--launch applies to `tensorboard`, not `list`"),
        (["compare", "--launch"], "--launch applies to `tensorboard`, not `compare`"),
        (["list", "--all-params"], "--all-params applies to `compare`, not `list`"),
    ],
)
def test_a_flag_of_another_command_is_refused_not_ignored(tmp_path, capsys, argv, expected):
    with pytest.raises(SystemExit) as exit_info:
        runs.main([*argv, "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith(f"error: {expected}: drop it") and "Traceback" not in err


def test_run_locals_closing_hints_name_its_runs_dir(tmp_path):
    """With another --runs-dir, `python -m pipelines.runs compare` as run_local printed it read ./.runs, not the run's."""
    assert (
        runs.runs_dir_flag(runs.RUNS_DIR) == runs.runs_dir_flag(runs.RUNS_DIR.absolute()) == ""
    )  # as run_local has it
    assert runs.runs_dir_flag(tmp_path / "my runs") == f" --runs-dir '{tmp_path}/my runs'"


@pytest.mark.parametrize("n", ["0", "-3"])
def test_compare_refuses_a_count_below_one(tmp_path, capsys, n):
    with pytest.raises(SystemExit) as exit_info:
        runs.main(["compare", "-n", n, "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith(f"error: -n {n}: ") and "at least 1" in err


def test_list_shows_no_accuracy_for_runs_without_tool_call_rows():
    run = {
        "id": "r1",
        "status": "succeeded",
        "elapsed_s": 5,
        "metrics": {"evaluate": {"base_fc_accuracy": 0.0, "tuned_fc_accuracy": 0.0, "fc_rows": 0.0, "text_rows": 4.0}},
    }
    assert "n/a (0 rows)" in runs.list_table([run]) and "0.0% -> 0.0%" not in runs.list_table([run])


def test_tensorboard_events_of_this_run_are_copied_out_of_the_bucket(store, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    events = tmp_path / "tb"
    writer = SummaryWriter(str(events))
    writer.add_scalar("train/loss", 1.5, 1)
    writer.close()
    store.put_dir(events, "runs/job-42/tensorboard")
    store.put_dir(events, "runs/job-43/tensorboard")  # another run's, at the same time
    run_dir = tmp_path / "run"
    # A run whose training failed: no adapter names its prefix, and time says nothing about whose events are whose.
    assert runs.save_tensorboard(run_dir, store, local_run="20261124-101500-finetune") is None
    store.put_json("runs/job-42/local-run/20261124-101500-finetune", {})  # what its finetune task marked
    target = runs.save_tensorboard(run_dir, store, local_run="20261124-101500-finetune")
    assert [p.name for p in target.iterdir()] == ["job-42"]
    copied = list((target / "job-42").glob("events.out.tfevents.*"))
    assert copied and copied[0].stat().st_size > 0


def test_a_runs_tensorboard_events_are_its_own_finetune_tasks_not_whatever_was_written_meanwhile(store, tmp_path):
    """Two runs at once: copying by time took both runs' events; the finetune tasks' adapters name their prefix."""
    from torch.utils.tensorboard import SummaryWriter

    events = tmp_path / "tb"
    writer = SummaryWriter(str(events))
    writer.add_scalar("train/loss", 1.5, 1)
    writer.close()
    store.put_dir(events, "runs/ours-1/tensorboard")
    store.put_dir(events, "runs/theirs-2/tensorboard")  # another run's, written while this one ran
    out = tmp_path / "kfp" / "finetune" / "executor_output.json"
    out.parent.mkdir(parents=True)
    out.write_text(
        json.dumps(
            {
                "artifacts": {
                    "adapter": {
                        "artifacts": [
                            {
                                "metadata": {
                                    "uri": store.uri("models/sha256-x"),
                                    "tensorboard_uri": store.uri("runs/ours-1/tensorboard"),
                                }
                            }
                        ]
                    }
                }
            }
        )
    )
    prefixes = runs.tensorboard_prefixes(tmp_path / "kfp")
    assert prefixes == [store.uri("runs/ours-1/tensorboard")]
    target = runs.save_tensorboard(tmp_path / "run", store, prefixes=prefixes)
    assert [p.name for p in target.iterdir()] == ["ours-1"] and list((target / "ours-1").glob("events.out.*"))


def test_tensorboard_copy_from_a_dead_endpoint_is_a_user_error(tmp_path, no_retry_backoff):
    from trainer.core.errors import UserError
    from trainer.core.storage import Store

    dead = Store(
        endpoint="http://127.0.0.1:9", bucket="llm-finetune", access_key="k", secret_key="s", region="us-east-1"
    )
    with pytest.raises(UserError, match="unreachable during TensorBoard listing"):
        runs.save_tensorboard(tmp_path / "run", dead)


def test_summary_says_smoke_tested_only_when_the_smoke_test_passed_and_hides_stopped_endpoints():
    from pipelines.run_local import endpoint_line, summarize

    url = "http://127.0.0.1:5000/v1"
    assert (
        endpoint_line(url, {"smoke_ok": 1.0, "smoke_latency_s": 0.25}, keep_serving=True)
        == f"endpoint (still serving; smoke test passed in 0.25s): {url}"
    )
    stopped = endpoint_line(url, {"smoke_ok": 1.0, "smoke_latency_s": 0.25}, keep_serving=False)
    assert url not in stopped and "stopped" in stopped
    failed = endpoint_line(url, {"smoke_ok": 0.0, "smoke_latency_s": 0.25}, keep_serving=True)
    assert "FAILED" in failed and "passed" not in failed
    assert "no smoke-test verdict" in endpoint_line(url, {}, keep_serving=True)
    # what an OpenAI client needs besides the URL: the name it passes as `model`
    assert endpoint_line(url, {"smoke_ok": 1.0, "smoke_latency_s": 0.25}, True, "llm-finetune").endswith(
        f"{url}, model 'llm-finetune'"
    )

    ev = {
        "base_eval_loss": 7.0,
        "tuned_eval_loss": 1.0,
        "base_fc_accuracy": 0.0,
        "tuned_fc_accuracy": 0.5,
        "base_text_match": 0.0,
        "tuned_text_match": 0.25,
        "eval_rows": 12,
        "fc_rows": 8,
        "text_rows": 4,
    }
    text = summarize({"evaluate": ev, "deploy": {"smoke_ok": 0.0, "smoke_latency_s": 1.0}}, url, False, 3.0)
    assert re.search(r"function-calling accuracy \(8 rows\)\s+0\.0%\s+50\.0%", text)
    assert "text match (4 rows)" in text and "25.0%" in text
    assert "warning: only 12 eval rows" in text and "smoke test FAILED" in text and url not in text


def test_component_log_files_outlive_the_runs_temporary_directory(tmp_path):
    tmp = tmp_path / "finetune-run-x"
    (tmp / "vllm-abc").mkdir(parents=True)
    (tmp / "vllm-abc" / "server.log").write_text("INFO: Started server process\n")
    (tmp / "tb-1").mkdir()
    (tmp / "tb-1" / "events.out.tfevents.1").write_bytes(b"x")
    kept = runs.keep_logs(tmp, tmp_path / "run")
    assert [p.name for p in kept] == ["vllm-abc-server.log"]
    assert kept[0].read_text() == "INFO: Started server process\n"


def test_a_run_that_keeps_its_server_up_leaves_only_the_servers_folders(tmp_path):
    """keep_serving left the run's whole temporary folder in /tmp for good (~150 MB)."""
    from pipelines.run_local import remove_run_tmp

    for keep in (True, False):
        tmp = tmp_path / f"finetune-run-{keep}"
        for folder in ("vllm-abc", "vllm-rpc-x", "torchinductor_root", "kfp-workspace", "tb-1"):
            (tmp / folder).mkdir(parents=True)
            (tmp / folder / "f").write_bytes(b"x" * 1000)
        (tmp / "stray.txt").write_text("x")
        remove_run_tmp(tmp, keep_server=keep)
        kept = ["torchinductor_root", "vllm-abc", "vllm-rpc-x"]  # its compile cache, log and sockets
        assert (sorted(p.name for p in tmp.iterdir()) == kept) if keep else not tmp.exists()
    assert (tmp_path / "finetune-run-True" / "vllm-abc" / "f").exists()  # the kept server's log
    empty = tmp_path / "finetune-run-nothing-deployed"
    (empty / "kfp-workspace").mkdir(parents=True)
    remove_run_tmp(empty, keep_server=True)  # keep_serving, but no server was started: nothing stays
    assert not empty.exists()


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_progress_is_redrawn_in_place():
    term, log = Terminal(), io.StringIO()
    console = Console(term, log)
    bars = [
        f"evaluate base: {p:3d}%|#         | {p}/100 [00:0{i + 3}<00:10, 5.00row/s]\n"
        for i, p in enumerate((10, 20, 30))
    ]
    run_through(console, lambda: kfp_task("evaluate", [*bars, "100 rows (100 tool-call, 0 text)\n"]))
    out = term.getvalue()
    assert out.count("\r\x1b[K    evaluate base:") == 3  # each refresh overwrites the line
    assert "5.00row/s]\n    100 rows (100 tool-call, 0 text)\n" in out  # the next line starts on a new line
    assert log.getvalue().count("evaluate base:") == 1  # the log keeps one line per 15 s


def test_sweep_trial_reports_are_titled_by_trial(tmp_path):
    md = tmp_path / "examples"
    md.write_text("# Evaluation: base vs tuned\n")
    (page,) = runs.save_reports(tmp_path / "run", {"for-loop-1-iteration-2.evaluate-examples": str(md)})
    assert "<title>Evaluation: base vs tuned, trial 2 — local run run</title>" in page.read_text()


@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "no run.json"),
        ('{"id": "2026', "unreadable run.json (JSONDecodeError"),
        ("[1, 2]", "holds no JSON object"),
        ('{"params": [], "metrics": {"evaluate": {"fc_accuracy": "high"}}}', "wrong type: params, metrics"),
        ("fifo", "run.json is not a regular file"),  # reading it waited for a writer: list and compare hung
        ("dir", "run.json is not a regular file"),
    ],
)
def test_a_broken_run_record_is_listed_as_broken_and_the_others_still_show(tmp_path, capsys, content, needle):
    runs_dir = tmp_path / "runs"
    good = record_run(runs_dir, tmp_path, 3e-3, 0.8)
    broken = runs_dir / "20991231-235959-finetune"  # the latest: `compare` picked it by default, a column of nothing
    broken.mkdir()
    if content == "fifo":
        os.mkfifo(broken / "run.json")
    elif content == "dir":
        (broken / "run.json").mkdir()
    elif content is not None:
        (broken / "run.json").write_text(content)
    (runs_dir / "outputs").mkdir()  # run_local's exported models live beside the runs: not a run

    assert runs.main(["list", "--runs-dir", str(runs_dir)]) == 0
    listed = capsys.readouterr().out
    assert good in listed and "outputs" not in listed
    [line] = [line for line in listed.splitlines() if line.startswith(broken.name)]
    assert " broken " in line and needle in line and f"remove {broken}" in line

    assert runs.main(["compare", "--runs-dir", str(runs_dir)]) == 0
    table = capsys.readouterr().out
    assert good in table and broken.name not in table and "0.8" in table
    assert runs.main(["compare", broken.name, "--runs-dir", str(runs_dir)]) == 0  # named: shown, as broken
    assert broken.name in capsys.readouterr().out
    assert runs.main(["tensorboard", "-n", "2", "--runs-dir", str(runs_dir)]) == 0
    assert f"{good}:" in capsys.readouterr().out


def test_tensorboard_launch_without_tensorboard_installed_is_one_line(tmp_path, capsys, monkeypatch):
    runs_dir = tmp_path / "runs"
    record_run(runs_dir, tmp_path, 3e-3, 0.8)
    monkeypatch.setattr(runs.shutil, "which", lambda name: None)
    monkeypatch.setattr(runs.sys, "executable", str(tmp_path / "no-venv" / "bin" / "python"))
    monkeypatch.setattr(runs.os, "execv", lambda *a: pytest.fail("exec'd a missing program"))
    with pytest.raises(SystemExit) as exit_info:
        runs.main(["tensorboard", "--launch", "--runs-dir", str(runs_dir)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "tensorboard is not installed here" in err and "pip install tensorboard" in err


def test_a_run_named_twice_is_compared_once(tmp_path, capsys):
    runs_dir = tmp_path / "runs"
    run = record_run(runs_dir, tmp_path, 3e-3, 0.8)
    assert runs.main(["compare", run, run, "--runs-dir", str(runs_dir)]) == 0
    assert capsys.readouterr().out.splitlines()[0].count(run) == 1


def test_compare_names_sweep_trials_as_trials():
    run = {
        "id": "r1",
        "status": "succeeded",
        "params": {},
        "metrics": {"for-loop-1-iteration-2.evaluate": {"tuned_fc_accuracy": 0.9}, "pick-best": {"best_trial": 2.0}},
    }
    table = runs.compare_table([run])
    assert "trial 2 evaluate: tuned_fc_accuracy" in table and "pick-best: best_trial" in table
    assert "for-loop" not in table


def test_a_run_whose_process_was_killed_reads_as_gone_not_running(tmp_path, capsys):
    import subprocess

    runs_dir = tmp_path / "runs"
    alive = runs.new_run("finetune", {"max_steps": 1}, runs_dir)  # this process: still running
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    killed = runs.new_run("finetune", {"max_steps": 2}, runs_dir)
    runs.update_run(killed, pid=dead.pid)
    # its pid now another process's (pid reuse: here this one's, started earlier), and pids that are no process's
    reused = runs.new_run("finetune", {"max_steps": 3}, runs_dir)
    boot, ticks = runs._started_at(os.getpid()).rsplit(":", 1)
    runs.update_run(reused, pid_started=f"{boot}:{int(ticks) - 100}")
    groups = [runs.new_run("finetune", {"max_steps": n}, runs_dir) for n in (4, 5)]
    for run_dir, pid in zip(groups, (0, -1)):
        runs.update_run(run_dir, pid=pid)
    by_id = {r["id"]: r for r in runs.load_runs(runs_dir)}
    assert by_id[alive.name]["status"] == "running"
    assert by_id[killed.name]["status"] == "gone" and str(dead.pid) in by_id[killed.name]["summary"]
    assert [by_id[d.name]["status"] for d in (reused, *groups)] == ["gone"] * 3


def test_a_hand_edited_record_shows_no_nan_as_a_number_and_no_control_character(tmp_path, capsys):
    """run.json is a file anyone can edit: NaN and Infinity are JSON to Python and read as "nan" / "inf% -> 0.0%";
    a newline or an escape sequence in the summary broke the table and reached the terminal."""
    import json

    (tmp_path / "20261122-100000-finetune").mkdir()
    (tmp_path / "20261122-100000-finetune" / "run.json").write_text(
        json.dumps(
            {
                "status": "succeeded",
                "started": "x",
                "params": {},
                "changed": {},
                "elapsed_s": 5.0,
                "summary": "line one\nline two \x1b[31mred\x1b[0m",
                "metrics": {
                    "evaluate": {
                        "tuned_fc_accuracy": float("nan"),
                        "base_fc_accuracy": float("inf"),
                        "fc_rows": 20.0,
                        "eval_rows": 10**400,
                    }
                },
            }
        )
    )
    [record] = runs.load_runs(tmp_path)
    assert record["metrics"] == {"evaluate": {"fc_rows": 20.0}}  # blank where nothing real was measured
    assert "\n" not in record["summary"] and "\x1b" not in record["summary"] and "line two" in record["summary"]
    assert runs.main(["list", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "nan" not in out.lower() and "inf" not in out.lower()


def test_compare_shows_large_numbers_in_full_and_small_ones_to_four_digits():
    from pipelines.runs import _fmt

    assert _fmt(18968.4) == "18,968" and _fmt(3.2e9) == "3,200,000,000"
    assert _fmt(0.98512) == "0.9851" and _fmt(7.682) == "7.682" and _fmt(1e-5) == "1e-05"
    assert _fmt(650) == "650" and _fmt(float("nan")) == "nan"


def test_compare_shows_failed_and_running_runs_with_their_status_and_no_number_they_never_logged(tmp_path, capsys):
    import json
    import os
    import socket

    def write(name, **record):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(
            json.dumps({"started": "x", "params": {"max_steps": 650}, "changed": {}, "metrics": {}, **record})
        )

    write(
        "20261122-100000-finetune",
        status="succeeded",
        elapsed_s=80.0,
        metrics={"evaluate": {"tuned_fc_accuracy": 0.985, "fc_rows": 200.0}, "finetune": {"train_loss": 0.0117}},
    )
    write(
        "20261122-110000-finetune",
        status="failed",
        elapsed_s=9.0,
        summary="task finetune failed",
        metrics={"evaluate": {}},
    )
    write("20261122-120000-finetune", status="running", pid=os.getpid(), host=socket.gethostname())
    assert runs.main(["compare", "-n", "3", "--runs-dir", str(tmp_path)]) == 0
    rows = {
        line.split()[0] + " " + line.split()[1]: line.split()[2:]
        for line in capsys.readouterr().out.splitlines()[2:]
        if len(line.split()) > 2
    }
    assert rows["evaluate: tuned_fc_accuracy"] == ["0.985", "-", "-"]  # never 0 for a stage that logged nothing
    assert rows["finetune: train_loss"] == ["0.0117", "-", "-"]
    assert runs.main(["list", "--runs-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "failed" in listed and "task finetune failed" in listed and "running" in listed


def test_tensorboard_copy_when_no_task_created_the_bucket_finds_no_events(s3_env, tmp_path):
    """Every delivery failed (e.g. offline), so nothing ever created the bucket: no events, no traceback."""
    from trainer.core.storage import Store

    empty = Store.from_env()
    empty.bucket = "never-created-bucket"
    assert runs.save_tensorboard(tmp_path / "run", empty) is None


@pytest.mark.parametrize("how, status", [("Ctrl-C", 130), ("SIGTERM", 143)])
def test_an_interrupted_local_run_is_one_line_a_record_and_no_temporary_folder(
    tmp_path, monkeypatch, capsys, how, status
):
    import argparse
    import os
    import signal
    import tempfile

    from pipelines import run_local
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.cli_params import pipeline_defaults

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def interrupted_run(*_):
        assert os.environ["TMPDIR"].startswith(str(tmp_path / "finetune-run-"))
        if how == "Ctrl-C":
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this

    monkeypatch.setattr(run_local, "_run", interrupted_run)
    args = argparse.Namespace(pipeline="finetune", runs_dir=tmp_path / "runs", pipeline_root=tmp_path / "root")
    before, handler = os.environ.get("TMPDIR"), signal.getsignal(signal.SIGTERM)
    assert run_local.run(finetune_pipeline, pipeline_defaults(finetune_pipeline), args) == status
    [run_dir] = (tmp_path / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "interrupted" and how in record["summary"]
    err = capsys.readouterr().err
    assert err.strip() == f"interrupted ({how}); the run's record: {run_dir}" and "Traceback" not in err
    assert not list(tmp_path.glob("finetune-run-*")) and os.environ.get("TMPDIR") == before
    assert signal.getsignal(signal.SIGTERM) == handler


def test_an_output_folder_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys):
    from pipelines import run_local

    a_file = tmp_path / "model.bin"
    a_file.write_text("x")
    with pytest.raises(SystemExit) as exit_:
        run_local.main(
            [
                "--output-dir",
                str(a_file),
                "--runs-dir",
                str(tmp_path / "runs"),
                "--pipeline-root",
                "/proc/nope",
                "--param",
                "max_steps=10",
            ]
        )
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--output-dir {a_file}: is a file" in err and "--pipeline-root /proc/nope" in err
    assert "Traceback" not in err and not (tmp_path / "runs").exists()  # nothing started, nothing written


def test_local_runs_are_kept_under_the_current_directory(tmp_path, monkeypatch):
    """As MLflow's ./mlruns: a user running from their project finds .runs/ there."""
    from pipelines import run_local

    monkeypatch.chdir(tmp_path)
    seen = {}
    monkeypatch.setattr(run_local, "_main", lambda args: seen.update(vars(args)) or 0)
    assert run_local.main([]) == 0
    assert seen["runs_dir"] == tmp_path / ".runs" and seen["output_dir"] == tmp_path / ".runs" / "outputs"
    assert seen["pipeline_root"] == tmp_path / ".runs" / "pipeline-root"
    assert runs.RUNS_DIR.absolute() == tmp_path / ".runs"


def test_a_sweeps_winner_model_and_endpoint_are_found_inside_its_condition(tmp_path):
    """The sweep deploys its winner inside a dsl.If, which gives the pipeline no outputs: run_local
    reads them from kfp.local's task outputs to copy the model out and show the endpoint."""
    kfp_run = tmp_path / "llm-finetune-sweep-2026-11-22-19-39-26-055711"
    for task, entry in {
        "merge-lora": {
            "artifacts": {
                "merged": {
                    "artifacts": [
                        {
                            "name": "merged",
                            "uri": "/x/merged",
                            "metadata": {"uri": "s3://llm-finetune/models/sha256-dd42", "tree_sha256": "dd42"},
                        }
                    ]
                }
            }
        },
        "deploy": {"parameterValues": {"endpoint": "http://127.0.0.1:54359/v1", "smoke_ok": True}},
        "for-loop-1-iteration-0/finetune": {
            "artifacts": {
                "adapter": {
                    "artifacts": [
                        {"name": "adapter", "uri": "/x/a", "metadata": {"uri": "s3://llm-finetune/models/sha256-aa"}}
                    ]
                }
            }
        },
    }.items():
        (kfp_run / task).mkdir(parents=True)
        (kfp_run / task / "executor_output.json").write_text(json.dumps(entry))
    none = {"trials_endpoint": "", "trials_models": ""}
    assert runs.deployed_outputs(kfp_run) == {
        "merged_model": "s3://llm-finetune/models/sha256-dd42",
        "endpoint": "http://127.0.0.1:54359/v1",
        **none,
    }
    (kfp_run / "merge-lora" / "executor_output.json").unlink()  # no trial beat the base: nothing deployed
    (kfp_run / "deploy" / "executor_output.json").unlink()
    assert runs.deployed_outputs(kfp_run) == {"merged_model": "", "endpoint": "", **none}
    # deploy_all_trials with keep_serving: the trials' server, still up, with the names to ask it for
    (kfp_run / "deploy-trials").mkdir()
    (kfp_run / "deploy-trials" / "executor_output.json").write_text(
        json.dumps({"parameterValues": {"endpoint": "http://127.0.0.1:5/v1", "models": ["m-base", "m-trial-0"]}})
    )
    assert runs.deployed_outputs(kfp_run) == {
        "merged_model": "",
        "endpoint": "",
        "trials_endpoint": "http://127.0.0.1:5/v1",
        "trials_models": "m-base, m-trial-0",
    }


@pytest.mark.parametrize("command", [["pipelines.submit", "--list-params"], ["pipelines.runs", "compare"]])
def test_output_piped_into_a_reader_that_stops_early_ends_quietly(tmp_path, command):
    """`... | head`: the reader goes away before the output is written; no BrokenPipeError traceback."""
    import subprocess
    from pathlib import Path

    runs_dir = tmp_path / "runs"
    for lr in (0.001, 0.002):
        record_run(runs_dir, tmp_path, lr=lr, acc=0.5)
    proc = subprocess.Popen(
        [sys.executable, "-m", *command, *(["--runs-dir", str(runs_dir)] if "runs" in command[0] else [])],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # before the child has printed anything: its first write meets a closed pipe
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err


def test_tensorboard_takes_the_latest_runs_that_have_events_not_the_latest_failed_ones(tmp_path, capsys):
    runs_dir = tmp_path / "runs"
    with_events = [record_run(runs_dir, tmp_path, lr=lr, acc=0.5) for lr in (0.001, 0.002)]
    for _ in range(2):  # two runs that failed before training: no events
        failed = runs.new_run("finetune", {"learning_rate": 0.003}, runs_dir)
        runs.update_run(failed, status="failed", summary="deliver-model: error: no such model")
    assert runs.main(["tensorboard", "--runs-dir", str(runs_dir)]) == 0
    spec = capsys.readouterr().out.split("--logdir_spec ")[1]
    assert [part.split(":")[0] for part in spec.strip().split(",")] == with_events
    with pytest.raises(SystemExit):
        runs.main(["tensorboard", failed.name, "--runs-dir", str(runs_dir)])
    assert "-n N" in capsys.readouterr().err


def test_a_converted_dataset_is_announced_by_the_step_that_converts_not_by_each_check(tmp_path, capsys):
    """run_local checks the parameters, then validate-params, then deliver-dataset reads the file:
    the "N ShareGPT rows converted" line is deliver-dataset's alone."""
    from tests.unit.test_data import SHAREGPT, write
    from trainer import data
    from trainer.config import sources
    from trainer.validate import DEFAULTS, pipeline_problems

    path = write(tmp_path, [json.dumps(SHAREGPT)] * 12)
    assert pipeline_problems({**DEFAULTS, "dataset_source": str(path), "batch_size": 1}) == []
    assert "converted" not in capsys.readouterr().out
    data.load(sources.Source("local", str(path)), "", 0.25, 1)
    assert capsys.readouterr().out.count("rows converted to chat messages") == 1


def test_the_trainer_cli_delivering_a_converted_dataset_says_so_once(tmp_path, capsys, s3_env):
    """`python -m trainer deliver-dataset FILE` checks the file, then delivers it: one line, from the delivery."""
    from tests.unit.test_data import SHAREGPT, write
    from trainer.__main__ import main

    path = write(tmp_path, [json.dumps(SHAREGPT)] * 12)
    main(["deliver-dataset", str(path)])
    out = capsys.readouterr().out
    assert out.count("rows converted to chat messages") == 1 and '"uri": "s3://' in out, out


def test_run_local_drops_a_parallel_for_s_queued_iterations_when_the_run_stops():
    """Ctrl-C / SIGTERM / a failed trial: kfp.local's ParallelFor executor (through the name its
    module uses) must not start the iterations still queued (they would train for hours)."""
    import threading

    from kfp.local.orchestrator import enhanced_dag_orchestrator as orchestrator

    from pipelines.kfp_local_patches import pending_tasks_cancelled

    saved = orchestrator.concurrent
    started, release = [], threading.Event()
    with pending_tasks_cancelled():
        pool = orchestrator.concurrent.futures.ThreadPoolExecutor(max_workers=1)
        first = pool.submit(lambda: (started.append(1), release.wait(30)))
        queued = [pool.submit(started.append, n) for n in (2, 3)]
        while not started:
            time.sleep(0.01)
        threading.Timer(0.2, release.set).start()  # the running iteration ends while shutdown waits
        pool.shutdown(wait=True)  # what kfp's `finally` calls on the way out
    assert first.done() and all(f.cancelled() for f in queued) and started == [1]
    assert orchestrator.concurrent is saved  # put back after the run


def test_a_closed_terminal_pipe_inside_kfp_logging_prints_no_logging_traceback(tmp_path, capsys):
    """`run_local | head`: the pipe closes while kfp logs through the console; logging would print
    its own "--- Logging error ---" traceback on the real stderr. Put back after the run."""
    from pipelines import console as console_mod

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    before = logging.raiseExceptions
    logger = logging.getLogger("kfp-like-closed-pipe")
    with open(tmp_path / "run.log", "w") as log:
        saved_stdout = sys.stdout
        sys.stdout = ClosedPipe()
        try:
            console, restore = console_mod.install(log)
            handler = logging.StreamHandler(sys.stdout)  # kfp.local logs to the console so
            logger.addHandler(handler)
            try:
                logger.warning("Task finetune finished")
            finally:
                logger.removeHandler(handler)
                restore()
        finally:
            sys.stdout = saved_stdout
    assert "Logging error" not in capsys.readouterr().err
    assert logging.raiseExceptions is before


def test_a_run_reads_only_its_own_kfp_run_even_when_another_run_writes_beside_it(tmp_path, s3_env, capsys):
    """Two run_local in one folder, the second started while the first runs: the first's record used to take the
    newest kfp.local run directory by modification time, i.e. the second run's metrics. Each run now has kfp.local's
    root of its own (pipeline-root/<run id>/)."""
    import argparse

    from pathlib import Path

    from kfp.local import config

    from pipelines import run_local
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.cli_params import pipeline_defaults

    def write_run(root: Path, stamp: str, steps: int) -> Path:
        out = root / f"llm-finetune-2026-11-24-10-00-{stamp}-000000" / "finetune" / "executor_output.json"
        out.parent.mkdir(parents=True)
        out.write_text(json.dumps({"artifacts": {"metrics": {"artifacts": [{"metadata": {"train_steps": steps}}]}}}))
        return out.parent.parent

    class Pipeline:  # the run as kfp.local would make it: a task's outputs under the configured root, then a failure
        name = "llm-finetune"
        pipeline_func = finetune_pipeline.pipeline_func

        def __call__(self, **params):
            self.own = write_run(Path(config.LocalExecutionConfig.instance.pipeline_root), "00", 10)
            time.sleep(0.05)
            write_run(tmp_path / "root", "04", 99)  # the other run, newer, where runs used to share one root
            raise RuntimeError("Task finetune failed")

    pipeline = Pipeline()
    args = argparse.Namespace(pipeline="finetune", runs_dir=tmp_path / "runs", pipeline_root=tmp_path / "root")
    assert run_local.run(pipeline, pipeline_defaults(finetune_pipeline), args) == 1
    [run_dir] = (tmp_path / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["metrics"] == {"finetune": {"train_steps": 10}} and record["kfp_run_dir"] == str(pipeline.own)
    assert pipeline.own.parent == tmp_path / "root" / run_dir.name


def test_a_full_disk_when_copying_the_model_out_keeps_the_runs_record_and_says_so_once(
    tmp_path, monkeypatch, capsys, s3_env
):
    """With 2 MB free the pipeline succeeded, then the copy out hit ENOSPC and the record said
    'failed' with every metric lost: the record is written first, the copy's failure is one line."""
    import argparse
    import types

    from pipelines import run_local
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.cli_params import pipeline_defaults
    from trainer.core.errors import UserError

    merged = types.SimpleNamespace(metadata={"uri": "s3://test-bucket/models/sha256-abc"})

    def pipeline(**_):  # a run that succeeded, as kfp.local hands it back
        return types.SimpleNamespace(outputs={"endpoint": "", "merged_model": merged})

    pipeline.name, pipeline.pipeline_func = finetune_pipeline.name, finetune_pipeline.pipeline_func

    def disk_full(uri, out):
        raise UserError(
            f"not enough space in {out.parent} for {uri}: it needs 540.0 MB, 2.0 MB are free; "
            "free space there or choose another folder"
        )

    monkeypatch.setattr(run_local, "export_model", disk_full)
    args = argparse.Namespace(
        pipeline="finetune", runs_dir=tmp_path / "runs", pipeline_root=tmp_path / "root", output_dir=tmp_path / "out"
    )
    assert run_local.run(pipeline, pipeline_defaults(finetune_pipeline), args) == 1
    [run_dir] = (tmp_path / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "succeeded" and record["merged_model"] == merged.metadata["uri"]
    assert "2.0 MB are free" in record["copy_error"]
    err = capsys.readouterr().err
    [line] = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert "not copied out" in line and f"python -m trainer download {merged.metadata['uri']} DIR" in line
    assert "Traceback" not in err


def test_a_record_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    run_dir = runs.new_run("finetune", {"max_steps": 3}, tmp_path)
    real = Path.write_text

    def full(self, text, *a, **kw):
        real(self, text[:10], *a, **kw)  # what a full disk leaves: the start of the file
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        runs.update_run(run_dir, status="succeeded", metrics={"evaluate": {"tuned_fc_accuracy": 0.9}})
    monkeypatch.undo()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"  # the previous record, whole
    assert [p.name for p in run_dir.iterdir()] == ["run.json"]


def test_a_log_on_a_full_disk_stops_with_one_note_and_the_run_goes_on(tmp_path):
    from pipelines.console import SafeLog

    terminal = io.StringIO()
    with SafeLog(open("/dev/full", "w", buffering=1), terminal) as log:  # every write: ENOSPC
        for _ in range(3):
            log.write("a line\n")
            log.flush()
    [note] = terminal.getvalue().splitlines()
    assert note.startswith("note: the log /dev/full stopped here (") and "No space left on device" in note
    with SafeLog(open(tmp_path / "run.log", "w"), terminal) as log:
        log.write("the last line\n")
    log.write("a library's late line, after the run\n")  # dropped without a word
    assert (tmp_path / "run.log").read_text() == "the last line\n" and len(terminal.getvalue().splitlines()) == 1


def test_summary_lists_each_measured_category_of_both_suites_with_its_rows():
    """run_local's base-vs-tuned table reads the categories through trainer.core.metrics.read: a held-out category
    with rows, each BFCL aggregate (no rows) and category (its rows); a category one model did not measure, or
    with no rows, is not a line."""
    from pipelines.run_local import summarize

    ev = {
        "base_eval_loss": 2.0,
        "tuned_eval_loss": 1.0,
        "base_fc_accuracy": 0.0,
        "tuned_fc_accuracy": 0.9,
        "fc_rows": 12,
        "base_fc_ast_accuracy": 0.25,
        "tuned_fc_ast_accuracy": 0.75,
        "fc_multiple_rows": 10,
        "base_fc_multiple_accuracy": 0.0,
        "tuned_fc_multiple_accuracy": 0.8,
        "fc_irrelevance_rows": 2,
        "base_fc_irrelevance_accuracy": 1.0,
        "tuned_fc_irrelevance_accuracy": 0.5,
        "fc_parallel_rows": 0,
        "base_bfcl_non_live_ast_accuracy": 0.0,
        "tuned_bfcl_non_live_ast_accuracy": 0.06,
        "bfcl_irrelevance_rows": 25,
        "base_bfcl_irrelevance_accuracy": 1.0,
        "tuned_bfcl_irrelevance_accuracy": 0.12,
        "base_bfcl_multiple_accuracy": 0.0,  # the tuned model's not logged: no line
        "bfcl_version": 20260323,
    }
    text = summarize({"evaluate": ev}, None, False, 1.0)
    assert re.search(r"function-calling AST accuracy \(12 rows\)\s+25\.0%\s+75\.0%", text), text
    assert re.search(r"\n  multiple \(10 rows\)\s+0\.0%\s+80\.0%", text)
    assert re.search(r"\n  irrelevance \(2 rows\)\s+100\.0%\s+50\.0%", text)
    assert "parallel" not in text
    assert re.search(
        r"\nBFCL 2026\.3\.23\s*\n  non_live_ast\s+0\.0%\s+6\.0%\s*\n  irrelevance \(25 rows\)\s+100\.0%\s+12\.0%", text
    )
    assert "  multiple (" not in text.split("BFCL 2026.3.23")[1]
