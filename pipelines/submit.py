"""python -m pipelines.submit [--pipeline sweep] [--host URL] [--param k=v ...] [--recurring "CRON"] [--wait] [--dry-run]
       [--start-time T] [--end-time T] [--max-concurrency N] [--catchup] [--parallelism N] [--list-params]

Submit the fine-tuning pipeline (or with --pipeline sweep the LoRA sweep, --parallelism
trials at once) to a Kubeflow Pipelines 2.x backend:
  1. validate the parameters (every problem at once, before anything is uploaded);
  2. compile the pipeline from this checkout;
  3. upload it, or upload a new version when the pipeline exists (versions are named by
     the content hash, so resubmitting unchanged code reuses the version);
  4. create a run in an experiment (created if missing), or with --recurring a recurring
     run on a 6-field cron schedule (`0 0 3 * * *` = daily at 03:00) or a descriptor
     (`@daily`, `@every 6h`), optionally within --start-time / --end-time, --max-concurrency runs
     at once (default 1) and --catchup of missed runs (default off); a recurring run of the same
     name in the experiment is refused (both schedules would start runs);
  5. print the run URL; --wait follows the run to the end and exits non-zero unless it succeeded.

The KFP host comes from --host or KFP_HOST; a bearer token, when the endpoint needs one,
from KFP_TOKEN (never a flag, so it stays out of shell history and process lists; nor
user:password in the host URL, which is refused). On multi-user Kubeflow the experiment and
its runs go into --kfp-namespace (default: the namespace parameter).
--dry-run validates and prints, as YAML, every Kubernetes object the run would create
(the TrainJob or PyTorchJob, the vLLM Deployment and Service or the InferenceService) and the
Model Registry calls, and contacts nothing; for the sweep, one job per trial.

Example:
  python -m pipelines.submit --host http://localhost:8080 --param launcher=trainjob \\
      --param deploy_backend=kubernetes --param model_source=meta-llama/Llama-3.2-1B-Instruct \\
      --param dataset_source=s3://llm-finetune/datasets/sha256-... --param nodes=2 --param procs_per_node=8
  python -m pipelines.submit --pipeline sweep --parallelism 3 --param launcher=trainjob \\
      --param 'trials=[{"lora_r": 16, "lora_alpha": 32, "learning_rate": 0.0002},
                       {"lora_r": 64, "lora_alpha": 128, "learning_rate": 0.0001}]'
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from datetime import timezone
from pathlib import Path
from typing import Any

from pipelines.dag.finetune import finetune_pipeline
from pipelines.cli_params import parse_params, pipeline_defaults
from trainer import deploy
from trainer.core import settings
from trainer.config.training import ADAPTER_METHODS
from trainer.core.errors import UserError, collect, exit_on_user_error


WAIT_S = 24 * 3600  # --wait's default limit


def option_problems(args: argparse.Namespace) -> list[str]:
    """The command's own options: KFP would refuse a blank name only after the upload."""
    problems = [
        f"--{opt.replace('_', '-')} is empty: give a name, e.g. --{opt.replace('_', '-')} llm-finetune"
        for opt in ("experiment", "run_name")
        if getattr(args, opt) is not None and not getattr(args, opt).strip()
    ]
    if args.parallelism is not None and args.parallelism < 0:  # as KFP's ParallelFor: 0 is no limit
        problems.append(
            f"--parallelism {args.parallelism}: give how many sweep trials run at once, e.g. "
            "--parallelism 2, or 0 for all at once (KFP's ParallelFor meaning of 0)"
        )
    if args.host and not args.dry_run and (at := settings.url_credentials(args.host)):
        problems.append(
            f"--host / KFP_HOST {at!r} carries a user name or password in the URL, which would end up in "
            "logs and the printed run URL: drop it and put a bearer token in KFP_TOKEN"
        )
    if args.wait and args.recurring is not None:
        problems.append(
            "--wait follows one run, but --recurring creates a schedule whose runs start later: "
            "drop --wait (the schedule's runs are listed under the recurring run's URL)"
        )
    if args.recurring is None:
        given = [
            flag
            for flag, value in (
                ("--start-time", args.start_time),
                ("--end-time", args.end_time),
                ("--max-concurrency", args.max_concurrency),
                ("--catchup", args.catchup or None),
            )
            if value is not None
        ]
        if given:
            problems.append(
                f"{', '.join(given)} set(s) a recurring run's schedule, but there is no --recurring: "
                "add --recurring '0 0 3 * * *' (or @daily, @every 6h), or drop them"
            )
    if args.timeout is not None and args.timeout <= 0:
        problems.append(f"--timeout {args.timeout}: give the --wait limit in seconds, e.g. --timeout 86400")
    elif args.timeout is not None and not args.wait:  # as --catchup without --recurring: it would do nothing
        problems.append(f"--timeout {args.timeout} limits --wait, which is not given: add --wait, or drop --timeout")
    if args.kfp_namespace is not None:  # KFP would answer for a profile that cannot exist only after the upload
        from trainer.k8s import rules

        problems += rules.dns1123_label(args.kfp_namespace, "--kfp-namespace")
    if not args.dry_run and not (args.host or "").strip():  # with the other problems, not after them
        problems.append(
            "no KFP host: pass --host URL or set KFP_HOST (e.g. http://localhost:8080 after "
            "`kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80`), or --dry-run to contact "
            "nothing"
        )
    return problems


