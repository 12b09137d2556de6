"""Model building for the training recipe: dtype, attention implementation, LoRA, fused
kernels, compilation, and a loss that never materializes the full logits.

Choices, and why:
- Attention: flattened (packed) rows need an attention that skips the other rows' blocks.
  flash-attention varlen when the flash-attn package is installed on CUDA; otherwise flex
  attention on CUDA (transformers builds a document block mask from `position_ids`), with the
  packed sequence filled to exactly `batch_tokens` so its kernel compiles once. On CPU, sdpa
  with the block-diagonal mask transformers builds from `position_ids`: correct, no savings.
- Loss: only positions with a label need logits, and those are computed in chunks (Liger's
  fused linear cross-entropy kernel on CUDA when liger-kernel is installed, else
  `chunked_cross_entropy`), so a 128k vocabulary costs [chunk, vocab] of memory, not
  [tokens, vocab]. Heads this cannot reproduce exactly (softcapping, scaled or LoRA-wrapped
  heads) use the model's own loss.
- LoRA layers add their product into the base output inside the GEMM, forward and backward
  (trainer/models/fused_lora.py): peft's separate scale and add passes were a large part of the
  elementwise time in a GPU profile.
- Liger's RMSNorm / SwiGLU / RoPE kernels are patched in on CUDA when installed, unless the
  layers are compiled (inductor fuses the same elementwise work, and Liger's Triton calls would
  break the compiled graph).
- Compile: regional (each decoder layer, which share one compiled graph), dynamic shapes for
  padded batches (a new length does not recompile), static for packed ones (one shape).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

from trainer.core import settings
from trainer.config.training import TrainConfig

CHUNK_ROWS = 4096  # label positions per cross-entropy chunk: [4096, 128256] fp32 logits = 2 GB


def flash_attention_available() -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None


def liger_available(device) -> bool:
    return (
        device.type == "cuda"
        and not settings.switched_off("FINETUNE_LIGER")
        and importlib.util.find_spec("liger_kernel") is not None
    )


def plan_packing(cfg: TrainConfig, device) -> tuple[bool, str | None, int]:
    """(flatten rows?, attention implementation or None for the default, fixed packed length or 0).

    Flattened rows save compute only where attention skips the block-diagonal mask's zeros:
    "auto" flattens with flash-attention only (measured on an H100 with ~100-token rows,
    length-bucketed sdpa beat flex attention: 26.4k vs 22.6k tokens/s).
    """
    flatten = bool(cfg.batch_tokens) and (
        cfg.packing == "flatten" or (cfg.packing == "auto" and flash_attention_available())
    )
    if not flatten or device.type != "cuda":
        return flatten, None, cfg.batch_tokens if flatten and cfg.compile else 0
    if flash_attention_available():
        return True, "flash_attention_2", cfg.batch_tokens if cfg.compile else 0
    return True, "flex_attention", cfg.batch_tokens  # one shape: the flex kernel compiles once


def build_model(cfg: TrainConfig, model_dir: Path, device, attn: str | None = None):
    """The model to train: base weights in bf16 on CUDA (fp32 on CPU), kernels, LoRA."""
    from transformers import AutoModelForCausalLM

    from trainer.models import fused_lora
    from trainer.core import settings

    dtype = torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    # method=qlora: the frozen base in 4-bit NF4 (bitsandbytes), loaded straight onto this rank's device
    quantized = (
        {"quantization_config": qlora_config(dtype), "device_map": {"": str(device)}} if cfg.method == "qlora" else {}
    )
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype, **({"attn_implementation": attn} if attn else {}), **quantized
    )
    if not quantized:
        model = model.to(device)
    if liger_available(device) and not cfg.compile:  # compiled layers: inductor fuses these itself
        _apply_liger(model)
    if quantized:
        from peft import prepare_model_for_kbit_training

        # norms and embeddings to float32, inputs that carry gradients through checkpointed 4-bit layers
        model = prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=cfg.gradient_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    elif cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if cfg.method == "full":
        return model
    from peft import LoraConfig, get_peft_model

    targets = cfg.lora_target_modules
    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        task_type="CAUSAL_LM",
        target_modules=targets if targets == "all-linear" else [t.strip() for t in targets.split(",")],
        modules_to_save=["embed_tokens"] if cfg.lora_train_embeddings else None,
        # keeps a tied lm_head tied to the trained embedding copy, so merge gives the same model
        ensure_weight_tying=cfg.lora_train_embeddings and bool(model.config.tie_word_embeddings),
        use_dora=cfg.method == "dora",  # the weight's magnitude trained apart from its direction
    )
    # The fused layers replace plain LoRA on nn.Linear only: DoRA's magnitude and the 4-bit base are peft's.
    if cfg.method == "lora" and not settings.switched_off("FINETUNE_FUSED_LORA"):
        fused_lora.register(lora)  # same adapters, scale and add inside the matmuls (trainer/models/fused_lora.py)
    return get_peft_model(model, lora)


# In an adapter trained over a 4-bit base (method=qlora): the quantization it was trained against.
BASE_QUANTIZATION = "base_quantization.json"


def skip_bitsandbytes(method: str = "", adapter_dir: Path | None = None) -> bool:
    """At an entry point, before peft is imported: unless this process loads a 4-bit base (method=qlora, or
    an adapter trained over one: BASE_QUANTIZATION), bitsandbytes is made absent for it. peft imports
    bitsandbytes whenever it is installed, and that import wraps its kernels in torch.compile, which imports
    inductor: 1.4 s of every training rank's, merge's and evaluation's start on CPU (2026-11-27), and
    nothing there uses it. A None in sys.modules is Python's own "not installed" (an import raises
    ImportError, importlib.util.find_spec answers None, which is what peft and transformers ask). Only where
    the whole process's work is known: a 4-bit load later in the same process would find it missing (a KFP
    component's body is such a place: KFP runs each in a process of its own). Returns whether it was skipped."""
    if method == "qlora" or (adapter_dir is not None and (Path(adapter_dir) / BASE_QUANTIZATION).is_file()):
        return False
    if "peft" in sys.modules:  # too late: it has imported bitsandbytes already, if installed
        return False
    sys.modules.setdefault("bitsandbytes", None)  # type: ignore[arg-type]  # None: Python's "import fails here"
    return sys.modules["bitsandbytes"] is None


