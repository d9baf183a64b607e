"""A step's pulls on one rank, without NIXL: a prefill engine that failed one pull fails the step's
later pulls from it at once, so a dead or stuck peer costs a step one set of timeouts; a failure of
one pull alone (its pin expired) fails only that pull."""
from __future__ import annotations

from moeserve.core.step_plan import KvPull, KvPullDone
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
    agent.agent = type("NoNixl", (), {"close": lambda self: None})()
    agent._init_reader()
    return agent


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
