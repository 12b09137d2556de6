"""python -m pipelines.run_local [--pipeline finetune|sweep] [--param KEY=VALUE ...] [--list-params]
                                [--s3-endpoint URL] [--keep-serving] [--runner subprocess|docker]

Run the whole fine-tuning pipeline on this machine through `kfp.local`, with the same
components that run on a cluster. Without --s3-endpoint (or S3_ENDPOINT in the
environment) it starts an S3-compatible server on loopback (moto, the stand-in for
MinIO); its contents vanish when this command ends, so the merged model is copied to
--output-dir and the run's TensorBoard events to its record. With a real MinIO, set
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY too.

The console shows each task's start and end, the components' messages and progress,
then a summary. Everything (kfp.local's executor dumps and warnings too) goes to the
run's log file. Each run is kept under .runs/<run id>/ in the current directory (as MLflow's
./mlruns): run.json (parameters, metrics), run.log, reports/*.html, tensorboard/; the merged
model goes to .runs/outputs/merged-model (replaced by each run whose model passes the promotion
gate). List and compare runs with `python -m pipelines.runs` (from the same directory, or with
--runs-dir).
--runner docker runs every component in the image its compiled spec names, through KFP's own DockerRunner
(pipelines.container_runner: podman's Docker API unless DOCKER_HOST is set; build the images with make images).
Ctrl-C (or SIGTERM) stops the run: one line, the record says "interrupted", exit status 130
(143 for SIGTERM).

kfp.local ignores kfp-kubernetes settings (Secrets as env), so this command hands the S3
settings and credentials to the components through its own environment.

Examples:
  python -m pipelines.run_local
  python -m pipelines.run_local --list-params
  python -m pipelines.run_local --param max_steps=50 --param dataset_source=./my.jsonl
  python -m pipelines.run_local --pipeline sweep --parallelism 2 --param min_gain=0.2
  make images && python -m pipelines.run_local --runner docker     # every step in its container
  python -m pipelines.runs compare        # this run next to the previous one
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from pipelines import kfp_local_patches
from pipelines.dag.finetune import finetune_pipeline
from trainer.chat import fc_check
from trainer.core import metrics as names
from trainer.core import settings
from trainer.config import sources
from trainer.data import bfcl as bfcl_data
from trainer.core.errors import UserError, exit_on_user_error


def parse_params(pairs: list[str], pipeline=finetune_pipeline) -> dict[str, Any]:
    from pipelines.cli_params import parse_params as parse

    return parse(pipeline, pairs)


def start_s3(endpoint: str | None):
    """Use the given endpoint, or start moto on loopback; sets env for the components."""
    if endpoint:
        from_env = os.environ.get("S3_ENDPOINT") == endpoint  # --s3-endpoint defaults to it: name what the user set
        os.environ["S3_ENDPOINT"] = endpoint
        if not (os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")):
            raise UserError(
                f"{'S3_ENDPOINT' if from_env else '--s3-endpoint'}={endpoint} needs AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY in the environment (that S3/MinIO's keys)"
                + ("; or unset S3_ENDPOINT to run on a throwaway S3 server on loopback" if from_env else "")
            )
        from trainer.core.storage import Store

        # A dead endpoint or wrong keys: one error now, not a failure in every task and a traceback after.
        Store.from_env().ensure_bucket()
        return None
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one log line per S3 request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ["S3_ENDPOINT"] = f"http://{host}:{port}"
    # Throwaway credentials for the throwaway server (moto accepts any), never printed.
    os.environ["AWS_ACCESS_KEY_ID"] = "local-" + secrets.token_hex(4)
    os.environ["AWS_SECRET_ACCESS_KEY"] = secrets.token_hex(16)
    return server


def throwaway_s3_problems(params: dict[str, Any], endpoint: str | None) -> list[str]:
    """An s3:// source can only be in a real S3: the throwaway server starts empty."""
    if endpoint:
        return []
    # The source as the other problems show it: a password in it (refused too) is never printed.
    instead = {
        "model_source": "a local path or Hub id",
        "dataset_source": "a local path or Hub id",
        "chat_template": "a local .jinja file or a built-in template's name",
        "bfcl_source": "bfcl-eval's wheel or its bfcl_eval/data folder as a local path (or empty: the wheel "
        "from the package index)",
    }
    return [
        f"{key}={settings.url_credentials(str(params[key])) or params[key]!r} is an object in S3, but without "
        "--s3-endpoint this run starts an empty "
        "throwaway S3 server: give --s3-endpoint (or S3_ENDPOINT) of the S3/MinIO that holds it, or "
        f"{instead[key]} instead"
        for key in instead
        if any(
            str(name).strip().startswith("s3://")
            for name in (
                sources.dataset_parts(params.get(key, "")) if key == "dataset_source" else [params.get(key) or ""]
            )
        )
    ]


