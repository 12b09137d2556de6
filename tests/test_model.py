"""Model building (trainer/model.py): the loss without full logits equals the usual loss and
gradients; packed rows with flex attention equal rows alone; compiled layers do not recompile
for every new batch shape."""

import shutil

import pytest
import torch

from trainer import builtin_data, data
from trainer.batching import collate, collate_packed
from trainer.config import TrainConfig
from trainer.model import (LossModel, build_model, chunked_cross_entropy, compile_layers, decoder_layers,
                           label_positions_of)


@pytest.mark.parametrize("weight_grad", [False, True])
def test_chunked_cross_entropy_matches_full_logits(weight_grad):
    torch.manual_seed(0)
    h = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, 16, dtype=torch.float64, requires_grad=weight_grad)
    t = torch.randint(0, 50, (37,))
    ours = chunked_cross_entropy(h, w, t, chunk=8)  # 5 chunks, the last one short
    grads = torch.autograd.grad(ours * 3, [h, w] if weight_grad else [h])
    ref = torch.nn.functional.cross_entropy(h @ w.T, t)
    want = torch.autograd.grad(ref * 3, [h, w] if weight_grad else [h])
    torch.testing.assert_close(ours, ref)
    for g, r in zip(grads, want):
        torch.testing.assert_close(g, r)


def examples(tokenizer, n=6):
    return [data.encode(r, tokenizer, 512) for r in builtin_data.generate(n, 1, seed=3)["train"]]


@pytest.mark.parametrize("train_embeddings", [False, True])
def test_loss_model_equals_the_models_own_loss_and_gradients(tiny_model_dir, tokenizer, train_embeddings):
    cfg = TrainConfig(lora_train_embeddings=train_embeddings, lora_dropout=0.0)
    model = build_model(cfg, tiny_model_dir, torch.device("cpu"))
    for n, p in model.named_parameters():  # LoRA B starts at zero: make the adapters matter
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.05)
    wrapped = LossModel(model, torch.device("cpu"))
    assert wrapped.fused == "chunked"
    params = [p for p in model.parameters() if p.requires_grad]
    for batch in (collate(examples(tokenizer), tokenizer.pad_token_id), collate_packed(examples(tokenizer))):
        ours = wrapped(**batch)
        g_ours = torch.autograd.grad(ours, params)
        ref = model(**batch, use_cache=False).loss
        g_ref = torch.autograd.grad(ref, params)
        torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(wrapped(**batch, label_positions=label_positions_of(batch["labels"])), ours)
        for a, b in zip(g_ours, g_ref):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


