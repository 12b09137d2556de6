"""Evaluation through the served model (eval_engine=vllm): vLLM's CPU server started as deploy
starts it, base and adapter side by side in one server, every row through the OpenAI API."""

import json
from pathlib import Path

import pytest

from trainer.data import builtin_data
from trainer import data
from trainer.data import bfcl
from trainer import evaluate as ev
from tests.unit.test_eval_served import _adapter


@pytest.fixture
def started(monkeypatch):
    """Every vLLM server trainer.serving.local.start starts, as (model directory, {adapter name: directory}, Server)."""
    from trainer.serving import local

    servers, original = [], local.start

    def counting(*args, **kwargs):
        server = original(*args, **kwargs)
        servers.append((args[0], dict(kwargs.get("lora_modules") or {}), server))
        return server

    monkeypatch.setattr(local, "start", counting)
    return servers


def test_the_cpu_build_scores_base_then_the_merged_tuned_model_losses_included(
    tiny_model_dir, tmp_path, started, bfcl_tree, monkeypatch
):
    """BFCL's rows (one per category) are asked on the same two servers as the held-out rows, none generated here."""
    rows = builtin_data.generate(n_train=0, n_eval=4, seed=6)["eval"]
    data.write_jsonl(rows, tmp_path / "eval.jsonl")
    adapter = _adapter(tiny_model_dir, tmp_path / "adapter", zero=False)
    assert ev.served.vllm_cpu_build()  # this machine's vLLM
    monkeypatch.setattr(ev.generation, "generate", lambda *a, **kw: pytest.fail("generated here, not served"))
    result = ev.evaluate(
        tiny_model_dir,
        adapter,
        tmp_path / "eval.jsonl",
        max_rows=4,
        max_seq_len=512,
        engine="vllm",
        suites=("heldout", "bfcl"),
        bfcl_dir=bfcl_tree,
        bfcl_rows=1,
    )
    counts = result["bfcl"]["counts"]
    assert all(counts[f"bfcl_{c}_rows"] == 1 for c in bfcl.CATEGORIES)
    assert set(result["bfcl"]["tuned"]) >= {f"bfcl_{c}_accuracy" for c in bfcl.CATEGORIES}
    (base_dir, base_loras, base_server), (tuned_dir, tuned_loras, tuned_server) = started
    assert str(base_dir) == str(tiny_model_dir) and not base_loras and not tuned_loras
    assert Path(tuned_dir).name == "merged" and str(tuned_dir) != str(adapter)  # the merge's output, removed since
    assert base_server.proc.poll() is not None and tuned_server.proc.poll() is not None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    _, examples = ev.fitting_rows(rows, tok, 512, None)
    for name, a in (("base", None), ("tuned", adapter)):  # the merged model's loss is the adapter's
        hf = ev.eval_loss(ev.load(tiny_model_dir, a), examples, tok.pad_token_id)
        assert result[name]["eval_loss"] == pytest.approx(hf, rel=1e-3), name


def test_base_and_adapter_answer_through_one_vllm_server(tiny_model_dir, tmp_path, monkeypatch, started):
    rows = builtin_data.generate(n_train=0, n_eval=6, seed=5)["eval"]
    data.write_jsonl(rows, tmp_path / "eval.jsonl")
    adapter = _adapter(tiny_model_dir, tmp_path / "adapter", zero=False)
    # the GPU build's plan, one server with the adapter beside the base (test_server_plans: the CPU
    # build merges), run on this CPU build
    monkeypatch.setattr(
        ev.served, "server_plans", lambda base, tuned: [(base, {"tuned": str(tuned)}, ("base", "tuned"))]
    )
    result = ev.evaluate(tiny_model_dir, adapter, tmp_path / "eval.jsonl", max_rows=6, max_seq_len=512, engine="vllm")
    assert result["engine"] == "vllm" and result["rows"] == 6
    [(served, loras, server)] = started  # one server: the base, with the adapter beside it
    assert str(served) == str(tiny_model_dir) and loras == {"tuned": str(adapter)}
    assert server.proc.poll() is not None  # stopped before evaluate returned
    assert server.tmp and not Path(server.tmp).exists()  # with its temporary files (vLLM's IPC sockets)
    for key in ("fc_accuracy", "fc_ast_accuracy", "fc_exact_accuracy", "fc_multiple_accuracy"):
        assert 0 <= result["base"][key] <= 1 and 0 <= result["tuned"][key] <= 1
    assert result["categories"]["fc_multiple_rows"] == 6
    # The eval losses came from the same server (prompt log-probabilities; no weights loaded here)
    # and equal what transformers computes on the same encodings, the adapter's included: the
    # adapter was applied to every prompt token.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    _, examples = ev.fitting_rows(rows, tok, 512, None)
    hf = {
        name: ev.eval_loss(ev.load(tiny_model_dir, a), examples, tok.pad_token_id)
        for name, a in (("base", None), ("tuned", adapter))
    }
    assert abs(hf["tuned"] - hf["base"]) > 0.01  # the adapter changes the model
    for name in ("base", "tuned"):
        assert result[name]["eval_loss"] == pytest.approx(hf[name], rel=1e-3), name
    json.dumps(result)  # the step writes it out
