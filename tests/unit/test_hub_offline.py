"""A Hub that cannot be reached because its name does not resolve (offline, no DNS): loading a dataset and
delivering a model work from the local cache at once instead of retrying a failure that will not heal."""

import logging
import socket

import pytest

from trainer.core import hub
from trainer.data import loading
from trainer.store import delivery
from trainer.config import sources
from trainer.core.errors import UserError


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
    for var in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hub.time, "sleep", lambda s: None)  # the two re-asks of a temporary failure


@pytest.mark.parametrize(
    "load",
    [
        lambda: loading._load_dataset("someorg/somedata", ""),
        lambda: delivery.materialize_model(sources.Source("hub", "someorg/somemodel"), "", None),
    ],
    ids=["dataset", "model"],
)
def test_an_unresolvable_hub_is_one_error_at_once_without_retries(no_dns, load, caplog, capsys):
    with caplog.at_level(logging.WARNING), pytest.raises(UserError, match="not in the local Hugging Face cache"):
        load()
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]  # huggingface_hub's 5 retries, 24 s
    assert "does not resolve (offline?)" in capsys.readouterr().out


def test_a_dns_blip_or_a_proxy_does_not_switch_the_hub_off(no_dns, monkeypatch):
    """A temporary failure that heals on the second ask (a cluster DNS blip) and a host that
    resolves only through the proxy (egress proxy, no outside DNS) leave the Hub on."""
    from huggingface_hub import constants

    answers = [socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"), [("ok",)]]

    def blip(host, *args, **kwargs):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(socket, "getaddrinfo", blip)
    assert hub.offline_if_hub_unresolvable() is False and not answers and not constants.HF_HUB_OFFLINE
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: pytest.fail("resolved locally despite the proxy"))
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    assert hub.offline_if_hub_unresolvable() is False and not constants.HF_HUB_OFFLINE


def test_no_such_name_is_final_at_once(no_dns, monkeypatch):
    asked = []

    def no_name(host, *args, **kwargs):
        asked.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_name)
    assert hub.offline_if_hub_unresolvable() is True and len(asked) == 1


def test_a_model_missing_from_the_cache_offline_is_said_with_the_hubs_whole_sentence(no_dns):
    """The Hub's reason was cut at 160 characters, mid-word ("To enable repo look-ups a); download it first")."""
    with pytest.raises(UserError) as err:
        delivery.materialize_model(sources.Source("hub", "org/doesnotexist-xyz"), "", None)
    text = str(err.value)
    assert text.startswith("model 'org/doesnotexist-xyz' is not in the local Hugging Face cache")
    assert "as environment variable.); download it first" in text


def test_brief_cuts_a_long_reason_at_a_word_and_names_an_empty_one():
    from trainer.core.errors import brief

    assert brief(ValueError("first line\nsecond")) == "first line"
    assert brief(ValueError("alpha beta gamma"), limit=12) == "alpha beta ..."
    assert brief(KeyError()) == "KeyError"  # str(err).splitlines()[0] was an IndexError here