@pytest.mark.integration  # compiles kernels: tens of seconds, kept out of make test-fast
def test_packed_rows_with_flex_attention_equal_rows_alone(tiny_model_dir, tokenizer):
    """Flex attention (what packing uses on CUDA without flash-attn) with the document mask
    transformers builds from position_ids, on a packed batch filled to a fixed length."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="flex_attention").eval()
    with torch.no_grad():  # make attention matter, so cross-row leakage would show in the loss
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(20)
    rows = examples(tokenizer, 5)
    loss_model = LossModel(model, torch.device("cpu"))
    with torch.no_grad():
        total, count = 0.0, 0
        for e in rows:
            b = collate([e], tokenizer.pad_token_id)
            n = int((b["labels"][0, 1:] != -100).sum())
            total, count = total + loss_model(**b).item() * n, count + n
        packed = collate_packed(rows, total=1024, pad_id=tokenizer.pad_token_id)
        loss = loss_model(**packed).item()
    assert abs(loss - total / count) < 1e-5


@pytest.mark.integration  # compiles kernels: tens of seconds, kept out of make test-fast
def test_compiled_layers_compile_a_bounded_number_of_times(tiny_model_dir):
    """Padded batches of 8 different shapes: dynamo compiles the (shared) layer graph at most
    twice (dynamic shapes, plus torch's specialisation of size-1 dimensions), never per shape.
    Recompiles are decided by dynamo's guards, before the backend; aot_eager stands in for
    inductor to keep the test to seconds on 2 cores (inductor's C++ build takes minutes)."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: torch.compile cannot build CPU code here")
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = build_model(TrainConfig(), tiny_model_dir, torch.device("cpu"))
    assert compile_layers(model, dynamic=True, backend="aot_eager") == len(decoder_layers(model)) == 4
    loss_model = LossModel(model, torch.device("cpu"))
    vocab = model.config.vocab_size
    for rows, width in [(4, 64), (8, 128), (2, 192), (5, 256), (3, 64), (6, 384), (1, 512), (7, 192)]:
        ids = torch.randint(0, vocab, (rows, width))
        loss_model(input_ids=ids, labels=ids, attention_mask=torch.ones_like(ids)).backward()
    frames = counters["frames"]["ok"]
    assert 1 <= frames <= 4, dict(counters["frames"])  # forward graph (+ a graph break) per compile
    assert counters["stats"]["unique_graphs"] <= 4


@pytest.mark.integration  # compiles: seconds
def test_eval_during_compiled_training_compiles_nothing_more(tiny_model_dir, tokenizer):
    """Recipe.measure_eval with compile=true runs the layers eagerly: eval mode and no_grad
    would otherwise fail dynamo's guards and recompile every layer graph (on an H100 as long
    as the first compile) for 64 rows."""
    from types import SimpleNamespace

    from torch._dynamo.utils import counters

    from trainer.train import Recipe, RunState

    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: torch.compile cannot build CPU code here")
    torch._dynamo.reset()
    counters.clear()
    model = build_model(TrainConfig(), tiny_model_dir, torch.device("cpu"))
    compile_layers(model, dynamic=True, backend="aot_eager")
    rows = examples(tokenizer)
    batch = collate(rows, tokenizer.pad_token_id)
    LossModel(model, torch.device("cpu"))(**batch).backward()
    compiled = counters["stats"]["unique_graphs"]
    assert compiled >= 1
    r = Recipe.__new__(Recipe)
    r.cfg, r.rank, r.model, r.eval_examples, r.tokenizer = TrainConfig(compile=True), 0, model, rows, tokenizer
    r.state, r.board = RunState(), SimpleNamespace(scalar=lambda *_: None)
    r.measure_eval(10)
    assert counters["stats"]["unique_graphs"] == compiled, dict(counters["stats"])
    assert r.state.history[0]["step"] == 10 and r.state.history[0]["eval_loss"] > 0 and model.training


def test_packing_plan_picks_an_attention_that_skips_other_rows():
    from trainer.model import plan_packing

    cuda, cpu = torch.device("cuda"), torch.device("cpu")  # only the device type is read
    flat = TrainConfig(batch_tokens=16384, packing="flatten")
    if not torch.cuda.is_available():  # no flash-attn here: flex attention, one fixed packed length
        assert plan_packing(flat, cuda) == (True, "flex_attention", 16384)
    assert plan_packing(flat, cpu) == (True, None, 0)  # sdpa with the block-diagonal mask
    assert plan_packing(TrainConfig(batch_tokens=16384, packing="flatten", compile=True), cpu) == (True, None, 16384)
    assert plan_packing(TrainConfig(batch_tokens=16384), cpu) == (False, None, 0)  # auto: length-bucketed padding
    assert plan_packing(TrainConfig(), cpu) == (False, None, 0)  # rows, not token budgets


def test_bf16_autocast_keeps_the_loss_and_saves_less_than_peft_upcasting(tiny_model_dir, tokenizer):
    """On a bf16 base, peft keeps fp32 adapters and casts each adapted layer's input to fp32;
    LossModel(autocast=True) (the CUDA default) computes the adapters in bf16 instead: same
    loss, fp32 adapter gradients close to the upcast path's, fewer bytes saved for backward."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.05)
    params = [p for p in model.parameters() if p.requires_grad]
    assert {p.dtype for p in params} == {torch.float32}
    batch = collate(examples(tokenizer), tokenizer.pad_token_id)
    results = {}
    for autocast in (False, True):
        loss_model = LossModel(model, torch.device("cpu"), autocast=autocast)
        saved = {}

        def pack(t):
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = loss_model(**batch)
        grads = torch.autograd.grad(loss, params)
        results[autocast] = (loss.float(), grads, sum(saved.values()))
    (plain, g_plain, bytes_plain), (mixed, g_mixed, bytes_mixed) = results[False], results[True]
    torch.testing.assert_close(mixed, plain, atol=1e-2, rtol=1e-3)
    assert all(g.dtype == torch.float32 for g in g_mixed)  # the adapters still train in fp32
    rel = max(((a - b).norm() / b.norm()).item() for a, b in zip(g_mixed, g_plain))
    assert rel < 0.05, rel
    assert bytes_mixed < 0.9 * bytes_plain, (bytes_mixed, bytes_plain)
    assert all(getattr(m, "cast_input_dtype_enabled", True) for m in loss_model.tuners)  # restored after
    assert not LossModel(model, torch.device("cpu")).autocast  # CPU default: unchanged


def test_cuda_default_autocasts_only_bf16_bases_with_adapters(tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    cuda = torch.device("cuda")  # only the device type is read
    bf16 = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    assert not LossModel(bf16, cuda).autocast  # full fine-tuning: no adapters, nothing to cast
    lora = get_peft_model(bf16, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    assert LossModel(lora, cuda).autocast
    bf16.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert not LossModel(lora, cuda).autocast  # its recompute in backward would run without the switch
    fp32 = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert not LossModel(get_peft_model(fp32, LoraConfig(r=4, target_modules="all-linear",
                                                         task_type="CAUSAL_LM")), cuda).autocast
