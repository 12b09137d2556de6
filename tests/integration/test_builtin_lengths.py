"""The built-in data on a real tokenizer: SmolLM2-135M-Instruct with chatml-tools (the README's laptop settings,
max_seq_len=640) skips none of builtin:function-calling's rows, nor of builtin:function-calling-wide's, whatever
their category."""

import pytest

from trainer.data import builtin_data
from trainer.chat import fc_check, templates

LAPTOP_MAX_SEQ_LEN = 640  # README: "Fine-tune a real model on a laptop"


@pytest.mark.parametrize("name", ["function-calling", "function-calling-wide"])
def test_every_builtin_row_fits_the_laptop_settings_on_smollm2(smollm2_model_dir, name):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_model_dir)
    tokenizer.chat_template = templates.resolve("chatml-tools")
    splits = builtin_data.dataset(name)
    lengths: dict[str, list[int]] = {}
    for row in splits["train"][::5] + splits["eval"]:
        ids = tokenizer.apply_chat_template(row["messages"], tools=row.get("tools"), tokenize=True, return_dict=True)[
            "input_ids"
        ]
        lengths.setdefault(fc_check.category(row), []).append(len(ids))
    assert set(lengths) == set(fc_check.CATEGORIES)
    longest = max(max(v) for v in lengths.values())
    assert longest <= LAPTOP_MAX_SEQ_LEN, {c: max(v) for c, v in lengths.items()}
    every = [n for v in lengths.values() for n in v]
    assert sum(every) / len(every) <= 520  # no longer than the five tools of plain strings made them (519)
