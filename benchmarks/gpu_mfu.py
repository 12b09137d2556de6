"""python -m benchmarks.gpu_mfu [--steps 30] [--batch-tokens 16384] [--peak-tflops auto]

LoRA fine-tuning throughput and model FLOPs utilisation (MFU) on one CUDA GPU: a model with
Llama-3.2-1B's shape (16 layers, hidden 2048, GQA 32/8 heads, MLP 8192, vocab 128256) and
random weights, bf16, our trainer (token-budget batches; flattened with flash-attention
when installed), the built-in function-calling data. Exits with a message when CUDA is absent.

MFU = achieved model FLOPs / the GPU's dense bf16 peak, counting 6 x parameters per token
plus attention (12 x layers x hidden x sequence length), the PaLM convention; LoRA skips the
frozen weights' gradients, so the hardware does about 2/3 of that work: the "hardware
utilisation" column shows it with 4 x parameters per token instead.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


def build_1b_shaped(out: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer import builtin_model

    tok = builtin_model.build_tokenizer()
    cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, rope_theta=500000.0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-tokens", type=int, default=16384)
    parser.add_argument("--peak-tflops", default="auto")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_mfu needs a CUDA GPU; none is visible here (torch.cuda.is_available() is False)")
    name = torch.cuda.get_device_name()
    peak = float(args.peak_tflops) if args.peak_tflops != "auto" else next(
        (v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    if peak is None:
        sys.exit(f"unknown GPU {name!r}: pass --peak-tflops (dense bf16 TFLOPs)")

    from benchmarks.common import local_s3
    from trainer import sources
    from trainer.config import TrainConfig
    from trainer.report import table
    from trainer.storage import Store
    from trainer.train import train

    server = local_s3()
    store = Store.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        model_uri, _ = store.put_tree(build_1b_shaped(Path(tmp) / "m"), "models")
    data_uri, _ = sources.deliver_dataset("builtin:function-calling", "", store)
    cfg = TrainConfig(model_uri=model_uri, dataset_uri=data_uri, output_prefix="runs/mfu", max_steps=args.steps,
                      batch_tokens=args.batch_tokens, learning_rate=2e-4, checkpoint_every=10**6, log_every=5,
                      max_seq_len=512)
    m = train(cfg, store)["metrics"]
    server.stop()
    n_params = 1.236e9
    seq = m["train_tokens"] / m["train_steps"]  # tokens per step; rows are ~100 tokens each
    attn = 12 * 16 * 2048 * 100  # per token, at the rows' ~100-token length
    tps = m["tokens_per_second"]
    mfu = tps * (6 * n_params + attn) / (peak * 1e12)
    hfu = tps * (4 * n_params + attn) / (peak * 1e12)
    print(table([(name, f"{tps:.0f}", f"{seq:.0f}", f"{mfu:.1%}", f"{hfu:.1%}", f"{m['peak_memory_mb']:.0f}")],
                ("GPU", "tokens/s", "tokens/step", "MFU (6N)", "hardware util. (4N)", "peak MB")))


if __name__ == "__main__":
    main()