def cluster_config_problems(params: dict[str, Any]) -> list[str]:
    """A step sent to a cluster (a TrainJob or PyTorchJob, a Deployment or KServe object) needs a
    Kubernetes configuration here: without one it failed only in that step, after delivering and training."""
    from trainer.deploy import CLUSTER_BACKENDS
    from trainer.launch import CLUSTER_LAUNCHERS

    on_cluster = [
        f"{key}={params[key]}"
        for key, names in (("launcher", CLUSTER_LAUNCHERS), ("deploy_backend", CLUSTER_BACKENDS))
        if params.get(key) in names
    ]
    if not on_cluster:
        return []
    from trainer.k8s.lifecycle import kube_config_problem

    return [p for p in [kube_config_problem(" and ".join(on_cluster))] if p]


def params_help(pipeline) -> str:
    """Every parameter by group with its type, default and description (trainer.config.params: the same
    text the KFP UI shows, which KFP takes from the pipeline docstring made from that table)."""
    from trainer.config import params

    return params.listing(
        "sweep" if "sweep" in pipeline.name else "finetune",
        f"Parameters of {pipeline.name} (set with --param KEY=VALUE; lists and dicts as JSON):",
    )


def endpoint_line(endpoint: str, smoke: dict[str, float], keep_serving: bool, model: str = "") -> str:
    """What the run says about its server: "smoke-tested" only when the deploy step's smoke
    test passed, and no URL for a server that has already stopped; with the name an OpenAI
    client passes as `model` when it is still up."""
    if smoke.get("smoke_ok") == 1:
        verdict = f"smoke test passed in {smoke.get('smoke_latency_s', float('nan')):.2f}s"
    elif smoke.get("smoke_ok") == 0 and smoke.get("smoke_server_ok") == 1:  # the model's answer, not the server
        verdict = "the server works, but the model's smoke-test reply was unusable: undertrained: more max_steps"
    elif smoke.get("smoke_ok") == 0:
        verdict = "smoke test FAILED: the deploy lines above say why"
    else:
        verdict = "no smoke-test verdict recorded"
    if keep_serving:
        return f"endpoint (still serving; {verdict}): {endpoint}" + (f", model {model!r}" if model else "")
    return f"endpoint: stopped after the run ({verdict}); --keep-serving leaves it up"


def training_line(tr: dict[str, float]) -> str:
    """The training metrics that matter at a glance; all of them are in the run's record."""
    line = (
        f"training: {tr.get('train_steps', 0):.0f} steps in {tr.get('train_seconds', 0):.1f}s on "
        f"{tr.get('world_size', 1):.0f} process(es), {tr.get('tokens_per_second', 0):.0f} tokens/s, "
        f"final loss {tr.get('train_loss', float('nan')):.4f}"
    )
    if tr.get("restarts"):
        line += f", {tr['restarts']:.0f} restart(s)"
    if tr.get("skipped_long_rows"):
        line += f", {tr['skipped_long_rows']:.0f} rows skipped as longer than max_seq_len"
    return line


