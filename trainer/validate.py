"""Validation of pipeline parameters before any expensive work starts.

One set of rules for every way a run starts: `pipelines.run_local`, `pipelines.submit` (and its
--dry-run), and the `validate-params` step that opens both pipelines, so a run started from
the KFP UI is checked exactly as one started from the command line. Bad input fails in a
second with one message listing every problem and its fix, not minutes into a run.

Order of checks: types first (a string "16", null, true where a number belongs, NaN or
infinity), then values (ranges, sources, the model's context), then the Kubernetes API
server's rules for cluster settings (trainer.k8s.rules through ClusterSpec). A value of the
wrong type is reported once and replaced by its default for the later checks, so they can
still report every other problem in the same round.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

from trainer import params as param_table
from trainer import deploy, parity, settings, sources, templates
from trainer.batching import check_rows
from trainer.config import ADAPTER_METHODS, MAX_ACCUM, TrainConfig
from trainer.data import lone_surrogate, non_finite_paths
from trainer.errors import UserError
from trainer.serving.args import served_name_problems

# Every pipeline parameter that is not a TrainConfig field, with the default a caller that
# lacks it gets (the sweep has no `method`, the CLI no `served_model_name`, ...): the finetune
# pipeline's, from the one table (trainer.params). The types of these defaults are the parameters'
# types. Cluster settings a caller lacks keep ClusterSpec's defaults (see trainer.launch.cluster_from_params).
DEFAULTS: dict[str, Any] = {p.name: p.default for p in param_table.PARAMS if p.name not in param_table.train_fields()}
_TRAIN_DEFAULTS = {f.name: f.default for f in fields(TrainConfig)}
_TRAIN_PARAMS = {k: v for k, v in _TRAIN_DEFAULTS.items() if k not in ("model_uri", "dataset_uri", "output_prefix")}
_KIND = {bool: "true or false", int: "a whole number", float: "a number", str: "a string", dict: "a JSON object",
         list: "a JSON list"}


_KIND_WORDS = {"builtin": "built in", "local": "a path on this machine", "s3": "a delivered s3:// tree"}


def default(name: str) -> Any:
    return _TRAIN_DEFAULTS[name] if name in _TRAIN_DEFAULTS else DEFAULTS.get(name)


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
        return (f"{name}={value:.3g} is out of range: whole-number parameters go up to {INT_MAX:,} (a typo? e.g. "
                f"1e30 for 1e3); use e.g. {name}={default(name)}")
    return None


def _padded(name: str, value: Any) -> str | None:
    """Spaces or line breaks around a name, image or URL (pasted into the KFP form or a shell
    quote) would reach Kubernetes or vLLM as part of it. Sources are read stripped everywhere;
    revisions have their own rule (no spaces anywhere); blank values their fields' own "empty" rules."""
    if (isinstance(value, str) and isinstance(default(name), str) and value.strip() and value != value.strip()
            and name not in ("model_source", "dataset_source", "model_revision", "dataset_revision")):
        return (f"{name}={value!r} has spaces or line breaks at its start or end (pasted?): remove them, "
                f"e.g. {name}={value.strip()!r}")
    return None


def _not_text(name: str, value: Any) -> str | None:
    """A value holding a lone surrogate: bytes that are not UTF-8 on the command line (Python
    keeps them as \\udcff) or a \\ud800 escape in JSON. No log line, record or API carries it."""
    if found := lone_surrogate(value, name):
        return (f"{found[0]} holds {found[1]!a}, which is not text (bytes that are not UTF-8, or half of a UTF-16 "
                "pair written as a \\u escape): type the value again as UTF-8 text")
    return None


