"""The GPU benchmark's CPU-checkable parts: FLOP accounting and its command line without CUDA."""

import subprocess
import sys

import pytest
import torch

from benchmarks.gpu_compare import SHAPES, Shape, mfu, parse_variants


def test_shapes_have_the_published_parameter_counts():
    assert SHAPES["1b"].params() == 1_235_814_400  # Llama-3.2-1B
    assert SHAPES["8b"].params() == 8_030_261_248  # Llama-3.1-8B


@pytest.mark.parametrize("tied", [True, False])
def test_parameter_count_matches_a_real_model_of_that_shape(tied):
    from transformers import LlamaForCausalLM

    from trainer import builtin_model

    shape = Shape(layers=2, hidden=64, mlp=160, heads=4, kv_heads=2, vocab=300, tied=tied)
    model = LlamaForCausalLM(shape.config(builtin_model.build_tokenizer()))
    assert sum(p.numel() for p in model.parameters()) == shape.params()


def test_mfu_counts_six_flops_per_parameter_plus_attention():
    shape = SHAPES["1b"]
    per_token = 6 * 1_235_814_400 + 12 * 16 * 2048 * 100
    assert mfu(1000.0, shape, 100, 989.0) == pytest.approx(1000 * per_token / 989e12)


def test_variants_become_trainer_arguments_and_typos_are_refused():
    assert parse_variants("default; compile=true packing=flatten;FINETUNE_LIGER=0") == {
        "default": ([], {}), "compile=true packing=flatten": (["--compile=true", "--packing=flatten"], {}),
        "FINETUNE_LIGER=0": ([], {"FINETUNE_LIGER": "0"})}
    for typo in ("compiel=true", "FINETUNE_LIGRE=0", "compile"):
        with pytest.raises(SystemExit, match="not FIELD=VALUE"):
            parse_variants(typo)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown where CUDA is absent")
def test_without_cuda_it_exits_with_a_message_not_a_traceback():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_compare", "--shapes", "1b"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert "gpu_compare needs a CUDA GPU" in proc.stderr and "Traceback" not in proc.stderr