def summarize(
    metrics: dict[str, dict[str, float]],
    endpoint: str | None,
    keep_serving: bool,
    elapsed: float,
    model: str = "",
    sources: list[str] = (),
) -> str:
    """The finetune pipeline's result in a few lines: base vs tuned, training, endpoint; `sources`: a mixed
    dataset's sources in order (its record), whose scores get a table of their own."""
    from trainer.evaluate.report import source_rows, table

    ev, tr, smoke = metrics.get("evaluate", {}), metrics.get("finetune", {}), metrics.get("deploy", {})
    lines = []
    if ev:
        fc_rows, text_rows = int(ev.get("fc_rows", ev.get("eval_rows", 0))), int(ev.get("text_rows", 0))
        # every assistant turn is asked: where rows hold several, the counts are of turns
        unit = "turns" if ev.get("eval_turns", 0) > ev.get("eval_rows", 0) else "rows"
        rows = (
            [
                ("eval loss", f"{ev['base_eval_loss']:.4f}", f"{ev['tuned_eval_loss']:.4f}"),
                (
                    f"function-calling accuracy ({fc_rows} {unit})",
                    *(
                        (f"{ev['base_fc_accuracy']:.1%}", f"{ev['tuned_fc_accuracy']:.1%}")
                        if fc_rows
                        else ("n/a", "n/a")
                    ),
                ),
            ]
            if "base_eval_loss" in ev
            else []
        )  # eval_suites=bfcl: no held-out rows
        if text_rows:
            rows.append(
                (f"text match ({text_rows} {unit})", f"{ev['base_text_match']:.1%}", f"{ev['tuned_text_match']:.1%}")
            )
        # BFCL-style AST accuracy over every function-calling category, then each category the split has
        heldout = names.read(ev, {"heldout": fc_check.CATEGORIES})
        if heldout.base is not None and heldout.tuned is not None:
            turns = sum(int(ev.get(names.count("heldout", c, "rows"), 0)) for c in fc_check.CATEGORIES)
            rows.append(
                (f"function-calling AST accuracy ({turns} {unit})", f"{heldout.base:.1%}", f"{heldout.tuned:.1%}")
            )
        rows += [
            (f"  {c.category} ({c.rows} {unit})", f"{c.base:.1%}", f"{c.tuned:.1%}")
            for c in heldout.categories
            if c.rows
        ]
        bfcl = [
            (f"  {c.category}" + (f" ({c.rows} rows)" if c.rows is not None else ""), f"{c.base:.1%}", f"{c.tuned:.1%}")
            for c in names.read(ev, {"bfcl": (*names.BFCL_AGGREGATES, *bfcl_data.CATEGORIES)}).categories
        ]
        if bfcl:
            number = int(ev.get("bfcl_version", 0))
            version = f"{number // 10_000}.{number // 100 % 100}.{number % 100}" if number else "(version unknown)"
            rows += [*([("", "", "")] if rows else []), (f"BFCL {version}", "", ""), *bfcl]
        lines += ["", "== base vs tuned ==", table(rows, ("metric", "base", "tuned"))]
        scores = {
            name: {k[len(name) + 1 :]: v for k, v in ev.items() if k.startswith(f"{name}_mix")}
            for name in ("base", "tuned")
        }
        if by_source := source_rows(scores["base"], scores["tuned"], ev, list(sources)):
            lines += [
                "",
                "== by source of the mix (AST accuracy; text kept: rows wanting text answered without a call) ==",
                table(
                    [(name, str(n), *s) for name, n, *s in by_source],
                    ("source", "rows", "AST base", "AST tuned", "kept base", "kept tuned"),
                ),
            ]
        if ev.get("promoted") == 0:
            lines.append(
                "not promoted: the tuned model failed the gate (min_fc_accuracy / min_gain / "
                "max_category_drop; the evaluate step's line says which and by how much): nothing was "
                "deployed or registered"
            )
        if "eval_rows" in ev and ev["eval_rows"] < 50:
            lines.append(f"warning: only {int(ev['eval_rows'])} eval rows: these numbers move a lot with one row")
        if ev.get("skipped_long_rows"):
            lines.append(f"warning: {int(ev['skipped_long_rows'])} eval rows longer than max_seq_len were not scored")
    if tr:
        lines += ["", training_line(tr)]
    if endpoint:
        lines += ["", endpoint_line(endpoint, smoke, keep_serving, model)]
    lines.append(f"pipeline wall time: {elapsed:.1f}s")
    return "\n".join(lines)


def export_model(merged_uri: str, out_dir: Path) -> Path:
    from trainer.core.storage import Store

    return Store.from_env().get_tree(merged_uri, out_dir)


def main(argv: list[str] | None = None) -> int:
    from pipelines import runs

    parser = argparse.ArgumentParser(
        prog="python -m pipelines.run_local", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pipeline",
        choices=("finetune", "sweep"),
        default="finetune",
        help="finetune: one training run (default); sweep: parallel LoRA trials, the best deployed",
    )
    parser.add_argument(
        "--parallelism",
        type=int,
        default=None,
        help="sweep trials running at once (default 2; 0: all at once, as KFP's ParallelFor; kfp.local "
        "itself runs at most 2); not used by the finetune pipeline",
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pipeline parameter, repeatable; --list-params shows them all with defaults",
    )
    parser.add_argument(
        "--list-params",
        action="store_true",
        help="print every pipeline parameter with its default and description, then exit",
    )
    parser.add_argument(
        "--s3-endpoint",
        default=os.environ.get("S3_ENDPOINT"),
        help="a real S3/MinIO endpoint (default: $S3_ENDPOINT, else a throwaway server on loopback)",
    )
    # Under the current directory, as MLflow's ./mlruns: a user running from their project
    # finds the runs there, not inside wherever this package is installed.
    parser.add_argument(
        "--pipeline-root",
        type=Path,
        default=Path(".runs") / "pipeline-root",
        help="kfp.local's artifact directory, a folder per run in it (default ./.runs/pipeline-root)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=Path(".runs") / "outputs",
        help="where the merged model is copied, as <dir>/merged-model (default ./.runs/outputs)",
    )
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=runs.RUNS_DIR,
        help="where each run's record, log, reports and TensorBoard events are kept (default ./.runs)",
    )
    parser.add_argument(
        "--keep-serving",
        action="store_true",
        help="leave the model server running after the run (it prints how to stop it)",
    )
    parser.add_argument(
        "--runner",
        choices=("subprocess", "docker"),
        default="subprocess",
        help="subprocess: each component in a process of this Python (default); docker: each in its image, "
        "through KFP's DockerRunner (make images builds them; podman's Docker API unless DOCKER_HOST is set)",
    )
    args = parser.parse_args(argv)
    # Absolute: the paths are printed, handed to kfp.local and to the components' processes.
    for name in ("pipeline_root", "output_dir", "runs_dir"):
        setattr(args, name, getattr(args, name).absolute())

    try:
        return _main(args)
    except KeyboardInterrupt:  # before the run started (its own Ctrl-C is handled in run())
        print("interrupted (Ctrl-C)", file=sys.stderr)
        return 130


