"""FINETUNE_IMAGE and VLLM_IMAGE from the environment get vllm_image's checks, and a digest is lower-case hex."""

from __future__ import annotations

import pytest

from trainer.validate import pipeline_problems

DIGEST = "a" * 64


@pytest.mark.parametrize(
    "variable, value, said",
    [
        (
            "FINETUNE_IMAGE",
            "ghcr.io/a/b:1 --privileged",
            "environment variable FINETUNE_IMAGE=\"ghcr.io/a/b:1 --privileged\" "
            "is not an image reference: it holds white space",
        ),
        (
            "VLLM_IMAGE",
            "vllm/vllm-openai:latest",
            "environment variable VLLM_IMAGE='vllm/vllm-openai:latest' must be "
            "pinned by tag, e.g. vllm/vllm-openai:v0.32.0",
        ),
        (
            "VLLM_IMAGE",
            f"vllm/vllm-openai@sha256:{DIGEST.upper()}",
            "a sha256 digest is 'sha256:' and 64 lower-case hex",
        ),
    ],
)
def test_an_image_override_from_the_environment_is_checked_naming_the_variable(monkeypatch, variable, value, said):
    monkeypatch.setenv(variable, value)
    found = [p for p in pipeline_problems({}) if variable in p]
    assert len(found) == 1 and said in found[0], found
    monkeypatch.setenv(variable, f"ghcr.io/a/b@sha256:{DIGEST}")
    assert not [p for p in pipeline_problems({}) if variable in p]


def test_an_upper_case_digest_in_vllm_image_is_refused():
    found = [
        p for p in pipeline_problems({"vllm_image": f"vllm/vllm-openai@sha256:{DIGEST.upper()}"}) if "vllm_image" in p
    ]
    assert len(found) == 1 and "64 lower-case hex digits" in found[0]