def validate(
    params: dict[str, Any], recurring: str | None = None, extra: list[str] | tuple = (), sweep: bool = False
) -> None:
    """Every parameter with the rules of the validate-params step, plus what only a cluster
    refuses (local paths, launcher=local) and the --recurring schedule: all before anything
    is compiled, uploaded or contacted."""
    from trainer.k8s import rules
    from trainer.validate import on_cluster_problems, pipeline_problems, sweep_problems

    checks = sweep_problems if sweep else pipeline_problems
    problems = [*extra] + checks(params, check_local_files=False) + on_cluster_problems(params)
    if recurring is not None:
        problems += rules.schedule(recurring, "--recurring")
    collect(problems, what="invalid sweep parameters" if sweep else "invalid pipeline parameters")


# What a submitted run trains with when launcher is not given: the pipelines' default, local, is run_local's,
# and a cluster refuses it.
SUBMIT_LAUNCHER = "trainjob"
MAX_CONCURRENCY = 10  # KFP's API server refuses a recurring run's max_concurrency outside 1-10


def _time(raw: str, flag: str, problems: list[str]):
    """An RFC 3339 time with its zone (KFP's form), or None with the problem recorded."""
    from datetime import datetime

    try:
        when = datetime.fromisoformat(raw.strip())
    except ValueError:
        problems.append(
            f"{flag} {raw!r} is not a date and time: give RFC 3339 with a zone, e.g. {flag} 2026-12-01T03:00:00Z"
        )
        return None
    if when.tzinfo is None:  # UTC or the local zone would each be a guess, hours apart
        # Suggested in the full form: '2026-12-01Z' (a date alone with a zone) is not ISO 8601.
        full = when.isoformat()
        problems.append(f"{flag} {raw!r} has no time zone: add one, e.g. {full}Z for UTC or {full}+01:00")
        return None
    return when


