"""Requests, not sequences, share a group's seats and KV blocks (core/fair_share.py)."""
from core_fakes import FakeEngine, make_scheduler

from moeserve.core import fair_share
from moeserve.core.request import Request, RequestStatus
from moeserve.sampling_params import SamplingParams


def choice(owner: str, i: int, prompt: list[int], max_tokens: int) -> Request:
    return Request(request_id=f"{owner}-{i}", prompt_token_ids=prompt, sampling=SamplingParams(max_tokens=max_tokens),
                   owner=owner)


def steps_until_finished(eng: FakeEngine, rid: str, limit: int) -> int:
    for n in range(1, limit + 1):
        eng.step()
        if rid in eng.finished:
            return n
    raise AssertionError(f"{rid} did not finish within {limit} steps")


def test_shares_split_seats_and_blocks_between_owners():
    assert fair_share.shares(1, 8, 100) == fair_share.Shares(8, 100)
    assert fair_share.shares(3, 8, 100) == fair_share.Shares(2, 33)
    assert fair_share.shares(20, 8, 100) == fair_share.Shares(1, 5)  # never zero


def test_pick_victim_takes_the_newest_sequence_of_the_owner_furthest_above_its_share():
    reqs = [choice("a", 0, [1], 4), choice("b", 0, [1], 4), choice("a", 1, [1], 4), choice("b", 1, [1], 4),
            choice("a", 2, [1], 4)]
    seats = fair_share.seats_by_owner(reqs)
    assert fair_share.pick_victim(reqs, seats, 2, seats).request_id == "a-2"
    assert fair_share.pick_victim(reqs, seats, 3, seats) is None  # nobody above the share
    alone = [choice("a", 0, [1], 4), choice("b", 0, [1], 4)]
    assert fair_share.pick_victim(alone, {"a": 9, "b": 1}, 2, fair_share.seats_by_owner(alone)) is None  # a lone sequence
    assert [r.request_id for r in fair_share.fair_order(reqs[::-1], {"a": 3, "b": 0})][:2] == ["b-1", "b-0"]


def test_a_wide_request_cannot_starve_a_short_one_of_seats():
    """One request with n = max_num_seqs and long outputs holds every seat; a short request sent after
    it runs within a few steps, not after the wide one's hundreds of tokens (FIFO admission did that)."""
    eng = FakeEngine(make_scheduler(num_blocks=512, max_num_seqs=4, max_num_batched_tokens=64))
    s = eng.scheduler
    for i in range(4):
        s.add_request(choice("wide", i, [7, 8], max_tokens=300))
    for _ in range(3):
        eng.step()
    s.add_request(choice("short", 0, [5, 6, 7], max_tokens=3))
    assert steps_until_finished(eng, "short-0", limit=10) <= 5
    eng.step()
    running = [r.request_id for g in s.groups for r in g.running]
    assert len(running) == 4 and all(r.startswith("wide") for r in running)  # its seat went back to the wide one
    eng.run()
    for i in range(4):  # preempted and recomputed: every choice still gets all its tokens, right context checked
        assert eng.finished[f"wide-{i}"].num_output_tokens == 300


def test_several_short_requests_each_get_a_fair_share_while_the_wide_one_keeps_its_own():
    eng = FakeEngine(make_scheduler(num_blocks=512, max_num_seqs=4, max_num_batched_tokens=64))
    s = eng.scheduler
    for i in range(4):
        s.add_request(choice("wide", i, [7, 8], max_tokens=200))
    eng.step()
    for k in range(3):
        s.add_request(choice(f"short{k}", 0, [5, k], max_tokens=20))
    eng.step()
    eng.step()
    owners = fair_share.seats_by_owner(s.groups[0].running)
    assert owners["wide"] == 1 and all(owners[f"short{k}"] == 1 for k in range(3))  # 4 owners, one seat each
    assert s.num_preemptions == 3
    eng.run()
    assert all(eng.finished[f"wide-{i}"].num_output_tokens == 200 for i in range(4))


def test_a_wide_request_cannot_starve_a_short_one_of_kv_blocks():
    """Seats to spare, but the wide request's sequences hold the KV pool: the short one gets blocks
    within a few steps (by preempting wide sequences above their block share)."""
    eng = FakeEngine(make_scheduler(num_blocks=80, block_size=4, max_num_seqs=16, max_num_batched_tokens=64))
    s = eng.scheduler
    for i in range(8):
        s.add_request(choice("wide", i, [1, 2, 3, 4], max_tokens=100))
    for _ in range(40):
        eng.step()
    assert s.groups[0].blocks.num_available < 5  # the wide request filled the pool
    s.add_request(choice("short", 0, list(range(10, 30)), max_tokens=4))  # 5 blocks of prompt
    assert steps_until_finished(eng, "short-0", limit=12) <= 8
    eng.run()
    assert all(eng.finished[f"wide-{i}"].num_output_tokens == 100 for i in range(8))


def test_an_owner_alone_uses_every_seat():
    eng = FakeEngine(make_scheduler(max_num_seqs=4))
    for i in range(6):
        eng.scheduler.add_request(choice("one", i, [i, 1], max_tokens=5))
    eng.step()
    assert eng.scheduler.num_running == 4 and eng.scheduler.num_preemptions == 0


def test_requests_without_an_owner_keep_fifo_order():
    """Each sequence its own owner (the Python API): one seat each, so nothing is preempted for
    fairness and admission stays FIFO."""
    eng = FakeEngine(make_scheduler(max_num_seqs=2))
    s = eng.scheduler
    for i in range(5):
        s.add_request(Request(request_id=f"r{i}", prompt_token_ids=[i, 2], sampling=SamplingParams(max_tokens=6)))
    order = []
    while s.has_unfinished():
        plan = eng.step()
        order += [r.request_id for r in plan.new_requests]
    assert order == [f"r{i}" for i in range(5)] and s.num_preemptions == 0
    assert all(r.status is RequestStatus.FINISHED for r in eng.finished.values())
