"""The pipelines' parameters, in one table: name, type, default, help and group of each.

From it come the pipelines' docstrings (the descriptions the KFP UI shows for each run parameter),
the pipelines' signature defaults, `validate`'s defaults for callers that lack a parameter,
`--list-params` of run_local and submit, and the parameter reference (docs/parameters.md); tests check every
pipeline's and component's signature (names, types, defaults) against it. A new parameter is one
row here plus its use.

Training settings that TrainConfig also has take TrainConfig's default (`_T.<name>`): the trainer
CLI (`python -m trainer train`) and a pipeline run train alike when given nothing.
"""

from __future__ import annotations

import argparse
import inspect
import re
import textwrap
from dataclasses import dataclass, fields
from typing import Any

from trainer.config.training import TrainConfig
from trainer.core.settings import parse_bool

_T = TrainConfig()

FINETUNE, SWEEP = ("finetune",), ("sweep",)
BOTH = FINETUNE + SWEEP

# Groups, in the order --list-params and docs/parameters.md show them.
INPUTS, TRAINING, EVALUATION, SWEEP_GROUP, SERVING, PLACEMENT, REGISTRY = (
    "inputs",
    "training",
    "evaluation and promotion",
    "sweep",
    "serving",
    "placement (cluster)",
    "registry",
)
GROUPS = (INPUTS, TRAINING, EVALUATION, SWEEP_GROUP, SERVING, PLACEMENT, REGISTRY)


@dataclass(frozen=True)
class Param:
    name: str
    type: type
    default: Any
    group: str
    pipelines: tuple[str, ...]
    help: str
    sweep_default: Any = None  # the sweep's own default, where it differs
    sweep_help: str = ""  # the sweep's own help, where the meaning differs

    def default_in(self, pipeline: str) -> Any:
        return self.sweep_default if pipeline == "sweep" and self.sweep_default is not None else self.default

    def help_in(self, pipeline: str) -> str:
        return self.sweep_help if pipeline == "sweep" and self.sweep_help else self.help


