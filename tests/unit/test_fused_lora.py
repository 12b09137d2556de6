"""trainer/models/fused_lora.py: the fused LoRA layer gives peft's outputs and gradients, falls back to
peft where it does not apply, and leaves adapters that plain peft saves, loads and merges."""

import pytest
import torch

from trainer.data import builtin_data
from trainer import data
from trainer.data.batching import collate
from trainer.config.training import TrainConfig
from trainer.models.fused_lora import FusedLoraLinear, _LoraLinearFunction
from trainer.models.model import LossModel, build_model


def examples(tokenizer, n=6):
    return [data.encode(r, tokenizer, 512) for r in builtin_data.generate(n, 1, seed=3)["train"]]


def test_function_gradients_match_finite_differences():
    """Every gradient (input, base weight and bias, both adapters) against gradcheck in fp64,
    with a scale that is not a power of two."""
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 5, 8), torch.randn(6, 8), torch.randn(6)
    a, bb = torch.randn(3, 8), torch.randn(6, 3)
    args = [t.double().requires_grad_() for t in (x, w, b, a, bb)]
    assert torch.autograd.gradcheck(lambda *t: _LoraLinearFunction.apply(*t, 0.37), args)


def _pair(tiny_model_dir, monkeypatch, cfg: TrainConfig):
    """The same LoRA model built fused and unfused, adapters identical and B non-zero."""
    models = {}
    for fused, value in (("auto", "auto"), ("0", " Off ")):  # 0, false, no, off: any case, spaces
        monkeypatch.setenv("FINETUNE_FUSED_LORA", value)
        torch.manual_seed(0)
        models[fused] = build_model(cfg, tiny_model_dir, torch.device("cpu")).train()  # as the trainer runs it
    torch.manual_seed(1)
    for (name, p), q in zip(models["auto"].named_parameters(), models["0"].parameters()):
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
        q.data.copy_(p.data)
    return models["auto"], models["0"]


@pytest.mark.parametrize("train_embeddings,checkpointing", [(False, False), (True, False), (False, True)])
def test_fused_model_loss_and_gradients_equal_peft(
    tiny_model_dir, tokenizer, monkeypatch, train_embeddings, checkpointing
):
    cfg = TrainConfig(
        lora_r=8,
        lora_alpha=12,
        lora_train_embeddings=train_embeddings,  # scale 1.5
        gradient_checkpointing=checkpointing,
    )
    fused, plain = _pair(tiny_model_dir, monkeypatch, cfg)
    layers = [m for m in fused.modules() if isinstance(m, FusedLoraLinear)]
    assert len(layers) == 4 * 7 and not any(isinstance(m, FusedLoraLinear) for m in plain.modules())
    batch = collate(examples(tokenizer), tokenizer.pad_token_id)
    out = {}
    for name, model in (("fused", fused), ("plain", plain)):
        loss = LossModel(model, torch.device("cpu"))(**batch)
        params = [p for p in model.parameters() if p.requires_grad]
        out[name] = (loss, torch.autograd.grad(loss, params))
    torch.testing.assert_close(out["fused"][0], out["plain"][0], rtol=1e-5, atol=1e-6)
    assert len(out["fused"][1]) == len(out["plain"][1]) > 0
    for g_fused, g_plain in zip(out["fused"][1], out["plain"][1]):
        torch.testing.assert_close(g_fused, g_plain, rtol=1e-4, atol=1e-6)


def test_bf16_base_fp32_adapters_match_peft_under_autocast(tiny_model_dir, tokenizer, monkeypatch):
    """The CUDA setting, on CPU: bf16 base, fp32 adapters, LossModel's bf16 autocast. The fused
    layers return fp32 adapter gradients close to peft's and save no more for backward
    (parameters aside: saving one keeps nothing alive that was not already)."""
    fused, plain = _pair(tiny_model_dir, monkeypatch, TrainConfig(lora_r=8, lora_alpha=16, lora_train_embeddings=False))
    batch = collate(examples(tokenizer), tokenizer.pad_token_id)
    out = {}
    for name, model in (("fused", fused), ("plain", plain)):
        model.to(torch.bfloat16)
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.data = p.data.float()  # peft's default on a bf16 base: fp32 adapters
        saved, params_at = {}, {p.untyped_storage().data_ptr() for p in model.parameters()}

        def pack(t):
            if t.untyped_storage().data_ptr() not in params_at:
                saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        params = [p for p in model.parameters() if p.requires_grad]
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = LossModel(model, torch.device("cpu"), autocast=True)(**batch)
        out[name] = (loss.float(), torch.autograd.grad(loss, params), sum(saved.values()))
    (loss_f, g_f, bytes_f), (loss_p, g_p, bytes_p) = out["fused"], out["plain"]
    torch.testing.assert_close(loss_f, loss_p, atol=1e-2, rtol=1e-3)
    assert all(g.dtype == torch.float32 for g in g_f)
    rel = max(((a - b).norm() / b.norm()).item() for a, b in zip(g_f, g_p))
    assert rel < 0.05, rel
    assert bytes_f <= bytes_p, (bytes_f, bytes_p)


