"""`--param key=value` parsing shared by run_local and submit: typed by the pipeline's own
defaults, every problem reported at once."""

from __future__ import annotations

import inspect
import json
from typing import Any

from trainer.errors import collect


def pipeline_defaults(pipeline) -> dict[str, Any]:
    return {name: p.default for name, p in inspect.signature(pipeline.pipeline_func).parameters.items()}


def parse_params(pipeline, pairs: list[str]) -> dict[str, Any]:
    """`key=value` strings -> the full, typed parameter dict (defaults filled in).

    dict and list values are JSON (`node_selector={"pool": "h100"}`).
    """
    params = pipeline_defaults(pipeline)
    problems = []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            problems.append(f"--param {pair!r} is not key=value")
            continue
        if key not in params:
            problems.append(f"unknown parameter {key!r}; known: {', '.join(sorted(params))}")
            continue
        kind = type(params[key])
        try:
            if kind is bool:
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                params[key] = raw.lower() in ("true", "1")
            elif kind in (dict, list):
                params[key] = json.loads(raw)
                if not isinstance(params[key], kind):
                    raise ValueError
            else:
                params[key] = kind(raw)
        except ValueError:
            problems.append(f"parameter {key}={raw!r} is not a valid {kind.__name__}")
    collect(problems, what="bad --param")
    return params
