"""python -m pipelines.runs {list,compare,tensorboard,clear-store} [RUN ...] [-n N] [--runs-dir DIR]

Local runs side by side, like the KFP UI's Compare view. Every `pipelines.run_local` run
keeps a record under .runs/<run id>/ in the directory it ran from (as MLflow's ./mlruns; run
this command there too, or give --runs-dir), which outlives the run's throwaway S3 server:

  run.json       parameters, metrics of every task, status, times, endpoint, model URI, the delivered
                 dataset's rows (irrelevance rows made by function masking among them)
  run.log        the full console output, kfp.local's executor dumps and warnings included
  reports/       the run's HTML reports and Markdown reports rendered as HTML
  tensorboard/   the trainer's TensorBoard event files

Status: running, succeeded, failed, interrupted (Ctrl-C); gone when the run's process ended
without finishing its record (killed); broken when run.json is missing or unreadable (the
line says why; remove the directory if the run is of no use).

Examples:
  python -m pipelines.runs list
  python -m pipelines.runs compare                # the last 2 runs
  python -m pipelines.runs compare -n 5           # the last 5
  python -m pipelines.runs compare 20261122-130501-finetune 20261122-131210-finetune
  python -m pipelines.runs tensorboard            # print the command for every run's events
  python -m pipelines.runs tensorboard --launch   # and start it (Ctrl-C stops)
  python -m pipelines.runs clear-store            # empty .runs/store (run_local's S3 contents kept between runs)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from trainer.core.errors import UserError, exit_on_user_error

RUNS_DIR = Path(".runs")  # under the current directory, as MLflow's ./mlruns
STORE = "store"  # <runs dir>/store: the throwaway S3's reusable contents between runs (pipelines.local_store)
RECORD = "run.json"


# --- writing a record (run_local)


def new_run(
    pipeline: str, params: dict[str, Any], runs_dir: Path = RUNS_DIR, defaults: dict[str, Any] | None = None
) -> Path:
    """Create .runs/<time>-<pipeline>/ with a run.json saying it is running; returns the directory.
    `defaults` (the pipeline's) lets `list` show what each run changed."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 100):
        run_dir = runs_dir / (f"{stamp}-{pipeline}" + (f"-{n}" if n > 1 else ""))
        try:
            run_dir.mkdir(parents=True)
            break
        except FileExistsError:
            continue
    record = {
        "id": run_dir.name,
        "pipeline": pipeline,
        "status": "running",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "params": params,
        "metrics": {},
        "pid": os.getpid(),
        "host": socket.gethostname(),  # so that a killed run reads as gone
        "pid_started": _started_at(os.getpid()),  # ... even once its pid is another process's
        "changed": {k: v for k, v in params.items() if defaults is not None and defaults.get(k) != v},
    }
    write_record(run_dir, record)
    return run_dir


def update_run(run_dir: Path, **fields: Any) -> dict[str, Any]:
    record = json.loads((run_dir / RECORD).read_text())
    record.update(fields)
    write_record(run_dir, record)
    return record


def write_record(run_dir: Path, record: dict[str, Any]) -> None:
    """run.json replaced whole or not at all: a full disk leaves the previous record, never half of one."""
    tmp = run_dir / f".{RECORD}.tmp"
    try:
        tmp.write_text(json.dumps(record, indent=1))
        os.replace(tmp, run_dir / RECORD)
    finally:
        tmp.unlink(missing_ok=True)


def collect_task_outputs(kfp_run_dir: Path) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """From a kfp.local run directory: every task's Metrics (by task, as the Compare view
    lists them) and its report artifacts (HTML / Markdown files), by "<task>-<output>".

    kfp.local writes each task's outputs into <run>/<task>/executor_output.json without their
    types. Model and Dataset artifacts here always carry a `uri` (components.artifacts), so
    the numbers of any other artifact are metrics (a Metrics artifact may also hold text,
    e.g. the deploy step's reply, which is left out).
    """
    metrics: dict[str, dict[str, float]] = {}
    reports: dict[str, str] = {}
    for task, name, artifact in task_artifacts(kfp_run_dir):
        meta = artifact.get("metadata") or {}
        numbers = {k: v for k, v in meta.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if numbers and "uri" not in meta:
            metrics.setdefault(task, {}).update(numbers)
        path = Path(artifact.get("uri", ""))
        if not meta and path.is_file() and path.read_bytes()[:1] in (b"<", b"#"):
            reports[f"{task}-{name}"] = str(path)
    return metrics, reports


def delivered_dataset(kfp_run_dir: Path) -> dict[str, Any]:
    """What the deliver-dataset task made of the data (its artifact's metadata): rows per split, the rows made
    by function masking (irrelevance_share, irrelevance_rows, irrelevance_reply), and a mix's record
    (trainer.data.mix: source, weight, rows read and taken); {} when it did not run."""
    keys = (
        "uri",
        "rows",
        "irrelevance_share",
        "irrelevance_rows",
        "irrelevance_reply",
        "irrelevance_distractors",
        "name_masking",
        "name_masked_rows",
        "mix",
    )
    return next(
        (
            {k: meta[k] for k in keys if k in meta}
            for task, _, artifact in task_artifacts(kfp_run_dir)
            if task.rsplit(".", 1)[-1] == "deliver-dataset" and (meta := artifact.get("metadata") or {})
        ),
        {},
    )


def task_artifacts(kfp_run_dir: Path) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(task, output name, artifact) for every output artifact of a kfp.local run, tasks in path
    order; a task inside a sub-DAG is named "<dag>.<task>"."""
    for out in sorted(kfp_run_dir.rglob("executor_output.json")):
        task = out.parent.relative_to(kfp_run_dir).as_posix().replace("/", ".")
        for name, entry in json.loads(out.read_text()).get("artifacts", {}).items():
            for artifact in entry.get("artifacts", []):
                yield task, name, artifact


def deployed_outputs(kfp_run_dir: Path) -> dict[str, str]:
    """What the sweep's conditional branch produced, which its pipeline outputs cannot carry (KFP
    returns no output from inside a dsl.If): the merged model's URI and the endpoint, "" for each
    that did not run (no trial beat the base model); and the endpoint serving every trial side by
    side (deploy_all_trials) with its model names, "" unless it is still serving."""
    found = {"merged_model": "", "endpoint": "", "trials_endpoint": "", "trials_models": ""}
    for out in kfp_run_dir.rglob("executor_output.json"):
        try:
            entry = json.loads(out.read_text())
        except (OSError, ValueError):
            continue
        if out.parent.name == "merge-lora":
            for artifact in entry.get("artifacts", {}).get("merged", {}).get("artifacts", []):
                found["merged_model"] = (artifact.get("metadata") or {}).get("uri", "") or found["merged_model"]
        elif out.parent.name == "deploy":
            found["endpoint"] = str(entry.get("parameterValues", {}).get("endpoint", "")) or found["endpoint"]
        elif out.parent.name == "deploy-trials":  # deploy_all_trials: the trials side by side, still serving
            values = entry.get("parameterValues", {})
            found["trials_endpoint"] = str(values.get("endpoint", ""))
            found["trials_models"] = ", ".join(map(str, values.get("models") or []))
    return found


# Titles for the reports this project's components write; others are named after task and output.
TITLES = {
    "finetune-report": "Training report",
    "evaluate-examples": "Evaluation: base vs tuned",
    "pick-best-summary": "Sweep results",
}


def save_reports(run_dir: Path, reports: dict[str, str]) -> list[Path]:
    """Copy the run's reports into run_dir/reports/ as .html files a browser opens, each
    titled with what it is and the run it belongs to."""
    import re

    from trainer.evaluate.report import markdown_html

    out_dir = run_dir / "reports"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for key, path in sorted(reports.items()):
        text = Path(path).read_text()
        name = key.rsplit(".", 1)[-1]  # a sweep's trials: "for-loop-1-iteration-0.evaluate-examples"
        trial = re.search(r"iteration-(\d+)\.", key)
        title = (
            f"{TITLES.get(name, name.replace('-', ' '))}{f', trial {trial[1]}' if trial else ''}"
            f" — local run {run_dir.name}"
        )
        if text.lstrip().startswith("<"):
            page = re.sub(r"<title>.*?</title>", lambda _: f"<title>{title}</title>", text, count=1, flags=re.S)
        else:
            (out_dir / f"{key}.md").write_text(text)
            page = markdown_html(text, title)
        target = out_dir / f"{key}.html"
        target.write_text(page)
        written.append(target)
    return written


def keep_logs(tmp_dir: Path, run_dir: Path) -> list[Path]:
    """Copy log files that components wrote under the run's temporary directory (e.g. the
    model server's) into run_dir/logs/ before that directory is removed."""
    kept = []
    for path in sorted(Path(tmp_dir).rglob("*.log")):
        target = run_dir / "logs" / f"{path.parent.name}-{path.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        kept.append(target)
    return kept


def tensorboard_prefixes(kfp_run_dir: Path) -> list[str]:
    """The TensorBoard prefixes (s3://bucket/runs/<id>/tensorboard) of a kfp.local run's finetune
    tasks, from their adapters' metadata: one per trial in a sweep."""
    return sorted(
        {
            uri
            for _, _, artifact in task_artifacts(kfp_run_dir)
            if (uri := (artifact.get("metadata") or {}).get("tensorboard_uri"))
        }
    )


LOCAL_RUN_MARK = "local-run"  # runs/<id>/local-run/<run_local's run name>: written by the finetune component


def save_tensorboard(run_dir: Path, store, prefixes: list[str] | None = None, local_run: str = "") -> Path | None:
    """Copy this run's TensorBoard events from runs/<id>/tensorboard/ in the bucket to
    run_dir/tensorboard/<id>/; None if there were none. Found by identity, never by time (two runs
    at once write to one bucket): `prefixes` (tensorboard_prefixes) are the finished finetune tasks';
    without them (training failed) the tasks that marked runs/<id>/local-run/<local_run> before
    training."""
    from minio.error import S3Error

    try:
        listed = store._call(
            "TensorBoard listing", lambda: list(store.client.list_objects(store.bucket, prefix="runs/", recursive=True))
        )
    except S3Error as err:
        if err.code == "NoSuchBucket":  # every task failed before writing anything: no events
            return None
        raise
    own = [p.split("/", 3)[3].rstrip("/") + "/" for p in prefixes or [] if p.count("/") >= 3]
    if not own and local_run:
        own = [
            o.object_name.rsplit(f"/{LOCAL_RUN_MARK}/", 1)[0] + "/tensorboard/"
            for o in listed
            if o.object_name.endswith(f"/{LOCAL_RUN_MARK}/{local_run}")
        ]
    if not own:
        return None

    def ours(o) -> bool:
        return o.object_name.startswith(tuple(own))

    found = [o for o in listed if ours(o) and not o.object_name.endswith("_manifest.json")]
    if not found:
        return None
    target = run_dir / "tensorboard"
    for o in found:
        run_id, _, rest = o.object_name.removeprefix("runs/").partition("/tensorboard/")
        store.client.fget_object(store.bucket, o.object_name, str(target / run_id / rest))
    return target


# --- reading records

# run_local's run directories: <YYYYmmdd-HHMMSS>-<pipeline>[-n]; .runs/ also holds outputs/, pipeline-root/.
_RUN_DIR = re.compile(r"\d{8}-\d{6}-.+")


def read_record(run_dir: Path) -> dict[str, Any]:
    """The run's record; a run directory whose run.json is missing, half-written or not a
    record (a run killed while writing it, a hand edit) reads as a record that says so, so
    that one broken run neither hides the others nor stops `list` and `compare`."""
    path = run_dir / RECORD
    try:
        if path.exists() and not path.is_file():  # a FIFO or a device: reading it would wait for a writer forever
            raise OSError(f"{RECORD} is not a regular file")
        record = json.loads(path.read_text())
        problem = "" if isinstance(record, dict) else f"{RECORD} holds no JSON object"
    except FileNotFoundError:
        record, problem = {}, f"no {RECORD}"
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:  # Recursion: nested past json's depth
        record, problem = {}, f"unreadable {RECORD} ({type(err).__name__}: {str(err)[:80]})"
    if not problem:
        wrong = [
            k
            for k, kind in (
                ("params", dict),
                ("metrics", dict),
                ("changed", dict),
                ("started", str),
                ("elapsed_s", (int, float)),
                ("status", str),
                ("summary", str),
            )
            if k in record and not isinstance(record[k], kind)
        ]
        if "elapsed_s" in record and "elapsed_s" not in wrong and not _real(record["elapsed_s"]):
            wrong.append("elapsed_s (a finite number of seconds)")
        if isinstance(record.get("metrics"), dict) and not all(
            isinstance(ms, dict) and all(isinstance(v, (int, float)) for v in ms.values())
            for ms in record["metrics"].values()
        ):
            wrong.append("metrics (each task's must be names and numbers)")
        problem = f"{RECORD} field(s) of the wrong type: {', '.join(wrong)}" if wrong else ""
    if problem:
        record = {
            "status": "broken",
            "summary": f"{problem}; remove {run_dir} if the run is gone",
            "started": "",
            "params": {},
            "metrics": {},
        }
    # What a hand edit (or a bug) can put there must not reach the terminal or the tables as if measured: a NaN or
    # infinite metric reads as not measured (blank); control characters (a newline, an escape sequence) as spaces.
    record["metrics"] = {
        task: {k: v for k, v in ms.items() if _real(v)} for task, ms in record.get("metrics", {}).items()
    }
    for key in ("summary", "status", "started", "pipeline"):
        if isinstance(record.get(key), str):
            record[key] = _CONTROL.sub(" ", record[key])
    if record.get("status") == "running" and _gone(record):
        record["status"] = "gone"
        record.setdefault("summary", f"its process {record['pid']} ended without finishing the record (killed?)")
    record["id"] = run_dir.name  # the directory is what `compare RUN` and `rm -r` name
    record["dir"] = str(run_dir)
    return record


def _real(value: float) -> bool:
    """A number a table can show: finite, and within a float's range (a JSON integer has no bound)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# What a terminal acts on instead of showing: control characters (C0, DEL, C1), bidirectional overrides and isolates
# (which reorder what is shown), and lone surrogates (no UTF-8 writer takes one).
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _shown(value: Any) -> str:
    """A record's value as the terminal should print it: what it would act on escaped as Python writes it
    (`\\x1b[2J`, `\\u202e`): a parameter with an escape sequence neither clears the screen nor breaks the table."""
    return _UNSHOWABLE.sub(lambda m: m[0].encode("unicode_escape", "backslashreplace").decode("ascii"), str(value))


def _shown_table(rows: list[tuple[Any, ...]], header: tuple[Any, ...]) -> str:
    from trainer.evaluate.report import table

    return table([tuple(map(_shown, r)) for r in rows], tuple(map(_shown, header)))


def _started_at(pid: int) -> str | None:
    """When process `pid` started, as "<boot id>:<clock ticks since boot>" (Linux's /proc: unlike a wall-clock time,
    no clock step moves it), None if there is no such process or no /proc to read it from."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return f"{boot}:{fields[19]}"  # field 22, starttime: the fields after the name start at 3
    except (OSError, IndexError, ValueError):
        return None


def _gone(record: dict[str, Any]) -> bool:
    """A run recorded as running on this machine whose process no longer exists: no process with its pid, or one
    that started at another time (the pid reused after the run was killed)."""
    pid = record.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or record.get("host") != socket.gethostname():
        return False  # another machine's run (a shared .runs/), or a record from before pids were kept
    if pid <= 0:  # kill(0) and kill(-1) reach whole groups: no run's own process
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: a pid past what the OS can have
        return True
    except OSError:  # exists, another user's
        pass
    recorded, started = record.get("pid_started"), _started_at(pid)
    return isinstance(recorded, str) and started is not None and started != recorded


def runs_dir_flag(runs_dir: Path) -> str:
    """` --runs-dir DIR` for a command line that must find runs kept under `runs_dir`, '' for the default."""
    import shlex

    return "" if Path(runs_dir).absolute() == RUNS_DIR.absolute() else f" --runs-dir {shlex.quote(str(runs_dir))}"


def load_runs(runs_dir: Path = RUNS_DIR) -> list[dict[str, Any]]:
    """Every run under runs_dir, oldest first (the id starts with its start time)."""
    dirs = [d for d in runs_dir.glob("*") if d.is_dir() and (_RUN_DIR.fullmatch(d.name) or (d / RECORD).exists())]
    return sorted((read_record(d) for d in dirs), key=lambda r: r["id"])


def select(runs: list[dict[str, Any]], ids: list[str], last: int, runs_dir: Path = RUNS_DIR) -> list[dict[str, Any]]:
    if not ids:
        return runs[-last:]
    by_id = {r["id"]: r for r in runs}
    ids = list(dict.fromkeys(ids))  # a run named twice is one column
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise UserError(f"no local run {', '.join(missing)} under {runs_dir}; see: python -m pipelines.runs list")
    return [by_id[i] for i in ids]


def _fmt(value: Any) -> str:
    if isinstance(value, float) and 1e4 <= abs(value) < 1e15:  # tokens/s, bytes: 18,968 rather than 1.897e+04
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def list_table(runs: list[dict[str, Any]]) -> str:
    rows = []
    for r in runs:
        ms = r.get("metrics", {})
        ev = ms.get("evaluate") or ms.get("pick-best") or {}  # a sweep: the winner's numbers
        acc = (
            f"{ev['base_fc_accuracy']:.1%} -> {ev['tuned_fc_accuracy']:.1%}"
            if {"base_fc_accuracy", "tuned_fc_accuracy"} <= set(ev)
            else ""
        )
        if ev.get("fc_rows", 1) == 0:  # no tool-call rows to score: 0% would read as a measurement
            acc = "n/a (0 rows)"
        changed = ", ".join(f"{k}={_fmt(v)}" for k, v in r.get("changed", {}).items()) or "defaults"
        rows.append(
            (
                r["id"],
                r.get("status", "?"),
                f"{r['elapsed_s']:.0f}s" if "elapsed_s" in r else "",
                acc,
                r.get("summary") or changed,
            )
        )
    return _shown_table(rows, ("run", "status", "time", "fc accuracy", "parameters set (or what happened)"))


def task_label(task: str) -> str:
    """kfp.local's names for a sweep trial's tasks ("for-loop-1-iteration-0.evaluate") as people say them."""
    return re.sub(r"^for-loop-\d+-iteration-(\d+)\.", r"trial \1 ", task)


def compare_table(runs: list[dict[str, Any]], all_params: bool = False) -> str:
    """Runs as columns: the parameters that differ (all with `all_params`), then every metric."""
    ids = [r["id"] for r in runs]
    names = sorted({k for r in runs for k in r.get("params", {})})
    rows = []
    for name in names:
        values = [_fmt(r.get("params", {}).get(name, "")) for r in runs]
        if all_params or len(set(values)) > 1:
            rows.append((name, *values))
    if not rows:
        rows.append(("(parameters)", *["same"] * len(runs)))
    rows.append(("", *[""] * len(runs)))
    keys = sorted({(task, m) for r in runs for task, ms in r.get("metrics", {}).items() for m in ms})
    for task, m in keys:  # "-": not logged (a stage that failed, did not run yet, or had nothing to measure)
        rows.append((f"{task_label(task)}: {m}", *[_fmt(r.get("metrics", {}).get(task, {}).get(m, "-")) for r in runs]))
    rows.append(("status", *[r.get("status", "?") for r in runs]))
    return _shown_table(rows, ("", *ids))


def tensorboard_command(runs: list[dict[str, Any]]) -> list[str]:
    """`tensorboard --logdir_spec name:dir,...` over the runs that have event files."""
    spec = [f"{r['id']}:{Path(r['dir']) / 'tensorboard'}" for r in runs if (Path(r["dir"]) / "tensorboard").is_dir()]
    if not spec:
        raise UserError(
            f"none of the runs {', '.join(r['id'] for r in runs)} has TensorBoard events (a run that "
            "failed before training has none): name others, or leave the ids out for the latest runs "
            "that have some (-n N for how many)"
        )
    exe = shutil.which("tensorboard") or str(Path(sys.executable).parent / "tensorboard")
    return [exe, "--logdir_spec", ",".join(spec)]


def tensorboard_missing(exe: str) -> str:
    """Why `exe` cannot be started ('' when it can): said before exec, which would raise a traceback."""
    if Path(exe).is_file() and os.access(exe, os.X_OK):
        return ""
    return (
        f"tensorboard is not installed here ({exe} not found): pip install tensorboard, or run the printed "
        "command where it is"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.runs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "command",
        choices=("list", "compare", "tensorboard", "clear-store"),
        help="list: one line per run; compare: parameters that differ and metrics side by side; "
        "tensorboard: the command that shows the runs' training curves; clear-store: empty the local store "
        "(<runs-dir>/store: what run_local keeps of its throwaway S3 between runs)",
    )
    parser.add_argument("runs", nargs="*", metavar="RUN", help="run ids (default: the last -n runs)")
    parser.add_argument(
        "-n",
        "--last",
        type=int,
        default=None,
        help="how many of the latest runs (default: all for list, 2 for compare and tensorboard)",
    )
    parser.add_argument("--all-params", action="store_true", help="compare: show parameters that are equal too")
    parser.add_argument("--launch", action="store_true", help="tensorboard: start it (Ctrl-C stops)")
    parser.add_argument("--runs-dir", type=Path, default=RUNS_DIR, help="where run_local keeps runs (default ./.runs)")
    args = parser.parse_args(argv)
    args.runs_dir = args.runs_dir.absolute()  # named in messages: say which .runs was read
    for stream in (sys.stdout, sys.stderr):  # what a terminal cannot encode (a damaged record's) printed escaped
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")

    with exit_on_user_error():
        for flag, command in (("all_params", "compare"), ("launch", "tensorboard")):  # else silently ignored
            if getattr(args, flag) and args.command != command:
                raise UserError(
                    f"--{flag.replace('_', '-')} applies to `{command}`, not `{args.command}`: drop it, or "
                    f"run python -m pipelines.runs {command} --{flag.replace('_', '-')}"
                )
        if args.command == "clear-store":
            from pipelines import local_store

            if args.runs or args.last is not None:
                raise UserError("clear-store empties the whole local store: it takes no run ids and no -n")
            print(local_store.clear(args.runs_dir / STORE))
            return 0
        if args.last is not None and args.last < 1:
            raise UserError(f"-n {args.last}: give how many of the latest runs to show, at least 1 (e.g. -n 2)")
        runs = load_runs(args.runs_dir)
        if not runs:
            raise UserError(f"no local runs under {args.runs_dir}: run python -m pipelines.run_local first")
        if args.command == "tensorboard" and not args.runs:
            # The latest runs that have curves: a failed run just before must not hide the one before it.
            with_events = [r for r in runs if (Path(r["dir"]) / "tensorboard").is_dir()]
            if not with_events:
                raise UserError(
                    f"none of the {len(runs)} runs under {args.runs_dir} has TensorBoard events (a run "
                    "that failed before training has none); see: python -m pipelines.runs list"
                )
            runs = with_events
        if args.command == "compare" and not args.runs:  # the latest runs it can compare: a broken record has nothing
            runs = [r for r in runs if r.get("status") != "broken"] or runs  # (list names it, and why)
        chosen = select(runs, args.runs, args.last or (len(runs) if args.command == "list" else 2), args.runs_dir)
        if args.command == "list":
            print(list_table(chosen))
        elif args.command == "compare":
            print(compare_table(chosen, args.all_params))
        else:
            cmd = tensorboard_command(chosen)
            print(" ".join(cmd))
            if args.launch:
                if problem := tensorboard_missing(cmd[0]):
                    raise UserError(problem)
                os.execv(cmd[0], cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
