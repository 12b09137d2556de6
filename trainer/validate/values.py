"""Parameter values one at a time: types (a string "16", null, true where a number belongs, NaN or
infinity), sizes, padding, secrets in plain text; and the defaults a caller that lacks a key gets."""

from __future__ import annotations

import math
import re
from dataclasses import fields
from typing import Any

from trainer.config import params as param_table
from trainer.core import settings
from trainer.config.training import TrainConfig
from trainer.data import lone_surrogate, non_finite_paths


# Every pipeline parameter that is not a TrainConfig field, with the default a caller that
# lacks it gets (the sweep has no `method`, the CLI no `served_model_name`, ...): the finetune
# pipeline's, from the one table (trainer.config.params). The types of these defaults are the parameters'
# types. Cluster settings a caller lacks keep ClusterSpec's defaults (see trainer.launch.cluster_from_params).
DEFAULTS: dict[str, Any] = {p.name: p.default for p in param_table.PARAMS if p.name not in param_table.train_fields()}


TRAIN_DEFAULTS = {f.name: f.default for f in fields(TrainConfig)}

TRAIN_PARAMS = {k: v for k, v in TRAIN_DEFAULTS.items() if k not in ("model_uri", "dataset_uri", "output_prefix")}

_KIND = {
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    str: "a string",
    dict: "a JSON object",
    list: "a JSON list",
}


def default(name: str) -> Any:
    return TRAIN_DEFAULTS[name] if name in TRAIN_DEFAULTS else DEFAULTS.get(name)


def _json_repr(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true (a boolean)" if value else "false (a boolean)"
    if isinstance(value, str):
        return f"{value!r} (a string)"
    return repr(value)


def value_problem(name: str, value: Any, kind: type, example: Any = None, in_json: bool = False) -> str | None:
    """Why `value` is not a `kind` (None when it is), with the fix. Ints pass for floats;
    bools never pass for numbers (JSON true is not 1); NaN and infinity never pass. `in_json`:
    a member of a JSON list or object, where 16.0 passes for an int."""
    example = default(name.rsplit(".", 1)[-1]) if example is None else example
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name} must be a finite number, got {value}: NaN and infinity train nothing; use e.g. {example}"
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if kind is int and in_json and isinstance(value, float) and value.is_integer():
        ok = True  # JSON has one number type: KFP hands list and dict members over as 16.0
    if ok:
        return None
    fix = ""
    if value is None:
        fix = f": give a value, e.g. {example}"
    elif isinstance(value, str) and kind in (int, float):
        try:
            float(value)
            fix = f": write {value.strip()} without quotes"
        except ValueError:
            fix = f", e.g. {example}"
    elif isinstance(value, bool) and kind in (int, float):
        fix = f": give a number, e.g. {example}"
    elif kind is bool:
        fix = ": use true or false"
    elif kind is int and isinstance(value, float):  # 1e30 from the KFP form arrives as a float
        fix = f": use a whole number, e.g. {int(value) if value.is_integer() and abs(value) <= INT_MAX else example}"
    elif example is not None:
        fix = f", e.g. {example!r}" if kind is str else f", e.g. {example}"
    return f"{name} must be {_KIND.get(kind, kind.__name__)}, got {_json_repr(value)}{fix}"


# Whole numbers beyond this are typos (1e30 typed for 1e3): the Kubernetes API holds counts in
# 32-bit integers, and no step, row, token or second count of a fine-tune comes near it.
# The seed and max_steps have their own ranges, with their own messages (TrainConfig.problems).
INT_MAX = 2**31 - 1


_OWN_RANGE = ("seed", "max_steps")


