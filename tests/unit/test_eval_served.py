"""Evaluation through the served model (eval_engine=vllm): vLLM's CPU server started as deploy
starts it, base and adapter side by side in one server, every row through the OpenAI API.

The fast checks; the ones that train, serve or run the pipeline are tests/integration/test_eval_served.py (the integration tier)."""

from pathlib import Path

import pytest

from trainer import evaluate as ev
from trainer.core.errors import UserError


def _adapter(base_dir, out_dir, modules_to_save=None, zero=True):
    """An untrained LoRA adapter: B = 0 answers exactly as its base; `zero=False` draws B at random
    too (peft's init_lora_weights=False), an adapter that changes the model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base_dir),
        LoraConfig(
            r=8,
            lora_alpha=16,
            target_modules=["q_proj", "v_proj"],
            modules_to_save=modules_to_save,
            init_lora_weights=zero,
        ),
    )
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out_dir)
    return out_dir


def test_engine_choice(tiny_model_dir, tmp_path):
    assert ev.choose_engine("hf", tiny_model_dir) == "hf"
    assert ev.choose_engine("auto", tiny_model_dir) == "hf"  # 0.9M parameters: a server start costs more
    plain = _adapter(tiny_model_dir, tmp_path / "plain")
    embed = _adapter(tiny_model_dir, tmp_path / "embed", modules_to_save=["embed_tokens"])
    assert (
        ev.served._served_lora(plain)
        and not ev.served._served_lora(embed)
        and not ev.served._served_lora(tiny_model_dir)
    )


def test_server_plans_put_the_adapter_beside_its_base_except_on_the_cpu_build(tiny_model_dir, tmp_path, monkeypatch):
    plain = _adapter(tiny_model_dir, tmp_path / "plain")
    embed = _adapter(tiny_model_dir, tmp_path / "embed", modules_to_save=["embed_tokens"])
    monkeypatch.setattr(ev.served, "vllm_cpu_build", lambda: False)
    assert ev.server_plans(tiny_model_dir, plain) == [(tiny_model_dir, {"tuned": str(plain)}, ("base", "tuned"))]
    apart = [(tiny_model_dir, {}, ("base",)), (embed, {}, ("tuned",))]  # vLLM cannot load trained embeddings
    assert ev.server_plans(tiny_model_dir, embed) == apart
    monkeypatch.setattr(ev.served, "vllm_cpu_build", lambda: True)  # the CPU build: base, then the tuned model merged
    assert ev.server_plans(tiny_model_dir, plain) == [(tiny_model_dir, {}, ("base",)), (plain, {}, ("tuned",))]


def test_only_the_servers_that_answer_for_the_models_asked_start(tiny_model_dir, tmp_path, monkeypatch):
    """A trial given its sweep's base scores asks for the tuned model alone: on the CPU build no base server starts
    (only the merged tuned one); beside its base (the GPU plan) one server starts and only the tuned name is asked;
    the base alone (evaluate_base) is one server of the base. vLLM's start, readiness and answers are faked here:
    tests/integration/test_eval_served.py starts real servers."""
    from trainer.models import merge
    from trainer.serving import client, local

    class Server:
        url = "http://127.0.0.1:1"

        def stop(self):
            pass

    started, asked, lengths = [], [], []
    monkeypatch.setattr(
        local,
        "start",
        lambda served, name, lora_modules=None, **kw: (
            started.append((str(served), dict(lora_modules or {}))) or lengths.append(kw["max_model_len"]) or Server()
        ),
    )
    monkeypatch.setattr(client, "wait_ready", lambda *a, **kw: None)
    monkeypatch.setattr(merge, "merge", lambda base, adapter, out: out)
    monkeypatch.setattr(ev.served, "ask", lambda url, name, rows, budgets, desc, concurrency: asked.append(name) or [])
    monkeypatch.setattr(ev.losses, "served_losses", lambda url, name, examples, desc, concurrency: [])
    from transformers import AutoTokenizer

    from trainer.data import builtin_data
    from trainer.evaluate.base import Asked

    tok, plain = AutoTokenizer.from_pretrained(tiny_model_dir), _adapter(tiny_model_dir, tmp_path / "plain")
    rows = builtin_data.generate(n_train=0, n_eval=2, seed=1)["eval"]
    question = {"heldout": Asked(rows, ev.generation.prompt_lengths(tok, rows), [16] * len(rows))}

    def served(tuned, names):
        started.clear(), asked.clear()
        answers = ev.served.VllmEngine(tok, 512).answer(tiny_model_dir, tuned, names, question)
        return started[:], asked[:], sorted(answers)

    monkeypatch.setattr(ev.served, "vllm_cpu_build", lambda: True)
    servers, names, answered = served(plain, ("tuned",))
    assert [(Path(d).name, loras) for d, loras in servers] == [("merged", {})] and names == answered == ["tuned"]
    servers, names, answered = served(plain, ("base", "tuned"))  # the finetune pipeline's evaluate: both
    assert [(Path(d).name, loras) for d, loras in servers] == [(tiny_model_dir.name, {}), ("merged", {})]
    assert names == answered == ["base", "tuned"]
    monkeypatch.setattr(ev.served, "vllm_cpu_build", lambda: False)
    assert served(plain, ("tuned",)) == ([(str(tiny_model_dir), {"tuned": str(plain)})], ["tuned"], ["tuned"])
    assert served(None, ("base",)) == ([(str(tiny_model_dir), {})], ["base"], ["base"])
    # each server's context: the longest prompt plus its answer's budget (no example's loss is read here)
    assert set(lengths) == {max(question["heldout"].prompts) + 16}


def test_auto_serves_through_vllm_only_where_it_can_start(tmp_path, monkeypatch):
    """auto takes vLLM for a real-sized model where vLLM can run: the CPU build (run_local), or
    the CUDA build of the evaluate image with a GPU; the same image on a CPU node takes HF."""
    import importlib.metadata

    import torch
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, vocab_size=32000).save_pretrained(
        tmp_path
    )
    assert ev.choose_engine("auto", tmp_path) == "vllm"  # here: vllm-cpu
    real = importlib.metadata.distribution

    def cuda_build_only(name):
        if name == "vllm-cpu":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", cuda_build_only)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ev.choose_engine("auto", tmp_path) == "hf"  # the evaluate image on a node without a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert ev.choose_engine("auto", tmp_path) == "vllm"
    assert ev.choose_engine("hf", tmp_path) == "hf"


def test_served_loss_reads_the_scored_tokens_of_the_prompt_and_the_last_at_the_generated_position(monkeypatch):
    from trainer.serving import client

    sent = []

    def completion(url, body, timeout=0):
        sent.append(body)
        # log-probability of token t at position i: -(i + t / 100), so the sum names what was read
        prompt = [None] + [{str(t): {"logprob": -(i + t / 100)}} for i, t in enumerate(body["prompt"]) if i]
        choice = {"prompt_logprobs": prompt}
        if "logprob_token_ids" in body:
            [t] = body["logprob_token_ids"]
            choice["logprobs"] = {
                "top_logprobs": [{f"token_id:{t}": -(len(body["prompt"]) + t / 100), "token_id:999": -0.01}]
            }
        return {"choices": [choice]}

    monkeypatch.setattr(client, "completion", completion)
    ids = [10, 11, 12, 13, 14]
    # scored: positions 2 and 4 (the last one, asked for at the generated position)
    total, n = ev.losses.served_nll("http://x", "tuned", {"input_ids": ids, "labels": [-100, -100, 12, -100, 14]})
    assert n == 2 and total == pytest.approx((2 + 0.12) + (4 + 0.14))
    assert sent[-1]["prompt"] == ids[:-1] and sent[-1]["model"] == "tuned" and sent[-1]["logprob_token_ids"] == [14]
    # the last token not scored: nothing asked for it
    total, n = ev.losses.served_nll("http://x", "base", {"input_ids": ids, "labels": [-100, 11, 12, -100, -100]})
    assert n == 2 and total == pytest.approx((1 + 0.11) + (2 + 0.12)) and "logprob_token_ids" not in sent[-1]
    # nothing scored (the first token never is): no request at all
    before = len(sent)
    assert ev.losses.served_nll("http://x", "base", {"input_ids": ids, "labels": [10] + [-100] * 4}) == (0.0, 0)
    assert len(sent) == before
    assert ev.mean_loss([(3.0, 2), (0.0, 0), (1.0, 2)]) == pytest.approx(1.0)
    # a server that ignores the fields (another vLLM): one message naming the fix, no KeyError
    monkeypatch.setattr(client, "completion", lambda url, body, timeout=0: {"choices": [{"text": ""}]})
    with pytest.raises(UserError, match="returned no prompt log-probabilities.*or eval_engine=hf"):
        ev.losses.served_nll("http://x", "base", {"input_ids": ids, "labels": [-100, 11, 12, 13, 14]})
