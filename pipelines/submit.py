"""python -m pipelines.submit [--host URL] [--param k=v ...] [--recurring "CRON"] [--wait] [--dry-run]

Submit the fine-tuning pipeline to a Kubeflow Pipelines 2.x backend:
  1. validate the parameters (every problem at once, before anything is uploaded);
  2. compile the pipeline from this checkout;
  3. upload it, or upload a new version when the pipeline exists (versions are named by
     the content hash, so resubmitting unchanged code reuses the version);
  4. create a run in an experiment (created if missing), or with --recurring a recurring
     run on a 6-field cron schedule (`0 0 3 * * *` = daily at 03:00);
  5. print the run URL; --wait follows the run to the end and exits non-zero unless it succeeded.

The KFP host comes from --host or KFP_HOST; a bearer token, when the endpoint needs one,
from KFP_TOKEN (never a flag, so it stays out of shell history and process lists).
--dry-run validates and prints, as YAML, every Kubernetes object the run would create
(the PyTorchJob, the vLLM Deployment and Service), and contacts nothing.

Example:
  python -m pipelines.submit --host http://localhost:8080 --param launcher=kubernetes \\
      --param deploy_backend=kubernetes --param model_source=meta-llama/Llama-3.2-1B-Instruct \\
      --param dataset_source=s3://llm-finetune/datasets/sha256-... --param nodes=2 --param procs_per_node=8
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from pipelines.finetune import PIPELINE_NAME, finetune_pipeline
from pipelines.params import parse_params
from trainer.errors import UserError, collect, exit_on_user_error


def cluster_problems(params: dict[str, Any]) -> list[str]:
    """What run_local accepts but a cluster cannot use."""
    problems = []
    for what in ("model", "dataset"):
        from trainer import sources

        try:
            if sources.parse(params[f"{what}_source"], what).kind == "local":
                problems.append(f"{what}_source {params[f'{what}_source']!r} is a path on this machine, which the "
                                f"cluster cannot read: deliver it first (python -m trainer deliver-{what} ... with "
                                f"S3_ENDPOINT at the cluster's MinIO) and pass the printed s3:// URI")
        except UserError:
            pass  # reported by validate_pipeline_params
    if params["launcher"] == "local":
        problems.append("launcher=local would train inside one pipeline pod; use launcher=kubernetes on a cluster")
    return problems


def validate(params: dict[str, Any]) -> None:
    from trainer.validate import pipeline_problems

    collect(pipeline_problems(params, check_local_files=False) + cluster_problems(params),
            what="invalid pipeline parameters")


def dry_run_objects(params: dict[str, Any]) -> list:
    """The Kubernetes objects this run would create, as model objects."""
    from trainer.config import TrainConfig
    from trainer.k8s import kserve, vllm
    from trainer.k8s.common import job_name
    from trainer.k8s.pytorchjob import build_pytorchjob
    from trainer.k8s.trainjob import build_trainjob
    from trainer.launch import cluster_from_params

    spec = cluster_from_params(params)
    objects = []
    if params["launcher"] != "local":
        cfg = TrainConfig.from_params(params, model_uri="s3://<bucket>/models/<from deliver-model>",
                                      dataset_uri="s3://<bucket>/datasets/<from deliver-dataset>",
                                      output_prefix="runs/<run id>")
        build = build_trainjob if params["launcher"] == "trainjob" else build_pytorchjob
        objects.append(build(job_name("run-id"), cfg.to_args(), spec))
    if params["deploy_backend"] in ("kubernetes", "kserve"):
        serve = vllm.ServeSpec(name=params["served_model_name"], model_uri="s3://<bucket>/models/<from merge-lora>",
                               gpus=params["serve_gpus"], cluster=spec)
        objects += (kserve if params["deploy_backend"] == "kserve" else vllm).build(serve)
    return objects


def package(out_dir: Path) -> tuple[Path, str]:
    """Compile to `out_dir`; returns (path, short content hash)."""
    from kfp import compiler

    path = out_dir / "finetune.yaml"
    compiler.Compiler().compile(finetune_pipeline, str(path))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def upload(client, path: Path, digest: str) -> tuple[str, str]:
    """(pipeline id, version id) of a version named by the package's content hash.

    Creating a pipeline also creates a first version named after the pipeline; runs always
    use a `<name>-<hash>` version, so resubmitting unchanged code finds and reuses it.
    """
    version_name = f"{PIPELINE_NAME}-{digest}"
    pipeline_id = client.get_pipeline_id(PIPELINE_NAME)
    if pipeline_id is None:
        pipeline_id = client.upload_pipeline(str(path), pipeline_name=PIPELINE_NAME,
                                             description=finetune_pipeline.description).pipeline_id
    existing = [v for v in client.list_pipeline_versions(pipeline_id, page_size=200).pipeline_versions or []
                if v.display_name == version_name]
    if existing:
        return pipeline_id, existing[0].pipeline_version_id
    version = client.upload_pipeline_version(str(path), pipeline_version_name=version_name, pipeline_id=pipeline_id)
    return pipeline_id, version.pipeline_version_id


def submit(client, params: dict[str, Any], experiment: str, run_name: str, recurring: str | None,
           host: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path, digest = package(Path(tmp))
        pipeline_id, version_id = upload(client, path, digest)
    experiment_id = client.create_experiment(experiment).experiment_id  # returns the existing one by name
    if recurring:
        if len(recurring.split()) != 6:
            raise UserError(f"--recurring needs a 6-field cron expression (seconds first), got {recurring!r}; "
                            "e.g. '0 0 3 * * *' for daily at 03:00")
        job = client.create_recurring_run(experiment_id, run_name, cron_expression=recurring, pipeline_id=pipeline_id,
                                          version_id=version_id, params=params, max_concurrency=1, no_catchup=True)
        return {"recurring_run_id": job.recurring_run_id, "pipeline_id": pipeline_id, "version_id": version_id,
                "url": f"{host.rstrip('/')}/#/recurringrun/details/{job.recurring_run_id}"}
    run = client.run_pipeline(experiment_id, run_name, pipeline_id=pipeline_id, version_id=version_id, params=params)
    return {"run_id": run.run_id, "pipeline_id": pipeline_id, "version_id": version_id,
            "url": f"{host.rstrip('/')}/#/runs/details/{run.run_id}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.submit", description=__doc__.splitlines()[2])
    parser.add_argument("--host", default=os.environ.get("KFP_HOST"), help="KFP API endpoint (or KFP_HOST)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--experiment", default="llm-finetune")
    parser.add_argument("--run-name", default="llm-finetune")
    parser.add_argument("--recurring", metavar="CRON", help="6-field cron: create a recurring run instead")
    parser.add_argument("--wait", action="store_true", help="follow the run to its end")
    parser.add_argument("--timeout", type=int, default=24 * 3600, help="--wait limit in seconds")
    parser.add_argument("--dry-run", action="store_true", help="print the Kubernetes objects; contact nothing")
    args = parser.parse_args(argv)

    with exit_on_user_error():
        params = parse_params(finetune_pipeline, args.param)
        validate(params)
        if args.dry_run:
            from trainer.__main__ import print_yaml

            print_yaml(dry_run_objects(params))
            return 0
        if not args.host:
            raise UserError("no KFP host: pass --host URL or set KFP_HOST (e.g. http://localhost:8080 after "
                            "`kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80`)")
        import kfp

        client = kfp.Client(host=args.host, existing_token=os.environ.get("KFP_TOKEN") or None)
        result = submit(client, params, args.experiment, args.run_name, args.recurring, args.host)
        for key, value in result.items():
            print(f"{key}: {value}")
        if args.wait and "run_id" in result:
            run = client.wait_for_run_completion(result["run_id"], timeout=args.timeout)
            print(f"run finished: {run.state}")
            return 0 if str(run.state).upper() == "SUCCEEDED" else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
