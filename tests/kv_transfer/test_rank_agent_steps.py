"""A step's pulls on one rank, without NIXL: a prefill engine that failed one pull fails the step's
later pulls from it at once, so a dead or stuck peer costs a step one set of timeouts; a failure of
one pull alone (its pin expired) fails only that pull. Each prefill engine's pulls are read by a
thread of their own: a stuck engine holds its own pulls, never another engine's."""
from __future__ import annotations

import threading

from moeserve.core.step_plan import KvPull, KvPullDone
from moeserve.kv_transfer import rank_agent
from moeserve.kv_transfer.rank_agent import RankKvAgent


def test_a_failed_peer_fails_the_steps_later_pulls_from_it_at_once():
    agent = RankKvAgent.__new__(RankKvAgent)  # no NIXL agent: _pull is faked
    tried = []

    def pull_once(pull: KvPull) -> tuple[KvPullDone, bool]:
        tried.append(pull.request_id)
        if pull.port == 1:
            return KvPullDone(pull.request_id, error="timed out"), True  # the peer is down
        if pull.request_id == "r1":
            return KvPullDone(pull.request_id, error="pin expired"), False  # this pull alone
        return KvPullDone(pull.request_id, 8), False

    agent._pull = pull_once
    pulls = [KvPull(f"r{i}", 0, "e", f"x{i}", "127.0.0.1", 1 if i % 2 == 0 else 2, [0], [0]) for i in range(5)]
    done = agent.run(pulls)
    assert tried == ["r0", "r1", "r3"]
    assert [d.error for d in done] == ["timed out", "pin expired", "timed out", None, "timed out"]
    agent.run(pulls[:1])
    assert tried[-1] == "r0"  # a new step tries the peer again


def _fake_agent(pull_once) -> RankKvAgent:
    """A RankKvAgent without NIXL (its _pull faked), reader thread and all."""
    agent = RankKvAgent.__new__(RankKvAgent)
    agent._pull = pull_once
    agent.agent = type("NoNixl", (), {"close": lambda self: None, "drop_staging": lambda self, reader: None})()
    agent._engines = {}
    agent._init_reader()
    return agent


def _pull(request_id: str, engine_id: str) -> KvPull:
    return KvPull(request_id, 0, engine_id, "x" + request_id, "127.0.0.1", 2 if engine_id == "stuck" else 3, [0], [0])


def _wait_for(agent: RankKvAgent, n: int) -> list[KvPullDone]:
    got: list[KvPullDone] = []
    for _ in range(1000):
        got += agent.finished(wait_s=0.01)
        if len(got) >= n:
            break
    return got


def test_a_stuck_prefill_engine_does_not_hold_another_engines_pulls():
    """One step pulls from a prefill engine that hangs (a blackholed host: its read waits for its
    timeout) and from a healthy one: the healthy one's pull is reported while the stuck one's still
    waits. Before, one reader thread read the step's pulls in order, so the healthy pull waited for
    the stuck one's timeout (10 s) and every later step's pulls queued behind it."""
    inside, release = threading.Event(), threading.Event()

    def pull_once(pull: KvPull) -> tuple[KvPullDone, bool]:
        if pull.engine_id == "stuck":
            inside.set()
            release.wait(60)
            return KvPullDone(pull.request_id, error="took more than 10.0 s"), True
        return KvPullDone(pull.request_id, 8), False

    agent = _fake_agent(pull_once)
    try:
        agent.start([_pull("r0", "stuck"), _pull("r1", "healthy")])
        assert inside.wait(30)
        first = agent.finished(wait_s=30)  # returns at the first report
        assert [d.request_id for d in first] == ["r1"] and first[0].error is None
        assert not release.is_set() and agent.num_in_flight == 1
        agent.start([_pull("r2", "healthy"), _pull("r3", "stuck")])  # the next step's
        assert [d.request_id for d in _wait_for(agent, 1)] == ["r2"]
    finally:
        release.set()
    assert sorted(d.request_id for d in _wait_for(agent, 2)) == ["r0", "r3"] and agent.num_in_flight == 0
    agent.close()


def test_readers_are_bounded_and_an_engine_past_the_bound_waits_for_an_idle_one(monkeypatch):
    """At MAX_READERS busy readers a new engine's pulls wait (in order) until one is idle; the idle
    one is retired (its engine forgotten) to make room, so threads stay bounded."""
    monkeypatch.setattr(rank_agent, "MAX_READERS", 1)
    inside, release = threading.Event(), threading.Event()

    def pull_once(pull: KvPull) -> tuple[KvPullDone, bool]:
        if pull.engine_id == "stuck":
            inside.set()
            release.wait(60)
        return KvPullDone(pull.request_id, 8), False

    agent = _fake_agent(pull_once)
    forgotten = []
    agent._forget = forgotten.append
    agent.start([_pull("r0", "stuck")])
    assert inside.wait(30)
    agent.start([_pull("r1", "other")])
    agent.start([_pull("r2", "other")])
    assert agent.finished(wait_s=0.05) == [] and agent.num_readers == 1
    release.set()
    got = _wait_for(agent, 3)
    assert [d.request_id for d in got] == ["r0", "r1", "r2"] and agent.num_readers == 1
    assert forgotten == ["stuck"]
    agent.close()


def test_reads_run_beside_the_steps_and_end_in_a_later_poll():
    import threading

    gate = threading.Event()

    def slow_pull(pull: KvPull) -> tuple[KvPullDone, bool]:
        gate.wait(10)
        return KvPullDone(pull.request_id, 8), False

    agent = _fake_agent(slow_pull)
    pulls = [KvPull(f"r{i}", 0, "e", f"x{i}", "127.0.0.1", 2, [0], [0]) for i in range(3)]
    agent.start(pulls[:2])
    assert agent.finished() == [] and agent.num_in_flight == 2  # start returned at once
    agent.start(pulls[2:])
    gate.set()
    got = []
    for _ in range(500):
        got += agent.finished(wait_s=0.01)
        if len(got) == 3:
            break
    assert [d.request_id for d in got] == ["r0", "r1", "r2"] and agent.num_in_flight == 0
    agent.close()


def test_a_reader_that_raises_still_ends_every_pull():
    def broken(pull: KvPull) -> tuple[KvPullDone, bool]:
        raise KeyError("bug")

    agent = _fake_agent(broken)
    agent.start([KvPull("r0", 0, "e", "x0", "127.0.0.1", 2, [0], [0])])
    (done,) = agent.finished(wait_s=5)
    assert done.request_id == "r0" and "KeyError" in done.error
    agent.close()
