"""A GGUF's tensors against what its metadata's config makes of each parameter (trainer.models.gguf.tensor_problems): a
tensor of the wrong shape, or one that is no parameter, refused before de-quantizing anything."""

from __future__ import annotations

import numpy as np
import pytest

from tests.integration.test_gguf import tiny_gguf
from trainer.models import gguf as trainer_gguf
from trainer.core.errors import UserError


def _with_tensor(path, name, shape):
    """tiny_gguf's file with one more (or one replaced) F32 tensor."""
    import gguf

    reader = gguf.GGUFReader(str(tiny_gguf(path.with_suffix(".src.gguf"), qtype="F32")))
    w = gguf.GGUFWriter(str(path), "llama")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value = field.contents()
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, value, kind, sub_type=sub)
    for t in reader.tensors:
        if t.name != name:
            w.add_tensor(t.name, np.array(t.data).reshape(tuple(int(n) for n in reversed(t.shape))))
    w.add_tensor(name, np.zeros(shape, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_whole_tiny_gguf_has_no_tensor_problem(tmp_path):
    assert trainer_gguf.tensor_problems(tiny_gguf(tmp_path / "tiny.gguf")) == []


@pytest.mark.parametrize(
    "name, shape, said",
    [
        (
            "blk.0.attn_q.weight",
            (32, 16),
            "tensor blk.0.attn_q.weight is [32, 16], but the config in its metadata makes "
            "model.layers.0.self_attn.q_proj.weight [32, 32]",
        ),
        ("blk.1.attn_q.weight", (32, 32), "tensor blk.1.attn_q.weight [32, 32] is no parameter of a 'llama' model"),
    ],
)
def test_a_tensor_of_the_wrong_shape_or_beyond_the_metadata_is_refused_before_converting(tmp_path, name, shape, said):
    path = _with_tensor(tmp_path / "bad.gguf", name, shape)
    err = str(pytest.raises(UserError, trainer_gguf.convert, path, tmp_path / "out").value)
    assert said in err and "damaged or holds a model of another architecture" in err
    assert not (tmp_path / "out").exists()
