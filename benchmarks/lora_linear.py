"""python -m benchmarks.lora_linear [--tokens N] [--repeats 5] [--shape 1b|8b] [--json out.json]

One training step's worth of LoRA linear layers, peft's `lora.Linear` against
`trainer.models.fused_lora.FusedLoraLinear`, on the layer shapes of one Llama decoder block (q, k, v,
o, gate, up, down), forward + backward, with the same weights and the same input, the way
the trainer runs them: on CUDA a bf16 base with fp32 adapters under bf16 autocast and peft's
input upcast off (trainer.models.model.LossModel), on CPU fp32. Interleaved (peft, fused, peft, ...);
prints the median time of each, the ratio, the largest output/gradient difference, and on
CUDA the peak memory above the weights.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import torch

SHAPES = {  # hidden, intermediate, kv width: Llama-3.2-1B and Llama-3.1-8B
    "1b": (2048, 8192, 512),
    "8b": (4096, 14336, 1024),
}


def layers(shape: str, fused: bool, device, dtype) -> list:
    from peft import LoraConfig
    from peft.tuners.lora import Linear as LoraLinear

    from trainer.models.fused_lora import FusedLoraLinear

    hidden, inter, kv = SHAPES[shape]
    dims = [
        (hidden, hidden),
        (hidden, kv),
        (hidden, kv),
        (hidden, hidden),
        (hidden, inter),
        (hidden, inter),
        (inter, hidden),
    ]
    cls = FusedLoraLinear if fused else LoraLinear
    out = []
    for i, (fan_in, fan_out) in enumerate(dims):
        torch.manual_seed(i)
        base = torch.nn.Linear(fan_in, fan_out, bias=False, device=device, dtype=dtype).requires_grad_(False)
        layer = cls(base, "default", config=LoraConfig(r=16, lora_alpha=32), r=16, lora_alpha=32)
        layer.to(device)
        for p in (layer.lora_A["default"].weight, layer.lora_B["default"].weight):
            p.data = torch.randn_like(p, dtype=torch.float32) * 0.02  # fp32 adapters, B non-zero
        out.append(layer)
    return out


def step(mods: list, xs: list, autocast: bool) -> tuple[list, list]:
    """Forward + backward of every layer; returns outputs and gradients (input, A, B)."""
    ctx = torch.autocast(xs[0].device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    outs, grads = [], []
    for mod, x in zip(mods, xs):
        x = x.detach().requires_grad_(True)
        mod.cast_input_dtype_enabled = not autocast
        with ctx:
            y = mod(x)
        y.backward(torch.ones_like(y) / y.numel() ** 0.5)
        outs.append(y.detach())
        grads += [x.grad, mod.lora_A["default"].weight.grad, mod.lora_B["default"].weight.grad]
        mod.zero_grad(set_to_none=True)
    return outs, grads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=0, help="tokens per step (default 16384 on CUDA, 2048 on CPU)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    tokens = args.tokens or (16384 if cuda else 2048)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    variants = {name: layers(args.shape, name == "fused", device, dtype) for name in ("peft", "fused")}
    torch.manual_seed(0)
    xs = [torch.randn(tokens, m.in_features, device=device, dtype=dtype) for m in variants["peft"]]
    results = {name: step(mods, xs, cuda) for name, mods in variants.items()}  # warm-up and check
    diff = max(
        ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30)).item()
        for a, b in zip(sum(results["fused"], []), sum(results["peft"], []))
    )
    times: dict[str, list[float]] = {name: [] for name in variants}
    peak: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, mods in variants.items():
            if cuda:
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            sync()
            t0 = time.perf_counter()
            step(mods, xs, cuda)
            sync()
            times[name].append(time.perf_counter() - t0)
            if cuda:
                peak[name] = (torch.cuda.max_memory_allocated() - base) / 2**30
    med = {name: sorted(v)[len(v) // 2] * 1000 for name, v in times.items()}
    where = torch.cuda.get_device_name() if cuda else "CPU"
    print(
        f"{where}, {args.shape} block's 7 LoRA linears, {tokens} tokens, {dtype}, r16, fwd+bwd, "
        f"median of {args.repeats}"
    )
    for name in variants:
        mem = f", peak {peak[name]:.2f} GiB above inputs" if cuda else ""
        print(f"  {name:6s} {med[name]:8.2f} ms{mem}")
    print(
        f"  fused / peft time: {med['fused'] / med['peft']:.3f}  (speed-up {med['peft'] / med['fused']:.2f}x); "
        f"largest relative difference of outputs and gradients: {diff:.1e}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": where,
                    "tokens": tokens,
                    "shape": args.shape,
                    "ms": med,
                    "peak_gib": peak,
                    "max_rel_diff": diff,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
