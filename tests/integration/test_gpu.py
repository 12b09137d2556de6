"""CUDA-only checks of what CPU cannot exercise: Liger's fused kernels give the same loss and
gradients as the plain path, packed rows under flex attention equal rows alone on the GPU, fused
LoRA equals peft in bf16, bf16 autocast equals fp32 within bf16 tolerance, DDP over NCCL (one
rank, or two processes through the real launcher where the machine has two GPUs), and compiled
layers (inductor) do not recompile per batch length. Run on a GPU machine: `make gpu-check`
(benchmarks/gpu_check.py runs this file first) or `pytest tests/integration/test_gpu.py`; where
CUDA is absent (CI) they are skipped, since what they check only exists on CUDA (the CPU
equivalents are in tests/unit/test_model.py, test_fused_lora.py and test_batching.py;
`make test` runs gpu_check's --dry-run)."""

import collections
import importlib.util
import logging

import pytest
import torch

from trainer.data import builtin_data
from trainer import data
from trainer.data.batching import collate, collate_packed
from trainer.config.training import TrainConfig
from trainer.models.model import LossModel, build_model, compile_layers, decoder_layers

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA-only kernels; CPU versions in test_model.py"
)
CUDA = torch.device("cuda")


def rows(tokenizer, n=6):
    return [data.encode(r, tokenizer, 512) for r in builtin_data.generate(n, 1, seed=3)["train"]]


def lora_model(tiny_model_dir, monkeypatch, liger: bool, attn=None):
    monkeypatch.setenv("FINETUNE_LIGER", "auto" if liger else "0")
    torch.manual_seed(0)
    model = build_model(TrainConfig(lora_dropout=0.0), tiny_model_dir, CUDA, attn)
    for n, p in model.named_parameters():  # LoRA B starts at zero: make the adapters matter
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.05)
    return model, LossModel(model, CUDA)


def on_cuda(batch):
    return {k: v.to(CUDA) for k, v in batch.items()}


def test_chunked_loss_on_cuda_matches_the_models_own_loss(tiny_model_dir, tokenizer, monkeypatch):
    model, loss_model = lora_model(tiny_model_dir, monkeypatch, liger=False)
    batch = on_cuda(collate(rows(tokenizer), tokenizer.pad_token_id))
    ours, ref = loss_model(**batch), model(**batch, use_cache=False).loss
    torch.testing.assert_close(ours.float(), ref.float(), atol=2e-2, rtol=1e-2)


def test_packed_rows_under_flex_attention_equal_rows_alone_on_cuda(tiny_model_dir, tokenizer, monkeypatch):
    model, loss_model = lora_model(tiny_model_dir, monkeypatch, liger=False, attn="flex_attention")
    with torch.no_grad():  # make attention matter, so cross-row leakage would show in the loss
        for layer in decoder_layers(model):
            layer.self_attn.o_proj.base_layer.weight.mul_(20)
        examples = rows(tokenizer, 5)
        total, count = 0.0, 0
        for e in examples:
            b = on_cuda(collate([e], tokenizer.pad_token_id))
            n = int((b["labels"][0, 1:] != -100).sum())
            total, count = total + loss_model(**b).float().item() * n, count + n
        packed = loss_model(**on_cuda(collate_packed(examples, total=1024, pad_id=tokenizer.pad_token_id)))
    assert abs(packed.float().item() - total / count) < 2e-2 * max(1.0, total / count)


class _Lines(logging.Handler):
    """Keeps the first line of each of dynamo's recompile and graph-break reports, so a failure says why."""

    def __init__(self):
        super().__init__()
        self.lines = collections.Counter()

    def emit(self, record):
        msg = record.getMessage()
        self.lines[" | ".join(line.strip() for line in msg.splitlines()[:3] if line.strip())] += 1


def test_inductor_compiled_layers_do_not_recompile_per_length(tiny_model_dir, monkeypatch):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    reasons = _Lines()
    torch._logging.set_logs(recompiles=True, graph_breaks=True)
    logging.getLogger("torch._dynamo").addHandler(reasons)
    model, loss_model = lora_model(tiny_model_dir, monkeypatch, liger=False)
    assert compile_layers(model, dynamic=True) == len(decoder_layers(model))
    vocab = model.config.vocab_size
    for n_rows, width in [(4, 64), (8, 128), (2, 192), (5, 256), (3, 64), (6, 384), (1, 512), (7, 192)]:
        ids = torch.randint(0, vocab, (n_rows, width), device=CUDA)
        loss_model(input_ids=ids, labels=ids, attention_mask=torch.ones_like(ids)).backward()
    logging.getLogger("torch._dynamo").removeHandler(reasons)
    torch._logging.set_logs()
    why = f"{dict(counters['frames'])}; why: {reasons.lines.most_common(12)}"
    assert 1 <= counters["frames"]["ok"] <= 4, why
    assert counters["stats"]["unique_graphs"] <= 4, why


def test_fused_lora_on_cuda_matches_peft_in_bf16(tiny_model_dir, tokenizer, monkeypatch):
    """cuBLAS's addmm epilogue on a bf16 base with fp32 adapters, against peft's own layers
    under the same LossModel (bf16 autocast): loss and fp32 adapter gradients agree."""
    batch = on_cuda(collate(rows(tokenizer), tokenizer.pad_token_id))
    out = {}
    for fused in ("auto", "0"):
        monkeypatch.setenv("FINETUNE_FUSED_LORA", fused)
        model, loss_model = lora_model(tiny_model_dir, monkeypatch, liger=False)
        model.train()
        out["names"], params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad])
        loss = loss_model(**batch)
        out[fused] = (loss.float(), torch.autograd.grad(loss, params))
    torch.testing.assert_close(out["auto"][0], out["0"][0], atol=2e-2, rtol=1e-2)
    # the adapters train in fp32 (the trained embedding, lora_train_embeddings' copy, is the base's bf16)
    assert all(g.dtype == torch.float32 for n, g in zip(out["names"], out["auto"][1]) if "lora_" in n)
    rel = max(((a - b).norm() / b.norm()).item() for a, b in zip(out["auto"][1], out["0"][1]))
    assert rel < 0.05, rel