def writable_dir_problems(dirs: dict[str, Path]) -> list[str]:
    """Each folder the run writes to must be a folder it can create and write, checked before the
    run rather than when the run is over (the merged model is copied out last)."""
    import tempfile

    problems = []
    for option, path in dirs.items():
        created = [p for p in (path, *path.parents) if not p.exists()]  # removed again: a check writes nothing
        try:
            path.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as err:
            why = "is a file" if path.exists() and not path.is_dir() else (err.strerror or type(err).__name__).lower()
            problems.append(f"{option} {path}: {why}; give a folder this user can create and write")
        finally:
            for made in created:  # deepest first
                try:
                    made.rmdir()
                except OSError:
                    break
    return problems


def _main(args: argparse.Namespace) -> int:
    with exit_on_user_error():
        problems: list[str] = []  # the options', --param's and the parameters' problems: all in one message
        if args.parallelism is not None and args.parallelism < 0:  # as submit: 0 is KFP's "no limit"
            problems.append(
                f"--parallelism {args.parallelism}: give how many sweep trials run at once, e.g. "
                "--parallelism 2, or 0 for all at once (KFP's ParallelFor meaning of 0)"
            )
        if args.parallelism is not None and args.parallelism >= 0 and args.pipeline != "sweep":
            print(
                f"note: --parallelism {args.parallelism} applies to --pipeline sweep only; the finetune pipeline "
                "runs one training",
                file=sys.stderr,
            )
        parallelism = 2 if args.parallelism is None else max(args.parallelism, 0)
        from pipelines.dag import sweep
        from pipelines.cli_params import parse_params as parse
        from trainer.core.errors import collect
        from trainer.validate import pipeline_problems, pipeline_warnings, registry_problems, sweep_problems

        pipeline = sweep.build(parallelism) if args.pipeline == "sweep" else finetune_pipeline
        if args.list_params:
            print(params_help(pipeline))
            return 0
        params = parse(pipeline, args.param + (["keep_serving=true"] if args.keep_serving else []), problems)
        problems += throwaway_s3_problems(params, args.s3_endpoint)
        problems += cluster_config_problems(params)
        endpoint = 'S3_ENDPOINT' if os.environ.get('S3_ENDPOINT') == args.s3_endpoint else '--s3-endpoint'
        if args.s3_endpoint and (masked := settings.url_credentials(args.s3_endpoint)):  # before anything prints it
            problems.append(
                f"{endpoint} {masked!r} carries a user name or password in the URL, which would show in "
                "messages and logs: give the endpoint alone, and the keys in AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY"
            )
        elif args.s3_endpoint and (problem := settings.url_problem(args.s3_endpoint, need_scheme=False, path=False)):
            problems.append(
                f"{endpoint} {args.s3_endpoint!r} is not an S3 endpoint ({problem}): give "
                "http(s)://HOST:PORT of the S3/MinIO (the bucket is S3_BUCKET), e.g. http://127.0.0.1:9000"
            )
        if args.runner == "docker" and args.keep_serving:
            problems.append(
                "--keep-serving with --runner docker: the model server lives in the deploy step's container, which "
                "ends with the step; leave --keep-serving out (the smoke test still runs), or serve the merged model "
                "afterwards: python -m trainer serve .runs/outputs/merged-model"
            )
        problems += writable_dir_problems(
            {"--output-dir": args.output_dir, "--runs-dir": args.runs_dir, "--pipeline-root": args.pipeline_root}
        )
        problems = (sweep_problems(params) if args.pipeline == "sweep" else pipeline_problems(params)) + problems
        problems += registry_problems(params, problems)  # as validate-params asks it, before anything starts (exit 2)
        for warning in pipeline_warnings(params):  # settings that would do nothing: said, not refused
            print(f"WARNING: {warning}", file=sys.stderr, flush=True)
        if args.pipeline == "sweep":  # before starting anything expensive
            collect(problems, what="invalid sweep parameters")
            # Trials run side by side on this machine: each gets its share of the cores
            # (inherited by the components' processes and the trainers they launch).
            at_once = min(parallelism or len(params["trials"]), len(params["trials"]), 2)  # kfp.local: at most 2
            share = str(max(1, (os.cpu_count() or 1) // max(at_once, 1)))
            os.environ.update(FINETUNE_LOCAL_CPUS=share, OMP_NUM_THREADS=share)
        else:
            collect(problems, what="invalid pipeline parameters")
        with contextlib.ExitStack() as stack:
            args.engine = None
            if args.runner == "docker":  # the engine and the images, before S3 starts or anything runs
                import shutil
                import tempfile

                from pipelines import container_runner

                socket_dir = tempfile.mkdtemp(prefix="finetune-engine-")
                stack.callback(shutil.rmtree, socket_dir, True)
                client, _ = args.engine = stack.enter_context(container_runner.engine(Path(socket_dir)))
                wanted = [settings.image(), settings.get("EVAL_IMAGE")]
                collect(container_runner.image_problems(wanted, client), what="--runner docker")
            server = start_s3(args.s3_endpoint)
            if server is not None:
                stack.callback(server.stop)
            if server is None:  # a real S3: its s3:// values named and found now, as validate-params will
                from trainer.validate.objects import object_problems

                collect(object_problems(params), what="invalid pipeline parameters")
                return run(pipeline, params, args)
            # The throwaway S3 starts with what earlier runs delivered and kept (pipelines.local_store)
            from minio.error import S3Error

            from pipelines import local_store, runs
            from trainer.core.storage import Store

            store_dir = args.runs_dir / runs.STORE
            print(local_store.restore(Store.from_env(), store_dir), flush=True)
            code = run(pipeline, params, args)
            if code not in (130, 143) and (kfp_run := getattr(args, "kfp_run_dir", None)) is not None:
                try:  # never fails the run: the next one delivers and scores again, as before
                    if line := local_store.keep(Store.from_env(), store_dir, kfp_run):
                        print(line, flush=True)
                except (OSError, UserError, S3Error) as err:
                    print(f"WARNING: could not keep this run's deliveries in {store_dir} ({err})", flush=True)
            return code


def run(pipeline, params: dict[str, Any], args: argparse.Namespace) -> int:
    """Run under kfp.local with the console filtered, then keep the run's record."""
    import signal
    import tempfile

    from kfp import local

    from pipelines import console as console_mod
    from pipelines import runs
    from pipelines.cli_params import pipeline_defaults
    from trainer.core import procs

    run_dir = runs.new_run(args.pipeline, params, args.runs_dir, pipeline_defaults(pipeline))
    log_path = run_dir / "run.log"
    # Components' temporary files (kfp.local's component sources, the trainer's TensorBoard
    # staging, checkpoints on their way up) go to one directory removed after the run,
    # instead of piling up in /tmp. A server left running may still use it.
    tmp = tempfile.mkdtemp(prefix="finetune-run-")
    saved_tmpdir = os.environ.get("TMPDIR")
    # The tasks run here even inside a pod (a Kubeflow Notebook sets KUBERNETES_SERVICE_HOST):
    # validate-params must not apply the cluster rules (launcher=local refused) to a local run.
    os.environ["FINETUNE_RUN_LOCAL"] = "1"
    os.environ["FINETUNE_LOCAL_RUN"] = run_dir.name  # the finetune tasks mark their TensorBoard prefix with it
    os.environ["TMPDIR"] = tmp

    # Every process the run starts (executors, trainers, model servers, whatever they orphan) is found
    # again and stopped on the way out (trainer.core.procs): nothing outlives the command.
    started = procs.Started()

    engine = getattr(args, "engine", None)
    saved_docker_host = os.environ.get("DOCKER_HOST")

    def interrupted(signum, frame):  # Ctrl-C, SIGTERM (kill, a CI timeout), SIGHUP (the terminal closed)
        # SIGTERM to what runs now first: kfp.local waits for the running task before letting the
        # exception through, and a signal sent to this process alone does not reach it.
        started.signal(signal.SIGTERM)
        if engine is not None:  # the step's container: its processes are not ours
            from pipelines import container_runner

            container_runner.stop_containers(engine[0], run_dir.name, "SIGTERM")
        raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signal.Signals(signum).name)

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, interrupted) for sig in handled}
    succeeded = False
    # A full disk ends the log, not the run.
    with console_mod.SafeLog(open(log_path, "w", buffering=1), sys.stderr) as log:
        console, restore = console_mod.install(log)
        try:
            # Each run gets kfp.local's root of its own, named as its record: two runs in one folder at once
            # (or a second before the first ends) can never read each other's task outputs.
            # kfp.local's workspace (its default: a new directory in /tmp, never removed) is a folder of its
            # own: kfp.local removes it as the pipeline ends, before keep_logs copies the model servers' logs
            # from TMPDIR (and while a server kept serving still has its sockets there).
            workspace = os.path.join(tmp, "kfp-workspace")
            os.mkdir(workspace)
            if engine is None:
                runner = local.SubprocessRunner(use_venv=False)
            else:
                from pipelines import container_runner

                os.environ["DOCKER_HOST"] = engine[1]  # kfp.local's docker.from_env()
                runner = container_runner.runner(run_dir.name, args.pipeline_root / run_dir.name, [Path(tmp)])
                wanted = [settings.image(), settings.get("EVAL_IMAGE")]
                runs.update_run(run_dir, images=container_runner.image_ids(engine[0], wanted))
                console.say("runner: docker (" + ", ".join(wanted) + ")")
            local.init(
                runner=runner,
                pipeline_root=str(args.pipeline_root / run_dir.name),
                raise_on_error=True,
                workspace_root=workspace,
            )
            changed = {k: v for k, v in params.items() if pipeline_defaults(pipeline).get(k) != v}
            console.say(f"local run {run_dir.name} (full log: {log_path})")
            console.say(
                f"parameters: defaults{''.join(f', {k}={json.dumps(v)}' for k, v in changed.items())}; "
                f"S3 {settings.get('S3_ENDPOINT')} bucket {settings.get('S3_BUCKET')}"
            )
            console.log.write(f"all parameters: {json.dumps(params)}\n")
            with kfp_local_patches.pending_tasks_cancelled(), kfp_local_patches.docker_exit_status():
                code = _run(pipeline, params, args, console, run_dir)
            succeeded = code == 0
            return code
        except (KeyboardInterrupt, Terminated) as err:
            # kfp.local lets the interrupt through its threads (two chained tracebacks): one line instead.
            how = "Ctrl-C" if isinstance(err, KeyboardInterrupt) else str(err)
            runs.update_run(run_dir, status="interrupted", summary=f"interrupted ({how})")
            print(f"interrupted ({how}); the run's record: {run_dir}", file=sys.stderr)
            return 130 if how == "Ctrl-C" else 128 + signal.Signals[how]
        except BaseException as err:
            # A failure of this command itself (not of a task): the record must not stay "running".
            with contextlib.suppress(OSError):  # a full disk: the error itself matters more
                runs.update_run(
                    run_dir, status="failed", summary=f"run_local failed: {type(err).__name__}: {err}"[:120]
                )
            raise
        finally:
            for sig in handled:  # a second Ctrl-C must not cut the clean-up short
                signal.signal(sig, signal.SIG_IGN)
            if succeeded and params.get("keep_serving"):
                started.release()  # the model server stays up, as asked
            else:
                started.stop(grace=20, say=lambda line: print(line, file=sys.stderr, flush=True))
            if engine is not None:
                from pipelines import container_runner

                container_runner.stop_containers(engine[0], run_dir.name)  # however the run ended
                if saved_docker_host is None:
                    os.environ.pop("DOCKER_HOST", None)
                else:
                    os.environ["DOCKER_HOST"] = saved_docker_host
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)
            restore()
            os.environ.pop("FINETUNE_RUN_LOCAL", None)
            os.environ.pop("FINETUNE_LOCAL_RUN", None)
            if saved_tmpdir is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = saved_tmpdir
            remove_run_tmp(Path(tmp), keep_server=succeeded and params.get("keep_serving", False))


