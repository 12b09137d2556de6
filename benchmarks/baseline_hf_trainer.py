"""python -m benchmarks.baseline_hf_trainer MODEL_DIR TRAIN_JSONL --steps N --batch-size B --out result.json
       [--padding longest] [--bf16] [--trainer hf|trl] [--method lora|full] [--liger]

The baseline for benchmarks.train_throughput (CPU) and benchmarks.gpu_compare (CUDA): LoRA
fine-tuning written the common way: Hugging Face Trainer + peft, loss on all tokens, Trainer
defaults otherwise. By default every row is padded to max_length 512 (the usual Kubernetes
example); `--padding longest --bf16` is the stronger baseline (pad each batch to its longest
row, bf16 weights and autocast). Reports real (non-pad) tokens per second and peak memory
(GPU memory on CUDA, resident memory otherwise).

`--trainer trl` runs TRL's SFTTrainer (the `bench` extra) on the same pre-tokenized rows instead,
with the same settings: TRL 1.x turns gradient checkpointing on by default, which is set off here
as for every other trainer compared (memory is not short at these sizes, and it costs a third more
compute). `--method full` trains every weight (no peft); `--liger` turns on the trainer's own
`use_liger_kernel` (Liger's fused linear cross-entropy, RMSNorm, SwiGLU, RoPE), each trainer's best
setting on a GPU where liger-kernel is installed. Padding-free batches (TRL's `padding_free`) need
flash-attention, which the GPU machines lack: without it they attend across the whole packed batch.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time


def main() -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForSeq2Seq,
        Trainer,
        TrainerCallback,
        TrainingArguments,
        default_data_collator,
    )

    p = argparse.ArgumentParser()
    p.add_argument("model_dir")
    p.add_argument("train_jsonl")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--padding", choices=("max_length", "longest"), default="max_length")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--train-embeddings", action="store_true", help="peft modules_to_save=[embed_tokens]")
    p.add_argument("--trainer", choices=("hf", "trl"), default="hf")
    p.add_argument("--method", choices=("lora", "full"), default="lora")
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--liger", action="store_true", help="use_liger_kernel=True (liger-kernel installed)")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    tok = AutoTokenizer.from_pretrained(args.model_dir)
    rows = [json.loads(line) for line in open(args.train_jsonl)]
    need = args.steps * args.batch_size
    rows = (rows * (need // len(rows) + 1))[:need]  # several epochs when a step takes many rows
    texts = [tok.apply_chat_template(r["messages"], tools=r.get("tools"), tokenize=False) for r in rows]
    fixed = args.padding == "max_length"
    enc = tok(
        texts,
        padding="max_length" if fixed else False,
        truncation=True,
        max_length=args.max_length,
        add_special_tokens=False,
    )
    labels = [
        [t if m else -100 for t, m in zip(ids, mask)] for ids, mask in zip(enc["input_ids"], enc["attention_mask"])
    ]
    # a plain list of rows (Trainer takes any sized dataset): the GPU machines lack `datasets`
    ds = [
        {"input_ids": i, "attention_mask": m, "labels": lb}
        for i, m, lb in zip(enc["input_ids"], enc["attention_mask"], labels)
    ]
    real_tokens = sum(sum(m) for m in enc["attention_mask"])

    cuda = torch.cuda.is_available()
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.bfloat16 if args.bf16 else torch.float32)
    lora = LoraConfig(
        r=16,
        lora_alpha=32,
        lora_dropout=0.0,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
        modules_to_save=["embed_tokens"] if args.train_embeddings else None,
    )
    if args.method == "lora" and args.trainer == "hf":
        model = get_peft_model(model, lora)
    # Trainer wants an output folder even when it saves nothing: one of its own in TMPDIR, removed at exit
    # (a fixed /tmp/baseline-hf was left behind by every run, and shared by two at once).
    out_dir = tempfile.TemporaryDirectory(prefix="baseline-hf-")
    common = dict(
        output_dir=out_dir.name,
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        use_cpu=not cuda,
        bf16=args.bf16,
        dataloader_num_workers=0,
        disable_tqdm=True,
        gradient_checkpointing=False,
        use_liger_kernel=args.liger,
    )
    inner = default_data_collator if fixed else DataCollatorForSeq2Seq(tok, padding="longest", label_pad_token_id=-100)
    counts: list[int] = []  # real tokens of each batch, in order (accelerate collates one batch ahead)

    def counting(inner):
        def collate(features):
            batch = inner(features)
            mask = batch.get("attention_mask")
            counts.append(int(mask.sum()) if mask is not None else int(batch["input_ids"].numel()))
            return batch

        return collate

    class Half(TrainerCallback):
        """Steady state: the second half of the steps, timed as the trainer's own figure is."""

        def on_step_end(self, targs, state, control, **kwargs):
            if state.global_step == args.steps // 2:
                if cuda:
                    torch.cuda.synchronize()
                half.extend([time.perf_counter(), state.global_step])

    half: list = []
    if args.trainer == "trl":
        from datasets import Dataset
        from trl import SFTConfig, SFTTrainer

        # pre-tokenized rows (input_ids): TRL tokenizes nothing, and pads each batch to its longest row
        targs = SFTConfig(**common, max_length=None, padding_free=False, packing=False)
        trainer = SFTTrainer(
            model=model,
            args=targs,
            processing_class=tok,
            callbacks=[Half()],
            train_dataset=Dataset.from_list([{"input_ids": i} for i in enc["input_ids"]]),
            peft_config=lora if args.method == "lora" else None,
        )
        trainer.data_collator = counting(trainer.data_collator)  # TRL's own (its padding), counted the same way
    else:
        trainer = Trainer(
            model=model,
            args=TrainingArguments(**common),
            train_dataset=ds,
            data_collator=counting(inner),
            callbacks=[Half()],
        )
    start = time.perf_counter()
    trainer.train()
    end = time.perf_counter()
    seconds = end - start
    peak = (
        torch.cuda.max_memory_allocated() / 2**20 if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    json.dump(
        {
            "tokens_per_second": real_tokens / seconds,
            "train_seconds": seconds,
            "real_tokens": real_tokens,
            "padded_tokens": len(rows) * args.max_length if fixed else None,
            "peak_memory_mb": peak,
            **({"steady_tokens_per_second": sum(counts[half[1] : args.steps]) / (end - half[0])} if half else {}),
        },
        open(args.out, "w"),
    )


if __name__ == "__main__":
    main()