def schedule_problems(args: argparse.Namespace, now=None) -> list[str]:
    """--start-time, --end-time and --max-concurrency of a recurring run, against each other and `now`:
    KFP would accept an end in the past (a schedule that never runs) and refuse only some of the rest."""
    from datetime import datetime, timezone

    if args.recurring is None:
        return []  # option_problems says they need --recurring
    now = now or datetime.now(timezone.utc)
    problems: list[str] = []
    start = _time(args.start_time, "--start-time", problems) if args.start_time is not None else None
    end = _time(args.end_time, "--end-time", problems) if args.end_time is not None else None
    if end is not None and end <= now:
        problems.append(
            f"--end-time {args.end_time} is in the past (now {now:%Y-%m-%dT%H:%M:%SZ}): the schedule "
            "would never start a run; give a later end, or none"
        )
    elif start is not None and end is not None and end <= start:
        problems.append(
            f"--end-time {args.end_time} is not after --start-time {args.start_time}: the schedule would "
            "never start a run"
        )
    if args.max_concurrency is not None and not 1 <= args.max_concurrency <= MAX_CONCURRENCY:
        problems.append(
            f"--max-concurrency {args.max_concurrency}: KFP takes 1 to {MAX_CONCURRENCY} runs of a "
            "recurring run at once, e.g. --max-concurrency 1 (the default: a run that overruns its "
            "interval delays the next)"
        )
    return problems


def schedule_notes(args: argparse.Namespace, now=None) -> None:
    """What KFP will do with a start time in the past: nothing surprising, but worth a line."""
    from datetime import datetime, timezone

    now = now or datetime.now(timezone.utc)
    start = _time(args.start_time, "--start-time", []) if args.start_time else None
    if start is None or start >= now:
        return
    if args.catchup:
        n = missed_runs(args.recurring, start, now)
        print(
            f"note: --start-time {args.start_time} is in the past and --catchup is on: KFP starts the "
            f"{n:,}{'+' if n >= 10_000 else ''} run(s) scheduled since then, {args.max_concurrency or 1} at a time",
            file=sys.stderr,
        )
    else:
        print(
            f"note: --start-time {args.start_time} is in the past: the first run is the next scheduled time "
            "from now (no catch-up; --catchup would start the missed ones)",
            file=sys.stderr,
        )


def missed_runs(schedule: str, start, now, cap: int = 10_000) -> int:
    """How many runs of `schedule` fall between `start` and `now`: what --catchup backfills."""
    from datetime import timedelta

    from croniter import croniter

    schedule = schedule.strip()
    if schedule.startswith("@every "):
        from trainer.k8s import rules

        return min(cap, int((now - start) / timedelta(seconds=rules.every_seconds(schedule))))
    it = croniter(schedule, start, second_at_beginning=not schedule.startswith("@"))
    count = 0
    while count < cap and it.get_next(type(start)) <= now:
        count += 1
    return count


PROBE_TIMEOUT_S = 10.0