def test_bf16_autocast_matches_fp32_within_bf16_tolerance(tiny_model_dir, tokenizer, monkeypatch):
    """A bf16 base trains under bf16 autocast on CUDA (LossModel.autocast, peft's fp32 input cast
    off); the same weights in fp32 give the reference: loss and adapter gradients within bf16's."""
    import copy

    model, loss_model = lora_model(tiny_model_dir, monkeypatch, liger=False)
    assert next(model.parameters()).dtype == torch.bfloat16 and loss_model.autocast
    reference = copy.deepcopy(model).float()
    ref_loss_model = LossModel(reference, CUDA)
    assert not ref_loss_model.autocast
    batch = on_cuda(collate(rows(tokenizer), tokenizer.pad_token_id))
    got = []
    for m, lm in ((model, loss_model), (reference, ref_loss_model)):
        names, params = zip(*[(n, p) for n, p in m.named_parameters() if p.requires_grad])
        loss = lm(**batch)
        got.append((loss.float(), torch.autograd.grad(loss, params)))
    (loss16, g16), (loss32, g32) = got
    assert torch.isfinite(loss16) and abs(loss16.item() - loss32.item()) < 2e-2 * max(1.0, abs(loss32.item()))
    # the adapters train in fp32 (the trained embedding, lora_train_embeddings' copy, is the base's bf16)
    assert all(g.dtype == torch.float32 for n, g in zip(names, g16) if "lora_" in n)
    rel = max(((a.float() - b).norm() / b.norm().clamp_min(1e-12)).item() for a, b in zip(g16, g32))
    assert rel < 0.05, rel


def test_ddp_over_nccl_gives_the_gradients_of_one_process(tiny_model_dir, tokenizer, monkeypatch):
    """The trainer's DDP wrapping over NCCL, one rank (the machine's first GPU): gradients after
    DDP's all-reduce equal the unwrapped model's, and a collective reaches the device."""
    import socket

    import torch.distributed as dist

    model, loss_model = lora_model(tiny_model_dir, monkeypatch, liger=False)
    batch = on_cuda(collate(rows(tokenizer), tokenizer.pad_token_id))
    params = [p for p in model.parameters() if p.requires_grad]
    plain = torch.autograd.grad(loss_model(**batch), params)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # device_id as the trainer gives it (trainer/recipe/runtime.py dist_setup): an indexed device, NCCL refuses a bare "cuda"
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=0,
        world_size=1,
        device_id=torch.device("cuda", torch.cuda.current_device()),
    )
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(loss_model)
        ddp(**batch).backward()
        for p, g in zip(params, plain):
            torch.testing.assert_close(p.grad, g, atol=1e-5, rtol=1e-4)
        x = torch.full((4,), 3.0, device=CUDA)
        dist.all_reduce(x)
        assert x.tolist() == [3.0] * 4 and dist.get_backend() == "nccl"
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="two processes over NCCL need two GPUs")
def test_two_gpus_learn_what_one_process_learns(builtin_uris, store):
    """Two ranks through the real launcher (torchrun, NCCL), each with a GPU of its own, against one
    rank in this process, on the same rows (as tests/integration/test_train_integration.py on CPU)."""
    from trainer.k8s.podspec import ClusterSpec
    from trainer.launch import run_training
    from trainer.recipe.train import train

    model_uri, data_uri = builtin_uris

    def cfg(prefix, batch_size):
        return TrainConfig(
            model_uri=model_uri,
            dataset_uri=data_uri,
            output_prefix=prefix,
            max_steps=8,
            batch_size=batch_size,
            batch_tokens=0,
            log_every=2,
            eval_every=100,
            learning_rate=1e-3,
        )

    one = train(cfg("runs/gpu-1rank", 8), store)
    two = run_training(
        cfg("runs/gpu-2rank", 4), "local", ClusterSpec(nodes=1, procs_per_node=2, backoff_limit=0), store
    )
    assert two["metrics"]["world_size"] == 2 and two["metrics"]["train_tokens"] == one["metrics"]["train_tokens"]
    a, b = ([h["loss"] for h in r["history"] if "loss" in h] for r in (one, two))
    assert len(a) == len(b) == 4 and all(abs(x - y) < 2e-2 * max(1.0, abs(x)) for x, y in zip(a, b)), (a, b)


# Last in the file: Liger patches transformers' Llama module functions (RoPE) process-wide.
@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None, reason="liger-kernel is not installed")
def test_liger_kernels_give_the_plain_paths_loss_and_gradients(tiny_model_dir, tokenizer, monkeypatch):
    batch = on_cuda(collate(rows(tokenizer), tokenizer.pad_token_id))
    results = []
    for liger in (False, True):
        model, loss_model = lora_model(tiny_model_dir, monkeypatch, liger)
        assert loss_model.fused == ("liger" if liger else "chunked")
        params = [p for p in model.parameters() if p.requires_grad]
        loss = loss_model(**batch)
        results.append((loss.float(), [g.float() for g in torch.autograd.grad(loss, params)]))
    (plain, g_plain), (fused, g_fused) = results
    torch.testing.assert_close(fused, plain, atol=2e-2, rtol=1e-2)  # bf16 weights: bf16 tolerances
    for a, b in zip(g_fused, g_plain):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=5e-2)
