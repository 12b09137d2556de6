"""A LoRA linear layer whose scale-and-add runs inside the matmuls.

peft's `lora.Linear` computes `base(x) + lora_B(lora_A(x)) * scaling` as three full-size
passes over the [tokens, out_features] output besides the matmuls (the B product, the scale,
the add), and autograd adds the same again on the way back (the scaled gradient, the sum of the
two input gradients). On an H100 profile of a 1B LoRA step (docs/performance.md, "On a GPU")
elementwise kernels took 44% of the step time. Here the LoRA product is accumulated into the
base output by the GEMM itself (`addmm_` with beta=1: cuBLAS reads the output once in its
epilogue), the scale is applied to the [tokens, r] intermediate, and the backward pass is five
matmuls with the input gradient's sum also inside a GEMM. What is saved for backward is the
layer's input (the same tensor the base layer saves) and the [tokens, r] intermediate.

The adapters are computed in the input's dtype (bf16 on a bf16 base, as under autocast) and
their gradients returned in the adapters' own dtype (fp32 by default: the optimizer state and
the update stay fp32). Everything the fast path does not cover (dropout > 0, DoRA and other
variants, LoRA biases, several or disabled adapters, merged weights, mixed-batch adapter names,
an input dtype other than the base weight's) goes through peft's own forward.

Installed through peft's custom-module hook (`LoraConfig._register_custom_module`), so the
adapter weights, their names, saving, loading and merging are peft's.
"""

from __future__ import annotations

import torch
from peft.tuners.lora import Linear as LoraLinear


# Asked once here, not in forward: torch 2.11's dynamo cannot trace torch.amp.is_autocast_available, so
# compile=true broke every decoder layer's graph at each LoRA layer and recompiled per projection shape
# (34 frames for 8 batch shapes on an H200, 2026-11-27; tests/integration/test_gpu.py).
_AUTOCAST_DEVICES = frozenset(
    t for t in ("cpu", "cuda", "xpu", "mps", "hpu", "mtia", "maia", "xla", "ipu") if torch.amp.is_autocast_available(t)
)


class _LoraLinearFunction(torch.autograd.Function):
    """y = x W^T + b + scale * (x A^T) B^T, with every add inside a GEMM."""

    @staticmethod
    def forward(ctx, x, weight, bias, lora_a, lora_b, scale: float):
        a, b = lora_a.to(x.dtype), lora_b.to(x.dtype)  # [r, in], [out, r]: tiny copies
        x2 = x.reshape(-1, x.shape[-1])
        xa = x2 @ a.T  # [tokens, r]
        y = torch.nn.functional.linear(x2, weight, bias)
        y.addmm_(xa, b.T, alpha=scale)
        ctx.save_for_backward(x, weight, lora_a, lora_b, xa)  # parameters: saving them costs nothing
        ctx.scale = scale
        return y.view(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, lora_a, lora_b, xa = ctx.saved_tensors
        a, b = lora_a.to(x.dtype), lora_b.to(x.dtype)
        need_x, need_w, need_bias, need_a, need_b, _ = ctx.needs_input_grad
        g = grad_y.reshape(-1, grad_y.shape[-1])
        x2 = x.reshape(-1, x.shape[-1])
        g_xa = (g @ b).mul_(ctx.scale)  # [tokens, r]: the scale on the small side
        grad_x = grad_w = grad_bias = grad_a = grad_b = None
        if need_x:
            grad_x = (g @ weight).addmm_(g_xa, a).view(x.shape)
        if need_w:
            grad_w = g.T @ x2
        if need_bias:
            grad_bias = g.sum(0)
        if need_a:
            grad_a = (g_xa.T @ x2).to(lora_a.dtype)
        if need_b:
            grad_b = (g.T @ xa).mul_(ctx.scale).to(lora_b.dtype)
        return grad_x, grad_w, grad_bias, grad_a, grad_b, None


class FusedLoraLinear(LoraLinear):
    """peft's LoRA Linear with the fused forward/backward above where it applies."""

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if args or kwargs or self.disable_adapters or self.merged or len(self.active_adapters) != 1:
            return super().forward(x, *args, **kwargs)
        name = self.active_adapters[0]
        base = self.base_layer
        if (
            name not in self.lora_A
            or name in self.lora_variant
            or not isinstance(self.lora_dropout[name], torch.nn.Identity)
            or self.lora_A[name].bias is not None
            or self.lora_B[name].bias is not None
            or type(base) is not torch.nn.Linear
            or x.dtype != base.weight.dtype
            or (
                x.device.type in _AUTOCAST_DEVICES
                and torch.is_autocast_enabled(x.device.type)
                and torch.get_autocast_dtype(x.device.type) != x.dtype
            )
        ):
            return super().forward(x, *args, **kwargs)
        return _LoraLinearFunction.apply(
            x, base.weight, base.bias, self.lora_A[name].weight, self.lora_B[name].weight, float(self.scaling[name])
        )


def register(lora_config) -> None:
    """Make peft build `FusedLoraLinear` for the nn.Linear layers `lora_config` targets."""
    lora_config._register_custom_module({torch.nn.Linear: FusedLoraLinear})