def qlora_config(dtype):
    """QLoRA's base: NF4 with double quantization, computing in `dtype` (bf16 on GPUs that have it, else fp32)."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype
    )


def load_base(model_dir: Path, adapter_dir: Path | None = None, device: str = "cpu"):
    """The base model an adapter was trained on, in the model's dtype. For a QLoRA adapter that is the
    base through the same NF4 round trip (quantized, then de-quantized): merged or served with it, the
    adapter sees the weights it was trained against, and merged logits equal the trained model's."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if adapter_dir is None or not (Path(adapter_dir) / BASE_QUANTIZATION).is_file():
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto").to(device)
    dtype = getattr(AutoConfig.from_pretrained(model_dir), "dtype", None) or torch.float32
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype, quantization_config=qlora_config(dtype), device_map={"": device}
    )
    return model.dequantize(dtype=dtype)


def _apply_liger(model) -> None:
    """Liger's RMSNorm, SwiGLU and RoPE kernels in place (the loss is handled by LossModel)."""
    try:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        _apply_liger_kernel_to_instance(
            model=model, rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=False
        )
    except (ImportError, TypeError, ValueError, AttributeError) as err:  # an architecture Liger does not know
        print(f"liger-kernel installed but not applied to {type(model).__name__}: {err}", flush=True)


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """sum over rows of cross_entropy(h @ w.T, target) / denom, a chunk of rows at a time.

    The gradients are computed during the forward pass, chunk by chunk (as Liger's kernel
    does), so neither the logits nor their gradient ever exist for more than one chunk.
    """

    @staticmethod
    def forward(ctx, h, w, target, denom: float, chunk: int):
        grad_h = torch.empty_like(h) if ctx.needs_input_grad[0] else None
        acc = torch.promote_types(h.dtype, torch.float32)  # bf16 logits, fp32 softmax and sums
        grad_w = torch.zeros_like(w, dtype=acc) if ctx.needs_input_grad[1] else None
        total = torch.zeros((), dtype=acc, device=h.device)
        for s in range(0, h.shape[0], chunk):
            hc, tc = h[s : s + chunk], target[s : s + chunk]
            logits = (hc @ w.T).to(acc)
            lse = torch.logsumexp(logits, dim=-1)
            total += (lse - logits.gather(1, tc[:, None]).squeeze(1)).sum()
            if grad_h is None and grad_w is None:
                continue
            g = torch.exp(logits - lse[:, None])  # softmax, in place of the logits
            g[torch.arange(len(tc), device=g.device), tc] -= 1
            g = (g / denom).to(h.dtype)
            if grad_h is not None:
                grad_h[s : s + chunk] = g @ w
            if grad_w is not None:
                grad_w += (g.T @ hc).to(acc)
        ctx.save_for_backward(
            grad_h if grad_h is not None else torch.empty(0),
            grad_w.to(w.dtype) if grad_w is not None else torch.empty(0),
        )
        return total / denom

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w = ctx.saved_tensors
        return (
            grad_h * grad_out if ctx.needs_input_grad[0] else None,
            grad_w * grad_out if ctx.needs_input_grad[1] else None,
            None,
            None,
            None,
        )


def chunked_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, chunk: int = CHUNK_ROWS
) -> torch.Tensor:
    """Mean cross-entropy of `h @ weight.T` against `target` (no ignored entries), without
    materializing more than `chunk` rows of logits; 0 (with gradients) for no rows."""
    if h.shape[0] == 0:
        return (h.sum() + weight.sum()) * 0.0
    return _ChunkedLinearCrossEntropy.apply(h, weight, target, float(h.shape[0]), chunk)


