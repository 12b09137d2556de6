"""Validation of pipeline parameters before any expensive work starts.

Used by `pipelines.run_local` (and later `submit`) so that bad input fails in a second with
one message listing every problem and its fix, not minutes into a run.
"""

from __future__ import annotations

from typing import Any

from trainer import sources
from trainer.config import TrainConfig
from trainer.errors import UserError, collect


# Parameters some callers (the sweep, the validate-params component) do not have; cluster
# settings a caller lacks keep ClusterSpec's defaults (see trainer.launch.cluster_from_params).
DEFAULTS = {"eval_fraction": 0.1, "seed": 0, "launcher": "local", "deploy_backend": "local", "nodes": 1,
            "procs_per_node": 1, "max_restarts": 0, "eval_max_rows": 1}


def pipeline_problems(params: dict[str, Any], check_local_files: bool = True) -> list[str]:
    """Every problem in a set of finetune-pipeline parameters (missing optional keys take defaults).

    `check_local_files` reads local dataset files fully (run_local); submit turns it off
    because a cluster cannot read this machine's files anyway.
    """
    params = {**DEFAULTS, **params}
    problems = []
    for what in ("model", "dataset"):
        try:
            src = sources.parse(params[f"{what}_source"], what)
        except UserError as err:
            problems.append(str(err))
            continue
        if what == "model":
            limit = sources.model_max_length(params["model_source"])
            if limit and params["max_seq_len"] > limit:
                problems.append(f"max_seq_len={params['max_seq_len']} exceeds the model's context length {limit}; "
                                f"set max_seq_len <= {limit}")
        if what == "dataset" and src.kind == "local" and check_local_files:
            try:  # local files are cheap to check fully now; Hub data is checked on delivery
                sources.materialize_dataset(src, "", params["eval_fraction"], params["seed"])
            except UserError as err:
                problems.append(str(err))
    problems += TrainConfig.from_params(params, model_uri="s3://check/model", dataset_uri="s3://check/data",
                                        output_prefix="runs/check").problems()
    if params["nodes"] < 1:
        problems.append(f"nodes must be >= 1, got {params['nodes']}")
    if params["procs_per_node"] < 1:
        problems.append(f"procs_per_node must be >= 1, got {params['procs_per_node']}")
    if not 0 < params["eval_fraction"] < 1:
        problems.append(f"eval_fraction must be between 0 and 1, got {params['eval_fraction']}")
    if params["max_restarts"] < 0:
        problems.append(f"max_restarts must be >= 0, got {params['max_restarts']}")
    if params["eval_max_rows"] < 1:
        problems.append(f"eval_max_rows must be >= 1, got {params['eval_max_rows']}")
    from trainer.launch import LAUNCHERS, cluster_from_params

    if params["launcher"] not in LAUNCHERS:
        problems.append(f"launcher must be one of {LAUNCHERS}, got {params['launcher']!r}")
    if params["deploy_backend"] not in ("local", "kubernetes"):
        problems.append(f"deploy_backend must be 'local' or 'kubernetes', got {params['deploy_backend']!r}")
    if "kubernetes" in (params["launcher"], params["deploy_backend"]):
        problems += cluster_from_params(params).kubernetes_problems()  # topology is checked above
    return problems


def validate_pipeline_params(params: dict[str, Any], check_local_files: bool = True) -> None:
    collect(pipeline_problems(params, check_local_files), what="invalid pipeline parameters")


TRIAL_KEYS = {"lora_r": int, "lora_alpha": int, "learning_rate": float}


def validate_sweep(params: dict[str, Any]) -> None:
    """Sweep parameters: the shared ones as for one run (with each trial's values), plus the trials."""
    from trainer.sweep import SELECT

    trials = params["trials"]
    problems = []
    if not isinstance(trials, list) or not trials:
        problems.append("trials must be a non-empty JSON list of objects like "
                        '{"lora_r": 16, "lora_alpha": 32, "learning_rate": 0.003}')
        trials = []
    for i, t in enumerate(trials):
        if not isinstance(t, dict) or set(t) != set(TRIAL_KEYS):
            problems.append(f"trials[{i}] must have exactly the keys {sorted(TRIAL_KEYS)}, got {t!r}")
            continue
        shared = {k: v for k, v in params.items() if k not in ("trials", "select_metric", "min_gain")}
        problems += [f"trials[{i}]: {p}" for p in pipeline_problems({**shared, **t, "method": "lora"})]
    if params["select_metric"] not in SELECT:
        problems.append(f"select_metric must be one of {sorted(SELECT)}, got {params['select_metric']!r}")
    seen = set()
    problems = [p for p in problems if not (p in seen or seen.add(p))]
    collect(problems, what="invalid sweep parameters")
