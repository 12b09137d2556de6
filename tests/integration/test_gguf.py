"""A .gguf file as a model source (trainer/models/gguf.py, trainer/config/sources.py): the source forms, the conversion of
a tiny GGUF written here and of the real SmolLM2-135M-Instruct Q4_1 (tests/real_models.py), delivery into the
bucket, and one UserError with the fix for every bad file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.models import gguf as trainer_gguf
from trainer.store import delivery
from trainer.models import model_tree
from trainer.config import sources
from trainer.core.errors import UserError

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is the capital of France?"}]


def _byte_level_alphabet() -> list[str]:
    """GPT-2's byte-to-character table: a byte-level BPE vocabulary with no merges encodes any text."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b if b in printable else next(extra)) for b in range(256)]


def tiny_gguf(
    path: Path,
    arch: str = "llama",
    qtype: str = "Q8_0",
    tokenizer: bool = True,
    hidden: int = 32,
    keep=lambda name: True,
    template: str | None = TEMPLATE,
) -> Path:
    """A 1-layer Llama as llama.cpp writes it (weights in `qtype`, norms F32; a byte-level tokenizer with
    ChatML specials and a chat template), in ~0.1 s; only the tensors whose names `keep` keeps."""
    import gguf

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = specials + _byte_level_alphabet()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(2 * hidden)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    if tokenizer:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types([3] * len(specials) + [1] * 256)
        w.add_token_scores([0.0] * len(tokens))
        w.add_token_merges([])
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_pad_token_id(2)
        if template:
            w.add_chat_template(template)
    rng = np.random.default_rng(0)
    kind = gguf.GGMLQuantizationType[qtype]
    shapes = {
        "token_embd.weight": (len(tokens), hidden),
        "blk.0.attn_norm.weight": (hidden,),
        **{f"blk.0.{n}.weight": (hidden, hidden) for n in ("attn_q", "attn_k", "attn_v", "attn_output")},
        "blk.0.ffn_norm.weight": (hidden,),
        "blk.0.ffn_gate.weight": (2 * hidden, hidden),
        "blk.0.ffn_up.weight": (2 * hidden, hidden),
        "blk.0.ffn_down.weight": (hidden, 2 * hidden),
        "output_norm.weight": (hidden,),
    }  # no output.weight: tied embeddings
    for name, shape in shapes.items():
        if not keep(name):
            continue
        values = rng.normal(0.0, 0.2, shape).astype(np.float32)
        if len(shape) == 1:
            w.add_tensor(name, values)
        else:
            w.add_tensor(name, gguf.quants.quantize(values, kind), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_source_forms(tmp_path, monkeypatch):
    local = tmp_path / "m.Q4_1.gguf"
    local.write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)
    for form in (str(local), f"file://{local}", "./m.Q4_1.gguf", "m.Q4_1.gguf"):
        assert sources.parse(form, "model") == sources.Source("local", str(local)), form
        assert sources.looks_local(form)
    for form in ("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smollm2-135m-instruct-q8_0.gguf", "org/name/sub/m.GGUF"):
        assert sources.parse(form, "model") == sources.Source("hub", form)
        assert not sources.looks_local(form)
    assert sources.parse("s3://bucket/uploads/m.gguf", "model") == sources.Source("s3", "s3://bucket/uploads/m.gguf")
    for missing in ("other.gguf", "dir/other.gguf", "./org/name/other.gguf"):  # too short for a Hub file, or ./
        err = str(pytest.raises(UserError, sources.parse, missing, "model").value)
        assert err.startswith("model path not found") and "org/name/file.gguf on the Hub" in err
    assert sources.is_gguf("a/b/M.GGUF") and not sources.is_gguf("org/name")