PARAMS: tuple[Param, ...] = (
    Param(
        'model_source',
        str,
        'builtin:tiny-llama',
        INPUTS,
        BOTH,
        help=(
            'Base model: a Hugging Face Hub id (Qwen/Qwen2.5-1.5B-Instruct), an s3:// URI printed by `python -m '
            'trainer deliver-model`, or builtin:tiny-llama (a tiny random model for demos).'
        ),
    ),
    Param(
        'model_revision',
        str,
        '',
        INPUTS,
        BOTH,
        help='Hub branch, tag or commit of model_source; empty means main. Pin a commit for reproducible runs.',
    ),
    Param(
        'chat_template',
        str,
        'model',
        INPUTS,
        BOTH,
        help=(
            "The chat template training, evaluation and serving all use: model (the model's own), auto, a "
            'built-in (chatml-tools, gemma-tools, llama3-json, mistral-tools, llama3-pythonic), a .jinja file or an '
            's3:// URI of '
            'one.'
        ),
    ),
    Param(
        'dataset_source',
        str,
        'builtin:function-calling',
        INPUTS,
        BOTH,
        help=(
            'Chat data: a Hub dataset id, an s3:// URI from `python -m trainer deliver-dataset`, '
            "builtin:function-calling (the demo's) or builtin:function-calling-wide; with run_local also a file "
            'or directory.'
        ),
    ),
    Param(
        'dataset_revision', str, '', INPUTS, BOTH, help='Hub branch, tag or commit of dataset_source; empty means main.'
    ),
    Param(
        'eval_fraction',
        float,
        0.1,
        INPUTS,
        BOTH,
        help=(
            'Share of rows held out for evaluation when the data has no eval split, between 0 and 1 (exclusive); '
            '0.05-0.1 is typical.'
        ),
    ),
    Param(
        'irrelevance_share',
        float,
        0.0,
        INPUTS,
        BOTH,
        help=(
            "Share of each split's rows made by function masking, from 0 to 0.5: copies of tool-call rows with "
            'the called tools removed, answered irrelevance_reply, against over-calling. 0 makes none; e.g. 0.1.'
        ),
    ),
    Param(
        'irrelevance_distractors',
        float,
        0.0,
        INPUTS,
        BOTH,
        help=(
            "Share of the irrelevance_share copies, from 0 to 1, that offer, in place of the removed tool, tools "
            "other training rows call that do not fit the request (Hammer's irrelevance rows). 0: none; e.g. 0.5."
        ),
    ),
    Param(
        'name_masking',
        float,
        0.0,
        INPUTS,
        BOTH,
        help=(
            "Share of the training rows with tools, from 0 to 1, whose function and parameter names are made "
            "random (the same in tools, calls and text; tools shuffled), so the model reads descriptions, not "
            "names (Hammer's masking). 0: none; e.g. 0.67."
        ),
    ),
    Param(
        'irrelevance_reply',
        str,
        'None of the available tools can do that.',
        INPUTS,
        BOTH,
        help=(
            "The text answer of the rows irrelevance_share makes, the same in every row, e.g. your product's "
            'wording. Plain text: a reply that reads as a tool call or holds an end-of-turn marker is refused.'
        ),
    ),
    Param(
        'launcher',
        str,
        'local',
        PLACEMENT,
        BOTH,
        help=(
            'Where training runs: local (in the pipeline pod; demos only), trainjob (a Kubeflow Trainer v2 '
            'TrainJob; use this on a current Kubeflow) or pytorchjob (Training Operator v1; old name kubernetes).'
        ),
    ),
    Param(
        'nodes',
        int,
        2,
        PLACEMENT,
        BOTH,
        sweep_default=1,
        help='Training pods (machines). 1 for models up to ~8B with LoRA; 2-4 for larger ones.',
    ),
    Param(
        'procs_per_node', int, 1, PLACEMENT, BOTH, help='Training processes per pod, one per GPU: 8 on an 8-GPU node.'
    ),
    Param(
        'method',
        str,
        _T.method,
        TRAINING,
        FINETUNE,
        help=(
            "lora (small adapter matrices; the usual choice), dora (LoRA plus each weight's magnitude), qlora "
            '(LoRA over a 4-bit base: ~1/4 of its memory) or full (every weight; several times the memory).'
        ),
    ),
    Param(
        'lora_r',
        int,
        _T.lora_r,
        TRAINING,
        FINETUNE,
        help="LoRA rank, the adapter's size. 16 is a sane start for a 1-8B model; 64 for harder tasks.",
    ),
    Param(
        'lora_alpha',
        int,
        _T.lora_alpha,
        TRAINING,
        FINETUNE,
        help='LoRA scaling numerator (the update is scaled by alpha / r); usually 2 x lora_r, e.g. 32.',
    ),
    Param(
        'lora_dropout',
        float,
        _T.lora_dropout,
        TRAINING,
        BOTH,
        help='Dropout on the adapter input, from 0 up to (not including) 1; 0.05 for small datasets, 0 otherwise.',
    ),
    Param(
        'lora_train_embeddings',
        bool,
        _T.lora_train_embeddings,
        TRAINING,
        BOTH,
        help=('Also train the token embeddings. true only for the built-in random model; false for pretrained models.'),
    ),
    Param(
        'learning_rate',
        float,
        _T.learning_rate,
        TRAINING,
        FINETUNE,
        help=(
            'Peak learning rate (cosine decay after warm-up). About 2e-4 for LoRA on a pretrained model, 1e-5 for '
            'full fine-tuning, 1e-3 for the built-in model and for SmolLM2-135M on a CPU.'
        ),
    ),
    Param(
        'max_steps',
        int,
        _T.max_steps,
        TRAINING,
        BOTH,
        help=(
            'Optimizer steps to train. A few hundred to a few thousand: about 2-3 passes over the data; 60 for '
            'SmolLM2-135M on the built-in data on a CPU.'
        ),
    ),
    Param(
        'batch_size',
        int,
        _T.batch_size,
        TRAINING,
        FINETUNE,
        help='Rows per process per micro-batch when batch_tokens is 0. 4-16 on one GPU.',
    ),
    Param(
        'batch_tokens',
        int,
        _T.batch_tokens,
        TRAINING,
        BOTH,
        sweep_default=1024,
        help=(
            'Tokens per process per micro-batch (rows packed without padding); 0 uses batch_size rows instead. '
            '16384 on an 80 GB GPU for a 1-8B model; 512 for the built-in model; must be >= max_seq_len.'
        ),
        sweep_help=(
            'Tokens per process per micro-batch (rows packed without padding); 0 uses 8 rows (the '
            "trainer's batch_size) instead. 16384 on an 80 GB GPU for a 1-8B model; must be >= max_seq_len."
        ),
    ),
    Param(
        'tokens_per_step',
        int,
        _T.tokens_per_step,
        TRAINING,
        FINETUNE,
        help=(
            'Tokens per optimizer step across all processes, reached by gradient accumulation; 0 means one '
            'micro-batch per step. e.g. 262144.'
        ),
    ),
    Param(
        'gradient_checkpointing',
        bool,
        _T.gradient_checkpointing,
        TRAINING,
        BOTH,
        help=(
            'Recompute activations in the backward pass: less GPU memory, about 30% more compute. true for long '
            'sequences or large models.'
        ),
    ),
    Param(
        'compile',
        bool,
        _T.compile,
        TRAINING,
        BOTH,
        help=(
            'torch.compile each decoder layer; steps 4-11 are timed compiled and eager, and the faster runs the '
            'rest of the training, so it is never slower than eager beyond them. Worth trying on long GPU runs.'
        ),
    ),
    Param(
        'max_seq_len',
        int,
        _T.max_seq_len,
        TRAINING,
        BOTH,
        help=(
            'Longest row in tokens; longer rows are skipped and counted. 2048-4096 for chat data, at most the '
            "model's context length; 640 for the built-in data on SmolLM2 with chatml-tools."
        ),
    ),
    Param(
        'seed',
        int,
        _T.seed,
        TRAINING,
        BOTH,
        help='Random seed for the data split, shuffling and initialisation, 0 to 4294967295.',
    ),
    Param(
        'checkpoint_every',
        int,
        _T.checkpoint_every,
        TRAINING,
        BOTH,
        help=(
            'Steps between checkpoints to the bucket (one is always written at the end). Every 10-30 minutes of '
            'training, e.g. 200.'
        ),
    ),
    Param(
        'max_restarts',
        int,
        2,
        TRAINING,
        BOTH,
        help='Times a failed job is restarted from its last checkpoint before the run fails; 2-3.',
    ),
    Param(
        'eval_max_rows',
        int,
        200,
        EVALUATION,
        BOTH,
        sweep_default=100,
        help=(
            'Held-out rows scored for base vs tuned metrics (more rows: better estimate, longer evaluation), e.g. 500.'
        ),
    ),
    Param(
        'eval_engine',
        str,
        'auto',
        EVALUATION,
        BOTH,
        help=(
            "How base and tuned answer the held-out rows: vllm (vLLM's server as deploy starts it: what users "
            'get), hf (HF generate in the evaluate step) or auto (vllm where it can run, for 20M+ parameters).'
        ),
    ),
    Param(
        'min_fc_accuracy',
        float,
        0.0,
        EVALUATION,
        BOTH,
        help=(
            'Promotion gate: the tuned model is deployed and registered only when its function-calling accuracy '
            '(fc_ast_accuracy, every category, as a fraction) reaches this, e.g. 0.9; 0 asks nothing.'
        ),
        sweep_help=(
            "The finetune pipeline's promotion gate: the best trial is deployed only when its "
            'function-calling accuracy (fc_ast_accuracy, a fraction) reaches this, e.g. 0.9; 0 asks nothing.'
        ),
    ),
    Param(
        'min_gain',
        float,
        0.0,
        EVALUATION,
        BOTH,
        sweep_default=0.1,
        help=(
            'Promotion gate: the tuned model is deployed and registered only when its function-calling accuracy '
            "beats the base's by at least this (0.05 is 5 points); 0 refuses only a model worse than its base."
        ),
        sweep_help=(
            "Least improvement over the base model, in the metric's own units, for the best trial to be "
            'deployed: e.g. 0.05 (5 points of accuracy) or 0.1 (eval loss).'
        ),
    ),
    Param(
        'eval_suites',
        str,
        'heldout',
        EVALUATION,
        FINETUNE,
        help=(
            "What evaluate scores base and tuned on, comma-separated: heldout (the dataset's eval split), bfcl "
            "(BFCL v4's single-turn categories, scored by its rules: bfcl_<category>_accuracy) or heldout,bfcl."
        ),
    ),
    Param(
        'bfcl_rows',
        int,
        25,
        EVALUATION,
        FINETUNE,
        help=(
            'BFCL rows per category (10 categories), a sample drawn with `seed`; 0 scores every row (3,475 in '
            'all: hours on a CPU). 25 suits a CPU; raise it on a GPU, e.g. 100.'
        ),
    ),
    Param(
        'bfcl_source',
        str,
        '',
        EVALUATION,
        FINETUNE,
        help=(
            "Where BFCL's data comes from: empty downloads the pinned bfcl-eval wheel; else that wheel uploaded "
            "to the run's bucket or the s3:// URI a run delivered it to; with run_local also a path."
        ),
    ),
    Param(
        'max_category_drop',
        float,
        0.1,
        EVALUATION,
        BOTH,
        help=(
            'Promotion gate: the tuned model is not deployed or registered when any category measured on both '
            "models falls more than this below the base's (a fraction: 0.1 is 10 points). 1.0 turns it off."
        ),
        sweep_help=(
            "The pick: a trial with a held-out category more than this below the base model's (0.1 is 10 points) "
            'is not picked while another passes; where none does, nothing is deployed. 1.0 turns it off.'
        ),
    ),
    Param(
        'gate_significance',
        float,
        0.0,
        EVALUATION,
        BOTH,
        help=(
            "With max_category_drop: refuse a category's drop only when McNemar's exact p on the rows it lost and "
            'won there is below this, e.g. 0.05; 0 refuses every drop. From 0 up to, not including, 1.'
        ),
        sweep_help=(
            "With max_category_drop in the pick: a trial's drop counts only when McNemar's exact p on the rows it "
            'lost and won there is below this, e.g. 0.05; 0 counts every drop. From 0 up to, not including, 1.'
        ),
    ),
    Param(
        'merge_scales',
        str,
        '1.0',
        EVALUATION,
        BOTH,
        help=(
            "The adapter's update scored at each of these scales in (0, 1], e.g. 1.0,0.75,0.5 (the base once); "
            "the strongest that passes the gate is merged and deployed. LoRA only; 1.0: as trained."
        ),
    ),
    Param(
        'max_drop_by_category',
        str,
        '',
        EVALUATION,
        BOTH,
        help=(
            "Other limits than max_category_drop for the categories named, as the gate's lines name them, e.g. "
            "bfcl_irrelevance=0.2,bfcl_live_irrelevance=0.2 (20 points; 1 turns one off). Empty: one limit for all."
        ),
    ),
    Param(
        'deploy_backend',
        str,
        'local',
        SERVING,
        BOTH,
        help=(
            'Where the model (in the sweep: the winner) is served: local (run_local only), kubernetes (a vLLM '
            "Deployment and Service), kserve (an InferenceService) or llmisvc (KServe's LLMInferenceService)."
        ),
    ),
    Param(
        'keep_serving',
        bool,
        False,
        SERVING,
        BOTH,
        help='Leave the local server running after the smoke test (local backend only); false on a cluster.',
    ),
    Param(
        'serve_adapters',
        bool,
        False,
        SERVING,
        FINETUNE,
        help=(
            'Serve the base as `served_model_name`-base and the adapter as `served_model_name` side by side (vLLM '
            '--enable-lora); false serves the merged model. Needs method=lora and lora_train_embeddings=false.'
        ),
    ),
    Param(
        'served_model_name',
        str,
        'llm-finetune',
        SERVING,
        BOTH,
        help=(
            'Name clients ask for (the OpenAI "model" field); on a cluster also the Deployment and Service name: '
            "at most 63 lowercase letters, digits and '-', starting with a letter, e.g. support-bot-v2."
        ),
    ),
    Param(
        'serve_gpus',
        int,
        1,
        SERVING,
        BOTH,
        help=(
            'GPUs for the vLLM server (tensor-parallel across them); 0 serves on CPU. 1 for models up to ~13B on '
            'an 80 GB GPU.'
        ),
    ),
    Param(
        'namespace',
        str,
        '',
        PLACEMENT,
        BOTH,
        help=(
            "Kubernetes namespace for the training job and the server; empty means the pipeline's own namespace. "
            'e.g. llm-finetune.'
        ),
    ),
    Param(
        'accelerator_resource',
        str,
        'nvidia.com/gpu',
        PLACEMENT,
        BOTH,
        help=(
            'Kubernetes resource name of the GPUs requested per process: nvidia.com/gpu, amd.com/gpu, or empty '
            'for CPU only.'
        ),
    ),
    Param(
        'node_selector',
        dict,
        {},
        PLACEMENT,
        BOTH,
        help=(
            'Node labels the pods must match, as a JSON object of strings, e.g. {"nvidia.com/gpu.product": '
            '"NVIDIA-H100-80GB-HBM3"}; {} for any node.'
        ),
    ),
    Param(
        'tolerations',
        list,
        [],
        PLACEMENT,
        BOTH,
        help=(
            'Taints the pods tolerate, as a JSON list of Kubernetes tolerations, e.g. [{"key": "nvidia.com/gpu", '
            '"operator": "Exists", "effect": "NoSchedule"}]; [] for none.'
        ),
    ),
    Param(
        'kueue_queue',
        str,
        '',
        PLACEMENT,
        BOTH,
        help=(
            'Kueue LocalQueue that admits the training job and server (quota and fair sharing); empty means no '
            'queueing. e.g. team-a-gpus.'
        ),
    ),
    Param(
        'cleanup',
        str,
        'on-success',
        PLACEMENT,
        BOTH,
        help=(
            'When to delete the training job after it ends: on-success (keep failed jobs for inspection), always, '
            'or never.'
        ),
    ),
    Param(
        'wait_timeout_s',
        int,
        0,
        PLACEMENT,
        BOTH,
        help=(
            'Seconds to wait for the training job before failing the run; 0 waits as long as it runs. e.g. 86400 '
            'for a one-day limit.'
        ),
    ),
    Param(
        'training_runtime',
        str,
        'torch-distributed',
        PLACEMENT,
        BOTH,
        help=(
            'launcher=trainjob: the ClusterTrainingRuntime the TrainJob runs on: torch-distributed (Kubeflow '
            "Trainer's own) or llm-finetune-torch (shipped by pipelines.manifests: exit code 2 never retried)."
        ),
    ),
    Param(
        'vllm_image',
        str,
        '',
        SERVING,
        BOTH,
        help=(
            'vLLM server image for deploy_backend kubernetes or kserve; empty picks vllm/vllm-openai for NVIDIA '
            "and AMD's rocm/vllm for amd.com/gpu. Pin a tag, e.g. vllm/vllm-openai:v0.32.0."
        ),
    ),
    Param(
        'eval_gpus',
        int,
        0,
        PLACEMENT,
        BOTH,
        help=(
            'GPUs for the evaluate and merge-LoRA steps (batched on the GPU); 0 runs them on CPU (the demo). 1 '
            'for models up to ~13B.'
        ),
    ),
    Param(
        'eval_accelerator_type',
        str,
        'nvidia.com/gpu',
        PLACEMENT,
        BOTH,
        help='Kubernetes resource name of those GPUs, e.g. nvidia.com/gpu or amd.com/gpu.',
    ),
    Param(
        'eval_node_selector',
        dict,
        {},
        PLACEMENT,
        BOTH,
        help=(
            'Node labels the evaluate and merge pods must match, as a JSON object of strings, e.g. '
            '{"nvidia.com/gpu.product": "NVIDIA-L40S"}; {} for any node.'
        ),
    ),
    Param(
        'eval_tolerations',
        list,
        [],
        PLACEMENT,
        BOTH,
        help=(
            'Taints the evaluate and merge pods tolerate, as a JSON list of tolerations, e.g. [{"key": '
            '"nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]; [] for none.'
        ),
    ),
    Param(
        'registry_address',
        str,
        '',
        REGISTRY,
        FINETUNE,
        help=(
            'Kubeflow Model Registry REST address to register the merged model and adapter in; empty skips '
            'registration. e.g. http://model-registry-service.kubeflow.svc.cluster.local:8080'
        ),
    ),
    Param(
        'stall_timeout_s',
        float,
        _T.stall_timeout_s,
        TRAINING,
        BOTH,
        help=(
            "Seconds without training progress (rank 0's step or setup stage) after which the job is stopped and "
            'failed, not restarted, naming the stuck stage; 0 turns it off, else at least 60. e.g. 1800.'
        ),
    ),
    # Around the finetune demo's settings (the third is its default since 2026-11-28): at 650 steps on 2 cores,
    # on the built-in data of one call among five tools, these gave 96% / 86% / 99% function-calling accuracy
    # (300 steps at 3e-3 / 3e-3 / 1e-3: 62% / 26% / 54%), so the sweep's pick means something.
    Param(
        'trials',
        list,
        [
            {"lora_r": 4, "lora_alpha": 8, "learning_rate": 0.003},
            {"lora_r": 16, "lora_alpha": 32, "learning_rate": 0.0015},
            {"lora_r": 64, "lora_alpha": 64, "learning_rate": 0.001},
        ],
        SWEEP_GROUP,
        SWEEP,
        help=(
            'JSON list of trials, each exactly {"lora_r": int, "lora_alpha": int, "learning_rate": float}, '
            'numbers without quotes, e.g. [{"lora_r": 16, "lora_alpha": 32, "learning_rate": 0.0002}].'
        ),
    ),
    Param(
        'select_metric',
        str,
        'fc_ast_accuracy',
        SWEEP_GROUP,
        SWEEP,
        help=(
            'Metric that picks the best trial: fc_ast_accuracy (function-calling accuracy over every category, '
            "the finetune gate's; higher is better) or eval_loss (lower is better, for data without tool calls)."
        ),
    ),
    Param(
        'deploy_all_trials',
        bool,
        False,
        SWEEP_GROUP,
        SWEEP,
        help=(
            "Also serve every trial's adapter side by side on one base (`served_model_name`-base, -trial-0, -1, "
            '...) to compare them by model name; false serves only the winner. Needs lora_train_embeddings=false.'
        ),
    ),
)

