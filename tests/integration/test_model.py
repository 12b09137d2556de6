"""Model building (trainer/models/model.py): the loss without full logits equals the usual loss and
gradients; packed rows with flex attention equal rows alone; compiled layers do not recompile
for every new batch shape."""

import shutil

import pytest
import torch

from trainer.data.batching import collate, collate_packed
from trainer.config.training import TrainConfig
from trainer.models.model import LossModel, build_model, compile_layers, decoder_layers
from tests.unit.test_model import examples


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


def test_eval_during_compiled_training_compiles_nothing_more(tiny_model_dir, tokenizer):
    """Recipe.measure_eval with compile=true runs the layers eagerly: eval mode and no_grad
    would otherwise fail dynamo's guards and recompile every layer graph (on an H100 as long
    as the first compile) for 64 rows."""
    from types import SimpleNamespace

    from torch._dynamo.utils import counters

    from trainer.recipe.runtime import RunState
    from trainer.recipe.train import Recipe

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


def test_a_process_loading_no_4bit_model_trains_lora_without_importing_bitsandbytes(tiny_model_dir, tmp_path):
    """peft imports bitsandbytes whenever it is installed, and that import pulls in inductor (1.4 s of every
    rank's start): skipped unless the process loads a 4-bit base. In a fresh process, as the entry points call it."""
    import subprocess
    import sys

    (tmp_path / "qlora-adapter").mkdir()
    (tmp_path / "qlora-adapter" / "base_quantization.json").write_text("{}")
    code = f"""
import sys
from pathlib import Path
from trainer.models.model import skip_bitsandbytes
assert not skip_bitsandbytes("qlora") and not skip_bitsandbytes(adapter_dir=Path({str(tmp_path / "qlora-adapter")!r}))
assert "bitsandbytes" not in sys.modules  # still importable: a QLoRA rank, merge or evaluation needs it
assert skip_bitsandbytes("lora")
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
model = get_peft_model(AutoModelForCausalLM.from_pretrained({str(tiny_model_dir)!r}), LoraConfig(r=4, target_modules="all-linear"))
model(input_ids=__import__("torch").tensor([[1, 2, 3]])).logits.sum().backward()
print(sys.modules["bitsandbytes"], "torch._inductor.compile_fx" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["None", "False"], proc.stdout
