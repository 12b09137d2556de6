"""Distributed LoRA / full fine-tuning recipe (torch DDP + transformers + peft), resumable.

Run:
  torchrun --nproc-per-node 2 -m trainer train --model-uri s3://... --dataset-uri s3://... \\
      --output-prefix runs/demo
  (one process: python -m trainer train ...; two nodes: set PET_NNODES / PET_NODE_RANK /
  PET_MASTER_ADDR on each, as the PyTorchJob operator does, and run the same command)

Shape: setup (process group, data, model, resume) / train (step loop, checkpoints) /
cleanup (rank 0 saves and uploads the result). Only rank 0 logs, writes files and talks to
the bucket for outputs; every rank reads inputs from the bucket itself, exactly as pods of
a PyTorchJob would.

Resilience: a restarted run (the local launcher restarting the job, or the PyTorchJob
restarting its pods) resumes from the newest complete checkpoint of the same output_prefix, at the same
step and data position. On SIGTERM every rank stops at the next step boundary, rank 0
writes and uploads a checkpoint within shutdown_grace_s, and the process exits with 143
so that the launcher restarts it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trainer import data
from trainer.batching import batches, check_rows, collate, collate_packed, real_tokens as count_tokens
from trainer.checkpoint import Checkpointer, rng_state
from trainer.config import TrainConfig
from trainer.storage import Store

MASTER = 0


def _dist_setup():
    """(rank, world_size, device) from the env torchrun / the operator set; inits the process group."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo", device_id=
                                device if device.type == "cuda" else None)
    return rank, world, device


def flash_attention_available() -> bool:
    import importlib.util

    import torch

    return torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None


class _Board:
    """TensorBoard event files on rank 0, uploaded next to the checkpoints
    (`<output_prefix>/tensorboard/`), so `tensorboard --logdir` on a copy of that prefix
    shows the run while it trains."""

    def __init__(self, store: Store, output_prefix: str):
        from torch.utils.tensorboard import SummaryWriter

        self.store, self.prefix = store, f"{output_prefix}/tensorboard"
        self.dir = tempfile.mkdtemp(prefix="tb-")
        self.writer = SummaryWriter(self.dir)

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.writer.add_scalar(tag, value, step)

    def upload(self) -> None:
        self.writer.flush()
        self.store.put_dir(self.dir, self.prefix)


def _peak_memory_mb(device) -> float:
    """Peak GPU memory on CUDA, else peak resident memory of this process."""
    import resource

    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _progress(rank: int):
    """say(stage, step): rank 0 prints a progress line for launchers' watchdogs (trainer.watchdog)."""
    from trainer.watchdog import progress_line

    def say(stage: str, step: int = 0) -> None:
        if rank == MASTER:
            print(progress_line(stage, step), flush=True)
    return say


def _install_sigterm() -> dict[str, bool]:
    """A flag set by SIGTERM; checked at step boundaries (never mid-step)."""
    stop = {"flag": False}

    def handler(signum, frame):
        stop["flag"] = True

    signal.signal(signal.SIGTERM, handler)
    return stop


def _agreed(flag: bool, world: int, device) -> bool:
    """True on every rank when any rank has the flag (one tiny all-reduce per step)."""
    if world == 1:
        return flag
    import torch
    import torch.distributed as dist

    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def build_model(cfg: TrainConfig, model_dir: Path, device):
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    attn = {"attn_implementation": "flash_attention_2"} if cfg.packing != "pad" and flash_attention_available() else {}
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **attn).to(device)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if cfg.method == "full":
        return model
    from peft import LoraConfig, get_peft_model

    targets = cfg.lora_target_modules
    lora = LoraConfig(
        r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, task_type="CAUSAL_LM",
        target_modules=targets if targets == "all-linear" else [t.strip() for t in targets.split(",")],
        modules_to_save=["embed_tokens"] if cfg.lora_train_embeddings else None,
        # keeps a tied lm_head tied to the trained embedding copy, so merge gives the same model
        ensure_weight_tying=cfg.lora_train_embeddings and bool(model.config.tie_word_embeddings),
    )
    return get_peft_model(model, lora)


