"""python -m pipelines.run_local [--pipeline finetune|sweep] [--param key=value ...] [--s3-endpoint URL] [--keep-serving]

Run the whole fine-tuning pipeline on this machine through `kfp.local`, with the same
components that run on a cluster. Without --s3-endpoint (or S3_ENDPOINT in the
environment) it starts an S3-compatible server on loopback (moto, the stand-in for
MinIO); its contents vanish when this command ends, so the merged model is copied to
--output-dir. With a real MinIO, set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY too.

kfp.local ignores kfp-kubernetes settings (Secrets as env), so this command hands the S3
settings and credentials to the components through its own environment.

Examples:
  python -m pipelines.run_local
  python -m pipelines.run_local --pipeline sweep --parallelism 2 --param min_gain=0.2
  python -m pipelines.run_local --param max_steps=50 --param dataset_source=./my.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from pipelines.finetune import finetune_pipeline
from trainer import settings
from trainer.errors import UserError, exit_on_user_error

ROOT = Path(__file__).resolve().parent.parent


def parse_params(pairs: list[str], pipeline=finetune_pipeline) -> dict[str, Any]:
    from pipelines.params import parse_params as parse

    return parse(pipeline, pairs)


def start_s3(endpoint: str | None):
    """Use the given endpoint, or start moto on loopback; sets env for the components."""
    if endpoint:
        os.environ["S3_ENDPOINT"] = endpoint
        if not (os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")):
            raise UserError("--s3-endpoint needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment")
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


def summarize(outputs: dict[str, Any], elapsed: float) -> str:
    from trainer.report import table

    ev = outputs["eval_metrics"].metadata
    tr = outputs["train_metrics"].metadata
    lines = [
        "", "== base vs tuned ==",
        table([("eval loss", f"{ev['base_eval_loss']:.4f}", f"{ev['tuned_eval_loss']:.4f}"),
               ("function-calling accuracy", f"{ev['base_fc_accuracy']:.1%}", f"{ev['tuned_fc_accuracy']:.1%}")],
              ("metric", "base", "tuned")),
        "", "== training ==",
        table([(k, f"{v:.4g}") for k, v in sorted(tr.items()) if isinstance(v, (int, float))], ("metric", "value")),
        "", f"endpoint (smoke-tested): {outputs['endpoint']}", f"pipeline wall time: {elapsed:.1f}s",
    ]
    return "\n".join(lines)


def export_model(merged_uri: str, out_dir: Path) -> Path:
    from trainer.storage import Store

    return Store.from_env().get_tree(merged_uri, out_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.run_local", description=__doc__.splitlines()[2])
    parser.add_argument("--pipeline", choices=("finetune", "sweep"), default="finetune")
    parser.add_argument("--parallelism", type=int, default=2, help="sweep trials running at once")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--s3-endpoint", default=os.environ.get("S3_ENDPOINT"))
    parser.add_argument("--pipeline-root", type=Path, default=ROOT / ".runs" / "pipeline-root")
    parser.add_argument("--output-dir", type=Path, default=ROOT / ".runs" / "outputs")
    parser.add_argument("--keep-serving", action="store_true", help="leave the model server running")
    args = parser.parse_args(argv)

    with exit_on_user_error():
        from pipelines import sweep
        from trainer.validate import validate_pipeline_params, validate_sweep

        pipeline = sweep.build(args.parallelism) if args.pipeline == "sweep" else finetune_pipeline
        params = parse_params(args.param + (["keep_serving=true"] if args.keep_serving else []), pipeline)
        if args.pipeline == "sweep":  # before starting anything expensive
            validate_sweep(params)
            # Trials run side by side on this machine: each gets its share of the cores
            # (inherited by the components' processes and the trainers they launch).
            share = str(max(1, (os.cpu_count() or 1) // max(args.parallelism, 1)))
            os.environ.update(FINETUNE_LOCAL_CPUS=share, OMP_NUM_THREADS=share)
        else:
            validate_pipeline_params(params)
        server = start_s3(args.s3_endpoint)
        try:
            return run(pipeline, params, args)
        finally:
            if server is not None:
                server.stop()


def run(pipeline, params: dict[str, Any], args: argparse.Namespace) -> int:
    import warnings

    from kfp import local

    # SubprocessRunner warns that the project image is not a Python image; locally the
    # components run in this interpreter on purpose (use_venv=False), so it is noise.
    warnings.filterwarnings("ignore", message=".*non-Python base image.*")
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(args.pipeline_root),
               raise_on_error=True)
    print(f"S3 endpoint {settings.get('S3_ENDPOINT')}, bucket {settings.get('S3_BUCKET')}; "
          f"parameters: {json.dumps(params)}", flush=True)
    start = time.perf_counter()
    try:
        task = pipeline(**params)
    except RuntimeError as err:  # kfp.local: a task failed; its own log above says why
        print(f"error: pipeline failed: {err}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - start
    if args.pipeline == "sweep":
        print("\n" + Path(task.outputs["summary"].path).read_text())
        print(f"pipeline wall time: {elapsed:.1f}s")
    else:
        print(summarize(task.outputs, elapsed))
        merged_uri = task.outputs["merged_model"].metadata["uri"]
        out = export_model(merged_uri, args.output_dir / "merged-model")
        print(f"merged model: {merged_uri}\n  copied to {out}  (serve it: python -m trainer serve {out})")
    run_dir = max(args.pipeline_root.glob(f"{pipeline.name}-*"), key=lambda p: p.stat().st_mtime)
    for report in sorted(run_dir.rglob("report")) + sorted(run_dir.rglob("examples")):
        print(f"report: {report}")
    print(f"artifacts and logs: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