def remove_run_tmp(tmp: Path, keep_server: bool) -> None:
    """The run's temporary folder, or, with a model server kept serving, all of it but what that server uses (its log
    and sockets, vllm-*; its compile cache, torchinductor_*): the rest (kfp.local's files, the trainers' and
    components' leftovers) stayed in /tmp for good, and the folder itself when no server was kept."""
    import shutil

    if not keep_server:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    for path in tmp.iterdir():  # the server's compile cache (TORCHINDUCTOR_CACHE_DIR, trainer.core.procs) is here too
        if not path.name.startswith(("vllm-", "torchinductor_")):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # no server was kept after all (not promoted, nothing deployed)
        tmp.rmdir()


class Terminated(BaseException):
    """SIGTERM or SIGHUP (its name the argument), raised in the main thread so that the run's record,
    processes and temporary files are handled as for Ctrl-C (a BaseException, like KeyboardInterrupt,
    so that no `except Exception` swallows it)."""


def _run(pipeline, params, args, console, run_dir) -> int:
    """Run the pipeline under kfp.local, keep what it made in the run's folder, and say how it ended."""
    from pipelines import runs

    task, error, elapsed = _execute(pipeline, params, args, console)
    kfp_run_dir = _kfp_run_dir(pipeline, args, run_dir)
    args.kfp_run_dir = kfp_run_dir  # what the local store keeps after the run (main)
    metrics, reports = runs.collect_task_outputs(kfp_run_dir) if kfp_run_dir else ({}, {})
    report_files = runs.save_reports(run_dir, reports)
    events = _keep_tensorboard(console, run_dir, kfp_run_dir)
    logs = runs.keep_logs(Path(os.environ["TMPDIR"]), run_dir)
    record = dict(
        status="failed" if error else "succeeded",
        elapsed_s=round(elapsed, 1),
        metrics=metrics,
        finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        kfp_run_dir=str(kfp_run_dir or ""),
        dataset=runs.delivered_dataset(kfp_run_dir) if kfp_run_dir else {},
    )
    if error:
        _say_failure(error, console, run_dir, logs, record)
        return 1
    if args.pipeline == "sweep":
        endpoint, merged_uri = _say_sweep(task, params, console, kfp_run_dir, metrics, record, elapsed)
    else:
        endpoint = task.outputs["endpoint"]
        console.say(_finetune_summary(params, metrics, endpoint, elapsed, record))
        merged_uri = task.outputs["merged_model"].metadata["uri"]
    record.update(endpoint=endpoint if params.get("keep_serving") and endpoint else "", merged_model=merged_uri)
    runs.update_run(run_dir, **record)  # before copying the model out: a full disk there must not lose the run
    copied = _copy_out(merged_uri, metrics, args, console, run_dir)
    _say_where(args, console, run_dir, report_files, events, logs)
    return 0 if copied else 1