def train(cfg: TrainConfig, store: Store | None = None) -> dict[str, Any]:
    """Run the recipe; on rank 0 returns the result written to `<output_prefix>/result.json`."""
    import torch
    import torch.distributed as dist
    from tqdm import tqdm
    from transformers import AutoTokenizer, get_scheduler

    cfg.validate()
    say = _progress(int(os.environ.get("RANK", 0)))
    say("setup: process group")
    rank, world, device = _dist_setup()
    torch.manual_seed(cfg.seed)
    store = store or Store.from_env()

    # -- setup: every rank reads its inputs from the bucket (cached per node by content hash)
    say("setup: downloading model and data")
    model_dir = store.get_tree(cfg.model_uri)
    data_dir = store.get_tree(cfg.dataset_uri)
    say("setup: tokenizing")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    examples, skipped = data.encode_all(data.read_jsonl(data_dir / "train.jsonl"), tokenizer, cfg.max_seq_len)
    eval_examples = data.encode_all(data.read_jsonl(data_dir / "eval.jsonl")[:64], tokenizer, cfg.max_seq_len)[0]
    check_rows(len(examples), cfg.batch_size, world, cfg.batch_tokens)  # before the model loads
    say("setup: loading model")
    model = build_model(cfg, model_dir, device)
    mean_len = sum(len(e["input_ids"]) for e in examples) / len(examples)
    micro_tokens = cfg.batch_tokens or cfg.batch_size * mean_len
    accum = max(1, math.ceil(cfg.tokens_per_step / (micro_tokens * world))) if cfg.tokens_per_step else 1
    # Flattened rows save compute only where attention skips the block-diagonal mask's zeros
    # (flash-attention varlen); elsewhere the packed sequence pays full quadratic attention.
    flatten = bool(cfg.batch_tokens) and (cfg.packing == "flatten" or (cfg.packing == "auto" and
                                                                        flash_attention_available()))
    collate_fn = collate_packed if flatten else (lambda rows: collate(rows, tokenizer.pad_token_id))
    if rank == MASTER:
        print(f"{len(examples)} rows (mean {mean_len:.0f} tokens), {world} process(es), "
              f"{('%s <= %d tokens' % ('flattened' if flatten else 'length-bucketed', cfg.batch_tokens)) if cfg.batch_tokens else '%d rows' % cfg.batch_size} "
              f"per micro-batch, {accum} micro-batch(es) per step", flush=True)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and cfg.max_seq_len > limit:  # Hub models: known only once loaded
        from trainer.errors import UserError

        raise UserError(f"max_seq_len={cfg.max_seq_len} exceeds the model's context length {limit}; "
                        f"set max_seq_len <= {limit}")
    ddp = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    if cfg.compile and device.type == "cuda":
        ddp = torch.compile(ddp)
    elif cfg.compile and rank == MASTER:
        print("compile=true ignored: torch.compile is enabled on CUDA only", flush=True)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay,
                                  fused=device.type == "cuda")
    scheduler = get_scheduler(cfg.lr_scheduler, optimizer, num_warmup_steps=int(cfg.warmup_ratio * cfg.max_steps),
                              num_training_steps=cfg.max_steps)

    # -- resume: the newest complete checkpoint of this output prefix, if any
    ckpt = Checkpointer(store, cfg.output_prefix, cfg.keep_checkpoints, rank)
    history: list[dict[str, float]] = []
    done, tokens_before, seconds_before, restarts = 0, 0, 0.0, 0
    window_loss, window_n = 0.0, 0  # this rank's losses since the last log line
    say("setup: resuming")
    latest = ckpt.latest()
    if latest is not None:
        state, mine = ckpt.load(latest, model, optimizer, scheduler, rank)
        window_loss, window_n = mine["window"]
        done, history = state["step"], state["history"]
        tokens_before, seconds_before, restarts = state["train_tokens"], state["train_seconds"], state["restarts"] + 1
        if rank == MASTER:
            print(f"resuming from checkpoint step {done} of {cfg.max_steps} (restart {restarts})", flush=True)

    stop = _install_sigterm()
    board = _Board(store, cfg.output_prefix) if rank == MASTER else None

    def measure_eval(step: int) -> None:
        """Rank 0: eval loss on a few held-out rows; the other ranks wait at the next collective."""
        if rank != MASTER or not eval_examples:
            return
        from trainer.evaluate import eval_loss

        model.eval()
        value = eval_loss(model, eval_examples, tokenizer.pad_token_id)
        model.train()
        history.append({"step": step, "eval_loss": value})
        board.scalar("eval/loss", value, step)

    def checkpoint(step: int) -> None:
        """Collective: gathers every rank's RNG and log window; rank 0 writes and uploads."""
        rngs = [{"rng": rng_state(), "window": [window_loss, window_n]}]
        if world > 1:
            rngs = [None] * world
            dist.all_gather_object(rngs, {"rng": rng_state(), "window": [window_loss, window_n]})
        tokens = real_tokens.clone()
        if world > 1:
            dist.all_reduce(tokens)
        ckpt.save(step, model, optimizer, scheduler, rngs, {
            "history": history, "train_tokens": tokens_before + int(tokens.item()), "restarts": restarts,
            "train_seconds": seconds_before + time.perf_counter() - start})

    # -- train
    stream = batches(examples, cfg.batch_size, rank, world, cfg.seed, start=done * accum,
                     batch_tokens=cfg.batch_tokens, flatten=flatten)
    real_tokens = torch.zeros((), dtype=torch.long)
    bar = tqdm(total=cfg.max_steps, initial=done, desc="train", unit="step", disable=rank != MASTER, mininterval=2,
               dynamic_ncols=True)
    ddp.train()
    say("train", done)
    start = time.perf_counter()
    for step in range(done + 1, cfg.max_steps + 1):
        step_loss = 0.0
        for micro in range(accum):
            batch = {k: v.to(device) for k, v in collate_fn(next(stream)).items()}
            # Gradients are all-reduced only on the last micro-batch of a step.
            sync = world == 1 or micro == accum - 1
            with contextlib.nullcontext() if sync else ddp.no_sync():
                loss = ddp(**batch, use_cache=False).loss / accum
                loss.backward()
            step_loss += loss.item()
            real_tokens += count_tokens(batch)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        window_loss, window_n = window_loss + step_loss, window_n + 1
        if step % cfg.log_every == 0 or step == cfg.max_steps:
            mean = torch.tensor(window_loss / window_n, device=device)
            if world > 1:  # SUM then divide: gloo has no AVG
                dist.all_reduce(mean)
                mean /= world
            history.append({"step": step, "loss": mean.item(), "lr": scheduler.get_last_lr()[0]})
            elapsed = time.perf_counter() - start
            if board:
                board.scalar("train/loss", mean.item(), step)
                board.scalar("train/lr", scheduler.get_last_lr()[0], step)
                board.scalar("train/tokens_per_second", real_tokens.item() * world / elapsed, step)
            # tokens/s estimated from this rank's count: an all-reduce per log line is not worth it
            bar.set_postfix(loss=f"{mean.item():.3f}", tok_s=f"{int(real_tokens.item() * world / elapsed)}")
            window_loss, window_n = 0.0, 0
            say("train", step)
        bar.update(1)
        if _agreed(stop["flag"], world, device):  # SIGTERM on any rank: all stop at this step
            checkpoint(step)
            if rank == MASTER:
                saved = ckpt.wait(timeout=cfg.shutdown_grace_s)
                print(f"SIGTERM: checkpoint at step {step} {'uploaded' if saved else 'NOT uploaded in time'}; "
                      f"exiting for a restart", flush=True)
            # Exit hard: a normal interpreter exit tears down the process group, which can hang
            # once a peer has gone, and would hold up torchrun's exit and the restart.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(143)
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            measure_eval(step)
        if step % cfg.checkpoint_every == 0 and step < cfg.max_steps:
            checkpoint(step)
            if board:
                board.upload()
    bar.close()
    if done < cfg.max_steps:
        checkpoint(cfg.max_steps)  # a crash while writing the result resumes straight to cleanup
    if board:
        board.upload()
    ckpt.wait()
    wall = seconds_before + time.perf_counter() - start
    if world > 1:
        dist.all_reduce(real_tokens)
    real_tokens += tokens_before

    # -- cleanup: rank 0 saves, uploads, and writes the result last
    result: dict[str, Any] = {}
    say("cleanup: saving the result", cfg.max_steps)
    if rank == MASTER:
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            uri, manifest = store.put_tree(tmp, "models")
        final = next(h["loss"] for h in reversed(history) if "loss" in h)
        result = {
            "output_uri": uri, "method": cfg.method, "output_bytes": manifest["total_bytes"],
            "metrics": {"train_loss": final, "train_steps": float(cfg.max_steps), "world_size": float(world),
                        "train_tokens": float(real_tokens.item()), "tokens_per_second": real_tokens.item() / wall,
                        "train_seconds": wall, "skipped_long_rows": float(skipped), "restarts": float(restarts),
                        "checkpoint_bytes": float(ckpt.last_bytes),
                        "checkpoint_upload_seconds": float(ckpt.last_upload_s or 0.0),
                        "grad_accum": float(accum), "peak_memory_mb": _peak_memory_mb(device),
                        "perplexity": math.exp(min(final, 50.0))},
            "history": history, "config": cfg.asdict(),
            "tensorboard_uri": store.uri(f"{cfg.output_prefix}/tensorboard"),
        }
        store.put_json(f"{cfg.output_prefix}/result.json", result)
        print(json.dumps({"train_result": result["metrics"], "output_uri": uri}), flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return result