def _credentials(name: str, value: Any) -> str | None:
    """A user name or password inside a URL parameter (registry_address=http://user:pass@host): it
    would show on the console, in the run's record and log, `runs list`, submit --dry-run and as a
    KFP run parameter. Refused, and masked in the message; credentials come from Secrets."""
    from trainer import settings

    image = name == "vllm_image"  # user:pass@registry/name:tag is not an image reference, and would be shown
    if image and isinstance(value, str):  # the one '@' an image reference may hold: its digest, at the end
        value = re.sub(r"@sha256:[0-9a-fA-F]{64}$", "", value.strip())
    if not (isinstance(value, str) and ("://" in value or image) and (masked := settings.url_credentials(value))):
        return None
    if image:
        return (f"vllm_image={masked!r} carries a user name or password, which would show in the Deployment or "
                "InferenceService, the run's record and the KFP run's parameters: give the image alone (e.g. "
                "vllm/vllm-openai:v0.32.0); a private registry's credentials go into an imagePullSecret of the "
                "namespace's service account (kubectl create secret docker-registry)")
    fix = (f"the registry's bearer token goes into the Secret {settings.get('REGISTRY_SECRET_NAME')!r} (key "
           "`token`)" if name == "registry_address" else
           f"credentials come from Kubernetes Secrets ({settings.get('S3_SECRET_NAME')!r} for S3, "
           f"{settings.get('HF_SECRET_NAME')!r} for the Hub's HF_TOKEN)")
    return (f"{name}={masked!r} carries a user name or password in the URL, which would show on the console, in the "
            f"run's record and in the KFP run's parameters: remove it; {fix}")


def type_problems(params: dict[str, Any]) -> tuple[list[str], set[str]]:
    """(problems, names of the parameters that have them): each known parameter against its
    type and, for whole numbers, INT_MAX; for every parameter, no NaN or infinity anywhere inside it."""
    problems, bad = [], set()
    for name, value in params.items():
        d = default(name)
        problem = _not_text(name, value) or _credentials(name, value)
        if problem is None and (name in _TRAIN_DEFAULTS or name in DEFAULTS):
            problem = value_problem(name, value, type(d))
        problem = problem or _too_large(name, value) or _padded(name, value)
        if problem is None and not isinstance(value, float):
            nested = non_finite_paths(value, name)
            if nested:
                problem = (f"{', '.join(nested)} must be finite numbers (NaN and Infinity are not numbers "
                           "a run can use): give real values")
        elif problem is None and not math.isfinite(value):
            problem = value_problem(name, value, float, example=1.0)
        if problem:
            problems.append(problem)
            bad.add(name)
    return problems, bad


