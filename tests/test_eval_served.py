"""Evaluation through the served model (eval_engine=vllm): vLLM's CPU server started as deploy
starts it, base and adapter side by side in one server, every row through the OpenAI API."""

import json

import pytest

from trainer import builtin_data, data
from trainer import evaluate as ev


def _adapter(base_dir, out_dir, modules_to_save=None):
    """An untrained LoRA adapter (B = 0: it answers exactly as its base)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir),
                           LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                      modules_to_save=modules_to_save))
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out_dir)
    return out_dir


def test_engine_choice(tiny_model_dir, tmp_path):
    assert ev.choose_engine("hf", tiny_model_dir) == "hf"
    assert ev.choose_engine("auto", tiny_model_dir) == "hf"  # 0.9M parameters: a server start costs more
    plain = _adapter(tiny_model_dir, tmp_path / "plain")
    embed = _adapter(tiny_model_dir, tmp_path / "embed", modules_to_save=["embed_tokens"])
    assert ev._served_lora(plain) and not ev._served_lora(embed) and not ev._served_lora(tiny_model_dir)


@pytest.mark.integration
def test_base_and_adapter_answer_through_one_vllm_server(tiny_model_dir, tmp_path, monkeypatch):
    rows = builtin_data.generate(n_train=0, n_eval=6, seed=5)["eval"]
    data.write_jsonl(rows, tmp_path / "eval.jsonl")
    adapter = _adapter(tiny_model_dir, tmp_path / "adapter")
    started = []

    import trainer.serve as serve

    original = serve.start

    def counting(*args, **kwargs):
        server = original(*args, **kwargs)
        started.append((args[0], dict(kwargs.get("lora_modules") or {}), server))
        return server

    monkeypatch.setattr(serve, "start", counting)
    result = ev.evaluate(tiny_model_dir, adapter, tmp_path / "eval.jsonl", max_rows=6, max_seq_len=512,
                         engine="vllm")
    assert result["engine"] == "vllm" and result["rows"] == 6
    [(served, loras, server)] = started  # one server: the base, with the adapter beside it
    assert str(served) == str(tiny_model_dir) and loras == {"tuned": str(adapter)}
    assert server.proc.poll() is not None  # stopped before evaluate returned
    # B = 0: the adapter answers as its base does, row for row, through the same server
    assert [e["base"] for e in result["examples"]] == [e["tuned"] for e in result["examples"]]
    for key in ("fc_accuracy", "fc_ast_accuracy", "fc_exact_accuracy", "fc_multiple_accuracy"):
        assert result["base"][key] == result["tuned"][key]
    assert result["categories"]["fc_multiple_rows"] == 6
    json.dumps(result)  # the step writes it out
