"""The finetune pipeline's parameters together: sources, the model's context, the data against the
template and the gates, training and serving settings, then the cluster's (validate.cluster)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from trainer.chat.types import Row
from trainer.data import builtin_data
from trainer.models import builtin_model, gguf, model_tree
from trainer import data, parity
from trainer.config import sources
from trainer.chat import templates, usertext
from trainer.data import bfcl, masking, name_masking, quiet_conversions
from trainer.chat.turns import split_turns
from trainer.evaluate import ENGINE_CHOICES, gate, row_counts
from trainer.evaluate.scales import parse_scales
from trainer.store.registry import reach_problem
from trainer.data.batching import check_rows
from trainer.config.training import ADAPTER_METHODS, MAX_ACCUM, TrainConfig
from trainer.core.errors import UserError
from trainer.core import metrics as metric_names
from trainer.core import tracking
from trainer.serving.args import served_name_problems
from trainer.validate.cluster import cluster_problems
from trainer.validate.values import TRAIN_DEFAULTS, TRAIN_PARAMS, DEFAULTS, default, type_problems


_KIND_WORDS = {
    "builtin": "built in",
    "local": "a path on this machine",
    "s3": "a delivered s3:// tree",
    "mix": "a mix of sources (each Hub part is read at its main branch)",
}


def pipeline_problems(
    params: dict[str, Any], check_local_files: bool = True, splits_out: dict | None = None, gate: bool = True
) -> list[str]:
    """Every problem in a set of finetune-pipeline parameters (missing optional keys take defaults).

    `check_local_files` reads local dataset files fully (run_local); submit turns it off
    because a cluster cannot read this machine's files anyway. `splits_out` receives the local
    dataset's rows read on the way ({"train": [...], "eval": [...]}), for the sweep's own checks. `gate`: the
    finetune pipeline's promotion gate reads min_gain as fc_ast_accuracy points (the sweep's, as its
    select_metric's: sweep_problems checks it).
    """
    with _one_read_of_a_gguf(params.get("model_source")):
        return _pipeline_problems(params, check_local_files, splits_out, gate)


def _one_read_of_a_gguf(model_source: Any):
    """A local GGUF model is parsed once for all of validation (its metadata, its tokenizer: ~2.5 s each for
    SmolLM2's), and let go after it."""
    try:
        src = sources.parse(model_source, "model") if isinstance(model_source, str) else None
    except UserError:
        src = None
    if src and src.kind == "local" and sources.is_gguf(src.ref) and Path(src.ref).is_file():
        return gguf.read_once(src.ref)
    return contextlib.nullcontext()


def _pipeline_problems(
    params: dict[str, Any], check_local_files: bool, splits_out: dict | None, gate: bool
) -> list[str]:
    params = {**TRAIN_PARAMS, **DEFAULTS, **params}
    problems, bad = type_problems(params)
    if tracked := tracking.uri_problem(os.environ.get(tracking.URI, "")):  # the steps' environment: theirs too
        problems.append(tracked)
    params.update({name: default(name) for name in bad if name in TRAIN_DEFAULTS or name in DEFAULTS})
    context = None  # the model's, when max_seq_len is over it: the other checks then take it as max_seq_len
    for what in ("model", "dataset"):
        try:
            src = sources.parse(params[f"{what}_source"], what)
        except UserError as err:
            problems.append(str(err))
            continue
        problems += _revision_problems(what, src, params)
        if what == "model":
            found, context = _model_problems(src, params)
            problems += found
        else:
            problems += _dataset_problems(src, params, problems, check_local_files, splits_out, gate)
    if "chat_template" not in bad:
        problems += templates.spec_problems(params["chat_template"], check_local_files)
    problems += _gate_problems(params, bad)
    problems += _settings_problems(params, context)
    if check_local_files:
        problems += _local_bfcl_problems(params)
    problems += _serving_problems(params)
    problems += _scale_problems(params)
    problems += cluster_problems(params)
    return list(dict.fromkeys(problems))  # each problem once, in the order found


def _revision_problems(what: str, src: sources.Source, params: dict[str, Any]) -> list[str]:
    """A revision given where it would be ignored without a word, or one that names nothing."""
    problems = []
    revision = params[f"{what}_revision"]
    if revision and src.kind != "hub":  # it would be ignored without a word
        problems.append(
            f"{what}_revision={revision!r} applies to Hub ids only, but {what}_source "
            f"{params[f'{what}_source'].strip()!r} is {_KIND_WORDS[src.kind]}: leave {what}_revision "
            "empty"
        )
    elif revision and (revision.split() != [revision] or ".." in revision):
        problems.append(
            f"{what}_revision={revision!r} is not a branch, tag or commit name (no spaces or '..'): "
            "e.g. main, v1.0 or a commit hash"
        )
    return problems


def _model_problems(src: sources.Source, params: dict[str, Any]) -> tuple[list[str], int | None]:
    """The model source against max_seq_len and lora_r, and a local directory checked fully; with the
    model's context when max_seq_len is over it (the later checks take it as max_seq_len)."""
    problems, context = [], None
    try:
        limit = model_tree.model_max_length(params["model_source"])
    except UserError as err:
        problems.append(str(err))
        limit = None
    if limit and params["max_seq_len"] > limit:
        problems.append(
            f"max_seq_len={params['max_seq_len']} exceeds the model's context length {limit}; "
            f"set max_seq_len <= {limit}"
        )
        context = limit
    if src.kind == "local":  # a model directory on this machine: checked fully now
        problems += model_tree.model_dir_problems(
            src.ref, own_template=templates.resolves_to_model(params.get("chat_template", templates.MODEL))
        )
    width = _hidden_size(src)
    if params["method"] in ADAPTER_METHODS and width and params["lora_r"] > width:
        problems.append(
            f"lora_r={params['lora_r']} is above the hidden size of model_source "
            f"{params['model_source'].strip()!r} ({width}): a rank above the layer width adds "
            f"memory and no capacity (an update is at most full rank); use e.g. "
            f"lora_r={min(16, width)}, at most {width}"
        )
    return problems, context


def _dataset_problems(
    src: sources.Source,
    params: dict[str, Any],
    found: list[str],
    check_local_files: bool,
    splits_out: dict | None,
    gate: bool,
) -> list[str]:
    """A local dataset read and checked fully now (the template, the gates, the trainer's row rule), and the
    built-in rows with another model, template or a short max_seq_len; Hub data is checked on delivery.
    `found`: the problems so far, which the template check does not repeat."""
    problems: list[str] = []
    if (src.kind == "local" or src.kind == "mix" and _on_this_machine(src)) and check_local_files:
        try:  # local files are cheap to check fully now; Hub data is checked on delivery
            with quiet_conversions():  # deliver-dataset says what it converts, once
                splits = data.load(src, "", params["eval_fraction"], params["seed"])
        except UserError as err:
            problems.append(str(err))
        else:
            if splits_out is not None:
                splits_out.update(splits)
            problems += _read_rows_template_problems(params, splits, [*found, *problems])
            if gate:
                problems += gate_rows_problems(params, splits["eval"], "min_fc_accuracy", "min_gain")
            problems += _bfcl_contamination_problems(params, splits["train"])
            if refused := masking.data_problem(
                splits, params["irrelevance_share"], f"dataset_source {params['dataset_source'].strip()!r}"
            ) or _no_copies_problem(params, splits):
                problems.append(refused)
            if renaming := name_masking.data_problem(
                splits, params["name_masking"], f"dataset_source {params['dataset_source'].strip()!r}"
            ):
                problems.append(renaming)
            try:  # the trainer's own rule, now instead of after delivery
                check_rows(
                    len(splits["train"]),
                    params["batch_size"],
                    params["nodes"] * params["procs_per_node"],
                    params["batch_tokens"],
                )
            except UserError as err:
                problems.append(f"dataset_source {params['dataset_source'].strip()!r}: {err}")
    elif src.kind == "mix" and check_local_files:  # beside an s3:// or Hub part: each local part read now
        for name in sources.dataset_parts(src.ref):
            part = sources.parse(name, "dataset")
            if part.kind != "local":
                continue  # a Hub or s3:// part: read by deliver-dataset; a built-in one is known good
            try:
                with quiet_conversions():
                    splits = data.load(part, "", params["eval_fraction"], params["seed"])
            except UserError as err:
                problems.append(str(err))  # it names the part's file, as for a lone local dataset
                continue
            problems += _read_rows_template_problems(params, splits, [*found, *problems])
            problems += _bfcl_contamination_problems(params, splits["train"])
    elif (
        src.kind == "builtin"
        and check_local_files
        and (
            params["chat_template"].strip() != templates.MODEL
            or not params["model_source"].strip().startswith("builtin:")
            or 0 < params["max_seq_len"] < TRAIN_DEFAULTS["max_seq_len"]
        )
    ):
        # the built-in rows with another model or template, or a max_seq_len under the default the demo runs
        # at (max_seq_len=1 would skip every row): checked now, not after delivery in finetune
        splits = {name: rows[:BUILTIN_CHECK_ROWS] for name, rows in builtin_data.dataset(src.ref).items()}
        problems += _template_problems(
            params["model_source"],
            splits,
            [*found, *problems],
            params["max_seq_len"],
            params["model_revision"],
            params["chat_template"],
            irrelevance_reply=params["irrelevance_reply"],
        )
    return problems


def _read_rows_template_problems(params: dict[str, Any], splits: dict[str, list[Row]], found: list[str]) -> list[str]:
    """A dataset read here (a local file, or a local part of a mix): its template check against the model, with the
    rows the evaluation scores (the problems `found` so far not repeated)."""
    return _template_problems(
        params["model_source"],
        splits,
        found,
        params["max_seq_len"],
        params["model_revision"],
        params["chat_template"],
        _scored(params),
        params["irrelevance_reply"],
    )


def _no_copies_problem(params: dict[str, Any], splits: dict[str, list]) -> str | None:
    """An irrelevance_share so small that masking makes no row (masking.copies_for rounds each split's count to 0):
    refused, not warned, as the share was set to add rows and would add none, which no later line would say; the
    fix is the least share that makes one."""
    share = params["irrelevance_share"]
    if (
        masking.share_problem(share)
        or share <= 0
        or any(masking.copies_for(len(rows), share) for rows in splits.values())
    ):
        return None
    largest = max(len(rows) for rows in splits.values())
    least = next((k / 1000 for k in range(1, 501) if masking.copies_for(largest, k / 1000)), masking.SHARE_MAX)
    sizes = " and ".join(f"{len(rows)} {name}" for name, rows in splits.items())
    return (
        f"irrelevance_share={share:g} makes no irrelevance row from dataset_source "
        f"{params['dataset_source'].strip()!r}'s {sizes} rows (each split's count rounds to 0): give at least "
        f"irrelevance_share={least:g}, or 0 for none"
    )


def pipeline_warnings(params: dict[str, Any]) -> list[str]:
    """Settings that would do nothing, said once at validate (run_local and the validate-params step print each as a
    WARNING line) and not refused: each is harmless, and often left set while another is turned off for one run
    (irrelevance_share=0 to compare, eval_suites=heldout for a quick one). A bfcl_source without the bfcl suite is
    refused instead (_suite_problems): a path or an upload given is meant to be read."""
    warnings = []
    share, reply = params.get("irrelevance_share", 0), params.get("irrelevance_reply", masking.IRRELEVANCE_REPLY)
    distractors = params.get("irrelevance_distractors", 0)
    if isinstance(share, (int, float)) and not share:
        unused = (
            [f"irrelevance_reply={reply!r}"] if isinstance(reply, str) and reply != masking.IRRELEVANCE_REPLY else []
        ) + (
            [f"irrelevance_distractors={distractors:g}"]
            if isinstance(distractors, (int, float)) and distractors > 0
            else []
        )
        if unused:
            warnings.append(
                f"{' and '.join(unused)} {'apply' if len(unused) > 1 else 'applies'} to the rows function masking makes, but irrelevance_share "
                "is 0, so none are made: set irrelevance_share (e.g. 0.1), or leave "
                f"{'them' if len(unused) > 1 else 'it'} at the default"
            )
    rows = params.get("bfcl_rows", default("bfcl_rows"))
    try:
        suites = bfcl.parse_suites(params["eval_suites"]) if "eval_suites" in params else ("bfcl",)
    except UserError:  # _suite_problems says so
        suites = ("bfcl",)
    if "bfcl" not in suites and isinstance(rows, int) and rows != default("bfcl_rows"):
        warnings.append(
            f"bfcl_rows={rows} applies to the bfcl suite, but eval_suites={params['eval_suites']!r} does "
            "not score it: add it (eval_suites=heldout,bfcl), or leave bfcl_rows at the default"
        )
    try:
        limits = gate.parse_drops(params.get("max_drop_by_category", ""))
        scoring = bfcl.parse_suites(params.get("eval_suites", default("eval_suites")))
    except UserError:  # _suite_problems says so
        limits, scoring = {}, ()
    scored = {metric_names.SUITE_PREFIX[s] for s in scoring}
    if unscored := [k for k in limits if k.split("_", 1)[0] not in scored]:
        warnings.append(
            f"max_drop_by_category names {', '.join(unscored)}, but eval_suites="
            f"{params.get('eval_suites', default('eval_suites'))!r} does not score "
            f"{'them' if len(unscored) > 1 else 'it'}: add the suite, or leave {'them' if len(unscored) > 1 else 'it'} out"
        )
    return warnings


def _on_this_machine(src: sources.Source) -> bool:
    """A mix whose parts are all local or built in: read and checked here like a local file."""
    return all(sources.parse(name, "dataset").kind in ("local", "builtin") for name in sources.dataset_parts(src.ref))


def _settings_problems(params: dict[str, Any], context: int | None) -> list[str]:
    """The evaluation engine, training, launch and serving counts, each against its range."""
    problems: list[str] = []
    if params["eval_engine"] not in ENGINE_CHOICES:
        problems.append(
            f"eval_engine must be one of {', '.join(ENGINE_CHOICES)}, got {params['eval_engine']!r}: auto picks "
            "vllm where vLLM is installed"
        )
    # With max_seq_len over the model's context, batch_tokens is checked against the context (what max_seq_len
    # must become), not against the value just refused: "set batch_tokens >= 100000000" would contradict it.
    problems += TrainConfig.from_params(
        {**params, **({"max_seq_len": context} if context else {})},
        model_uri="s3://check/model",
        dataset_uri="s3://check/data",
        output_prefix="runs/check",
    ).problems()
    if params["nodes"] < 1:
        problems.append(f"nodes must be >= 1, got {params['nodes']}")
    if params["procs_per_node"] < 1:
        problems.append(f"procs_per_node must be >= 1, got {params['procs_per_node']}")
    if not 0 < params["eval_fraction"] < 1:
        problems.append(f"eval_fraction must be between 0 and 1, got {params['eval_fraction']}")
    if share := masking.share_problem(params["irrelevance_share"]):
        problems.append(share)
    if reply := masking.reply_problem(params["irrelevance_reply"]):
        problems.append(reply)
    elif _is_builtin(params["model_source"]):  # its special tokens are known without building its tokenizer
        problems += _reply_token_problems(
            params["irrelevance_reply"], builtin_model.SPECIAL_TOKENS, params["model_source"]
        )
    if bad := masking.distractors_problem(params["irrelevance_distractors"]):
        problems.append(bad)
    if bad := name_masking.share_problem(params["name_masking"]):
        problems.append(bad)
    if params["max_restarts"] < 0:
        problems.append(f"max_restarts must be >= 0, got {params['max_restarts']}")
    if params["eval_max_rows"] < 1:
        problems.append(f"eval_max_rows must be >= 1, got {params['eval_max_rows']}")
    problems += _suite_problems(params)
    if params["serve_gpus"] < 0:
        problems.append(f"serve_gpus must be >= 0 (0 serves on CPU), got {params['serve_gpus']}")
    problems += served_name_problems(params["served_model_name"])
    world = params["nodes"] * params["procs_per_node"]
    micro = params["batch_tokens"] * world  # tokens one micro-batch on every process takes (0: data-dependent)
    if world > 0 and micro > 0 and 0 < params["tokens_per_step"] < micro:
        problems.append(
            f"tokens_per_step={params['tokens_per_step']} is less than one micro-batch on every process "
            f"(batch_tokens {params['batch_tokens']} x {world} processes = {micro}), so a step takes "
            f"that many anyway: give a multiple of {micro} (e.g. {4 * micro}), or 0 for one micro-batch "
            "per step"
        )
    elif world > 0 and micro > 0 and params["tokens_per_step"] > MAX_ACCUM * micro:
        problems.append(
            f"tokens_per_step={params['tokens_per_step']} is {-(-params['tokens_per_step'] // micro)} "
            f"micro-batches per optimizer step (batch_tokens {params['batch_tokens']} x {world} processes "
            f"= {micro} tokens each), more than {MAX_ACCUM}: give at most {MAX_ACCUM * micro} (e.g. "
            f"{4 * micro}), or 0 for one micro-batch per step"
        )
    local_max = max(8, os.cpu_count() or 1)
    if params["launcher"] == "local" and world > local_max:
        problems.append(
            f"launcher=local starts nodes x procs_per_node = {world} training processes on this machine "
            f"({os.cpu_count()} cores), each holding the whole model: use at most {local_max} (e.g. "
            "nodes=2 procs_per_node=1), or a cluster launcher (trainjob, pytorchjob) for more"
        )
    if params["launcher"] == "trainjob" and not params["training_runtime"]:
        problems.append(
            "training_runtime is empty, but launcher=trainjob needs the (Cluster)TrainingRuntime its "
            "TrainJob runs on: e.g. training_runtime=torch-distributed"
        )
    return problems


def _suite_problems(params: dict[str, Any]) -> list[str]:
    """eval_suites, bfcl_rows, bfcl_source and max_category_drop (finetune only: absent from the sweep's)."""
    problems: list[str] = []
    drop = params.get("max_category_drop", 1.0)
    if not 0 <= drop <= 1:
        problems.append(
            f"max_category_drop={drop:g} is a fraction of accuracy, as min_gain and min_fc_accuracy are, "
            "from 0 (no category may fall) to 1.0 (off): a fraction: 0.1 is 10 points"
            + (f", so give max_category_drop={drop / 100:g}" if 1 < drop <= 100 else "")
        )
    try:
        gate.parse_drops(params.get("max_drop_by_category", ""))
    except UserError as err:
        problems.append(str(err))
    if "eval_suites" not in params:
        return problems
    try:
        suites = bfcl.parse_suites(params["eval_suites"])
    except UserError as err:
        problems.append(str(err))
        suites = ()
    if params.get("bfcl_rows", 0) < 0:
        problems.append(f"bfcl_rows must be >= 0 (rows per BFCL category; 0 for all), got {params['bfcl_rows']}")
    if "bfcl" in suites and (problem := bfcl.source_problem(params.get("bfcl_source", ""))):
        problems.append(problem)
    elif "bfcl" not in suites and suites and (params.get("bfcl_source") or "").strip():
        problems.append(
            f"bfcl_source is set but eval_suites={params['eval_suites']!r} does not score bfcl: add it "
            "(eval_suites=heldout,bfcl), or leave bfcl_source empty"
        )
    return problems


def _local_bfcl_problems(params: dict[str, Any]) -> list[str]:
    """A local bfcl_source read fully now, whatever the dataset (deliver-bfcl would refuse a fake wheel or an
    empty folder only after the dataset and the model were delivered): a wheel holding bfcl_eval/data's files,
    or a folder holding them."""
    source = (params.get("bfcl_source") or "").strip()
    try:
        suites = bfcl.parse_suites(params.get("eval_suites", "heldout"))
    except UserError:  # _suite_problems says so
        return []
    if "bfcl" not in suites or not source or source.startswith("s3://") or bfcl.source_problem(source):
        return []  # the value's own problems: _suite_problems
    try:
        with tempfile.TemporaryDirectory(prefix="bfcl-check-") as tmp:
            bfcl.extract(Path(source.removeprefix("file://")).expanduser(), Path(tmp) / "tree")
    except UserError as err:
        return [str(err)]
    return []


def _bfcl_contamination_problems(params: dict[str, Any], train_rows: list[Row]) -> list[str]:
    """A local dataset's training rows against BFCL's questions now, before anything is delivered, where BFCL's
    data is at hand: a local bfcl_source, or the pinned wheel (one `pip download`, ~2 MB). An s3:// source is
    checked by the deliver-bfcl step, still before training."""
    source = (params.get("bfcl_source") or "").strip()
    try:
        suites = bfcl.parse_suites(params.get("eval_suites", "heldout"))
    except UserError:  # _suite_problems says so
        return []
    if "bfcl" not in suites or source.startswith("s3://") or bfcl.source_problem(source):
        return []
    try:
        with tempfile.TemporaryDirectory(prefix="bfcl-check-") as tmp:
            tree = (  # _local_bfcl_problems reads a local source's every category: not twice
                bfcl.extract(Path(source.removeprefix("file://")).expanduser(), Path(tmp) / "tree", check=False)
                if source
                else bfcl.fetched(Path(tmp) / "tree")
            )
            problem = bfcl.contamination(train_rows, tree, origins=data.row_origins(params["dataset_source"]))
    except UserError as err:
        return [str(err)]
    return [f"dataset_source {params['dataset_source'].strip()!r}: {problem}"] if problem else []


def _serving_problems(params: dict[str, Any]) -> list[str]:
    """serve_adapters against what vLLM can load beside its base."""
    problems: list[str] = []
    if params["serve_adapters"] and params["method"] == "dora":
        # vLLM's own check (vllm/lora/peft_helper.py): "vLLM does not yet support DoRA."
        problems.append(
            "serve_adapters=true: vLLM cannot load DoRA adapters (it refuses use_dora); "
            "set serve_adapters=false to serve the merged model, or method=lora"
        )
    elif params["serve_adapters"] and params["method"] == "qlora":
        problems.append(
            "serve_adapters=true: a QLoRA adapter was trained against the 4-bit base, and vLLM would "
            "serve it over the full-precision one; set serve_adapters=false to serve it merged onto "
            "the de-quantized base (what was trained and evaluated), or method=lora"
        )
    elif params["serve_adapters"] and params["method"] != "lora":
        problems.append(
            "serve_adapters=true serves the LoRA adapter beside its base model, but method="
            f"{params['method']!r} makes no adapter: set method=lora or serve_adapters=false"
        )
    elif params["serve_adapters"] and params["lora_train_embeddings"]:
        # vLLM: "only supports modules_to_save being either None or ['classifier', 'score']".
        problems.append(
            "serve_adapters=true: vLLM cannot load an adapter that trains the embeddings in full; "
            "set lora_train_embeddings=false, or serve_adapters=false to serve the merged model"
        )
    return problems


def _scale_problems(params: dict[str, Any]) -> list[str]:
    """merge_scales: its text, and a scale other than 1 only where the tuned output is a LoRA update that scales
    (trainer.models.merge.scale_problem says the same of the adapter the evaluate step gets)."""
    try:
        scales = parse_scales(params.get("merge_scales", "1.0"))
    except UserError as err:
        return [str(err)]
    if all(s == 1 for s in scales):
        return []
    given = f"merge_scales={params['merge_scales'].strip()}"
    method = params.get("method", "lora")
    if method not in ("lora", "qlora"):
        return [
            f"{given} scales a LoRA adapter's update, but method={method!r} "
            + ("trains the weights' magnitudes apart, which no scale applies to" if method == "dora" else "makes none")
            + ": set method=lora, or merge_scales=1.0"
        ]
    problems = []
    if params.get("lora_train_embeddings"):
        problems.append(
            f"{given} scales the LoRA update, but lora_train_embeddings=true trains whole embedding matrices beside "
            "it, which no scale applies to: set lora_train_embeddings=false, or merge_scales=1.0"
        )
    if params.get("serve_adapters"):
        problems.append(
            f"{given}: serve_adapters=true serves the adapter as trained beside its base, not at the scale the gate "
            "chooses: set serve_adapters=false to serve the merged model, or merge_scales=1.0"
        )
    return problems


def _hidden_size(src: sources.Source) -> int | None:
    """The model's layer width when it is known without a download: the built-in model's, or
    config.json's of a local one (None for the rest, and for a config that model_dir_problems refuses)."""
    if src.kind == "builtin":
        return builtin_model.HIDDEN_SIZE
    try:
        config = (
            json.loads((Path(src.ref) / "config.json").read_text(encoding="utf-8-sig")) if src.kind == "local" else None
        )
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
        problems.append(
            f"min_fc_accuracy={accuracy:g} is a fraction of the function-calling accuracy, from 0 to 1: "
            + (f"write {accuracy / 100:g} for {accuracy:g}%" if accuracy > 1 else "0 asks nothing")
        )
    gain = params.get("min_gain", DEFAULTS["min_gain"])
    if "min_gain" in bad:
        pass
    elif gain < 0:
        problems.append(
            f"min_gain must be >= 0, got {gain}: a negative gain would deploy a model worse than the "
            f"base model; 0 deploys any improvement"
        )
    elif (
        params.get("select_metric", DEFAULTS["select_metric"]) != "eval_loss" and gain > 1
    ):  # 10 meant as 10% never deploys
        problems.append(
            f"min_gain={gain:g} can never be reached: the gain in function-calling accuracy is a "
            f"fraction of at most 1: write {gain / 100:g} for {gain:g} percentage points"
        )
    return problems


def registry_problems(params: dict[str, Any], found: list[str]) -> list[str]:
    """registry_address asked once, now (one GET), unless it is empty or `found` already refuses it: a registry found
    unreachable only after training loses the run's registration."""
    address = params.get("registry_address") or ""
    if not address or any("registry_address" in p for p in found):
        return []
    return [p for p in [reach_problem(address)] if p]


def _scored(params: dict[str, Any]) -> int | None:
    """How many eval rows the evaluate step scores (its first eval_max_rows), None when eval_max_rows is refused."""
    n = params.get("eval_max_rows", DEFAULTS["eval_max_rows"])
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def gate_rows_problems(params: dict[str, Any], eval_rows: list[Row], *gates: str) -> list[str]:
    """The gates among `gates` that are set (min_gain gates on the function-calling accuracy in the finetune
    pipeline, not in a sweep picking by eval_loss) over scored eval rows without a tool call (`tool_rows_problem`)."""
    asked = [f"{g}={params[g]:g}" for g in gates if isinstance(params.get(g), (int, float)) and params[g] > 0]
    if not asked:
        return []
    return tool_rows_problem(
        params,
        eval_rows,
        f"{' and '.join(asked)} {'gate' if len(asked) > 1 else 'gates'} on the function-calling accuracy",
        "no tool-call rows",
        "the tuned model could never pass",
        f"set {' and '.join(g + '=0' for g in gates)} for chat-only data",
    )


def tool_rows_problem(
    params: dict[str, Any], eval_rows: list[Row], claim: str, none: str, outcome: str, fix: str
) -> list[str]:
    """`claim` (a gate, select_metric=fc_accuracy) measures tool calls, but the eval rows evaluate scores (the split's
    first eval_max_rows) hold none: every trial or the run would train, then score 0 -> 0 or fail the gate. Where
    later rows hold some, raising eval_max_rows is a fix too."""
    n = _scored(params)
    if not eval_rows or n is None:
        return []
    # evaluate asks every assistant turn: a glaive row's call counts though its last turn is text
    counts = row_counts(split_turns(eval_rows[:n]))
    if counts["fc_rows"]:
        return []
    source = str(params.get("dataset_source", "")).strip()
    later = row_counts(split_turns(eval_rows))["fc_rows"]
    where = (
        f"the {min(n, len(eval_rows))} eval rows evaluate scores (the first eval_max_rows={n}) of dataset_source "
        f"{source!r} hold"
        if later
        else f"the eval split of dataset_source {source!r} has"
    )
    more = f"raise eval_max_rows (the split's {len(eval_rows)} rows hold {later} tool-call rows), or " if later else ""
    return [f"{claim}, but {where} {none} ({counts['text_rows']} text rows), so {outcome}: {more}{fix}"]


BUILTIN_CHECK_ROWS = 100  # of each built-in split: its rows are few kinds, each one well represented


def _template_problems(
    model_source: str,
    splits: dict[str, list],
    found: list[str],
    max_seq_len: int,
    revision: str = "",
    chat_template: str = templates.MODEL,
    eval_max_rows: int | None = None,
    irrelevance_reply: Any = None,
) -> list[str]:
    """A model's chat template (or the one chat_template names) against a local dataset's rows (a
    second or two for a thousand rows): rows it refuses, the train/serve parity check
    (trainer.parity), a split with no row short enough for max_seq_len, and an irrelevance_reply that holds
    one of the tokenizer's special tokens. For the built-in model,
    a local one that passed its checks, or a Hub model whose tokenizer is in the local HF cache
    (nothing is downloaded here); a template in s3:// is checked at the finetune step."""
    try:
        model = sources.parse(model_source, "model")
    except UserError:
        return []
    if model.kind == "builtin":  # its tokenizer is built in a second, the weights are not needed
        tokenizer = builtin_model.build_tokenizer()
    elif model.kind == "local" and not any(model.ref in p for p in found):
        from transformers import AutoTokenizer

        path = Path(model.ref)
        # a GGUF's tokenizer and template are in its metadata: checked now, not after its conversion and upload
        load = (
            {"pretrained_model_name_or_path": str(path.parent), "gguf_file": path.name}
            if sources.is_gguf(model.ref) and path.is_file()
            else {"pretrained_model_name_or_path": model.ref}
        )
        try:
            with gguf.read_once(path) if "gguf_file" in load else contextlib.nullcontext():
                tokenizer = AutoTokenizer.from_pretrained(**load, local_files_only=True)
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
    # before the template's checks, which return early: the reply is the tokenizer's business, not the template's
    replied = (
        []
        if model.kind == "builtin"
        else _reply_token_problems(  # the built-in's: _settings_problems
            irrelevance_reply, usertext.special_tokens(tokenizer), model_source
        )
    )
    if (
        not isinstance(chat_template, str)
        or templates.spec_problems(chat_template)
        or chat_template.strip().startswith("s3://")
    ):
        return replied  # the template is reported on its own, or read from the bucket at the finetune step
    eos = templates.generation_stop_ids(model.ref) if model.kind == "local" else []
    chat_template = chat_template.strip()
    if chat_template == templates.AUTO:  # what deliver-model will choose, on the same tokenizer
        try:
            chat_template, _ = parity.choose_template(tokenizer, eos)
        except UserError as err:
            return replied + [str(err)]
    templates.apply_to_tokenizer(tokenizer, chat_template)
    if not tokenizer.chat_template:
        return replied  # delivery refuses the model with its own message
    where = f"dataset_source with model {model_source.strip()}"
    eos += templates.extra_stop_ids(tokenizer, chat_template, eos)  # as deliver-model adds them
    named = chat_template if chat_template != templates.MODEL else ""
    problems = parity.template_problems(splits["train"] + splits["eval"], tokenizer, where, eos, named)
    if max_seq_len > 0:  # else TrainConfig says so
        context = model_tree.model_max_length(model_source)
        problems += [
            f"{where}: {p}" for p in data.length_problems(splits, tokenizer, max_seq_len, context, eval_max_rows)
        ]
    return replied + problems


def _is_builtin(model_source: Any) -> bool:
    try:
        return sources.parse(model_source, "model").kind == "builtin"
    except UserError:
        return False


def _reply_token_problems(reply: Any, tokens: list[str], model_source: str) -> list[str]:
    """irrelevance_reply against the model's special tokens, when masking.reply_problem passed it (one
    message per reply)."""
    if reply is None or masking.reply_problem(reply):
        return []
    found = usertext.special_token_problem(
        reply,
        tokens,
        "irrelevance_reply",
        model_source.strip(),
        f"e.g. irrelevance_reply={masking.IRRELEVANCE_REPLY!r}",
    )
    return [found] if found else []