def check_host(host: str, token: str | None, timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """One bounded request to KFP's healthz endpoint, so that a wrong or unreachable --host is one
    error line in seconds (kfp.Client would retry without a time limit and print tracebacks).
    Returns healthz's answer ({"multi_user": true, ...})."""
    import urllib.error
    import urllib.request

    url = f"{host.rstrip('/')}/apis/v2beta1/healthz"
    fix = (
        "check --host / KFP_HOST (e.g. http://localhost:8080 while `kubectl port-forward -n kubeflow "
        "svc/ml-pipeline-ui 8080:80` runs)"
    )
    if bad := settings.url_problem(host):
        raise UserError(f"--host {host!r} is not an http(s):// URL ({bad}); {fix}")
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body, final = response.read(65536), response.geturl().split("?", 1)[0]
        try:
            answer = json.loads(body or b"{}")
        except ValueError:  # e.g. Kubeflow's Dex/oauth2-proxy login page after a redirect: not the API
            moved = f" (redirected to {final})" if final != url else ""
            raise UserError(
                f"{host} answered {url}{moved} with a web page, not KFP's API: a login page means the "
                "gateway wants credentials: set KFP_TOKEN to a token it accepts, or use "
                "`kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80` and --host "
                "http://localhost:8080"
            ) from None
        return answer if isinstance(answer, dict) else {}
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            raise UserError(
                f"KFP at {host} refused the request (HTTP {err.code}): set KFP_TOKEN to a valid bearer "
                "token for this endpoint"
            ) from None
        raise UserError(f"{host} answered HTTP {err.code} for {url}: is it the KFP API endpoint? {fix}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise UserError(f"cannot reach KFP at {host} ({reason}) within {timeout:.0f}s; {fix}") from None


def sweep_dry_run_objects(params: dict[str, Any]) -> list:
    """The sweep's objects: one training job per trial (the finetune pipeline's defaults for
    what the sweep does not set), then the winner's serving objects."""
    from trainer.k8s.podspec import job_name

    base = {**pipeline_defaults(finetune_pipeline), **params, "method": "lora"}
    objects = []
    for i, trial in enumerate(params["trials"]):
        [job, *_] = dry_run_objects({**base, **trial, "deploy_backend": "none"}, job_name(f"run-id-trial-{i}"))
        objects.append(job)
    objects += dry_run_objects({**base, "launcher": "local"})  # the winner, if it beats the base by min_gain
    if params.get("deploy_all_trials") and params["deploy_backend"] in deploy.CLUSTER_BACKENDS:
        from trainer.deploy.base import ServeSpec, trial_adapters
        from trainer.launch import cluster_from_params

        name = params["served_model_name"]
        side_by_side = ServeSpec(
            name=f"{name}-base",
            model_uri="s3://<bucket>/models/<from deliver-model>",
            gpus=base["serve_gpus"],
            cluster=cluster_from_params(base),
            vllm_image=base.get("vllm_image", ""),
            adapters=trial_adapters(
                name, [f"s3://<bucket>/models/<from-trial-{i}>" for i in range(len(params["trials"]))]
            ),
            max_lora_rank=max(int(t["lora_r"]) for t in params["trials"]),
        )
        objects += deploy.backend(params["deploy_backend"]).build(side_by_side)
    return objects


def dry_run_objects(params: dict[str, Any], name: str = "") -> list:
    """The Kubernetes objects this run would create, as model objects."""
    from trainer.config.training import TrainConfig
    from trainer.deploy.base import ServeSpec
    from trainer.k8s.podspec import job_name
    from trainer.launch import CLUSTER_LAUNCHERS, cluster_from_params, launcher

    spec = cluster_from_params(params)
    objects = []
    if params["launcher"] in CLUSTER_LAUNCHERS:
        cfg = TrainConfig.from_params(
            params,
            model_uri="s3://<bucket>/models/<from deliver-model>",
            dataset_uri="s3://<bucket>/datasets/<from deliver-dataset>",
            output_prefix="runs/<run id>",
        )
        objects += launcher(params["launcher"], spec, cfg.stall_timeout_s).build(
            cfg.to_args(), name or job_name("run-id")
        )
    if params["deploy_backend"] in deploy.CLUSTER_BACKENDS:
        name, side_by_side = params["served_model_name"], params.get("serve_adapters", False)
        serve = ServeSpec(
            name=f"{name}-base" if side_by_side else name,
            gpus=params["serve_gpus"],
            cluster=spec,
            model_uri="s3://<bucket>/models/<from deliver-model>"
            if side_by_side
            else "s3://<bucket>/models/<from merge-lora>",
            adapters={name: "s3://<bucket>/models/<from finetune>"} if side_by_side else {},
            vllm_image=params.get("vllm_image", ""),
        )
        objects += deploy.backend(params["deploy_backend"]).build(serve)
    return objects


def registry_calls(params: dict[str, Any]) -> list[str]:
    """What the register step would do (nothing when registry_address is empty)."""
    if not params.get("registry_address"):
        return []
    from trainer.store.registry import Registration, lineage, plan

    meta = lineage(
        params["model_source"],
        params["model_revision"],
        "s3://<bucket>/datasets/<from deliver-dataset>",
        {"<every train metric>": 0.0},
        {"<every eval metric>": 0.0},
        "<run id>",
    )
    return plan(
        Registration(
            address=params["registry_address"],
            name=params["served_model_name"],
            version="<run name>",
            run_id="<run id>",
            metadata=meta,
            model_uri="s3://<bucket>/models/<from merge-lora>",
            adapter_uri="s3://<bucket>/models/<from finetune>" if params["method"] in ADAPTER_METHODS else "",
        )
    )


def package(out_dir: Path, pipeline=finetune_pipeline) -> tuple[Path, str]:
    """Compile to `out_dir`; returns (path, short content hash)."""
    from pipelines.compile import compile_pipeline

    path = compile_pipeline(pipeline, out_dir / f"{pipeline.name}.yaml")  # deterministic: same code, same hash
    return path, hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def upload(client, path: Path, digest: str, pipeline=finetune_pipeline) -> tuple[str, str]:
    """(pipeline id, version id) of a version named by the package's content hash.

    Creating a pipeline also creates a first version named after the pipeline; runs always
    use a `<name>-<hash>` version, so resubmitting unchanged code finds and reuses it.
    """
    version_name = f"{pipeline.name}-{digest}"
    pipeline_id = client.get_pipeline_id(pipeline.name)
    if pipeline_id is None:
        pipeline_id = client.upload_pipeline(
            str(path), pipeline_name=pipeline.name, description=pipeline.description
        ).pipeline_id
    # Asked by name: a pipeline with many versions lists them over many pages.
    by_name = json.dumps({"predicates": [{"key": "display_name", "operation": "EQUALS", "string_value": version_name}]})
    existing = [
        v
        for v in client.list_pipeline_versions(pipeline_id, page_size=10, filter=by_name).pipeline_versions or []
        if v.display_name == version_name
    ]
    if existing:
        return pipeline_id, existing[0].pipeline_version_id
    version = client.upload_pipeline_version(str(path), pipeline_version_name=version_name, pipeline_id=pipeline_id)
    return pipeline_id, version.pipeline_version_id


def compile_package(pipeline=finetune_pipeline) -> tuple[Path, str]:
    """Compile into a fresh temporary directory (the caller removes `path.parent`). A local
    failure (no writable temp directory, a full disk) is named as such: it is no KFP problem."""
    try:
        tmp = Path(tempfile.mkdtemp(prefix="llm-finetune-submit-"))
    except OSError as err:
        raise UserError(
            f"cannot create a temporary directory to compile the pipeline in "
            f"({err.strerror or err}: {err.filename or tempfile.gettempdir()}): point TMPDIR at a "
            "writable directory with free space, e.g. TMPDIR=$HOME/tmp"
        ) from None
    try:
        return package(tmp, pipeline)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(
            f"cannot write the compiled pipeline to {tmp} ({err.strerror or err}): free disk space "
            "there or point TMPDIR at a writable directory with free space"
        ) from None


def existing_recurring_runs(client, experiment_id: str, name: str, namespace: str | None) -> list:
    """Recurring runs of this experiment already named `name`: KFP would accept a second one with
    the same name, and both schedules would start runs."""
    by_name = json.dumps({"predicates": [{"key": "display_name", "operation": "EQUALS", "string_value": name}]})
    found = (
        client.list_recurring_runs(
            experiment_id=experiment_id, namespace=namespace, page_size=10, filter=by_name
        ).recurring_runs
        or []
    )
    return [job for job in found if job.display_name == name]


def submit(
    client,
    params: dict[str, Any],
    experiment: str,
    run_name: str,
    recurring: str | None,
    host: str,
    pipeline=finetune_pipeline,
    namespace: str | None = None,
    schedule: dict[str, Any] | None = None,
    packaged: tuple[Path, str] | None = None,
) -> dict[str, Any]:
    """Upload (or reuse) the package and create the run or recurring run. `schedule`: the
    recurring run's start_time, end_time, max_concurrency, no_catchup (checked by schedule_problems)."""
    path, digest = packaged or compile_package(pipeline)
    try:
        pipeline_id, version_id = upload(client, path, digest, pipeline)
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
    # Returns the existing one by name; multi-user KFP keeps experiments (and their runs) per profile namespace.
    experiment_id = client.create_experiment(experiment, namespace=namespace).experiment_id
    if recurring:  # the schedule was checked by validate(), before the upload above
        same = existing_recurring_runs(client, experiment_id, run_name, namespace)
        if enabled := [job for job in same if str(job.status).upper() != "DISABLED"]:
            raise UserError(
                f"experiment {experiment!r} already has a recurring run named {run_name!r} "
                f"({host.rstrip('/')}/#/recurringrun/details/{enabled[0].recurring_run_id}); a second one "
                "would start runs on its own schedule too: pick another --run-name, or disable or "
                "delete that one in the KFP UI (Recurring Runs) first"
            )
        if same:  # only disabled ones: replacing a paused schedule is what this usually is
            print(
                f"note: experiment {experiment!r} also has {len(same)} disabled recurring run(s) named "
                f"{run_name!r}; enabling one again would start runs beside this one",
                file=sys.stderr,
            )
        schedule = {"max_concurrency": 1, "no_catchup": True, **(schedule or {})}
        job = client.create_recurring_run(
            experiment_id,
            run_name,
            cron_expression=recurring.strip(),
            pipeline_id=pipeline_id,
            version_id=version_id,
            params=params,
            **schedule,
        )
        return {
            "recurring_run_id": job.recurring_run_id,
            "pipeline_id": pipeline_id,
            "version_id": version_id,
            "url": f"{host.rstrip('/')}/#/recurringrun/details/{job.recurring_run_id}",
        }
    run = client.run_pipeline(experiment_id, run_name, pipeline_id=pipeline_id, version_id=version_id, params=params)
    return {
        "run_id": run.run_id,
        "pipeline_id": pipeline_id,
        "version_id": version_id,
        "url": f"{host.rstrip('/')}/#/runs/details/{run.run_id}",
    }


def _parser() -> argparse.ArgumentParser:
    """The command line: submit's options, the pipeline's parameters as --param KEY=VALUE."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.submit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
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
        help="sweep: trials running at once, compiled into the pipeline (default 2; 0: all at once, "
        "as KFP's ParallelFor); not used by the finetune pipeline",
    )
    parser.add_argument("--host", default=os.environ.get("KFP_HOST"), help="KFP API endpoint (or KFP_HOST)")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pipeline parameter, repeatable (--list-params lists them)",
    )
    parser.add_argument(
        "--list-params",
        action="store_true",
        help="print the --pipeline's parameters with defaults and descriptions, then exit",
    )
    parser.add_argument("--experiment", default="llm-finetune", help="KFP experiment, created if missing")
    parser.add_argument(
        "--kfp-namespace",
        default=None,
        metavar="PROFILE",
        help="multi-user Kubeflow: the profile namespace of the experiment and its runs "
        "(default: the namespace parameter)",
    )
    parser.add_argument("--run-name", default=None, help="the run's name in the KFP UI (default: the pipeline's name)")
    parser.add_argument(
        "--recurring",
        metavar="CRON",
        help="create a recurring run instead: 6-field cron ('0 0 3 * * *'), @daily, @every 6h",
    )
    parser.add_argument(
        "--start-time",
        metavar="TIME",
        help="--recurring: first possible run, RFC 3339 with a zone (2026-12-01T03:00:00Z); default now",
    )
    parser.add_argument(
        "--end-time", metavar="TIME", help="--recurring: no runs after this time (RFC 3339 with a zone)"
    )
    parser.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        metavar="N",
        help=f"--recurring: runs of the schedule at once, 1-{MAX_CONCURRENCY} (default 1)",
    )
    parser.add_argument(
        "--catchup",
        action="store_true",
        help="--recurring: start the runs missed while the schedule was paused or before now "
        "(default: no catch-up, the next run is the next scheduled time)",
    )
    parser.add_argument("--wait", action="store_true", help="follow the run to its end")
    parser.add_argument("--timeout", type=int, default=None, help=f"--wait limit in seconds (default {WAIT_S})")
    parser.add_argument("--dry-run", action="store_true", help="print the Kubernetes objects; contact nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse, validate every parameter and option at once, then render (--dry-run) or submit, and follow (--wait)."""
    args = _parser().parse_args(argv)
    with exit_on_user_error():
        sweep = args.pipeline == "sweep"
        pipeline = _pipeline(args)
        if args.list_params:
            _list_params(pipeline)
            return 0
        params = _validated(args, pipeline, sweep)
        run_name = args.run_name or pipeline.name
        if args.dry_run:
            _print_dry_run(args, params, sweep, run_name)
            return 0
        client, result = _submitted(args, params, pipeline, run_name)
        for key, value in result.items():
            print(f"{key}: {value}")
        if args.wait and "run_id" in result:
            return _waited(client, args, result)
    return 0


def _pipeline(args: argparse.Namespace):
    """The --pipeline's pipeline function (the sweep compiled with --parallelism)."""
    if args.pipeline == "sweep":
        from pipelines.dag.sweep import build

        return build(2 if args.parallelism is None else max(args.parallelism, 0))
    if args.parallelism is not None and args.parallelism >= 0:  # as for the sweep: scripts may pass it to both
        print(
            f"note: --parallelism {args.parallelism} applies to --pipeline sweep only; the finetune "
            "pipeline runs one training",
            file=sys.stderr,
        )
    return finetune_pipeline


def _list_params(pipeline) -> None:
    from pipelines.run_local import params_help

    print(params_help(pipeline))
    # The defaults above are the compiled pipeline's (the KFP UI's), which are run_local's: two of them
    # a submitted run does not keep.
    *others, last = deploy.CLUSTER_BACKENDS
    print(
        f"\nsubmit: launcher not given is {SUBMIT_LAUNCHER} (launcher=local trains inside one pipeline pod, "
        f"which a cluster refuses); deploy_backend must be given: {', '.join(others)} or {last} (local "
        "would serve inside the deploy step's pod and end with it)"
    )


def _validated(args: argparse.Namespace, pipeline, sweep: bool) -> dict[str, Any]:
    """The run's parameters (launcher defaulting to SUBMIT_LAUNCHER), with --param, the options and the
    parameters' problems said in one message."""
    problems: list[str] = []
    default_launcher = not any(p.partition("=")[0].strip() == "launcher" for p in args.param)
    params = parse_params(
        pipeline, [*args.param, *([f"launcher={SUBMIT_LAUNCHER}"] if default_launcher else [])], problems
    )
    validate(params, args.recurring, problems + option_problems(args) + schedule_problems(args), sweep=sweep)
    if default_launcher:
        print(
            f"note: launcher not given: {SUBMIT_LAUNCHER} (a Kubeflow Trainer v2 TrainJob; "
            "launcher=pytorchjob for the Training Operator v1)",
            file=sys.stderr,
        )
    if args.recurring is not None:
        schedule_notes(args)
    return params


def _schedule(args: argparse.Namespace) -> dict[str, Any]:
    """--recurring's settings as submit() takes them: times as RFC 3339 in UTC ('2026-12-01T02:00:00Z' for
    2026-12-01 03:00+01:00), as KFP shows them."""
    schedule: dict[str, Any] = {
        k: _time(v, "", []).astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
        for k, v in (("start_time", args.start_time), ("end_time", args.end_time))
        if v is not None
    }
    if args.max_concurrency is not None:
        schedule["max_concurrency"] = args.max_concurrency
    schedule["no_catchup"] = not args.catchup
    return schedule


def _print_dry_run(args: argparse.Namespace, params: dict[str, Any], sweep: bool, run_name: str) -> None:
    from trainer.__main__ import print_yaml

    print_yaml(sweep_dry_run_objects(params) if sweep else dry_run_objects(params))
    for line in registry_calls(params):  # YAML comments: the output stays valid YAML
        print(f"# {line}")
    if args.recurring:
        window = "".join(f", {w} {t}" for w, t in (("from", args.start_time), ("until", args.end_time)) if t)
        print(
            f"# recurring run {run_name!r} in experiment {args.experiment!r}: schedule {args.recurring!r}"
            f"{window}, at most {args.max_concurrency or 1} run(s) at a time, "
            + ("catch-up of missed runs" if args.catchup else "no catch-up of missed runs")
        )


def _submitted(args: argparse.Namespace, params: dict[str, Any], pipeline, run_name: str):
    """(the kfp.Client, submit()'s result): the host's health and tenancy asked first, the package compiled here."""
    health = check_host(args.host, os.environ.get("KFP_TOKEN") or None)
    # Single-user KFP keeps experiments without a namespace; multi-user needs the profile's.
    namespace = (args.kfp_namespace or params.get("namespace")) if health.get("multi_user") else None
    if args.kfp_namespace and not health.get("multi_user"):
        print(f"note: KFP at {args.host} is single-user: --kfp-namespace is not used", file=sys.stderr)
    if health.get("multi_user") and not namespace:  # neither --kfp-namespace nor the namespace parameter
        raise UserError(f"KFP at {args.host} is multi-user: pass --kfp-namespace <your profile namespace>")
    if namespace:  # the runs' pods go into the profile namespace, where namespace="" deploys
        from trainer.validate import run_namespace_problems

        collect(run_namespace_problems(params, namespace), what="invalid pipeline parameters")
    import kfp
    from kfp_server_api.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    # Compiled outside the try below: a local failure (TMPDIR, full disk) is no lost connection.
    packaged = compile_package(pipeline)
    try:
        client = kfp.Client(host=args.host, existing_token=os.environ.get("KFP_TOKEN") or None)
        result = submit(
            client,
            params,
            args.experiment,
            run_name,
            args.recurring,
            args.host,
            pipeline,
            namespace,
            _schedule(args),
            packaged,
        )
    except ApiException as err:  # the server's answer, e.g. a permission or validation error
        detail = (err.body or "").strip().replace("\n", " ")[:300]
        raise UserError(f"KFP at {args.host} refused the request: HTTP {err.status} {err.reason} {detail}") from None
    except (HTTPError, OSError) as err:  # it answered healthz, then went away (port-forward ended, restart)
        reason = getattr(err, "reason", None) or err
        raise UserError(
            f"lost the connection to KFP at {args.host} ({str(reason)[:200]}): check that it is up "
            "(and the port-forward still runs), then submit again; an unchanged package is reused"
        ) from None
    finally:
        shutil.rmtree(packaged[0].parent, ignore_errors=True)
    return client, result


def _waited(client, args: argparse.Namespace, result: dict[str, Any]) -> int:
    """--wait: follow the run to its end; 0 when it succeeded, 1 when it did not or --timeout passed (it goes on)."""
    from kfp_server_api.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        run = client.wait_for_run_completion(result["run_id"], timeout=args.timeout or WAIT_S)
    except TimeoutError:  # the run itself goes on: this is no failure of it, nor bad input
        print(
            f"error: the run has not finished within --timeout {args.timeout or WAIT_S}s; it goes on in KFP: "
            f"{result['url']}",
            file=sys.stderr,
        )
        return 1
    except ApiException as err:
        raise UserError(
            f"KFP at {args.host} refused a status request for run {result['run_id']}: HTTP "
            f"{err.status} {err.reason}; the run goes on: {result['url']}"
        ) from None
    except (HTTPError, OSError) as err:  # after TimeoutError, an OSError too
        reason = getattr(err, "reason", None) or err
        raise UserError(
            f"lost the connection to KFP at {args.host} while waiting ({str(reason)[:200]}); the "
            f"run goes on: {result['url']}"
        ) from None
    print(f"run finished: {run.state}")
    return 0 if str(run.state).upper() == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