@pytest.mark.parametrize("qtype, dtype", [("Q8_0", torch.float32), ("BF16", torch.bfloat16)])
def test_a_tiny_gguf_converts_to_a_plain_model_directory_in_its_dtype(tmp_path, capsys, qtype, dtype):
    """Quantized blocks de-quantize into float32; a file of BF16 tensors stays bfloat16, bit for bit."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_gguf(tmp_path / f"tiny.{qtype}.gguf", qtype=qtype)
    assert model_tree.model_max_length(str(path)) == 256
    out = trainer_gguf.convert(path, tmp_path / "model")
    assert f"converted tiny.{qtype}.gguf (llama, 11 tensors: " in capsys.readouterr().out
    assert model_tree.model_dir_problems(out) == []
    config = json.loads((out / "config.json").read_text())
    assert config["dtype"] == str(dtype).removeprefix("torch.") and "quantization_config" not in config
    with safe_open(out / "model.safetensors", "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F32" if dtype == torch.float32 else "BF16"}
    model = AutoModelForCausalLM.from_pretrained(out)
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name)  # float32, as transformers reads it
    for name, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], value.to(dtype)), name
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template == TEMPLATE and tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.model_max_length == 256


def counted_readers(monkeypatch) -> list[str]:
    """The names of the files gguf.GGUFReader parses from now on (the test's end puts the class back)."""
    import gguf

    opened = []

    class Counted(gguf.GGUFReader):
        def __init__(self, path, mode="r"):
            opened.append(Path(path).name)
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", Counted)
    return opened


def test_a_conversion_reads_the_gguf_once_and_leaves_the_gguf_module_as_it_was(tmp_path, monkeypatch):
    """transformers reads the file three times (config, tokenizer, weights) and the check before a conversion once
    more: one gguf.GGUFReader serves them all; another file read meanwhile gets its own; after the conversion
    gguf's names are its own again. The converted model is compared with transformers' own reading above."""
    import gguf

    opened = counted_readers(monkeypatch)
    Counted = gguf.GGUFReader
    name_map = gguf.get_tensor_name_map
    path, other = tiny_gguf(tmp_path / "tiny.Q8_0.gguf"), tiny_gguf(tmp_path / "other.Q8_0.gguf")
    with trainer_gguf.read_once(path):
        out = delivery.materialize_model(sources.Source("local", str(path)), "", tmp_path / "work")
        assert gguf.GGUFReader(str(other)) is not gguf.GGUFReader(str(path))
    assert (out / "model.safetensors").is_file()
    assert opened == ["tiny.Q8_0.gguf", "other.Q8_0.gguf"]
    assert gguf.GGUFReader is Counted and gguf.get_tensor_name_map is name_map
    trainer_gguf.convert(path, tmp_path / "again")  # on its own, outside any block: one reader too
    assert opened[2:] == ["tiny.Q8_0.gguf"]


def test_validation_parses_a_gguf_once_and_keeps_no_parsed_file_after(tmp_path, monkeypatch):
    """Validation checks a GGUF's metadata, then loads its tokenizer to check the template: one parse of the file
    (~2.5 s for SmolLM2's), not two. No parsed file is kept after it (~140 MB for SmolLM2's, and the file stays open),
    nor after a metadata read outside a block."""
    from trainer.validate import pipeline_problems

    opened = counted_readers(monkeypatch)
    path = tiny_gguf(tmp_path / "tiny.Q8_0.gguf")
    problems = pipeline_problems({"model_source": str(path), "max_seq_len": 256, "chat_template": "chatml-tools"})
    assert "(this one allows 256)" in " ".join(problems)  # the context from the metadata, lengths by its tokenizer
    assert opened == ["tiny.Q8_0.gguf"]
    assert trainer_gguf._shared_reader.cache_info().currsize == 0
    other = tiny_gguf(tmp_path / "other.Q8_0.gguf")
    assert trainer_gguf.file_problems(other) == []
    assert opened[1:] == ["other.Q8_0.gguf"] and trainer_gguf._shared_reader.cache_info().currsize == 0


def test_a_gguf_uploaded_to_the_bucket_or_local_is_delivered_once(tmp_path, store, capsys):
    """s3://bucket/uploads/x.gguf and the same file on this machine convert into the same tree: delivering the
    .gguf again uploads nothing."""
    path = tiny_gguf(tmp_path / "tiny.Q8_0.gguf")
    store.ensure_bucket()
    store.client.fput_object(store.bucket, "uploads/tiny.Q8_0.gguf", str(path))
    uri, meta = delivery.deliver_model(store.uri("uploads/tiny.Q8_0.gguf"), "", store)
    assert uri.startswith(store.uri("models/sha256-")) and meta["uploaded_bytes"] > 0
    assert {f["path"] for f in meta["files"]} >= {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "chat_template.jinja",
    }
    assert "converted tiny.Q8_0.gguf (llama, 11 tensors: F32/Q8_0) into a float32" in capsys.readouterr().out
    again, meta = delivery.deliver_model(f"file://{path}", "", store)
    assert (again, meta["uploaded_bytes"]) == (uri, 0)  # the conversion is deterministic: the same tree


def _objects(store, prefix):
    store.ensure_bucket()
    return [o.object_name for o in store.client.list_objects(store.bucket, prefix=prefix, recursive=True)]


def test_bad_gguf_files_are_one_error_with_the_fix(tmp_path, store):
    good = tiny_gguf(tmp_path / "good.gguf").read_bytes()
    (tmp_path / "garbage.gguf").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\n")
    (tmp_path / "cut.gguf").write_bytes(good[: len(good) * 2 // 3])
    tiny_gguf(tmp_path / "rwkv.gguf", arch="rwkv6")
    tiny_gguf(tmp_path / "t5.gguf", arch="t5")
    tiny_gguf(tmp_path / "notok.gguf", tokenizer=False)
    expected = {
        "garbage": "is not a GGUF file (it does not start with the bytes 'GGUF'",
        "cut": "the file is damaged or cut short",
        "rwkv": "holds a 'rwkv6' model, an architecture the installed transformers cannot de-quantize from GGUF: use "
        "the original Hugging Face model",
        "t5": "holds a 't5' model, not a decoder-only causal language model",
        "notok": "has no tokenizer in its metadata (tokenizer.ggml.*)",
    }
    before = _objects(store, "models/")
    for name, words in expected.items():
        path = tmp_path / f"{name}.gguf"
        problems = model_tree.model_dir_problems(path)
        assert len(problems) == 1 and words in problems[0], (name, problems)
        err = str(pytest.raises(UserError, delivery.deliver_model, str(path), "", store).value)
        assert words in err and str(path) in err and "Traceback" not in err, (name, err)
    assert _objects(store, "models/") == before  # nothing uploaded


def test_a_gguf_missing_weights_its_architecture_needs_is_refused_before_upload(tmp_path, store):
    """transformers filled a missing tensor with new random values and the model was uploaded and trained."""
    no_q = tiny_gguf(tmp_path / "no_q.gguf", keep=lambda name: name != "blk.0.attn_q.weight")
    only_embd = tiny_gguf(tmp_path / "only_embd.gguf", keep=lambda name: name == "token_embd.weight")
    before = _objects(store, "models/")
    err = str(pytest.raises(UserError, delivery.deliver_model, str(no_q), "", store).value)
    assert (
        err.startswith(
            f"model {no_q}: its tensors do not make a whole 'llama' model: weights 1 missing "
            "(model.layers.0.self_attn.q_proj.weight)"
        )
        and "nothing was uploaded" in err
    )
    err = str(pytest.raises(UserError, trainer_gguf.convert, only_embd, tmp_path / "out").value)
    assert "weights 10 missing (model.layers.0.input_layernorm.weight, " in err and ", ...)" in err
    assert _objects(store, "models/") == before and not (tmp_path / "out").exists()


def test_a_model_without_a_template_of_its_own_is_trained_with_the_template_the_run_gives(tmp_path, store):
    """It was refused with "add a template" even though chat_template=chatml-tools gave one."""
    from trainer.chat import templates
    from trainer.validate.pipeline import _model_problems

    path = tiny_gguf(tmp_path / "bare.gguf", template=None)
    [problem] = model_tree.model_dir_problems(path)
    assert "has no chat template" in problem
    assert model_tree.model_dir_problems(path, own_template=False) == []
    uri, meta = delivery.deliver_model(str(path), "", store, chat_template="chatml-tools")
    assert meta["chat_template"] == "chatml-tools"
    assert store.get_bytes(f"{uri.split('/', 3)[3]}/chat_template.jinja").decode() == templates.CHATML_TOOLS
    with pytest.raises(UserError, match="has no chat template"):
        delivery.deliver_model(str(path), "", store)
    src = sources.parse(str(path), "model")
    params = {"model_source": str(path), "max_seq_len": 128, "method": "lora", "lora_r": 8}
    assert not [p for p in _model_problems(src, {**params, "chat_template": "chatml-tools"})[0] if "template" in p]
    assert any(
        "give one with chat_template=" in p for p in _model_problems(src, {**params, "chat_template": "model"})[0]
    )


def test_a_gguf_whose_own_template_drops_tools_is_refused_at_validate(tmp_path):
    """Its metadata was read at validate, but the template was checked only after the conversion and upload."""
    from trainer.validate import pipeline_problems

    path = tiny_gguf(tmp_path / "own.gguf")  # TEMPLATE renders no tools
    problems = pipeline_problems({"model_source": str(path), "max_seq_len": 256})
    assert any(
        f"dataset_source with model {path}: the chat template fails the train/serve check" in p and "tools dropped" in p
        for p in problems
    ), problems
    assert not [
        p
        for p in pipeline_problems({"model_source": str(path), "max_seq_len": 256, "chat_template": "chatml-tools"})
        if "tools dropped" in p
    ]


def test_the_gguf_package_missing_is_named_with_the_install_command(tmp_path, monkeypatch):
    path = tiny_gguf(tmp_path / "tiny.gguf")
    monkeypatch.setitem(sys.modules, "gguf", None)  # `import gguf` raises ImportError
    problems = model_tree.model_dir_problems(path)
    assert problems == [
        f"reading {path} needs the gguf package, which is not installed: pip install gguf (a "
        "dependency of this project: `pip install -e .` installs it)"
    ]


def test_a_gguf_in_a_hub_repo_from_the_cache_and_the_hub_errors(tmp_path, monkeypatch, capsys):
    """org/name/file.gguf: hf_hub_download finds it in a pre-filled HF cache (HF_HUB_OFFLINE=1) and it is
    converted; a file not cached, a file the repo does not have, one UserError each."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import EntryNotFoundError

    repo = tmp_path / "hub" / "models--acme--tiny-GGUF"
    (repo / "snapshots" / ("a" * 40)).mkdir(parents=True)
    tiny_gguf(repo / "snapshots" / ("a" * 40) / "tiny.Q8_0.gguf")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    src = sources.parse("acme/tiny-GGUF/tiny.Q8_0.gguf", "model")
    out = delivery.materialize_model(src, "", tmp_path / "work")
    assert out == tmp_path / "work" / "model" and model_tree.model_dir_problems(out) == []
    err = str(
        pytest.raises(
            UserError,
            delivery.materialize_model,
            sources.parse("acme/tiny-GGUF/other.gguf", "model"),
            "",
            tmp_path / "work2",
        ).value
    )
    assert err.startswith(
        "model 'acme/tiny-GGUF/other.gguf' is not in the local Hugging Face cache and the Hub cannot be reached"
    )

    asked = []

    def no_such_file(repo_id, filename, revision=None):
        asked.append((repo_id, filename, revision))
        raise EntryNotFoundError("404 Client Error: Entry Not Found")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_such_file)
    err = str(
        pytest.raises(
            UserError,
            delivery.materialize_model,
            sources.parse("acme/tiny-GGUF/sub/x.gguf", "model"),
            "v1.0",
            tmp_path / "work3",
        ).value
    )
    assert asked == [("acme/tiny-GGUF", "sub/x.gguf", "v1.0")]
    assert err == (
        "model repo 'acme/tiny-GGUF' has no file 'sub/x.gguf': check the file name in the repo's file list "
        "(names are case-sensitive), and model_revision"
    )


def test_an_uploaded_gguf_object_is_named_in_messages(tmp_path, store):
    store.ensure_bucket()
    (tmp_path / "bad.gguf").write_bytes(b"<html>not found</html>")
    store.client.fput_object(store.bucket, "uploads/bad.gguf", str(tmp_path / "bad.gguf"))
    err = str(pytest.raises(UserError, delivery.deliver_model, store.uri("uploads/bad.gguf"), "", store).value)
    assert f"{store.uri('uploads/bad.gguf')} is not a GGUF file" in err and str(tmp_path) not in err
    err = str(pytest.raises(UserError, delivery.deliver_model, store.uri("uploads/none.gguf"), "", store).value)
    assert err == (
        f"{store.uri('uploads/none.gguf')}: no such object in bucket 'test-bucket'; check the key (a .gguf "
        "model uploaded there is read as it is, like a local file)"
    )


def test_smollm2_converted_computes_what_the_gguf_model_does(smollm2_gguf, smollm2_model_dir):
    """The real SmolLM2-135M-Instruct Q4_1: the converted directory loads as a plain model, its logits equal
    those of transformers' GGUF-loaded model, and its tokenizer carries SmolLM2's own ChatML template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert model_tree.model_dir_problems(smollm2_model_dir) == []
    config = json.loads((smollm2_model_dir / "config.json").read_text())
    assert (config["model_type"], config["dtype"], config["tie_word_embeddings"]) == ("llama", "float32", True)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_model_dir)
    assert "You are a helpful AI assistant named SmolLM, trained by Hugging Face" in tokenizer.chat_template
    assert (tokenizer.eos_token, tokenizer.model_max_length) == ("<|im_end|>", 8192)
    prompt = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert prompt == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is the capital of "
        "France?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    model = AutoModelForCausalLM.from_pretrained(smollm2_model_dir)
    reference = AutoModelForCausalLM.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name)
    with torch.no_grad():
        logits, expected = model(ids).logits, reference(ids).logits
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    assert tokenizer.decode(int(logits[0, -1].argmax())) == tokenizer.decode(int(expected[0, -1].argmax()))


def test_smollm2_gguf_is_delivered_as_the_tree_any_conversion_of_it_gives(
    smollm2_gguf, smollm2_model_dir, store, capsys
):
    """Converting the same .gguf again (here, and before in tests/real_models.py) gives the same tree:
    delivering it again uploads nothing."""
    uri, meta = delivery.deliver_model(str(smollm2_gguf), "", store)
    assert (
        "converted SmolLM2-135M-Instruct.Q4_1.gguf (llama, 272 tensors: F32/Q4_1/Q8_0) into a float32 model "
        "directory" in capsys.readouterr().out
    )
    assert uri.startswith(store.uri("models/sha256-")) and meta["source"] == str(smollm2_gguf)
    again, manifest = store.put_tree(smollm2_model_dir, "models")
    assert (again, manifest["uploaded_bytes"]) == (uri, 0)
