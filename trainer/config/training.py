"""Training configuration: one dataclass, validated once, every problem reported together."""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, fields

from trainer.core.errors import collect

# torch.manual_seed takes any 64-bit value, but numpy's seed (set through transformers.set_seed)
# must fit in 32 bits: the common range.
SEED_MAX = 2**32 - 1
# Micro-batches accumulated into one optimizer step (tokens_per_step): far above any real setting (a few to 64);
# tokens_per_step=1e9 made 1,953,125 of them, hundreds of passes over the data for one step.
MAX_ACCUM = 1024
MIN_STALL_S = 60  # a watchdog (stall_timeout_s) below this fires while a process starts, before any progress line
MAX_STEPS = 100_000_000  # beyond any fine-tune: a larger value is a typo that would never finish


# These field defaults are the only ones: `python -m trainer train`, the pipelines' signatures and
# the components all read them (DEFAULT), so a run started any way trains the same. They are tuned
# for the built-in model and data, the pipelines' default sources (README "Built-ins").
# lora: low-rank adapters; dora: LoRA with the weights' magnitudes trained apart (peft use_dora);
# qlora: LoRA over the base loaded in 4-bit NF4 (bitsandbytes); full: every weight.
METHODS = ("lora", "dora", "qlora", "full")
ADAPTER_METHODS = ("lora", "dora", "qlora")
# transformers' schedulers (get_scheduler) that run on warm-up and step counts alone: the others need a metric
# (reduce_lr_on_plateau, greedy) or further arguments (cosine_with_min_lr, warmup_stable_decay), and failed at setup
LR_SCHEDULERS = (
    "cosine",
    "linear",
    "constant",
    "constant_with_warmup",
    "cosine_with_restarts",
    "polynomial",
    "inverse_sqrt",
)


