"""Training config validation and the function-calling scorer."""

import argparse

import pytest

from trainer.config import TrainConfig
from trainer.errors import UserError
from trainer.evaluate import is_correct, parse_tool_call


def test_every_config_problem_is_reported_at_once():
    cfg = TrainConfig(model_uri="hf://x", dataset_uri="", output_prefix="", lora_r=0, learning_rate=0,
                      max_steps=-1, batch_size=0)
    msg = str(pytest.raises(UserError, cfg.validate).value)
    for needle in ("model_uri", "dataset_uri", "output_prefix", "lora_r", "learning_rate", "max_steps",
                   "batch_size"):
        assert needle in msg
    assert "7 problems" in msg
    assert "method must be 'lora' or 'full'" in str(pytest.raises(
        UserError, TrainConfig(model_uri="s3://b/m", dataset_uri="s3://b/d", output_prefix="r",
                               method="qlora").validate).value)


def test_config_survives_the_command_line():
    cfg = TrainConfig(model_uri="s3://b/m", dataset_uri="s3://b/d", output_prefix="runs/x", lora_r=4,
                      lora_train_embeddings=True, learning_rate=1e-4)
    parser = argparse.ArgumentParser()
    TrainConfig.add_arguments(parser)
    assert TrainConfig.from_namespace(parser.parse_args(cfg.to_args())) == cfg


@pytest.mark.parametrize("text, expected", [
    ('<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', {"name": "f", "arguments": {"a": 1}}),
    ('{"name": "f", "parameters": {"a": 1}}', {"name": "f", "arguments": {"a": 1}}),  # Llama 3 style
    ('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>', {"name": "f", "arguments": {"a": 1}}),
    ('<tool_call>{"name": "f", "arguments": {"a": 1}} trailing', {"name": "f", "arguments": {"a": 1}}),
    ("Sure, the weather is nice.", None),
    ('<tool_call>{"name": "f", "arguments": {"a": </tool_call>', None),
    ('{"arguments": {}}', None),
])
def test_parse_tool_call(text, expected):
    assert parse_tool_call(text) == expected


def test_exact_match_ignores_key_order_but_not_values():
    exp = {"name": "f", "arguments": {"a": 1, "b": "x"}}
    assert is_correct({"name": "f", "arguments": {"b": "x", "a": 1}}, exp)
    assert not is_correct({"name": "f", "arguments": {"a": 1, "b": "y"}}, exp)
    assert not is_correct({"name": "g", "arguments": {"a": 1, "b": "x"}}, exp)
    assert not is_correct(None, exp)
    assert is_correct(None, None) and not is_correct(exp, None)
