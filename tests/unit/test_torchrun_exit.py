"""trainer.recipe.torchrun.leave_exit_barrier against a real TCPStore: node 0, the store's host, stays until every node
has left torchrun's exit barrier (the race itself, with two torchrun agents: tests/integration/test_resilience.py)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.utils.store import _NUM_MEMBERS

from trainer.recipe import torchrun


def agent(store, rank, world=2):
    return SimpleNamespace(_store=store, _worker_group=SimpleNamespace(group_rank=rank, group_world_size=world))


@pytest.fixture
def stores():
    host = TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False)
    yield host, TCPStore("127.0.0.1", host.port, 2, is_master=False)


def test_node_0_returns_only_after_every_node_left_and_the_others_do_not_wait(stores):
    host, peer = stores
    host.add(_TERMINAL_STATE_SYNC_ID + _NUM_MEMBERS, 2)  # both arrived: torch's barrier is done
    done = threading.Event()
    waiting = threading.Thread(target=lambda: (torchrun.leave_exit_barrier(agent(host, 0)), done.set()))
    waiting.start()
    assert not done.wait(1.0)  # node 1 has not left yet
    torchrun.leave_exit_barrier(agent(peer, 1))  # returns at once: it never waits
    waiting.join(timeout=30)
    assert done.is_set() and host.add(torchrun.LEFT_KEY, 0) == 2


def test_nothing_to_wait_for_when_the_barrier_did_not_complete_or_one_node_ran(stores):
    host, _ = stores
    host.add(_TERMINAL_STATE_SYNC_ID + _NUM_MEMBERS, 1)  # a node failed before the barrier: torch logged it
    torchrun.leave_exit_barrier(agent(host, 0))  # would wait LINGER_S for a node that never comes
    torchrun.leave_exit_barrier(agent(host, 0, world=1))
    assert host.add(torchrun.LEFT_KEY, 0) == 0


def test_a_sigterm_while_node_0_waits_is_passed_on(stores, monkeypatch):
    host, _ = stores
    host.add(_TERMINAL_STATE_SYNC_ID + _NUM_MEMBERS, 2)

    def sigterm(_):
        raise SignalException("Process got signal: 15", 15)

    monkeypatch.setattr(torchrun.time, "sleep", sigterm)  # torch's handler raises it in the main thread
    with pytest.raises(SignalException):
        torchrun.leave_exit_barrier(agent(host, 0))