def _too_large(name: str, value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and name not in _OWN_RANGE and abs(value) > INT_MAX:
        return (
            f"{name}={value:.3g} is out of range: whole-number parameters go up to {INT_MAX:,} (a typo? e.g. "
            f"1e30 for 1e3); use e.g. {name}={default(name)}"
        )
    return None


def _padded(name: str, value: Any) -> str | None:
    """Spaces or line breaks around a name, image or URL (pasted into the KFP form or a shell
    quote) would reach Kubernetes or vLLM as part of it. Sources are read stripped everywhere;
    revisions have their own rule (no spaces anywhere); blank values their fields' own "empty" rules."""
    if (
        isinstance(value, str)
        and isinstance(default(name), str)
        and value.strip()
        and value != value.strip()
        and name not in ("model_source", "dataset_source", "model_revision", "dataset_revision")
    ):
        return (
            f"{name}={value!r} has spaces or line breaks at its start or end (pasted?): remove them, "
            f"e.g. {name}={value.strip()!r}"
        )
    return None


def _out_of_range(name: str, value: Any) -> str | None:
    """gate_significance, a p-value threshold: 0 (off) up to, not including, 1 (p < 1 would refuse nearly every
    drop, p <= 1 every one: that is what 0 does, said plainly)."""
    if (
        name == "gate_significance"
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and not 0 <= value < 1
    ):
        return (
            f"gate_significance={value:g} is a p-value threshold, from 0 (off: every drop past max_category_drop "
            "is refused) up to, not including, 1: e.g. 0.05"
        )
    return None


def _not_text(name: str, value: Any) -> str | None:
    """A value holding a lone surrogate: bytes that are not UTF-8 on the command line (Python
    keeps them as \\udcff) or a \\ud800 escape in JSON. No log line, record or API carries it."""
    if found := lone_surrogate(value, name):
        return (
            f"{found[0]} holds {found[1]!a}, which is not text (bytes that are not UTF-8, or half of a UTF-16 "
            "pair written as a \\u escape): type the value again as UTF-8 text"
        )
    return None


def _credentials(name: str, value: Any) -> str | None:
    """A user name or password inside a URL parameter (registry_address=http://user:pass@host): it
    would show on the console, in the run's record and log, `runs list`, submit --dry-run and as a
    KFP run parameter. Refused, and masked in the message; credentials come from Secrets."""
    image = name == "vllm_image"  # user:pass@registry/name:tag is not an image reference, and would be shown
    if image and isinstance(value, str):  # the one '@' an image reference may hold: its digest, at the end
        value = re.sub(r"@sha256:[0-9a-fA-F]{64}$", "", value.strip())
    if not (isinstance(value, str) and ("://" in value or image) and (masked := settings.url_credentials(value))):
        return None
    if image:
        return (
            f"vllm_image={masked!r} carries a user name or password, which would show in the Deployment or "
            "InferenceService, the run's record and the KFP run's parameters: give the image alone (e.g. "
            "vllm/vllm-openai:v0.32.0); a private registry's credentials go into an imagePullSecret of the "
            "namespace's service account (kubectl create secret docker-registry)"
        )
    fix = (
        f"the registry's bearer token goes into the Secret {settings.get('REGISTRY_SECRET_NAME')!r} (key `token`)"
        if name == "registry_address"
        else f"credentials come from Kubernetes Secrets ({settings.get('S3_SECRET_NAME')!r} for S3, "
        f"{settings.get('HF_SECRET_NAME')!r} for the Hub's HF_TOKEN)"
    )
    return (
        f"{name}={masked!r} carries a user name or password in the URL, which would show on the console, in the "
        f"run's record and in the KFP run's parameters: remove it; {fix}"
    )


def type_problems(params: dict[str, Any]) -> tuple[list[str], set[str]]:
    """(problems, names of the parameters that have them): each known parameter against its
    type and, for whole numbers, INT_MAX; for every parameter, no NaN or infinity anywhere inside it."""
    problems, bad = [], set()
    for name, value in params.items():
        d = default(name)
        problem = _not_text(name, value) or _credentials(name, value)
        if problem is None and (name in TRAIN_DEFAULTS or name in DEFAULTS):
            problem = value_problem(name, value, type(d))
        problem = problem or _too_large(name, value) or _padded(name, value) or _out_of_range(name, value)
        if problem is None and not isinstance(value, float):
            nested = non_finite_paths(value, name)
            if nested:
                problem = (
                    f"{', '.join(nested)} must be finite numbers (NaN and Infinity are not numbers "
                    "a run can use): give real values"
                )
        elif problem is None and not math.isfinite(value):
            problem = value_problem(name, value, float, example=1.0)
        if problem:
            problems.append(problem)
            bad.add(name)
    return problems, bad