class LossModel(torch.nn.Module):
    """`model(**batch) -> mean next-token loss` over the labelled positions (labels != -100),
    the same value as the transformers model's own `.loss`, computed without full logits.
    Wrap this in DDP, so that gradient synchronisation sees the whole forward pass."""

    def __init__(self, model, device, autocast: bool | None = None):
        super().__init__()
        self.model = model
        # peft keeps adapter weights in fp32 on a bf16 base and casts every LoRA layer's input to
        # fp32 to match: a [tokens, features] fp32 copy per adapted layer, saved for backward.
        # Instead, bf16 autocast with that cast off: the (tiny) fp32 adapter weights are cast to
        # bf16, the inputs stay as they are, and the adapters still train in fp32. Measured on
        # CPU in bf16 (Llama-1B layer shapes): 27% fewer bytes saved for backward, loss equal
        # within 3e-5 (tests/unit/test_model.py). Default: on CUDA with a bf16 base and adapters.
        # trainer/models/fused_lora.py's layers (the default) compute in the input's dtype anyway; this
        # still covers FINETUNE_FUSED_LORA=0 and the layers the fused path hands back to peft.
        from peft.tuners.tuners_utils import BaseTunerLayer

        self.tuners = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
        base_dtype = next(model.parameters()).dtype
        # Not with gradient checkpointing: its recompute runs in backward, outside this forward's
        # switch, where peft's cast is back on, and the recomputed tensors would differ in dtype.
        checkpointing = any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
        self.autocast = (
            (device.type == "cuda" and base_dtype == torch.bfloat16 and bool(self.tuners) and not checkpointing)
            if autocast is None
            else autocast
        )
        self.device_type = device.type
        causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        head, config = causal_lm.get_output_embeddings(), causal_lm.config
        plain = (
            type(head) is torch.nn.Linear
            and head.bias is None
            and hasattr(causal_lm, "model")
            and not any(
                getattr(config, a, None)
                for a in ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")
            )
        )
        self.backbone: Any = causal_lm.model if plain else None
        self.head: Any = head if plain else None
        self.liger = None
        if plain and liger_available(device):
            from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

            self.liger = LigerFusedLinearCrossEntropyLoss()

    @property
    def fused(self) -> str:
        return "liger" if self.liger is not None else "chunked" if self.head is not None else "none"

    def forward(self, input_ids, labels, label_positions=None, **kwargs):
        """`label_positions` (from `label_positions()`, made on the host before the batch moves)
        spares the device a sync: selecting the labelled positions with a boolean mask on the
        device makes the host wait for their count."""
        with self._mixed():
            if self.head is None:
                return self.model(input_ids=input_ids, labels=labels, use_cache=False, **kwargs).loss
            hidden = self.backbone(input_ids=input_ids, use_cache=False, **kwargs).last_hidden_state
        if label_positions is None:
            label_positions = label_positions_of(labels)
        h = hidden[:, :-1].reshape(-1, hidden.shape[-1]).index_select(0, label_positions)
        t = labels[:, 1:].reshape(-1).index_select(0, label_positions)
        if self.liger is not None and h.shape[0]:  # no labelled position: Liger's mean is 0/0
            return self.liger(self.head.weight, h, t)
        return chunked_cross_entropy(h, self.head.weight, t)

    @contextlib.contextmanager
    def _mixed(self):
        """bf16 autocast without peft's input upcast (see __init__); a no-op when off. The flag
        is what peft.helpers.disable_input_dtype_casting sets, without its walk over every
        module on each call."""
        if not self.autocast:
            yield
            return
        for m in self.tuners:
            m.cast_input_dtype_enabled = False
        try:
            with torch.autocast(self.device_type, dtype=torch.bfloat16):
                yield
        finally:
            for m in self.tuners:
                m.cast_input_dtype_enabled = True


def label_positions_of(labels: torch.Tensor) -> torch.Tensor:
    """Flat indices into labels[:, 1:] of the positions that carry a label (next-token targets)."""
    return (labels[:, 1:].reshape(-1) != -100).nonzero().squeeze(1)


def decoder_layers(model) -> list[torch.nn.Module]:
    """The repeated transformer blocks (LlamaDecoderLayer, Qwen2DecoderLayer, ...)."""
    return [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]


def compile_layers(model, dynamic: bool, backend: str = "inductor") -> int:
    """Compile each decoder layer in place (regional compilation: the layers share one graph,
    so compile time does not grow with depth, and the loss and embedding stay eager). With
    `dynamic`, sequence and batch sizes are symbolic from the start, so batches of new lengths
    do not recompile. Errors fall back to eager with a warning rather than stopping training.
    Returns the number of layers compiled."""
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True
    layers = decoder_layers(model)
    for layer in layers:
        layer.compile(backend=backend, dynamic=dynamic)
    return len(layers)