def _execute(pipeline, params, args, console):
    """(the pipeline's task or None, the error that stopped it or None, seconds it took)."""
    start = time.perf_counter()
    task, error = None, None
    try:
        task = pipeline(**params)
    except RuntimeError as err:  # kfp.local: a task failed
        error = err
    except Exception as err:  # --runner docker: the engine refused a task's container (docker-py's errors)
        if getattr(args, "engine", None) is None or type(err).__module__.split(".")[0] != "docker":
            raise
        error = err
        console.say(f"error: the container engine refused a task's container: {err}")
    return task, error, time.perf_counter() - start


def _kfp_run_dir(pipeline, args, run_dir) -> Path | None:
    """kfp.local's folder of this run: it names a run "<pipeline name>-<timestamp>" under this run's own root."""
    import re

    kfp_runs = [
        p
        for p in (args.pipeline_root / run_dir.name).glob(f"{pipeline.name}-*")
        if re.fullmatch(rf"{re.escape(pipeline.name)}(-\d+){{7}}", p.name)
    ]
    return kfp_runs[0] if len(kfp_runs) == 1 else None


def _keep_tensorboard(console, run_dir, kfp_run_dir):
    from pipelines import runs
    from trainer.core.storage import Store

    try:
        return runs.save_tensorboard(
            run_dir, Store.from_env(), runs.tensorboard_prefixes(kfp_run_dir) if kfp_run_dir else None, run_dir.name
        )
    except UserError as err:  # S3 gone mid-run: the record and the error below still matter more
        console.say(f"TensorBoard events not kept: {err}")
        return None


