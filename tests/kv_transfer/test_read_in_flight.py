"""A failed READ that NIXL cannot cancel, without NIXL: a fake agent whose transfer stays "PROC" past
the deadline and whose release_xfer_handle then refuses (as NIXL 1.5 does for a transfer it cannot
cancel), until the transfer ends. KvAgent must not let go of the destination meanwhile: the read
raises ReadInFlight, the handle lingers until check_xfer_state says it ended, a staging buffer it
reads into is abandoned (kept alive and registered) rather than handed to the next read; the rank
reports the pull as failed with lingering 1, then its end with lingering -1."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from moeserve.core.step_plan import KvPull, KvPullDone
from moeserve.kv_transfer import rank_agent
from moeserve.kv_transfer.nixl_agent import KvAgent, ReadInFlight, TransferError
from moeserve.kv_transfer.rank_agent import RankKvAgent


class FakeNixl:
    """The nixl_agent calls KvAgent makes. `state`: what the transfer reports; `cancellable`: whether
    release_xfer_handle cancels a transfer still in "PROC" (else it raises and keeps the handle)."""

    def __init__(self, state: str = "PROC", cancellable: bool = False):
        self.state, self.cancellable = state, cancellable
        self.released: list[int] = []
        self.registered: list[int] = []
        self.deregistered: list[int] = []
        self._handles = 0

    def initialize_xfer(self, op, local, remote, agent_name):
        self._handles += 1
        return self._handles

    def get_xfer_descs(self, descs, mem):
        return descs

    def transfer(self, handle):
        return self.state

    def check_xfer_state(self, handle):
        return self.state

    def release_xfer_handle(self, handle):
        if self.state == "PROC" and not self.cancellable:
            raise RuntimeError("NIXL_ERR_REPOST_ACTIVE")  # could not cancel: the handle is not freed
        self.released.append(handle)

    def register_memory(self, tensors):
        self.registered.append(tensors[0].data_ptr())
        return ("reg", tensors[0].data_ptr())

    def deregister_memory(self, reg):
        self.deregistered.append(reg[1])


def fake_kv_agent(nixl: FakeNixl) -> KvAgent:
    """A KvAgent over one small cache tensor, its NIXL agent the fake."""
    agent = KvAgent.__new__(KvAgent)
    agent.agent, agent.caches, agent.name = nixl, [torch.zeros(4, 2, 8)], "me"
    agent._reg, agent._peers = None, {"peer"}
    agent._staging, agent._staging_reg = None, None
    agent._lingering, agent._next_token = {}, 0
    return agent


def rows(base: int, n: int = 2, size: int = 64) -> np.ndarray:
    return np.array([[base + i * size, size] for i in range(n)], dtype=np.int64)


def test_a_successful_read_releases_its_handle_once_and_returns_the_bytes():
    nixl = FakeNixl(state="DONE")
    agent = fake_kv_agent(nixl)
    assert agent.read("peer", rows(1000), rows(5000), timeout_s=1.0) == 128
    assert nixl.released == [1] and agent.num_lingering == 0 and agent.settle() == []


def test_a_timed_out_read_that_cannot_be_cancelled_lingers_until_it_ends():
    nixl = FakeNixl()
    agent = fake_kv_agent(nixl)
    with pytest.raises(ReadInFlight, match="took more than") as e:
        agent.read("peer", rows(1000), rows(5000), timeout_s=0.01)
    assert isinstance(e.value, TransferError)
    assert agent.num_lingering == 1 and nixl.released == []
    assert agent.settle() == [] and agent.num_lingering == 1  # still "PROC": still writing
    nixl.state = "DONE"  # the peer's progress resumed and the READ landed, late
    assert agent.settle() == [e.value.token]
    assert agent.num_lingering == 0 and nixl.released == [1]
    assert agent.settle() == []


def test_a_read_that_nixl_cancels_or_that_ended_does_not_linger():
    agent = fake_kv_agent(FakeNixl(cancellable=True))  # release cancels it: nothing can land later
    with pytest.raises(TransferError) as e:
        agent.read("peer", rows(1000), rows(5000), timeout_s=0.01)
    assert not isinstance(e.value, ReadInFlight) and agent.num_lingering == 0

    class Refuses(FakeNixl):  # ended with an error, and release refuses anyway
        def release_xfer_handle(self, handle):
            raise RuntimeError("no")

    agent = fake_kv_agent(Refuses(state="ERR"))
    with pytest.raises(TransferError, match="failed") as e:
        agent.read("peer", rows(1000), rows(5000), timeout_s=1.0)
    assert not isinstance(e.value, ReadInFlight) and agent.num_lingering == 0


def test_a_staged_read_that_lingers_abandons_the_staging_buffer():
    nixl = FakeNixl()
    agent = fake_kv_agent(nixl)
    staging = agent.staging(256)
    with pytest.raises(ReadInFlight):
        agent.read("peer", rows(staging.data_ptr()), rows(5000), timeout_s=0.01)
    fresh = agent.staging(256)
    assert fresh.data_ptr() != staging.data_ptr()  # the next staged read lands elsewhere
    assert nixl.registered == [staging.data_ptr(), fresh.data_ptr()]
    assert nixl.deregistered == []  # the old buffer stays alive and registered while the READ may write it
    nixl.state = "DONE"
    assert len(agent.settle()) == 1
    assert nixl.deregistered == [staging.data_ptr()] and agent.staging(256) is fresh


def test_a_lingering_read_in_place_keeps_the_staging_buffer():
    agent = fake_kv_agent(FakeNixl())
    staging = agent.staging(256)
    with pytest.raises(ReadInFlight):
        agent.read("peer", rows(agent.caches[0].data_ptr()), rows(5000), timeout_s=0.01)
    assert agent.staging(256) is staging


def test_the_rank_reports_a_lingering_read_then_its_end(monkeypatch):
    """Through the reader thread: the pull fails with lingering 1 (its blocks may still be written);
    the rank keeps a report outstanding (num_in_flight) and, once NIXL says the READ ended, reports
    the request again with lingering -1."""
    nixl = FakeNixl()
    src = type("Src", (), {"agent_name": "peer", "host": "", "group": 0, "tp_rank": 1})()
    reads = type("Reads", (), {"src": src, "staged": lambda self, mine: False})()
    monkeypatch.setattr(rank_agent, "group_ranks", lambda ranks, group: ranks)
    monkeypatch.setattr(rank_agent, "plan_sources", lambda mine, sources, ids: [reads])
    monkeypatch.setattr(rank_agent, "pull_rows", lambda mine, srcs, lo, re: {0: (rows(1000), rows(5000))})
    monkeypatch.setattr(rank_agent, "READ_TIMEOUT_S", 0.01)
    monkeypatch.setattr(rank_agent, "SETTLE_POLL_S", 0.01)
    ranks = RankKvAgent.__new__(RankKvAgent)
    ranks.agent = fake_kv_agent(nixl)
    ranks.agent.layout, ranks.agent.add_peer, ranks.agent.close = None, lambda layout: None, lambda: None
    ranks._engines = {}
    ranks._handshake = lambda pull: [src]
    ranks._init_reader()
    ranks.start([KvPull("r0", 0, "e", "x0", "127.0.0.1", 2, [3, 4], [0, 1])])
    (done,) = ranks.finished(wait_s=10)
    assert done.request_id == "r0" and done.lingering == 1 and "could not be cancelled" in done.error
    assert "tp rank 1" in done.error
    assert ranks.num_in_flight == 1  # its end is still to be reported
    assert ranks.finished(wait_s=0.05) == []
    nixl.state = "DONE"
    ended = []
    for _ in range(500):
        ended += ranks.finished(wait_s=0.01)
        if ended:
            break
    assert ended == [KvPullDone("r0", lingering=-1)] and ranks.num_in_flight == 0
    ranks.close()


def test_held_blocks_show_on_metrics():
    from prometheus_client import CollectorRegistry, generate_latest

    from moeserve.server.metrics import EngineStatsCollector

    registry = CollectorRegistry()
    registry.register(EngineStatsCollector(lambda: {"kv_blocks_quarantined": 5, "kv_quarantines": 2}, lambda: True))
    page = generate_latest(registry).decode()
    assert "moeserve_kv_cache_blocks_quarantined 5.0" in page and "moeserve_kv_quarantines_total 2.0" in page
