"""A Hub that cannot be reached because its name does not resolve (offline, no DNS): delivery
works from the local cache at once instead of retrying a failure that will not heal."""

import logging
import socket

import pytest

from trainer import sources
from trainer.errors import UserError


@pytest.fixture
def no_dns(monkeypatch):
    import datasets.config
    from huggingface_hub import constants

    # What the code under test switches, put back afterwards for the rest of the session.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")

    def unresolvable(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", unresolvable)


@pytest.mark.parametrize("load", [lambda: sources._load_dataset("someorg/somedata", ""),
                                  lambda: sources.materialize_model(sources.Source("hub", "someorg/somemodel"), "",
                                                                    None)], ids=["dataset", "model"])
def test_an_unresolvable_hub_is_one_error_at_once_without_retries(no_dns, load, caplog, capsys):
    with caplog.at_level(logging.WARNING), pytest.raises(UserError, match="not in the local Hugging Face cache"):
        load()
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]  # huggingface_hub's 5 retries, 24 s
    assert "does not resolve (offline?)" in capsys.readouterr().out
