"""trainer.models.weights: corrupt or mismatched weights are found from headers and sizes, before training."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from trainer.models import weights


def variant(tmp_path, model_dir, change):
    """A copy of the tiny model with `change(dir)` applied; its weights' problems."""
    out = tmp_path / "model"
    shutil.copytree(model_dir, out)
    change(out)
    return weights.dir_problems(out, json.loads((out / "config.json").read_text()))


def renamed(rename):
    def change(d):
        tensors = load_file(d / "model.safetensors")
        save_file({rename(k): v for k, v in tensors.items() if rename(k)}, d / "model.safetensors")

    return change


def config(**changes):
    def change(d):
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, **changes}))

    return change


def test_the_tiny_model_passes(tmp_path, tiny_model_dir):
    assert variant(tmp_path, tiny_model_dir, lambda d: None) == []


def test_a_truncated_file_is_named_with_the_fix(tmp_path, tiny_model_dir):
    def truncate(d):
        data = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes(data[: len(data) // 2])

    [problem] = variant(tmp_path, tiny_model_dir, truncate)
    assert "model.safetensors is truncated: " in problem and "tensors lie beyond the end of the file" in problem
    assert problem.endswith("download it again (an interrupted download?)")


def test_a_header_claiming_2_to_the_62_bytes(tmp_path, tiny_model_dir):
    def claim(d):
        data = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes((2**62).to_bytes(8, "little") + data[8:])

    [problem] = variant(tmp_path, tiny_model_dir, claim)
    assert "model.safetensors's header claims 4,611,686,018,427,387,904 bytes but the file has" in problem


def test_a_tensor_whose_bytes_do_not_fit_its_shape(tmp_path, tiny_model_dir):
    def reshape(d):
        data = (d / "model.safetensors").read_bytes()
        length = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + length])
        header["lm_head.weight"]["shape"] = [7, 7]  # same offsets, another shape
        raw = json.dumps(header, separators=(",", ":")).encode().ljust(length)
        (d / "model.safetensors").write_bytes(data[:8] + raw + data[8 + length :])

    [problem] = variant(tmp_path, tiny_model_dir, reshape)
    assert "model.safetensors is corrupt: 'lm_head.weight' (F32 [7, 7]) needs 196 bytes but has" in problem


def test_pickle_only_weights_are_refused_never_unpickled(tmp_path, tiny_model_dir, monkeypatch):
    import pickle

    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("unpickled"))

    def to_pickle(d):
        (d / "model.safetensors").unlink()
        (d / "pytorch_model.bin").write_bytes(b"\x80\x02c__builtin__\neval\n")

    [problem] = variant(tmp_path, tiny_model_dir, to_pickle)
    assert "has its weights only as pickle (pytorch_model.bin): loading a pickle runs code from the file" in problem
    assert "convert them to safetensors on a machine you trust" in problem


def test_a_module_prefix_is_named_with_its_fix(tmp_path, tiny_model_dir):
    [problem] = variant(tmp_path, tiny_model_dir, renamed(lambda k: "module." + k))
    assert "the weights do not match config.json: 39 of the model's 39 weights are missing (lm_head.weight" in problem
    assert "39 of the file's 39 tensors fit no weight of the model (module.lm_head.weight" in problem
    assert "saved from a DDP or DataParallel wrapper" in problem


def test_a_gpt2_config_over_llama_weights(tmp_path, tiny_model_dir):
    change = config(
        model_type="gpt2", architectures=["GPT2LMHeadModel"], n_embd=128, n_layer=2, n_head=4, vocab_size=1024
    )
    [problem] = variant(tmp_path, tiny_model_dir, change)
    assert "weights are missing (transformer.h.0.attn.c_attn.bias" in problem
    assert "config.json and the weights are of different models" in problem


def test_what_transformers_loads_itself_passes(tmp_path, tiny_model_dir):
    """A tied output embedding left out, a base model's keys (no `model.` prefix), an old
    checkpoint's rotary_emb.inv_freq: transformers loads each without random weights."""

    def tied(d):
        renamed(lambda k: None if k == "lm_head.weight" else k)(d)
        config(tie_word_embeddings=True)(d)

    assert variant(tmp_path / "a", tiny_model_dir, tied) == []
    assert variant(tmp_path / "b", tiny_model_dir, renamed(lambda k: k.removeprefix("model."))) == []

    def inv_freq(d):
        tensors = load_file(d / "model.safetensors")
        save_file({**tensors, "model.layers.0.self_attn.rotary_emb.inv_freq": torch.zeros(16)}, d / "model.safetensors")

    assert variant(tmp_path / "c", tiny_model_dir, inv_freq) == []


def test_an_untied_output_layer_left_out_is_refused(tmp_path, tiny_model_dir):
    [problem] = variant(tmp_path, tiny_model_dir, renamed(lambda k: None if k == "lm_head.weight" else k))
    assert (
        "1 of the model's 39 weights are missing (lm_head.weight). Training would start those weights from "
        "random values" in problem
    )


def test_a_delivered_tree_is_checked_in_the_bucket_without_downloading_weights(store, tmp_path, tiny_model_dir):
    out = tmp_path / "model"
    shutil.copytree(tiny_model_dir, out)
    data = (out / "model.safetensors").read_bytes()
    (out / "model.safetensors").write_bytes(data[: len(data) - 1000])
    uri, manifest = store.put_tree(out, "models")
    read = []
    get_bytes = store.get_bytes
    store.get_bytes = lambda key, length=0: read.append((key.rsplit("/", 1)[1], length)) or get_bytes(key, length)
    [problem] = weights.store_problems(store, uri, manifest)
    assert problem.startswith(f"{uri}/model.safetensors is truncated")
    lengths = [n for name, n in read if name == "model.safetensors"]
    assert lengths and all(0 < n < 64 << 10 for n in lengths)  # the header, never the data


def test_delivery_refuses_a_delivered_tree_with_corrupt_weights(store, tmp_path, tiny_model_dir):
    """An s3:// model source passes through deliver-model as it is: its headers are read there."""
    from trainer.store import delivery
    from trainer.core.errors import UserError

    out = tmp_path / "model"
    shutil.copytree(tiny_model_dir, out)
    data = (out / "model.safetensors").read_bytes()
    (out / "model.safetensors").write_bytes((2**62).to_bytes(8, "little") + data[8:])
    uri, _ = store.put_tree(out, "models")
    with pytest.raises(UserError, match=r"header claims 4,611,686,018,427,387,904 bytes"):
        delivery.deliver_model(uri, "", store)