def _say_failure(error, console, run_dir, logs, record) -> None:
    """The failed task's own error line is on the screen already; its hidden lines (a traceback) come only when
    there are some, and the closing line names the tasks rather than repeating it."""
    from pipelines import runs

    console.show_tail("last lines the failed task printed:")
    failed = console.failed
    what = (
        f"task {failed[0]} failed"
        + (f" (and {', '.join(failed[1:])})" if failed[1:] else "")
        + ": its lines above say why"
        if failed
        else local_error_text(error)
    )
    print(
        f"error: {what}; full log: {run_dir / 'run.log'}" + (f"; component logs: {run_dir / 'logs'}" if logs else ""),
        file=sys.stderr,
    )
    why = console.last_line(failed[0]) if failed else ""
    runs.update_run(run_dir, **record, summary=(f"{failed[0]}: {why}" if why else local_error_text(error))[:120])


def _served_name(params) -> str:
    from trainer.validate import DEFAULTS

    return params.get("served_model_name", DEFAULTS["served_model_name"])


def _say_sweep(task, params, console, kfp_run_dir, metrics, record, elapsed) -> tuple[str, str]:
    """The sweep's decision and its winner's endpoint; returns (endpoint, merged model URI)."""
    from pipelines import runs

    decision = str(task.outputs["decision"])
    console.say("\n" + Path(task.outputs["summary"].path).read_text().strip())
    # The winner's model and endpoint come from inside the sweep's dsl.If, which has no pipeline outputs.
    winner = runs.deployed_outputs(kfp_run_dir) if kfp_run_dir else {}
    endpoint, merged_uri = winner.get("endpoint", ""), winner.get("merged_model", "")
    if endpoint:
        line = endpoint_line(
            endpoint, metrics.get("deploy", {}), params.get("keep_serving", False), _served_name(params)
        )
        console.say("\n" + line)
    if winner.get("trials_endpoint"):  # deploy_all_trials with keep_serving: every trial beside the base
        console.say(
            f"trials side by side (still serving): {winner['trials_endpoint']}, models {winner['trials_models']}"
        )
        record.update(trials_endpoint=winner["trials_endpoint"])
    console.say(f"pipeline wall time: {elapsed:.1f}s")
    record.update(summary=decision[:120])
    return endpoint, merged_uri


