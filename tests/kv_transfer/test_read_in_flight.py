"""A READ that fails while still running, without NIXL: a fake agent whose transfer stays "PROC" past
the deadline and whose release_xfer_handle refuses a running transfer (as NIXL 1.5 does when it
cannot cancel it) or accepts it (as it does over UCX's TCP transport, where the READ still lands
later: the slow test at the end shows it with real NIXL). KvAgent must not let go of the destination
until NIXL reports the READ over: it raises ReadInFlight, the handle lingers (never released while
running) until check_xfer_state says DONE or ERR, a staging buffer it reads into is abandoned (kept
alive and registered) rather than handed to the next read; the rank reports the pull as failed with
lingering 1, then its end with lingering -1."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
        self.released.append((handle, self.state))

    def register_memory(self, tensors):
        self.registered.append(tensors[0].data_ptr())
        return ("reg", tensors[0].data_ptr())

    def deregister_memory(self, reg):
        self.deregistered.append(reg[1])


def fake_kv_agent(nixl: FakeNixl) -> KvAgent:
    """A KvAgent over one small cache tensor, its NIXL agent the fake."""
    agent = KvAgent.__new__(KvAgent)
    agent.agent, agent.caches, agent.name = nixl, [torch.zeros(4, 2, 8)], "me"
    agent._reg = None
    agent._init_state()
    agent._peers.add("peer")
    return agent


def rows(base: int, n: int = 2, size: int = 64) -> np.ndarray:
    return np.array([[base + i * size, size] for i in range(n)], dtype=np.int64)


def test_a_successful_read_releases_its_handle_once_and_returns_the_bytes():
    nixl = FakeNixl(state="DONE")
    agent = fake_kv_agent(nixl)
    assert agent.read("peer", rows(1000), rows(5000), timeout_s=1.0) == 128
    assert nixl.released == [(1, "DONE")] and agent.num_lingering == 0 and agent.settle() == []


@pytest.mark.parametrize("cancellable", [False, True])
def test_a_timed_out_read_lingers_until_it_ends(cancellable):
    """Whether or not NIXL would accept the release (a cancel it may not honour), a READ still running
    is kept, never released, until NIXL reports it over."""
    nixl = FakeNixl(cancellable=cancellable)
    agent = fake_kv_agent(nixl)
    with pytest.raises(ReadInFlight, match="took more than") as e:
        agent.read("peer", rows(1000), rows(5000), timeout_s=0.01)
    assert isinstance(e.value, TransferError)
    assert agent.num_lingering == 1 and nixl.released == []
    assert agent.settle() == [] and agent.num_lingering == 1  # still "PROC": still writing
    nixl.state = "DONE"  # the peer's progress resumed and the READ landed, late
    assert agent.settle() == [e.value.token]
    assert agent.num_lingering == 0 and nixl.released == [(1, "DONE")]
    assert agent.settle() == []


def test_a_read_that_nixl_reports_ended_does_not_linger():
    nixl = FakeNixl(state="ERR")
    agent = fake_kv_agent(nixl)
    with pytest.raises(TransferError, match="failed") as e:
        agent.read("peer", rows(1000), rows(5000), timeout_s=1.0)
    assert not isinstance(e.value, ReadInFlight) and agent.num_lingering == 0 and nixl.released == [(1, "ERR")]

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


def test_each_reader_stages_in_a_buffer_of_its_own_and_a_lingering_read_abandons_only_its_own():
    """Readers of different prefill engines read side by side: each stages through its own buffer."""
    nixl = FakeNixl()
    agent = fake_kv_agent(nixl)
    a, b = agent.staging(256, "engine-a"), agent.staging(256, "engine-b")
    assert a.data_ptr() != b.data_ptr()
    with pytest.raises(ReadInFlight) as e:
        agent.read("peer", rows(b.data_ptr()), rows(5000), timeout_s=0.01)
    assert agent.staging(256, "engine-a") is a and agent.staging(256, "engine-b").data_ptr() != b.data_ptr()
    assert agent.settle([]) == [] and agent.num_lingering == 1  # asked about no token: none named
    nixl.state = "DONE"
    assert agent.settle([e.value.token]) == [e.value.token] and nixl.deregistered == [b.data_ptr()]
    agent.drop_staging("engine-a")
    assert nixl.deregistered == [b.data_ptr(), a.data_ptr()]


@pytest.mark.parametrize("metadata", ["bm90IE5JWEwgbWV0YWRhdGE=", "not base64!"])
def test_metadata_nixl_cannot_load_fails_the_pull_as_a_dead_peer_would(metadata):
    """A prefill rank's agent metadata NIXL refuses (or that is not base64) is a TransferError, so the
    pull fails as from a dead peer; before, NIXL's own exception reached the reader as a bug."""

    class Refuses(FakeNixl):
        def add_remote_agent(self, metadata):
            raise RuntimeError("NIXL_ERR_INVALID_PARAM")

    agent = fake_kv_agent(Refuses())
    agent.layout = type("Mine", (), {"check_pairs_with": lambda self, other: None})()
    peer = type("Peer", (), {"agent_name": "p2", "agent_metadata": metadata})()
    with pytest.raises(TransferError, match="could not load the NIXL metadata of p2"):
        agent.add_peer(peer)
    assert not agent.has_peer("p2")