BY_NAME = {p.name: p for p in PARAMS}


def of(pipeline: str) -> list[Param]:
    """The parameters of `pipeline` ("finetune" or "sweep"), in the table's order."""
    return [p for p in PARAMS if pipeline in p.pipelines]


def defaults(pipeline: str) -> dict[str, Any]:
    """name -> default, as `pipeline`'s signature must have them (tests check it)."""
    return {p.name: p.default_in(pipeline) for p in of(pipeline)}


def signature(pipeline: str, returns: Any = inspect.Signature.empty) -> inspect.Signature:
    """`pipeline`'s parameters as a Python signature, each its name, type and default from the table, in its
    order: the pipelines' own signature (pipelines/dag/tasks.table_parameters), which KFP compiles into the run
    parameters, so that a parameter is declared here alone. `returns`: the pipeline's outputs."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature(
        [inspect.Parameter(p.name, kind, default=p.default_in(pipeline), annotation=p.type) for p in of(pipeline)],
        return_annotation=returns,
    )


def docstring(pipeline: str, intro: str) -> str:
    """`intro`, then an Args section of `pipeline`'s parameters: KFP takes each run parameter's
    description in its UI from it."""
    lines = [textwrap.dedent(intro).strip(), "", "Args:"]
    for p in of(pipeline):
        lines += textwrap.wrap(
            f"{p.name}: {p.help_in(pipeline)}",
            112,
            initial_indent="    ",
            subsequent_indent="        ",
            break_on_hyphens=False,
            break_long_words=False,
        )
    return "\n".join(lines) + "\n"


def _shown(value: Any) -> str:
    import json

    return json.dumps(value)


def listing(pipeline: str, title: str) -> str:
    """--list-params: every parameter of `pipeline` by group, with its type, default and help."""
    lines = [title, ""]
    for group in GROUPS:
        ps = [p for p in of(pipeline) if p.group == group]
        if not ps:
            continue
        lines.append(f"{group}:")
        for p in ps:
            lines.append(f"  {p.name} = {_shown(p.default_in(pipeline))}  ({p.type.__name__})")
            lines += textwrap.wrap(
                p.help_in(pipeline),
                width=96,
                initial_indent=" " * 6,
                subsequent_indent=" " * 6,
                break_on_hyphens=False,
                break_long_words=False,
            )
        lines.append("")
    return "\n".join(lines).rstrip()


def markdown() -> str:
    """docs/parameters.md's reference (`python -m trainer.config.params` prints it; a test keeps the page current)."""
    out = []
    for group in GROUPS:
        out += [
            f"**{group[0].upper() + group[1:]}**",
            "",
            "| parameter | default | pipelines | what it does |",
            "|---|---|---|---|",
        ]
        for p in (p for p in PARAMS if p.group == group):
            default = f"`{_shown(p.default)}`" + (
                f" (sweep `{_shown(p.sweep_default)}`)" if p.sweep_default is not None else ""
            )
            if p.name == "trials":
                default = "3 trials (`--list-params`)"
            where = " + ".join(p.pipelines)
            out.append(f"| `{p.name}` | {default} | {where} | {p.help.replace('|', '/')} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def train_fields() -> set[str]:
    return {f.name for f in fields(TrainConfig)}


def main(argv: list[str] | None = None) -> int:
    """`python -m trainer.config.params`: the parameter reference's table (docs/parameters.md) as Markdown."""
    import argparse

    argparse.ArgumentParser(
        prog="python -m trainer.config.params",
        description="Print the table of every pipeline parameter as Markdown: the table in "
        "docs/parameters.md, which a test keeps equal to this output.",
    ).parse_args(argv)
    print(markdown(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# A sweep trial's settings (pipeline parameter `trials`): their names and types, and an example.
TRIAL_KEYS = {"lora_r": int, "lora_alpha": int, "learning_rate": float}
TRIAL_EXAMPLE = '{"lora_r": 16, "lora_alpha": 32, "learning_rate": 0.0002}'


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """One `python -m trainer train` option per TrainConfig field; its help is the pipeline
    parameter's (PARAMS) when there is one, else the field's comment in TrainConfig (one place to
    document each)."""
    helps = {**_field_comments(TrainConfig), **{p.name: p.help for p in PARAMS}}
    for f in fields(TrainConfig):
        kind = type(f.default)
        parser.add_argument(
            f"--{f.name.replace('_', '-')}",
            default=f.default,
            type=_parse_bool if kind is bool else kind,
            help=f"{helps.get(f.name, '')} (default: {f.default!r})".lstrip().replace("%", "%%"),
        )


def _field_comments(cls) -> dict[str, str]:
    """Each dataclass field's comment: the lines right above it plus the one at its end."""
    helps, above = {}, []
    for line in inspect.getsource(cls).splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# "))
        elif m := re.match(r"\s+(\w+): [^=]+=.*?(?:#\s*(.*))?$", line):
            helps[m[1]] = " ".join([*above, m[2] or ""]).strip()
            above = []
        else:
            above = []
    return helps


def _parse_bool(value: str) -> bool:
    try:
        return parse_bool(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
