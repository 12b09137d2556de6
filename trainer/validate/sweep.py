"""The sweep pipeline's parameters: its trials, then every finetune check on each."""

from __future__ import annotations

import json
from typing import Any

from trainer.config.params import TRIAL_EXAMPLE, TRIAL_KEYS
from trainer.evaluate.gate import PRIMARY, select_problem
from trainer.validate.pipeline import gate_rows_problems, tool_rows_problem, pipeline_problems
from trainer.validate.values import TRAIN_DEFAULTS, DEFAULTS, value_problem


SWEEP_ONLY = ("trials",)


def sweep_problems(params: dict[str, Any], check_local_files: bool = True) -> list[str]:
    """Sweep parameters: the shared ones as for one run, each trial's own values, the selection."""
    trials = params.get("trials", DEFAULTS["trials"])
    shared = {k: v for k, v in params.items() if k not in SWEEP_ONLY}
    splits: dict[str, list] = {}
    problems = pipeline_problems({**shared, "method": "lora"}, check_local_files, splits_out=splits, gate=False)
    if not isinstance(trials, list) or not trials:
        problems.append(f"trials must be a non-empty JSON list of objects like {TRIAL_EXAMPLE}, got {trials!r}")
        trials = []
    for i, t in enumerate(trials):
        if not isinstance(t, dict) or set(t) != set(TRIAL_KEYS):
            problems.append(
                f"trials[{i}] must have exactly the keys {sorted(TRIAL_KEYS)}, like {TRIAL_EXAMPLE}; got {t!r}"
            )
            continue
        typed = [
            value_problem(f"trials[{i}].{k}", t[k], kind, example=TRAIN_DEFAULTS[k], in_json=True)
            for k, kind in TRIAL_KEYS.items()
        ]
        if any(typed):
            problems += [p for p in typed if p]
            continue
        t = {k: int(v) if TRIAL_KEYS[k] is int else v for k, v in t.items()}  # 16.0 from KFP -> 16
        same = next((j for j, u in enumerate(trials[:i]) if isinstance(u, dict) and u == t), None)
        if same is not None:  # the same run twice: its compute is wasted and the two tie
            problems.append(f"trials[{i}] repeats trials[{same}] ({json.dumps(t)}): drop it or change a value")
        # Only what this trial's own values add (the shared problems are reported once above).
        problems += [
            f"trials[{i}]: {p}"
            for p in pipeline_problems({**shared, **t, "method": "lora"}, check_local_files=False, gate=False)
            if p not in problems
        ]
    if (
        params.get("deploy_all_trials") is True
        and shared.get("lora_train_embeddings", TRAIN_DEFAULTS["lora_train_embeddings"]) is True
    ):
        # As serve_adapters in pipeline_problems: found after every trial trained, by deploy-trials, without this.
        problems.append(
            "deploy_all_trials=true serves every trial's adapter beside the base model, and vLLM cannot "
            "load an adapter that trains the embeddings in full: set lora_train_embeddings=false, or "
            "deploy_all_trials=false to deploy the winner merged"
        )
    select = params.get("select_metric", DEFAULTS["select_metric"])
    if problem := select_problem(select):
        problems.append(problem)
    elif select == PRIMARY:  # every trial would train, then score nothing and nothing deploys
        problems += tool_rows_problem(
            {**DEFAULTS, **shared},
            splits.get("eval") or [],
            f"select_metric={PRIMARY} measures tool calls",
            "none",
            "no trial could be picked or deployed",
            "set select_metric=eval_loss",
        )
    problems += gate_rows_problems({**DEFAULTS, **shared}, splits.get("eval") or [], "min_fc_accuracy")
    return list(dict.fromkeys(problems))  # each problem once, in the order found
