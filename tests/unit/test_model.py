"""Model building (trainer/models/model.py): the loss without full logits equals the usual loss and
gradients; packed rows with flex attention equal rows alone; compiled layers do not recompile
for every new batch shape.

The fast checks; the ones that train, serve or run the pipeline are tests/integration/test_model.py (the integration tier)."""

import pytest
import torch

from trainer.data import builtin_data
from trainer import data
from trainer.data.batching import collate, collate_packed
from trainer.config.training import TrainConfig
from trainer.models.model import LossModel, build_model, chunked_cross_entropy, label_positions_of


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


def test_packing_plan_picks_an_attention_that_skips_other_rows():
    from trainer.models.model import plan_packing

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
    assert not LossModel(
        get_peft_model(fp32, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM")), cuda
    ).autocast