def test_a_lingering_read_in_place_keeps_the_staging_buffer():
    agent = fake_kv_agent(FakeNixl())
    staging = agent.staging(256)
    with pytest.raises(ReadInFlight):
        agent.read("peer", rows(agent.caches[0].data_ptr()), rows(5000), timeout_s=0.01)
    assert agent.staging(256) is staging


def test_the_rank_reports_a_lingering_read_then_its_end(monkeypatch):
    """Through the reader thread: the pull fails with lingering 1 (its blocks may still be written);
    the rank keeps a report outstanding (num_in_flight) and, once NIXL says the READ ended, reports
    the request again with lingering -1 (the engine thread asks NIXL, in `finished`, and only about
    reads whose failure it has already reported)."""
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
    assert done.request_id == "r0" and done.lingering == 1 and "still running" in done.error
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


def test_a_peer_with_a_lingering_read_stays_connected_until_it_ends():
    nixl = FakeNixl()
    nixl.removed = []
    nixl.remove_remote_agent = nixl.removed.append
    agent = fake_kv_agent(nixl)
    with pytest.raises(ReadInFlight):
        agent.read("peer", rows(1000), rows(5000), timeout_s=0.01)
    agent.remove_peer("peer")  # the rank forgets a failed engine: not while its READ may still land
    assert nixl.removed == [] and agent.has_peer("peer")
    nixl.state = "DONE"
    agent.settle()
    agent.remove_peer("peer")
    assert nixl.removed == ["peer"]


@pytest.mark.slow
def test_a_real_read_from_a_stopped_peer_lands_late_and_lingers_until_then():
    """Real NIXL over UCX's TCP transport: the prefill side's process is stopped (SIGSTOP) during the
    READ, which times out; it is continued a second later, and the READ then lands in full in the
    destination. KvAgent raised ReadInFlight and named the read in settle only once it had ended."""
    env = dict(os.environ, UCX_TLS="tcp", UCX_NET_DEVICES="lo", STALL_WAIT_S="30")
    script = Path(__file__).with_name("nixl_stall.py")
    proc = subprocess.run([sys.executable, str(script), "reader", "stop"], env=env, capture_output=True, text=True,
                          timeout=120)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stdout + proc.stderr
    out = json.loads(lines[-1])
    assert out["raised"] == "ReadInFlight" and out["lingering"] == 1
    assert out["landed_before_continue"] < out["bytes"]  # not all of it yet: the owner is stopped
    assert out["settled_after_s"] is not None and out["still_lingering"] == 0
    assert out["landed_at_end"] == out["bytes"]  # the late write: held blocks took it, nobody else's