def test_what_the_fast_path_does_not_cover_goes_through_peft(tiny_model_dir, monkeypatch):
    """Dropout, disabled adapters and merged weights give exactly what peft's own layer gives."""
    torch.manual_seed(0)
    for dropout in (0.0, 0.3):
        fused, plain = _pair(tiny_model_dir, monkeypatch, TrainConfig(lora_dropout=dropout))
        f_layer = fused.base_model.model.model.layers[0].mlp.down_proj
        p_layer = plain.base_model.model.model.layers[0].mlp.down_proj
        x = torch.randn(3, 5, f_layer.in_features)
        for mode in ("train", "eval"):
            getattr(f_layer, mode)(), getattr(p_layer, mode)()
            torch.manual_seed(7)
            y_f = f_layer(x)
            torch.manual_seed(7)
            torch.testing.assert_close(y_f, p_layer(x), rtol=1e-5, atol=1e-6)
    with fused.disable_adapter():
        torch.testing.assert_close(f_layer(x), f_layer.base_layer(x))
    adapted = f_layer(x)
    f_layer.merge()
    torch.testing.assert_close(f_layer(x), adapted, rtol=1e-4, atol=1e-5)


def test_adapters_trained_fused_save_load_and_merge_as_plain_peft(tiny_model_dir, monkeypatch, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    fused, _ = _pair(tiny_model_dir, monkeypatch, TrainConfig())
    ids = torch.randint(0, fused.config.vocab_size, (2, 16))
    expected = fused(input_ids=ids).logits
    fused.save_pretrained(tmp_path / "adapter")
    assert "custom" not in (tmp_path / "adapter" / "adapter_config.json").read_text().lower()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    loaded = PeftModel.from_pretrained(base, tmp_path / "adapter")
    assert not any(isinstance(m, FusedLoraLinear) for m in loaded.modules())
    torch.testing.assert_close(loaded(input_ids=ids).logits, expected, rtol=1e-4, atol=1e-5)
    merged = fused.merge_and_unload()
    assert not any(isinstance(m, FusedLoraLinear) for m in merged.modules())
    torch.testing.assert_close(merged(input_ids=ids).logits, expected, rtol=1e-4, atol=1e-4)


def test_a_compiled_decoder_layer_traces_the_fused_layers_whole(tiny_model_dir, tokenizer, monkeypatch):
    """compile=true compiles each decoder layer (trainer.models.model.compile_layers): the fused
    autograd.Function and FusedLoraLinear's checks (autocast state included) must trace into
    one graph, not break it at each of the 7 LoRA layers. As on CUDA: a bf16 base, fp32
    adapters, bf16 autocast with peft's input cast off (LossModel)."""
    import torch._dynamo

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from trainer.models import fused_lora
    from trainer.models.model import decoder_layers

    lora = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM")
    fused_lora.register(lora)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16), lora)
    assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}
    layer = decoder_layers(model)[0]
    assert isinstance(layer.self_attn.q_proj, FusedLoraLinear)
    seen = {}
    hook = layer.register_forward_pre_hook(
        lambda m, args, kwargs: seen.update(args=args, kwargs=kwargs), with_kwargs=True
    )
    loss_model = LossModel(model, torch.device("cpu"), autocast=True)
    loss_model(**collate(examples(tokenizer), tokenizer.pad_token_id))
    hook.remove()
    for m in loss_model.tuners:
        m.cast_input_dtype_enabled = False
    # torch 2.11's dynamo (the GPU machine's) breaks the graph at torch.amp.is_autocast_available; this
    # torch traces it. A function dynamo must skip stands in for 2.11's, so calling it while tracing fails here too.
    monkeypatch.setattr(torch.amp, "is_autocast_available", torch._dynamo.disable(torch.amp.is_autocast_available))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        explained = torch._dynamo.explain(layer)(*seen["args"], **seen["kwargs"])
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    # the fused path (traced as the autograd.Function it is), not peft's fallback, in all 7 layers
    assert explained.graphs[0].code.count("autograd_function_apply(") == 7