@dataclass
class TrainConfig:
    model_uri: str = ""  # s3://bucket/models/sha256-... (from deliver_model)
    dataset_uri: str = ""  # s3://bucket/datasets/sha256-... (from deliver_dataset)
    output_prefix: str = ""  # runs/<run id>: where result.json goes
    method: str = "lora"  # one of METHODS
    # LoRA rank: adapter size and capacity. 64 for the built-in demo: at 16 the random model learns
    # one argument slot wrong on some seeds (README "Built-ins"); 8-64 is usual for pretrained models.
    lora_r: int = 64
    lora_alpha: int = 64  # LoRA scaling numerator (the update is scaled by alpha / r)
    lora_dropout: float = 0.0  # dropout on the LoRA input, in [0, 1)
    lora_target_modules: str = "all-linear"  # comma list, or all-linear
    # Also train the (tied) token embedding. Set false for pretrained models; the built-in random
    # model (the default source) needs it to learn to copy argument values (see README "Built-ins").
    lora_train_embeddings: bool = True
    # peak learning rate: 1e-3 suits the built-in model at rank 64; about 2e-4 for a pretrained model with LoRA
    learning_rate: float = 1e-3
    weight_decay: float = 0.0  # AdamW weight decay
    warmup_ratio: float = 0.05  # share of max_steps spent warming the learning rate up
    lr_scheduler: str = "cosine"  # a transformers scheduler: cosine, linear, constant, constant_with_warmup, ...
    max_steps: int = 800  # optimizer steps to train
    batch_size: int = 8  # rows per rank per micro-batch (when batch_tokens is 0)
    # > 0: padding-free batches of up to this many tokens per rank (rows packed, no padding,
    # no cross-row attention); 0: batch_size rows padded to the longest row. 512 suits the
    # built-in model; 16384 on an 80 GB GPU for a 1-8B model.
    batch_tokens: int = 512
    # With batch_tokens: "flatten" packs rows into one sequence (no padding; saves compute with
    # flash-attention on CUDA, else flex attention on CUDA with the sequence filled to batch_tokens),
    # "pad" pads length-bucketed rows (best without flash-attention, e.g. CPU), "auto" flattens
    # when flash-attention is available. See trainer/models/model.py.
    packing: str = "auto"
    tokens_per_step: int = 0  # > 0: accumulate micro-batches to about this many tokens per optimizer step
    gradient_checkpointing: bool = False  # less activation memory, ~30% more compute
    # torch.compile the decoder layers (dynamic shapes for padded batches, one shape for packed
    # ones); the first step compiles (108 s for a 1B model on an H100). Steps 4-11 are timed
    # compiled, then eager, and the faster runs the rest (never slower than eager). Needs a C
    # compiler on CPU.
    compile: bool = False
    profile_steps: int = 0  # > 0: torch.profiler trace of that many steps, to <output_prefix>/profile/
    max_seq_len: int = 512  # longer rows are skipped and counted (skipped_long_rows)
    seed: int = 0  # seeds data order, initialisation and dropout (0 .. 2**32 - 1)
    log_every: int = 10  # steps between loss lines / TensorBoard points
    eval_every: int = 50  # steps between eval-loss measurements on up to 64 eval rows (rank 0)
    checkpoint_every: int = 100  # steps between checkpoints (one is always written at the end)
    keep_checkpoints: int = 2  # newest checkpoints kept in the bucket
    shutdown_grace_s: float = 90.0  # on SIGTERM: time allowed for the final checkpoint upload
    # Launchers fail a job (no restart) whose progress (rank 0's step or stage) stops this long;
    # 0 turns the watchdog off. Generous: model download and a first compile can take minutes.
    stall_timeout_s: float = 1800.0

    def problems(self) -> list[str]:
        p = []
        bad = set()  # non-finite: said once, not again by the range checks below
        for f in fields(self):  # NaN passes every comparison below, and inf is never meant
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                p.append(f"{f.name} must be a finite number, got {value}; e.g. {f.name}={f.default}")
                bad.add(f.name)
        if not self.model_uri.startswith("s3://"):
            p.append(f"model_uri must be an s3:// URI from deliver_model, got {self.model_uri!r}")
        if not self.dataset_uri.startswith("s3://"):
            p.append(f"dataset_uri must be an s3:// URI from deliver_dataset, got {self.dataset_uri!r}")
        if not self.output_prefix:
            p.append("output_prefix is empty: pass runs/<run id>")
        if self.method not in METHODS:
            p.append(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.lr_scheduler not in LR_SCHEDULERS:
            p.append(f"lr_scheduler must be one of {', '.join(LR_SCHEDULERS)}, got {self.lr_scheduler!r}")
        if self.method in ADAPTER_METHODS and self.lora_r <= 0:
            p.append(f"lora_r must be > 0, got {self.lora_r}; e.g. lora_r=16 (8-64 is usual)")
        if self.method in ADAPTER_METHODS and self.lora_alpha <= 0:
            p.append(f"lora_alpha must be > 0, got {self.lora_alpha}; e.g. lora_alpha=32 (twice lora_r is usual)")
        if self.method == "qlora":
            import importlib.util

            if importlib.util.find_spec("bitsandbytes") is None:
                p.append(
                    "method=qlora loads the base in 4-bit with bitsandbytes, which is not installed: "
                    "pip install 'bitsandbytes>=0.50' (CPU and CUDA), or use method=lora"
                )
            if self.compile:
                p.append(
                    "method=qlora with compile=true: torch.compile is not used over bitsandbytes' 4-bit layers "
                    "here; set compile=false"
                )
        if "lora_dropout" not in bad and not 0 <= self.lora_dropout < 1:
            p.append(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if "learning_rate" not in bad:
            if self.learning_rate <= 0:
                p.append(
                    f"learning_rate must be > 0, got {self.learning_rate:g}; about 2e-4 for LoRA on a "
                    "pretrained model, 1e-5 for full fine-tuning"
                )
            elif self.learning_rate >= 1:  # AdamW moves every weight by about the rate per step: NaN within steps
                p.append(
                    f"learning_rate must be below 1, got {self.learning_rate:g}: such a rate diverges at once; "
                    "about 2e-4 for LoRA on a pretrained model, 1e-5 for full fine-tuning"
                )
        if self.max_steps > MAX_STEPS:
            p.append(
                f"max_steps must be <= {MAX_STEPS:,}, got {self.max_steps:,}; fine-tunes take hundreds to "
                f"a few hundred thousand steps"
            )
        if "warmup_ratio" not in bad and not 0 <= self.warmup_ratio < 1:
            p.append(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.packing not in ("auto", "flatten", "pad"):
            p.append(f"packing must be auto, flatten or pad, got {self.packing!r}")
        elif self.packing in ("flatten", "pad") and self.batch_tokens == 0:  # else ignored without a word
            p.append(
                f"packing={self.packing} arranges token-budget batches, but batch_tokens=0 takes batch_size rows "
                "padded to the longest: set batch_tokens (e.g. 512), or packing=auto"
            )
        if self.batch_tokens < 0 or self.tokens_per_step < 0:
            p.append("batch_tokens and tokens_per_step must be >= 0 (0 turns them off)")
        if 0 < self.batch_tokens < self.max_seq_len:
            p.append(
                f"batch_tokens={self.batch_tokens} must be >= max_seq_len={self.max_seq_len} so every row fits: "
                f"set batch_tokens >= {self.max_seq_len} (e.g. {max(16384, self.max_seq_len)} on an 80 GB GPU), "
                f"lower max_seq_len to <= {self.batch_tokens}, or batch_tokens=0 to use batch_size rows"
            )
        if not 0 <= self.seed <= SEED_MAX:
            p.append(f"seed must be between 0 and {SEED_MAX} (2**32 - 1, numpy's limit), got {self.seed}")
        for name in (
            "max_steps",
            "batch_size",
            "max_seq_len",
            "log_every",
            "eval_every",
            "checkpoint_every",
            "keep_checkpoints",
        ):
            if getattr(self, name) <= 0:
                p.append(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("stall_timeout_s", "shutdown_grace_s"):
            if name not in bad and getattr(self, name) < 0:
                p.append(
                    f"{name} must be >= 0 seconds, got {getattr(self, name):g}"
                    + (
                        " (0 turns the watchdog off)"
                        if name == "stall_timeout_s"
                        else "; e.g. 90, the time a final checkpoint has to upload after SIGTERM"
                    )
                )
        if "stall_timeout_s" not in bad and 0 < self.stall_timeout_s < MIN_STALL_S:
            p.append(
                f"stall_timeout_s={self.stall_timeout_s:g} is shorter than a training process takes to start "
                "(importing torch and loading the model take tens of seconds before its first progress line), "
                f"so the watchdog would stop every job: give at least {MIN_STALL_S} (e.g. 1800), or 0 to turn "
                "it off"
            )
        return p

    def validate(self) -> "TrainConfig":
        collect(self.problems(), what="invalid training config")
        return self

    # What a run resumed from its checkpoint may change: how often it logs, evaluates and checkpoints, how it
    # stops, and how each step is computed (the same step either way); every other field defines the run.
    MAY_CHANGE_ON_RESUME = (
        "output_prefix",
        "log_every",
        "eval_every",
        "checkpoint_every",
        "keep_checkpoints",
        "shutdown_grace_s",
        "stall_timeout_s",
        "profile_steps",
        "compile",
        "gradient_checkpointing",
    )

    def run_settings(self) -> dict:
        """The fields that define the run (not MAY_CHANGE_ON_RESUME): a checkpoint records them, a resume compares."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self.MAY_CHANGE_ON_RESUME}

    def resume_problem(self, saved: dict, where: str) -> str:
        """Why a checkpoint whose run had the settings `saved` (`run_settings`) cannot be resumed with these;
        "" when it can (a checkpoint from before settings were recorded: nothing to compare)."""
        now = self.run_settings()
        changed = [f"{k} {saved[k]!r} (now {now[k]!r})" for k in now if k in saved and saved[k] != now[k]]
        if not changed:
            return ""
        return (
            f"{where} holds a checkpoint of a run with other settings: {', '.join(changed)}. Resuming it would "
            "mix two runs (or fail to load its weights): give the run a new output_prefix (a new run id), or "
            "resume it with the settings it was started with"
        )

    def to_args(self) -> list[str]:
        """CLI arguments that rebuild this config in `python -m trainer train`."""
        return [f"--{f.name.replace('_', '-')}={getattr(self, f.name)}" for f in fields(self)]

    @classmethod
    def from_params(cls, params: dict, **fields_) -> "TrainConfig":
        """A config from pipeline parameters: every key that names a field, plus `fields_`;
        other keys (artifacts, cluster settings) are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in params.items() if k in names}, **fields_)

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> "TrainConfig":
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls)})

    def asdict(self) -> dict:
        return dataclasses.asdict(self)


DEFAULT = TrainConfig()  # e.g. `learning_rate: float = DEFAULT.learning_rate` in a pipeline signature