def _finetune_summary(params, metrics, endpoint, elapsed, record) -> str:
    # The tuned model answers as served_model_name (beside its base too: that one is '<name>-base').
    return summarize(
        metrics,
        endpoint,
        params.get("keep_serving", False),
        elapsed,
        _served_name(params),
        [m["source"] for m in record["dataset"].get("mix", [])],
    )


def _copy_out(merged_uri, metrics, args, console, run_dir) -> bool:
    """The merged model copied out of the bucket; False when that failed (it stays in the bucket, and the run
    exits 1). The gate said no: <output-dir>/merged-model is what a user serves next (its line says "serve it"), and
    the last promoted model there stays. A bucket that outlives the run keeps the model; the throwaway one vanishes
    with the run, so the model goes into the run's own folder instead."""
    from pipelines import runs

    not_promoted = metrics.get("evaluate", {}).get("promoted") == 0
    if merged_uri and not_promoted and args.s3_endpoint:
        console.say(
            f"merged model: {merged_uri}\n  not copied to {args.output_dir / 'merged-model'} (not promoted: "
            f"that keeps the last promoted model); fetch it: python -m trainer download {merged_uri} DIR"
        )
    elif merged_uri:
        try:
            out = export_model(merged_uri, (run_dir if not_promoted else args.output_dir) / "merged-model")
        except UserError as err:
            print(
                f"error: the merged model was not copied out: {err}; it stays in the bucket (fetch it later: "
                f"python -m trainer download {merged_uri} DIR, with the same S3 settings)",
                file=sys.stderr,
            )
            runs.update_run(run_dir, copy_error=str(err))
            return False
        console.say(
            f"merged model: {merged_uri}\n  copied to {out}  "
            + (
                f"(not promoted, so not to {args.output_dir / 'merged-model'}, which keeps the last promoted model)"
                if not_promoted
                else f"(serve it: python -m trainer serve {out})"
            )
        )
    return True


def _say_where(args, console, run_dir, report_files, events, logs) -> None:
    """The closing lines: where the run's reports, events, logs and record are, and the commands that read them."""
    from pipelines import runs

    console.say("")
    for path in report_files:
        if path.suffix == ".html":
            console.say(f"report: {path}")
    # The commands as they find this run: from another folder than ./.runs' they need --runs-dir too.
    where = runs.runs_dir_flag(args.runs_dir)
    if events:
        console.say(f"TensorBoard events: {events}  (python -m pipelines.runs tensorboard --launch{where})")
    if logs:
        console.say(f"component logs (the model server's too): {run_dir / 'logs'}")
    console.say(f"run kept in {run_dir}  (compare runs: python -m pipelines.runs compare{where})")
    console.say(f"full log: {run_dir / 'run.log'}")
    if console.hidden_warnings:
        console.say(f"({console.hidden_warnings} warnings from components are in the log)")


def local_error_text(err: Exception) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", str(err)).rstrip(".")


if __name__ == "__main__":
    sys.exit(main())