def pipeline_problems(params: dict[str, Any], check_local_files: bool = True,
                      splits_out: dict | None = None, gate: bool = True) -> list[str]:
    """Every problem in a set of finetune-pipeline parameters (missing optional keys take defaults).

    `check_local_files` reads local dataset files fully (run_local); submit turns it off
    because a cluster cannot read this machine's files anyway. `splits_out` receives the local
    dataset's rows read on the way ({"train": [...], "eval": [...]}), for the sweep's own checks. `gate`: the
    finetune pipeline's promotion gate reads min_gain as fc_ast_accuracy points (the sweep's, as its
    select_metric's: sweep_problems checks it).
    """
    params = {**_TRAIN_PARAMS, **DEFAULTS, **params}
    problems, bad = type_problems(params)
    params.update({name: default(name) for name in bad if name in _TRAIN_DEFAULTS or name in DEFAULTS})
    context = None  # the model's, when max_seq_len is over it: the other checks then take it as max_seq_len
    for what in ("model", "dataset"):
        try:
            src = sources.parse(params[f"{what}_source"], what)
        except UserError as err:
            problems.append(str(err))
            continue
        revision = params[f"{what}_revision"]
        if revision and src.kind != "hub":  # it would be ignored without a word
            problems.append(f"{what}_revision={revision!r} applies to Hub ids only, but {what}_source "
                            f"{params[f'{what}_source'].strip()!r} is {_KIND_WORDS[src.kind]}: leave {what}_revision "
                            "empty")
        elif revision and (revision.split() != [revision] or ".." in revision):
            problems.append(f"{what}_revision={revision!r} is not a branch, tag or commit name (no spaces or '..'): "
                            "e.g. main, v1.0 or a commit hash")
        if what == "model":
            try:
                limit = sources.model_max_length(params["model_source"])
            except UserError as err:
                problems.append(str(err))
                limit = None
            if limit and params["max_seq_len"] > limit:
                problems.append(f"max_seq_len={params['max_seq_len']} exceeds the model's context length {limit}; "
                                f"set max_seq_len <= {limit}")
                context = limit
            if src.kind == "local":  # a model directory on this machine: checked fully now
                problems += sources.model_dir_problems(src.ref)
            width = _hidden_size(src)
            if params["method"] in ADAPTER_METHODS and width and params["lora_r"] > width:
                problems.append(f"lora_r={params['lora_r']} is above the hidden size of model_source "
                                f"{params['model_source'].strip()!r} ({width}): a rank above the layer width adds "
                                f"memory and no capacity (an update is at most full rank); use e.g. "
                                f"lora_r={min(16, width)}, at most {width}")
        if what == "dataset" and src.kind == "local" and check_local_files:
            try:  # local files are cheap to check fully now; Hub data is checked on delivery
                from trainer.data import quiet_conversions

                with quiet_conversions():  # deliver-dataset says what it converts, once
                    splits = sources.materialize_dataset(src, "", params["eval_fraction"], params["seed"])
            except UserError as err:
                problems.append(str(err))
            else:
                if splits_out is not None:
                    splits_out.update(splits)
                problems += _template_problems(params["model_source"], splits, problems, params["max_seq_len"],
                                               params["model_revision"], params["chat_template"],
                                               _scored(params))
                if gate:
                    problems += _gate_rows_problems(params, splits["eval"], "min_fc_accuracy", "min_gain")
                try:  # the trainer's own rule, now instead of after delivery
                    check_rows(len(splits["train"]), params["batch_size"], params["nodes"] * params["procs_per_node"],
                               params["batch_tokens"])
                except UserError as err:
                    problems.append(f"dataset_source {params['dataset_source'].strip()!r}: {err}")
        elif what == "dataset" and src.kind == "builtin" and check_local_files and (
                params["chat_template"].strip() != templates.MODEL
                or not params["model_source"].strip().startswith("builtin:")
                or 0 < params["max_seq_len"] < _TRAIN_DEFAULTS["max_seq_len"]):
            # the built-in rows with another model or template, or a max_seq_len under the default the demo runs
            # at (max_seq_len=1 would skip every row): checked now, not after delivery in finetune
            from trainer import builtin_data

            splits = {name: rows[:BUILTIN_CHECK_ROWS] for name, rows in builtin_data.dataset(src.ref).items()}
            problems += _template_problems(params["model_source"], splits, problems, params["max_seq_len"],
                                           params["model_revision"], params["chat_template"])
    if "chat_template" not in bad:
        problems += templates.spec_problems(params["chat_template"], check_local_files)
    from trainer.evaluate import ENGINES

    problems += _gate_problems(params, bad)
    if params["eval_engine"] not in ENGINES:
        problems.append(f"eval_engine must be one of {', '.join(ENGINES)}, got {params['eval_engine']!r}: auto picks "
                        "vllm where vLLM is installed")
    # With max_seq_len over the model's context, batch_tokens is checked against the context (what max_seq_len
    # must become), not against the value just refused: "set batch_tokens >= 100000000" would contradict it.
    problems += TrainConfig.from_params({**params, **({"max_seq_len": context} if context else {})},
                                        model_uri="s3://check/model", dataset_uri="s3://check/data",
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
    if params["serve_gpus"] < 0:
        problems.append(f"serve_gpus must be >= 0 (0 serves on CPU), got {params['serve_gpus']}")
    problems += served_name_problems(params["served_model_name"])
    world = params["nodes"] * params["procs_per_node"]
    micro = params["batch_tokens"] * world  # tokens one micro-batch on every process takes (0: data-dependent)
    if world > 0 and micro > 0 and 0 < params["tokens_per_step"] < micro:
        problems.append(f"tokens_per_step={params['tokens_per_step']} is less than one micro-batch on every process "
                        f"(batch_tokens {params['batch_tokens']} x {world} processes = {micro}), so a step takes "
                        f"that many anyway: give a multiple of {micro} (e.g. {4 * micro}), or 0 for one micro-batch "
                        "per step")
    elif world > 0 and micro > 0 and params["tokens_per_step"] > MAX_ACCUM * micro:
        problems.append(f"tokens_per_step={params['tokens_per_step']} is {-(-params['tokens_per_step'] // micro)} "
                        f"micro-batches per optimizer step (batch_tokens {params['batch_tokens']} x {world} processes "
                        f"= {micro} tokens each), more than {MAX_ACCUM}: give at most {MAX_ACCUM * micro} (e.g. "
                        f"{4 * micro}), or 0 for one micro-batch per step")
    local_max = max(8, os.cpu_count() or 1)
    if params["launcher"] == "local" and world > local_max:
        problems.append(f"launcher=local starts nodes x procs_per_node = {world} training processes on this machine "
                        f"({os.cpu_count()} cores), each holding the whole model: use at most {local_max} (e.g. "
                        "nodes=2 procs_per_node=1), or a cluster launcher (trainjob, pytorchjob) for more")
    if params["launcher"] == "trainjob" and not params["training_runtime"]:
        problems.append("training_runtime is empty, but launcher=trainjob needs the (Cluster)TrainingRuntime its "
                        "TrainJob runs on: e.g. training_runtime=torch-distributed")
    if params["serve_adapters"] and params["method"] == "dora":
        # vLLM's own check (vllm/lora/peft_helper.py): "vLLM does not yet support DoRA."
        problems.append("serve_adapters=true: vLLM cannot load DoRA adapters (it refuses use_dora); "
                        "set serve_adapters=false to serve the merged model, or method=lora")
    elif params["serve_adapters"] and params["method"] == "qlora":
        problems.append("serve_adapters=true: a QLoRA adapter was trained against the 4-bit base, and vLLM would "
                        "serve it over the full-precision one; set serve_adapters=false to serve it merged onto "
                        "the de-quantized base (what was trained and evaluated), or method=lora")
    elif params["serve_adapters"] and params["method"] != "lora":
        problems.append("serve_adapters=true serves the LoRA adapter beside its base model, but method="
                        f"{params['method']!r} makes no adapter: set method=lora or serve_adapters=false")
    elif params["serve_adapters"] and params["lora_train_embeddings"]:
        # vLLM: "only supports modules_to_save being either None or ['classifier', 'score']".
        problems.append("serve_adapters=true: vLLM cannot load an adapter that trains the embeddings in full; "
                        "set lora_train_embeddings=false, or serve_adapters=false to serve the merged model")
    problems += cluster_problems(params)
    seen: set[str] = set()
    return [p for p in problems if not (p in seen or seen.add(p))]


def _hidden_size(src: sources.Source) -> int | None:
    """The model's layer width when it is known without a download: the built-in model's, or
    config.json's of a local one (None for the rest, and for a config that model_dir_problems refuses)."""
    if src.kind == "builtin":
        from trainer import builtin_model

        return builtin_model.HIDDEN_SIZE
    try:
        config = json.loads((Path(src.ref) / "config.json").read_text(encoding="utf-8-sig")) \
            if src.kind == "local" else None
    except (OSError, ValueError, RecursionError):
        return None
    config = config if isinstance(config, dict) else {}
    if isinstance(config.get("text_config"), dict):  # a multimodal model's language model
        config = config["text_config"]
    width = next((config[k] for k in ("hidden_size", "n_embd", "d_model") if k in config), None)
    return width if isinstance(width, int) and not isinstance(width, bool) and width > 0 else None


def _gate_problems(params: dict[str, Any], bad: set[str]) -> list[str]:
    """The promotion gate (trainer.evaluate.promotion) and the sweep's pick: fractions of an accuracy."""
    problems = []
    accuracy = params.get("min_fc_accuracy", 0.0)
    if "min_fc_accuracy" not in bad and not 0 <= accuracy <= 1:
        problems.append(f"min_fc_accuracy={accuracy:g} is a fraction of the function-calling accuracy, from 0 to 1: "
                        + (f"write {accuracy / 100:g} for {accuracy:g}%" if accuracy > 1 else "0 asks nothing"))
    gain = params.get("min_gain", DEFAULTS["min_gain"])
    if "min_gain" in bad:
        pass
    elif gain < 0:
        problems.append(f"min_gain must be >= 0, got {gain}: a negative gain would deploy a model worse than the "
                        f"base model; 0 deploys any improvement")
    elif params.get("select_metric", "fc_accuracy") == "fc_accuracy" and gain > 1:  # 10 meant as 10% never deploys
        problems.append(f"min_gain={gain:g} can never be reached: the gain in function-calling accuracy is a "
                        f"fraction of at most 1: write {gain / 100:g} for {gain:g} percentage points")
    return problems


def registry_problems(params: dict[str, Any], found: list[str]) -> list[str]:
    """registry_address asked once, now (one GET), unless it is empty or `found` already refuses it: a registry found
    unreachable only after training loses the run's registration."""
    address = params.get("registry_address") or ""
    if not address or any("registry_address" in p for p in found):
        return []
    from trainer.k8s.registry import reach_problem

    return [p for p in [reach_problem(address)] if p]


def _scored(params: dict[str, Any]) -> int | None:
    """How many eval rows the evaluate step scores (its first eval_max_rows), None when eval_max_rows is refused."""
    n = params.get("eval_max_rows", DEFAULTS["eval_max_rows"])
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def _gate_rows_problems(params: dict[str, Any], eval_rows: list[dict[str, Any]], *gates: str) -> list[str]:
    """The gates among `gates` that are set (min_gain gates on the function-calling accuracy in the finetune
    pipeline, not in a sweep picking by eval_loss) over scored eval rows without a tool call (`_tool_rows_problem`)."""
    asked = [f"{g}={params[g]:g}" for g in gates if isinstance(params.get(g), (int, float)) and params[g] > 0]
    if not asked:
        return []
    return _tool_rows_problem(params, eval_rows, f"{' and '.join(asked)} {'gate' if len(asked) > 1 else 'gates'} on "
                              "the function-calling accuracy", "no tool-call rows", "the tuned model could never pass",
                              f"set {' and '.join(g + '=0' for g in gates)} for chat-only data")


def _tool_rows_problem(params: dict[str, Any], eval_rows: list[dict[str, Any]], claim: str, none: str, outcome: str,
                       fix: str) -> list[str]:
    """`claim` (a gate, select_metric=fc_accuracy) measures tool calls, but the eval rows evaluate scores (the split's
    first eval_max_rows) hold none: every trial or the run would train, then score 0 -> 0 or fail the gate. Where
    later rows hold some, raising eval_max_rows is a fix too."""
    from trainer.evaluate import row_counts

    n = _scored(params)
    if not eval_rows or n is None:
        return []
    counts = row_counts(eval_rows[:n])
    if counts["fc_rows"]:
        return []
    source = str(params.get("dataset_source", "")).strip()
    later = row_counts(eval_rows)["fc_rows"]
    where = (f"the {min(n, len(eval_rows))} eval rows evaluate scores (the first eval_max_rows={n}) of dataset_source "
             f"{source!r} hold" if later else f"the eval split of dataset_source {source!r} has")
    more = f"raise eval_max_rows (the split's {len(eval_rows)} rows hold {later} tool-call rows), or " if later else ""
    return [f"{claim}, but {where} {none} ({counts['text_rows']} text rows), so {outcome}: {more}{fix}"]


BUILTIN_CHECK_ROWS = 100  # of each built-in split: its rows are few kinds, each one well represented


def _template_problems(model_source: str, splits: dict[str, list], found: list[str], max_seq_len: int,
                       revision: str = "", chat_template: str = templates.MODEL,
                       eval_max_rows: int | None = None) -> list[str]:
    """A model's chat template (or the one chat_template names) against a local dataset's rows (a
    second or two for a thousand rows): rows it refuses, the train/serve parity check
    (trainer.parity), and a split with no row short enough for max_seq_len. For the built-in model,
    a local one that passed its checks, or a Hub model whose tokenizer is in the local HF cache
    (nothing is downloaded here); a template in s3:// is checked at the finetune step."""
    from trainer import data

    try:
        model = sources.parse(model_source, "model")
    except UserError:
        return []
    if model.kind == "builtin":  # its tokenizer is built in a second, the weights are not needed
        from trainer import builtin_model

        tokenizer = builtin_model.build_tokenizer()
    elif model.kind == "local" and not any(model.ref in p for p in found):
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(model.ref, local_files_only=True)
        except (OSError, ValueError):  # model_dir_problems names what is wrong with the directory
            return []
    elif model.kind == "hub":
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(model.ref, revision=revision or None, local_files_only=True)
        except (OSError, ValueError):  # not cached (or not a model): delivery checks it after downloading
            return []
        if not tokenizer.chat_template:
            return []  # delivery refuses the model with its own message
    else:
        return []
    if not isinstance(chat_template, str) or templates.spec_problems(chat_template) \
            or chat_template.strip().startswith("s3://"):
        return []  # reported on its own, or read from the bucket at the finetune step
    templates.apply_to_tokenizer(tokenizer, chat_template)
    if not tokenizer.chat_template:
        return []  # delivery refuses the model with its own message
    where = f"dataset_source with model {model_source.strip()}"
    eos = []
    if model.kind == "local" and (gen := os.path.join(model.ref, "generation_config.json")) and os.path.isfile(gen):
        with open(gen, encoding="utf-8") as f:
            ids = json.load(f).get("eos_token_id")
        eos = ids if isinstance(ids, list) else [ids] if isinstance(ids, int) else []
    named = chat_template.strip() if chat_template.strip() != templates.MODEL else ""
    problems = parity.template_problems(splits["train"] + splits["eval"], tokenizer, where, eos, named)
    if max_seq_len > 0:  # else TrainConfig says so
        context = sources.model_max_length(model_source)
        problems += [f"{where}: {p}" for p in data.length_problems(splits, tokenizer, max_seq_len, context,
                                                                   eval_max_rows)]
    return problems


def cluster_problems(params: dict[str, Any]) -> list[str]:
    """Launcher and deploy backend names, and, when either runs on Kubernetes, every cluster
    setting against the API server's rules (trainer.k8s.rules, through ClusterSpec)."""
    from trainer import launch
    from trainer.k8s import rules
    from trainer.k8s.podspec import CLEANUP

    problems = []
    cluster_launchers = getattr(launch, "CLUSTER_LAUNCHERS", ("kubernetes",))
    if params["launcher"] not in launch.LAUNCHERS:
        problems.append(f"launcher must be one of {launch.LAUNCHERS}, got {params['launcher']!r}")
    if params["deploy_backend"] not in DEPLOY_BACKENDS:
        problems.append(f"deploy_backend must be 'local', 'kubernetes' (vLLM Deployment), 'kserve' "
                        f"(InferenceService) or 'llmisvc' (LLMInferenceService), got {params['deploy_backend']!r}")
    on_cluster = params["deploy_backend"] in DEPLOY_BACKENDS[1:]
    if params["cleanup"] not in CLEANUP:  # also for a local run, so that it and submit accept the same values
        problems.append(f"cleanup must be one of {CLEANUP}, got {params['cleanup']!r}")
    if params["launcher"] in cluster_launchers or on_cluster:
        problems += launch.cluster_from_params(params).kubernetes_problems()  # topology is checked above
    problems += rules.non_negative_int(params["eval_gpus"], "eval_gpus")
    if params["eval_gpus"]:
        problems += rules.resource_name(params["eval_accelerator_type"], "eval_accelerator_type")
    problems += rules.node_selector(params["eval_node_selector"], "eval_node_selector")
    problems += rules.tolerations(params["eval_tolerations"], "eval_tolerations")
    address = params["registry_address"]
    if address and (not isinstance(address, str) or (bad := settings.url_problem(address))):
        problems.append(f"registry_address={address!r} must be an http:// or https:// URL"
                        f"{f' ({bad})' if isinstance(address, str) else ''}, e.g. "
                        "http://model-registry-service.kubeflow.svc.cluster.local:8080 (empty skips registration)")
    image = params["vllm_image"]  # one with credentials is refused by type_problems and reset to the default by now
    if image and (not isinstance(image, str) or ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")):
        problems.append(f"vllm_image={image!r} must be pinned by tag, e.g. vllm/vllm-openai:v0.32.0 (not :latest)")
    if on_cluster and not served_name_problems(params["served_model_name"]):  # else reported once, above
        # The objects' names: `<name>-base` beside adapters; KServe's predictor host adds the namespace.
        namespace = params["namespace"] if not rules.dns1123_label(params["namespace"], "namespace") else ""
        problems += rules.deploy_name(params["served_model_name"], params["deploy_backend"], namespace,
                                      params["serve_adapters"] is True or params["deploy_all_trials"] is True)
    return problems


DEPLOY_BACKENDS = deploy.BACKENDS  # all but the first run on the cluster


def on_cluster_problems(params: dict[str, Any]) -> list[str]:
    """What a run on this machine accepts but a run on a cluster cannot use (submit, and the
    validate-params step when it runs in a cluster pod)."""
    from trainer.k8s import rules

    problems = []
    for what in ("model", "dataset"):
        source = params.get(f"{what}_source", DEFAULTS[f"{what}_source"])
        if isinstance(source, str) and source.strip() and sources.looks_local(source):  # empty: said on its own
            problems.append(f"{what}_source {source!r} is a path on this machine, which the cluster cannot read: "
                            f"deliver it first (python -m trainer deliver-{what} ... with S3_ENDPOINT at the "
                            "cluster's MinIO) and pass the printed s3:// URI")
    template = params.get("chat_template", templates.MODEL)
    if isinstance(template, str) and templates.is_local(template) and not templates.spec_problems(template, False):
        problems.append(f"chat_template {template!r} is a file on this machine, which the cluster cannot read: upload "
                        "it to the run's bucket (mc cp FILE minio/BUCKET/templates/) and pass its s3:// URI")
    if params.get("eval_engine") == "vllm" and (not params.get("eval_gpus") or params.get(
            "eval_accelerator_type", DEFAULTS["eval_accelerator_type"]) != "nvidia.com/gpu"):
        problems.append("eval_engine=vllm serves the models inside the evaluate pod with the CUDA vLLM of its image "
                        "(docker/Dockerfile.eval), which needs an NVIDIA GPU: set eval_gpus=1 (eval_accelerator_type "
                        "nvidia.com/gpu), or use eval_engine=auto or hf (HF generate, calls read with the serving parser)")
    if params.get("launcher", DEFAULTS["launcher"]) == "local":
        problems.append("launcher=local would train inside one pipeline pod; use launcher=trainjob (Kubeflow Trainer v2) "
                        "or launcher=pytorchjob (Training Operator v1) on a cluster")
    if params.get("deploy_backend", DEFAULTS["deploy_backend"]) == "local":  # the default, for run_local
        problems.append("deploy_backend=local serves inside the pipeline pod, whose image (docker/Dockerfile) has no "
                        "vLLM, so it would fail after training; on a cluster use deploy_backend=kubernetes (a vLLM "
                        "Deployment and Service), kserve (an InferenceService) or llmisvc (an LLMInferenceService)")
    if params.get("keep_serving") is True:  # the local server would end with its pod
        problems.append("keep_serving=true keeps a server on the machine of a local run only; on a cluster use "
                        "deploy_backend=kubernetes, kserve or llmisvc for a server that stays up")
    # In a pod (the validate-params step) the run's own namespace is known: see run_namespace_problems.
    return problems + run_namespace_problems(params, rules.pod_namespace())


def run_namespace_problems(params: dict[str, Any], run_namespace: str) -> list[str]:
    """KServe's predictor host name in `run_namespace` ('' when unknown: no problem), for
    namespace="": such a deploy goes into the run's own namespace (the profile's), which the
    validate-params pod and a multi-user submit know, but pipeline_problems does not."""
    from trainer.k8s import rules

    name = params.get("served_model_name", DEFAULTS["served_model_name"])
    side_by_side = params.get("serve_adapters") is True or params.get("deploy_all_trials") is True
    if (not run_namespace or params.get("deploy_backend") != "kserve" or params.get("namespace")
            or rules.deploy_name(name, "kserve", "", side_by_side)):  # the last: cluster_problems said it
        return []
    return rules.deploy_name(name, "kserve", run_namespace, side_by_side)


TRIAL_KEYS = {"lora_r": int, "lora_alpha": int, "learning_rate": float}
TRIAL_EXAMPLE = '{"lora_r": 16, "lora_alpha": 32, "learning_rate": 0.0002}'
SWEEP_ONLY = ("trials",)


def sweep_problems(params: dict[str, Any], check_local_files: bool = True) -> list[str]:
    """Sweep parameters: the shared ones as for one run, each trial's own values, the selection."""
    from trainer.sweep import SELECT

    trials = params.get("trials", DEFAULTS["trials"])
    shared = {k: v for k, v in params.items() if k not in SWEEP_ONLY}
    splits: dict[str, list] = {}
    problems = pipeline_problems({**shared, "method": "lora"}, check_local_files, splits_out=splits, gate=False)
    if not isinstance(trials, list) or not trials:
        problems.append(f"trials must be a non-empty JSON list of objects like {TRIAL_EXAMPLE}, got {trials!r}")
        trials = []
    for i, t in enumerate(trials):
        if not isinstance(t, dict) or set(t) != set(TRIAL_KEYS):
            problems.append(f"trials[{i}] must have exactly the keys {sorted(TRIAL_KEYS)}, like {TRIAL_EXAMPLE}; "
                            f"got {t!r}")
            continue
        typed = [value_problem(f"trials[{i}].{k}", t[k], kind, example=_TRAIN_DEFAULTS[k], in_json=True)
                 for k, kind in TRIAL_KEYS.items()]
        if any(typed):
            problems += [p for p in typed if p]
            continue
        t = {k: int(v) if TRIAL_KEYS[k] is int else v for k, v in t.items()}  # 16.0 from KFP -> 16
        same = next((j for j, u in enumerate(trials[:i]) if isinstance(u, dict) and u == t), None)
        if same is not None:  # the same run twice: its compute is wasted and the two tie
            problems.append(f"trials[{i}] repeats trials[{same}] ({json.dumps(t)}): drop it or change a value")
        # Only what this trial's own values add (the shared problems are reported once above).
        problems += [f"trials[{i}]: {p}" for p in pipeline_problems({**shared, **t, "method": "lora"},
                                                                    check_local_files=False, gate=False)
                     if p not in problems]
    if params.get("deploy_all_trials") is True and shared.get("lora_train_embeddings",
                                                               _TRAIN_DEFAULTS["lora_train_embeddings"]) is True:
        # As serve_adapters in pipeline_problems: found after every trial trained, by deploy-trials, without this.
        problems.append("deploy_all_trials=true serves every trial's adapter beside the base model, and vLLM cannot "
                        "load an adapter that trains the embeddings in full: set lora_train_embeddings=false, or "
                        "deploy_all_trials=false to deploy the winner merged")
    select = params.get("select_metric", DEFAULTS["select_metric"])
    if select not in SELECT:
        problems.append(f"select_metric must be one of {sorted(SELECT)}, got {select!r}")
    elif select == "fc_accuracy":  # every trial would train, then score 0 -> 0 and nothing deploys
        problems += _tool_rows_problem({**DEFAULTS, **shared}, splits.get("eval") or [],
                                       "select_metric=fc_accuracy measures tool calls", "none",
                                       "no trial could be picked or deployed", "set select_metric=eval_loss")
    problems += _gate_rows_problems({**DEFAULTS, **shared}, splits.get("eval") or [], "min_fc_accuracy")
    seen: set[str] = set()
    return [p for p in problems if not (p in seen or seen.add(p))]
