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
