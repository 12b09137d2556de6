"""`--param key=value` parsing shared by run_local and submit: typed by the pipeline's own
defaults, every problem reported at once."""

from __future__ import annotations

import difflib
import inspect
import json
import math
from typing import Any

from trainer.core import settings
from trainer.core.errors import collect


_KIND = {
    bool: "true/false",
    int: "whole number",
    float: "number",
    str: "string",
    dict: "JSON object",
    list: "JSON list",
}


class _NonFinite(ValueError):
    pass


def _whole_number(raw: str) -> int:
    """`16`, ` 16 `, `1e3`, `100.0` (as people type step counts); not `16.5`, not NaN."""
    try:
        return int(raw)
    except ValueError:
        value = float(raw)  # ValueError again when it is no number at all
        if not (math.isfinite(value) and value.is_integer()):
            raise
        return int(value)


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads keeps the last of a key given twice in one object: a value the user typed would be dropped."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(f"{k!r} appears twice in one JSON object ({json.dumps(out[k])}, then {json.dumps(v)})")
        out[k] = v
    return out


def _no_constant(name: str):
    """json.loads accepts NaN, Infinity and -Infinity by default; no parameter may hold them."""
    raise _NonFinite(name)


def pipeline_defaults(pipeline) -> dict[str, Any]:
    return {name: p.default for name, p in inspect.signature(pipeline.pipeline_func).parameters.items()}


def _pipelines_with(key: str, pipeline) -> list[str]:
    """The project's other pipelines that take `key` (e.g. finetune's registry_address, absent from the sweep)."""
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.dag.sweep import sweep_pipeline

    return [
        p.name for p in (finetune_pipeline, sweep_pipeline) if p.name != pipeline.name and key in pipeline_defaults(p)
    ]


def parse_params(pipeline, pairs: list[str], problems: list[str] | None = None) -> dict[str, Any]:
    """`key=value` strings -> the full, typed parameter dict (defaults filled in).

    dict and list values are JSON (`node_selector={"pool": "h100"}`). A key given twice with
    different values is refused: keeping the last would silently drop a value the user typed.
    With `problems`, what is wrong is appended there (a bad value keeps its default) so that the
    caller reports it with every other problem of the run in one message; else it raises.
    """
    params = pipeline_defaults(pipeline)
    defaults = dict(params)
    raise_here = problems is None
    problems = [] if problems is None else problems
    given: dict[str, str] = {}  # key -> the raw value it was first given
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            problems.append(f"--param {pair!r} is not key=value")
            continue
        key = key.strip()  # `--param "lora_r = 16"`: the spaces are typing, not part of the name
        if not key:
            problems.append(f"--param {pair!r} has no name before '=': give KEY=VALUE, e.g. --param max_steps=200")
            continue
        if key not in params:
            close = difflib.get_close_matches(key, params, n=1)
            other = _pipelines_with(key, pipeline)
            what = (
                f"parameter {key!r} belongs to {', '.join(other)}, not to {pipeline.name}"
                if other
                else f"unknown parameter {key!r}"
            )
            problems.append(
                f"{what}; " + (f"did you mean {close[0]}? " if close else "") + f"known: {', '.join(sorted(params))}"
            )
            continue
        kind = type(params[key])
        before = params[key]
        found = len(problems)
        try:
            if kind is bool:
                params[key] = settings.parse_bool(raw)
            elif kind in (int, float) and not raw.isascii():  # Python reads '١٢' as 12; KFP and people do not
                raise ValueError
            elif kind is int:
                params[key] = _whole_number(raw)
            elif kind in (dict, list):
                params[key] = json.loads(raw, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
                if not isinstance(params[key], kind):
                    raise ValueError
            else:
                params[key] = kind(raw)
                if kind is float and not math.isfinite(params[key]):
                    problems.append(
                        f"parameter {key}={raw!r} is not a finite number: NaN and infinity train "
                        f"nothing; give a real value, e.g. {key}={defaults[key]}"
                    )
        except RecursionError:
            problems.append(f"parameter {key}: the JSON is nested too deeply; give a flat object or list")
        except _DuplicateKey as err:
            problems.append(f"parameter {key}: {err}: give each key once")
        except _NonFinite:
            problems.append(
                f"parameter {key}={raw!r} holds NaN or Infinity, which JSON does not allow and no run "
                "can use: give real numbers"
            )
        except ValueError:
            example = json.dumps(defaults[key]) if kind in (dict, list, bool) else defaults[key]
            quotes = kind in (dict, list) and "'" in raw and '"' not in raw  # a Python literal, not JSON
            wrap = kind is list and raw.strip().startswith("{")  # one object where a list of them belongs
            problems.append(
                f"parameter {key}={raw!r} is not a valid {_KIND.get(kind, kind.__name__)}"
                + (" (JSON strings take double quotes)" if quotes else "")
                + f", e.g. {key}={example}"
                + ("; for one object, wrap it in [ ] to make a list of one" if wrap else "")
            )
        if len(problems) > found:  # the value is reported; later checks see the previous one, not NaN
            params[key] = before
        elif key in given and params[key] != before:
            first, then = (settings.url_credentials(v) or v for v in (given[key], raw))  # no password shown
            problems.append(
                f"parameter {key} is given twice with different values ({key}={first!r}, then "
                f"{key}={then!r}): give it once"
            )
        given.setdefault(key, raw)
    problems += _ignored_adapter_settings(params, defaults, given)
    if raise_here:
        collect(problems, what="bad --param")
    return params


def _ignored_adapter_settings(params: dict[str, Any], defaults: dict[str, Any], given: dict[str, str]) -> list[str]:
    """An adapter setting typed beside method=full, which trains no adapter: it would do nothing without a
    word. Only what was typed here (the KFP UI sends every parameter, so validate cannot tell)."""
    from trainer.config.training import ADAPTER_METHODS, METHODS

    if params.get("method") not in METHODS or params["method"] in ADAPTER_METHODS:
        return []  # an unknown method is refused on its own
    # Not lora_train_embeddings: the pipeline's help advises false for pretrained models, whatever the method.
    typed = [
        f"{key}={given[key]}"
        for key in ("lora_r", "lora_alpha", "lora_dropout")
        if key in given and params.get(key) != defaults.get(key)
    ]
    return (
        [
            f"{', '.join(typed)} set{'s' if len(typed) == 1 else ''} an adapter, which method={params['method']} "
            f"does not train: drop {'it' if len(typed) == 1 else 'them'}, or use method={ADAPTER_METHODS[0]}"
        ]
        if typed
        else []
    )
