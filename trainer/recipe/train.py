"""Distributed LoRA / full fine-tuning recipe (torch DDP + transformers + peft), resumable.

Run:
  torchrun --nproc-per-node 2 -m trainer train --model-uri s3://... --dataset-uri s3://... \\
      --output-prefix runs/demo
  (one process: python -m trainer train ...; two nodes: set PET_NNODES / PET_NODE_RANK /
  PET_MASTER_ADDR on each, as the PyTorchJob operator does, and run the same command)

Shape (as torchtune's recipes): `Recipe.setup` (process group, then `_setup_data`,
`_setup_model`, `_setup_batching`, `_setup_optimizer`, `_resume`), `Recipe.train` (the step
loop), `Recipe.save_checkpoint`, `Recipe.cleanup` (rank 0 saves and uploads the result). What a
checkpoint carries besides weights, optimizer and RNG is one `RunState` (trainer/recipe/runtime.py, with the
process group, TensorBoard, profiling and peak memory). Where MLFLOW_TRACKING_URI is set, rank 0 also logs the
settings and the losses to MLflow (trainer/core/tracking.py). Beside it: model.py, batching.py, shutdown.py
(SIGTERM), compile_trial.py (compile=true's trial).
Only rank 0 logs, writes files and talks to the bucket for outputs; every rank reads inputs
from the bucket itself, exactly as pods of a PyTorchJob would. Rank 0 prints progress lines
(trainer/core/watchdog.py) that launchers watch for stalls.

The loop does not wait on the device between micro-batches: losses and the non-finite flag
accumulate on the device and are read once per step (or per log step with one process).

Exit statuses: 0 done; 2 the input is invalid (UserError); 3 the loss or gradients became NaN
or infinite (nothing is saved as a result; a restart would fail the same way); 143 stopped
by SIGTERM (0 once the result is committed: the work is done); 203 a transient S3 or network
failure. Launchers restart only the last two kinds (trainer.core.exitcodes has the table; `python -m
trainer train` maps the transient failures).

Resilience: a restarted run (the local launcher restarting the job, or the PyTorchJob
restarting its pods) resumes from the newest complete checkpoint of the same output_prefix, at
the same step and data position. On SIGTERM every rank stops at the next step boundary, rank 0
writes and uploads a checkpoint, and the process exits with 143 so that the launcher restarts
it; a rank that does not reach a step boundary within shutdown_grace_s (stuck in setup, or in
a collective whose peer is gone) exits with 143 then, without a checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

from trainer import data
from trainer.data.batching import batches, bucket, check_rows, collate, collate_packed
from trainer.recipe.checkpoint import Checkpointer, rng_state
from trainer.recipe.compile_trial import CompileTrial, compile_metrics, compiled_graphs, say_compiled
from trainer.config.training import MAX_ACCUM, TrainConfig
from trainer.core.errors import UserError
from trainer.evaluate import losses
from trainer.core.exitcodes import EXIT_NONFINITE
from trainer.models.model import (
    LossModel,
    build_model,
    compile_layers,
    decoder_layers,
    label_positions_of,
    plan_packing,
)
from trainer.recipe.runtime import Board, RunState, dist_setup, peak_memory_mb, save_profile, start_profiler
from trainer.recipe.shutdown import COMMITTED, Shutdown, exit_now
from trainer.core.storage import Store
from trainer.core.tracking import Tracker
from trainer.core.watchdog import progress_line

MASTER = 0


class Recipe:
    """One training run: `setup()`, `train()`, `cleanup()`; `run()` does all three."""

    # The timer behind mark(), and so behind the compile trial's choice: a test scripts it, so
    # that the choice it checks does not depend on how busy the machine is.
    clock = staticmethod(time.perf_counter)
    eval_s = 0.0  # this process's seconds in measure_eval: not training (train_seconds, tokens/s)
    tracker = Tracker()  # MLflow: off until setup (rank 0, MLFLOW_TRACKING_URI set) turns it on

    def __init__(self, cfg: TrainConfig, store: Store | None = None):
        self.cfg = cfg.validate()
        self.given_store = store  # None: setup() makes one from the environment (Store.from_env)
        self.rank = int(os.environ.get("RANK", 0))

    def say(self, stage: str, step: int = 0) -> None:
        """Rank 0: a progress line for launchers' watchdogs (trainer.core.watchdog)."""
        if self.rank == MASTER:
            print(progress_line(stage, step), flush=True)

    def setup(self) -> None:
        import torch

        cfg = self.cfg
        COMMITTED.clear()  # an earlier run in this process committed its own result, not this one's
        self.shutdown = Shutdown(cfg.shutdown_grace_s)  # first: a rank stuck in setup must end too
        self.say("setup: process group")
        self.rank, self.world, self.device = dist_setup()
        torch.manual_seed(cfg.seed)
        self.store = self.given_store or Store.from_env()
        examples, model_dir = self._setup_data()
        self.say("setup: loading model")
        self._setup_model(model_dir)
        self._setup_batching(examples)
        self._setup_optimizer()
        self.say("setup: checkpoints")  # the newest one, if any, is resumed from
        self._resume(examples)
        self.board = Board(self.store, cfg.output_prefix) if self.rank == MASTER else None
        # MLflow where MLFLOW_TRACKING_URI is set (else a no-op): the settings that define the run, which a restart
        # logs again unchanged (MLflow refuses a param changed within a run: MAY_CHANGE_ON_RESUME's are left out)
        self.tracker = Tracker.from_env(run_name=cfg.output_prefix) if self.rank == MASTER else Tracker()
        self.tracker.log_params(cfg.run_settings())
        self.real_tokens = 0  # this rank's, since this process started

    def _setup_data(self) -> tuple[list[dict[str, list[int]]], pathlib.Path]:
        """Every rank reads its inputs from the bucket (cached per node by content hash): the
        training rows tokenized (long ones skipped and counted), up to 64 eval rows for the
        in-training eval loss, the tokenizer; returns (train examples, model directory)."""
        from transformers import AutoTokenizer

        cfg, store = self.cfg, self.store
        self.say("setup: downloading model and data")
        data_dir = store.get_tree(cfg.dataset_uri)
        # The data is small and the model may be many GB: too few rows fails before the model downloads
        # (rows skipped as too long are known only after tokenizing, below).
        with open(data_dir / "train.jsonl") as f:
            check_rows(sum(1 for line in f if line.strip()), cfg.batch_size, self.world, cfg.batch_tokens)
        model_dir = store.get_tree(cfg.model_uri)
        self.say("setup: tokenizing")
        self.tokenizer = tokenizer = AutoTokenizer.from_pretrained(model_dir)
        examples, self.skipped = data.encode_all(
            data.read_delivered(data_dir / "train.jsonl"), tokenizer, cfg.max_seq_len
        )
        self.eval_examples = data.encode_all(
            data.read_delivered(data_dir / "eval.jsonl")[:64], tokenizer, cfg.max_seq_len
        )[0]
        check_rows(len(examples), cfg.batch_size, self.world, cfg.batch_tokens, self.skipped)  # before the model loads
        return examples, model_dir

    def _setup_model(self, model_dir: pathlib.Path) -> None:
        """The model (LoRA / DoRA / QLoRA / full: trainer.models.model), compiled layers, the loss wrapper, DDP."""
        import torch

        cfg, device = self.cfg, self.device
        self.flatten, self.attn, self.packed_len = plan_packing(cfg, device)
        self.model = model = build_model(cfg, model_dir, device, self.attn)
        limit = getattr(model.config, "max_position_embeddings", None)
        if limit and cfg.max_seq_len > limit:  # Hub models: known only once loaded
            raise UserError(
                f"max_seq_len={cfg.max_seq_len} exceeds the model's context length {limit}; set max_seq_len <= {limit}"
            )
        self.graphs = [compiled_graphs()]  # dynamo's count, process-wide: at setup, at the window's ends
        if cfg.compile:
            # Packed batches have one shape (packed_len); padded ones vary in length: dynamic.
            compile_layers(model, dynamic=not self.packed_len)
        self.loss_model = LossModel(model, device)
        self.ddp = torch.nn.parallel.DistributedDataParallel(self.loss_model) if self.world > 1 else self.loss_model

    def _setup_batching(self, examples: list[dict[str, list[int]]]) -> None:
        """Micro-batches per step (tokens_per_step) and how rows become a batch; the plan to the log."""
        cfg, world = self.cfg, self.world
        mean_len = sum(len(e["input_ids"]) for e in examples) / len(examples)
        micro_tokens = cfg.batch_tokens or cfg.batch_size * mean_len
        self.accum = max(1, math.ceil(cfg.tokens_per_step / (micro_tokens * world))) if cfg.tokens_per_step else 1
        if self.accum > MAX_ACCUM:  # the pipeline refuses it earlier where batch_tokens is set; here for the CLI
            raise UserError(
                f"tokens_per_step={cfg.tokens_per_step} is {self.accum} micro-batches per optimizer step "
                f"(about {round(micro_tokens * world)} tokens each on {world} processes), more than "
                f"{MAX_ACCUM}: give at most {MAX_ACCUM * math.floor(micro_tokens * world)}, or 0 for one "
                "micro-batch per step"
            )
        pad = self.tokenizer.pad_token_id
        # Compiled padded batches are padded to a few bucket widths: on an H100 this read 24.2k
        # tokens/s against 20.5k with every length left to dynamic shapes (docs/performance.md).
        self.bucketed = cfg.compile  # off again if CompileTrial finds eager faster
        width = lambda rows: bucket(max(len(e["input_ids"]) for e in rows)) if self.bucketed else 0  # noqa: E731
        self.collate = (
            (lambda rows: collate_packed(rows, self.packed_len, pad))
            if self.flatten
            else (lambda rows: collate(rows, pad, width=width(rows)))
        )
        if self.rank == MASTER:
            per_micro = (
                f"{'flattened' if self.flatten else 'length-bucketed'} <= {cfg.batch_tokens} tokens"
                if cfg.batch_tokens
                else f"{cfg.batch_size} rows"
            )
            if self.skipped:  # never truncated: a cut row could lose every token it is trained on
                print(
                    f"{self.skipped} training rows longer than max_seq_len={cfg.max_seq_len} tokens skipped "
                    "(raise max_seq_len to keep them)",
                    flush=True,
                )
            print(
                f"{len(examples)} rows (mean {mean_len:.0f} tokens), {world} process(es), {per_micro} per "
                f"micro-batch, {self.accum} micro-batch(es) per step; attention {self.attn or 'default'}, "
                f"loss {self.loss_model.fused}{', compiled layers' if cfg.compile else ''}",
                flush=True,
            )
            if (
                self.flatten and self.attn is None
            ):  # CPU: sdpa with a block-diagonal mask, every cross-row pair computed
                print(
                    "packing=flatten here attends over the whole packed sequence behind a mask (no flash or flex "
                    "attention on this device): measured 2x slower than packing=auto's length-bucketed padding "
                    "on CPU (docs/performance.md); use packing=auto",
                    flush=True,
                )

    def _setup_optimizer(self) -> None:
        import torch
        from transformers import get_scheduler

        cfg = self.cfg
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay, fused=self.device.type == "cuda"
        )
        self.scheduler = get_scheduler(
            cfg.lr_scheduler,
            self.optimizer,
            num_warmup_steps=int(cfg.warmup_ratio * cfg.max_steps),
            num_training_steps=cfg.max_steps,
        )

    def _resume(self, examples: list[dict[str, list[int]]]) -> None:
        """The newest complete checkpoint of this output prefix, if any: weights, optimizer,
        scheduler, this rank's RNG and log window, the RunState; the batch stream from that step."""
        import torch

        cfg, rank = self.cfg, self.rank
        self.ckpt = Checkpointer(self.store, cfg.output_prefix, cfg.keep_checkpoints, rank)
        self.state = RunState()
        window = (0.0, 0)  # this rank's summed step losses since the last log line, and their count
        latest = self.ckpt.latest()
        if latest is not None:
            problem = cfg.resume_problem(self.ckpt.state(latest).get("settings", {}), cfg.output_prefix)
            if problem:  # before any weights load: a LoRA of another rank failed there with a size mismatch
                raise UserError(problem)
            saved, mine = self.ckpt.load(latest, self.model, self.optimizer, self.scheduler, rank)
            self.state, window = RunState.resumed(saved), mine["window"]
            if rank == MASTER:
                print(
                    f"resuming from checkpoint step {self.state.step} of {cfg.max_steps} "
                    f"(restart {self.state.restarts})",
                    flush=True,
                )
        self.window_loss = torch.tensor(float(window[0]), device=self.device, dtype=torch.float64)
        self.window_n = int(window[1])
        self.stream = batches(
            examples,
            cfg.batch_size,
            rank,
            self.world,
            cfg.seed,
            start=self.state.step * self.accum,
            batch_tokens=cfg.batch_tokens,
            flatten=self.flatten,
        )

    def train(self) -> None:
        import torch
        from tqdm import tqdm

        cfg, device, world = self.cfg, self.device, self.world
        done = self.state.step
        bar = tqdm(
            total=cfg.max_steps,
            initial=done,
            desc="train",
            unit="step",
            mininterval=2,
            disable=self.rank != MASTER,
            dynamic_ncols=True,
        )
        bad = torch.zeros((), dtype=torch.bool, device=device)  # a non-finite loss or gradient norm
        profiler = start_profiler(cfg.profile_steps, self.device, steps_left=cfg.max_steps - done)
        self.ddp.train()
        self.say("train", done)
        self.start = last_say = time.perf_counter()
        # Steady-state throughput is timed over the second half of the steps, once kernels are
        # compiled / JIT-ed and the allocator is warm: one device sync, there.
        self.half_step, self.half = done + max(1, (cfg.max_steps - done) // 2), None
        self.steady = None
        self.trial = (
            CompileTrial.plan(
                done,
                cfg.max_steps,
                decoder_layers(self.model),
                mark=self.mark,
                use_bucketing=lambda on: setattr(self, "bucketed", on),
                world=world,
                device=device,
                master=self.rank == MASTER,
            )
            if cfg.compile
            else None
        )
        for step in range(done + 1, cfg.max_steps + 1):
            if self.trial:
                self.trial.before(step)
            step_loss, norm = self._step()
            if cfg.compile and step == done + 1 and self.rank == MASTER:
                say_compiled(compiled_graphs() - self.graphs[0])
            if self.trial:
                self.trial.after(step)
            if (step == self.half_step and step < cfg.max_steps) or (step == cfg.max_steps and self.half):
                mark = self.mark()
                if self.half:  # the window ends here, before the final eval and checkpoint
                    self.steady = (mark[1] - self.half[1], mark[0] - self.half[0])  # this rank's tokens, s
                self.half = mark
                if cfg.compile:
                    self.graphs.append(compiled_graphs())
            bad |= ~torch.isfinite(step_loss) | ~torch.isfinite(norm)
            self.window_loss += step_loss
            self.window_n += 1
            if profiler:
                profiler.step()
            logs = step % cfg.log_every == 0 or step == cfg.max_steps
            evals, saves = step % cfg.eval_every == 0 or step == cfg.max_steps, step % cfg.checkpoint_every == 0
            stop = False
            if world > 1 or logs or evals or saves or self.shutdown.requested:
                stop, nonfinite = self._agreed(self.shutdown.requested, bad)
                if nonfinite:
                    self._fail_nonfinite(step)
            if logs:
                self._log(step, bar)
            bar.update(1)  # after the log's postfix: drawn first, the bar's 100% line showed the loss before
            if stop:  # after this step's log line: the resumed run must not lose it (nor fold it into the next)
                self._stop_for_sigterm(step)
            if logs or time.perf_counter() - last_say > 60:
                self.say("train", step)
                last_say = time.perf_counter()
            if evals:
                self.say("eval", step)
                self.measure_eval(step)
            if saves and step < cfg.max_steps:
                self.say("checkpoint", step)
                self.save_checkpoint(step)
                if self.board:
                    self.board.upload()
        bar.close()
        if profiler:
            save_profile(profiler, self.store if self.rank == MASTER else None, cfg.output_prefix, self.device)

    def mark(self) -> tuple[float, int]:
        """(now, less the seconds spent measuring the eval loss; this rank's real tokens so far), after the device
        has finished its queued work: the one device sync behind every timing (steady throughput, the compile
        trial)."""
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return self.clock() - self.eval_s, self.real_tokens  # the eval loss's seconds are not training's

    def _step(self):
        """One optimizer step over `accum` micro-batches: (summed loss, gradient norm), both left
        on the device."""
        import torch
        import torch.distributed as dist

        step_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        micro_batches = []
        for _ in range(self.accum):
            rows = next(self.stream)
            self.real_tokens += sum(len(e["input_ids"]) for e in rows)  # host-side: no device sync
            micro_batches.append(self._to_device(self.collate(rows)))
        # The step's loss is the mean over all its labelled tokens, on every rank (as transformers'
        # Trainer with num_items_in_batch): each micro-batch's mean is weighted by its share of
        # the tokens, times world because DDP averages gradients over ranks. Shapes only: no sync.
        counts = [b["label_positions"].numel() for b in micro_batches]
        denom = float(max(1, sum(counts)))
        if self.world > 1:
            denom = torch.full((), denom if sum(counts) else 0.0, device=self.device)  # a fill: no host copy
            dist.all_reduce(denom)
            denom = denom.clamp(min=1.0) / self.world
        for micro, batch in enumerate(micro_batches):
            # Gradients are all-reduced only on the last micro-batch of a step.
            sync = self.world == 1 or micro == self.accum - 1
            with contextlib.nullcontext() if sync else self.ddp.no_sync():
                loss = self.ddp(**batch) * (counts[micro] / denom)
                loss.backward()
            step_loss += loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return step_loss, norm

    def _to_device(self, batch: dict) -> dict:
        """Host-made tensors (label positions included) copied without making the host wait."""
        batch["label_positions"] = label_positions_of(batch["labels"])
        if self.device.type != "cuda":
            return batch
        return {k: v.pin_memory().to(self.device, non_blocking=True) for k, v in batch.items()}

    def _agreed(self, stop: bool, bad) -> tuple[bool, bool]:
        """(SIGTERM on any rank, non-finite values on any rank): one tiny all-reduce, one read."""
        import torch
        import torch.distributed as dist

        flags = torch.stack([torch.tensor(float(stop), device=self.device), bad.float()])
        if self.world > 1:
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        stop, nonfinite = flags.tolist()
        return bool(stop), bool(nonfinite)

    def _fail_nonfinite(self, step: int) -> None:
        if self.rank == MASTER:
            seen = [h["loss"] for h in self.state.history if "loss" in h]
            print(
                f"error: the training loss or its gradients became NaN or infinite by step {step}"
                f"{f' (last logged loss {seen[-1]:.4g})' if seen else ''}; training stopped and nothing was "
                f"saved as a result. Lower learning_rate (now {self.cfg.learning_rate:g}) or check the data "
                f"for rows that break the model (exit status {EXIT_NONFINITE}: a restart would fail the same way)",
                file=sys.stderr,
                flush=True,
            )
        exit_now(EXIT_NONFINITE)

    def _stop_for_sigterm(self, step: int) -> None:
        """SIGTERM on any rank: all stop at this step; rank 0 checkpoints within the grace time."""
        import torch.distributed as dist

        self.save_checkpoint(step)
        if self.rank == MASTER:
            saved = self.ckpt.wait(timeout=self.shutdown.remaining())
            print(
                f"SIGTERM: checkpoint at step {step} {'uploaded' if saved else 'NOT uploaded in time'}; "
                f"exiting for a restart",
                flush=True,
            )
        if self.world > 1:
            # The other ranks wait for rank 0's upload: a rank exiting first makes torchrun (or the
            # local launcher) kill rank 0 mid-upload. A dead peer is covered by Shutdown's timer.
            dist.barrier()
        exit_now(143)

    def _log(self, step: int, bar) -> None:
        """Mean loss over the steps since the last log line, averaged over ranks: the only
        place the loop reads the loss back from the device."""
        import torch.distributed as dist

        mean = self.window_loss / self.window_n
        if self.world > 1:  # SUM then divide: gloo has no AVG
            dist.all_reduce(mean)
            mean /= self.world
        value, lr = mean.item(), self.scheduler.get_last_lr()[0]
        self.state.history.append({"step": step, "loss": value, "lr": lr})
        # tokens/s estimated from this rank's count: an all-reduce per log line is not worth it
        tok_s = self.real_tokens * self.world / self._trained_s()
        if self.board:
            self.board.scalar("train/loss", value, step)
            self.board.scalar("train/lr", lr, step)
            self.board.scalar("train/tokens_per_second", tok_s, step)
        self.tracker.log_metrics({"train/loss": value, "train/lr": lr, "train/tokens_per_second": tok_s}, step)
        bar.set_postfix(loss=f"{value:.3f}", tok_s=f"{int(tok_s)}", refresh=False)  # shown by the step's update
        self.window_loss.zero_()
        self.window_n = 0

    def _trained_s(self) -> float:
        """This process's seconds since the loop started, less those spent measuring the eval loss."""
        return time.perf_counter() - self.start - self.eval_s

    def measure_eval(self, step: int) -> None:
        """Rank 0: eval loss on a few held-out rows, with a bar (on a real model on CPU, minutes); the other ranks
        wait at the next collective. Its time is not training's (train_seconds, tokens_per_second)."""
        if self.rank != MASTER or not self.eval_examples:
            return
        import torch

        began = time.perf_counter()
        self.model.eval()
        # Compiled layers would recompile for eval mode and no_grad (on an H100 as long as the
        # first compile, ~100 s) to run 64 rows once: eager instead, the compiled code kept.
        with torch.compiler.set_stance("force_eager") if self.cfg.compile else contextlib.nullcontext():
            value = losses.eval_loss(
                self.model, self.eval_examples, self.tokenizer.pad_token_id, desc=f"eval loss at step {step}"
            )
        self.model.train()
        self.eval_s += time.perf_counter() - began
        self.state.history.append({"step": step, "eval_loss": value})
        if self.board:
            self.board.scalar("eval/loss", value, step)
        self.tracker.log_metrics({"eval/loss": value}, step)

    def save_checkpoint(self, step: int) -> None:
        """Collective: gathers every rank's RNG and log window; rank 0 writes and uploads."""
        import torch
        import torch.distributed as dist

        mine = {"rng": rng_state(), "window": [self.window_loss.item(), self.window_n]}
        per_rank: list[Any] = [mine]
        tokens = torch.tensor(self.real_tokens)
        if self.world > 1:
            per_rank = [None] * self.world
            dist.all_gather_object(per_rank, mine)
            tokens = tokens.to(self.device)
            dist.all_reduce(tokens)
        self.ckpt.save(
            step,
            self.model,
            self.optimizer,
            self.scheduler,
            per_rank,
            self.state.saved(int(tokens.item()), self._trained_s(), self.cfg.run_settings()),
        )

    def cleanup(self) -> dict[str, Any]:
        """Rank 0 saves and uploads the result, and writes result.json last."""
        import torch
        import torch.distributed as dist

        cfg = self.cfg
        if self.state.step < cfg.max_steps:
            self.save_checkpoint(cfg.max_steps)  # a crash while writing the result resumes straight to cleanup
        if self.board:
            self.board.close()
        self.ckpt.wait()
        wall = self.state.train_seconds + self._trained_s()
        window = getattr(self, "steady", None)  # (this rank's tokens, seconds) of the steady window
        tokens = torch.tensor([self.real_tokens, window[0] if window else 0], device=self.device)
        if self.world > 1:
            dist.all_reduce(tokens)  # every rank's real tokens: ranks' padded batches differ
        total, window_tokens = tokens.tolist()  # the device is done here
        total += self.state.train_tokens
        steady = window_tokens / window[1] if window else None
        result: dict[str, Any] = {}
        self.say("cleanup: saving the result", cfg.max_steps)
        if self.rank == MASTER:
            with tempfile.TemporaryDirectory() as tmp:
                self.model.save_pretrained(tmp)
                self.tokenizer.save_pretrained(tmp)
                if cfg.method == "qlora":  # merge and serve over the same de-quantized base (model.load_base)
                    from trainer.models.model import BASE_QUANTIZATION, qlora_config

                    (pathlib.Path(tmp) / BASE_QUANTIZATION).write_text(qlora_config(torch.float32).to_json_string())
                uri, manifest = self.store.put_tree(tmp, "models")
            final = next(h["loss"] for h in reversed(self.state.history) if "loss" in h)
            result = {
                "output_uri": uri,
                "method": cfg.method,
                "output_bytes": manifest["total_bytes"],
                "metrics": {
                    "train_loss": final,
                    "train_steps": float(cfg.max_steps),
                    "world_size": float(self.world),
                    "train_tokens": float(total),
                    "tokens_per_second": total / wall,
                    "train_seconds": wall,
                    "skipped_long_rows": float(self.skipped),
                    "restarts": float(self.state.restarts),
                    "checkpoint_bytes": float(self.ckpt.last_bytes),
                    "checkpoint_upload_seconds": float(self.ckpt.last_upload_s or 0.0),
                    "grad_accum": float(self.accum),
                    "peak_memory_mb": peak_memory_mb(self.device),
                    "perplexity": math.exp(min(final, 50.0)),
                    **(trial.metrics() if (trial := getattr(self, "trial", None)) else {}),
                    **(compile_metrics(self.graphs) if cfg.compile else {}),
                    **({"steady_tokens_per_second": steady} if steady else {}),
                },
                "history": self.state.history,
                "config": cfg.asdict(),
                "tensorboard_uri": self.store.uri(f"{cfg.output_prefix}/tensorboard"),
            }
            self.store.put_json(f"{cfg.output_prefix}/result.json", result)
            COMMITTED.set()
            self.tracker.log_metrics(result["metrics"], step=cfg.max_steps)
            self.tracker.close()
            print(json.dumps({"train_result": result["metrics"], "output_uri": uri}), flush=True)
        if self.world > 1:
            dist.barrier()
            COMMITTED.set()  # rank 0 wrote the result before reaching the barrier
            dist.destroy_process_group()
        return result

    def run(self) -> dict[str, Any]:
        try:
            self.setup()
            self.train()
            return self.cleanup()
        finally:
            self.tracker.close(failed=True)  # a run that got to its result closed it already (a no-op then)
            if hasattr(self, "shutdown"):
                self.shutdown.close()


def train(cfg: TrainConfig, store: Store | None = None) -> dict[str, Any]:
    """Run the recipe; on rank 0 returns the result written to `<output_prefix>/result.json`."""
    return Recipe(cfg, store).run()
