"""The prefill/decode split in the scheduler, without NIXL: a prefill scheduler pins a finished
prompt's blocks; a decode scheduler admits the request with a KvPull of the blocks its prefix cache
lacks; a fake transfer copies the fake KV across, and FakeEngine checks every context reads back as
the request's tokens (so a wrong block mapping fails here)."""
from __future__ import annotations

import pytest
from core_fakes import FakeEngine, make_request, make_scheduler

from moeserve.core.kv_pins import KvPins
from moeserve.core.step_plan import KvPullDone, PullTally, SampledToken, StepResult
from moeserve.errors import RequestError
from moeserve.kv_transfer.params import RemotePrefill, prompt_digest

BS = 4


class PullingEngine(FakeEngine):
    """A decode FakeEngine whose KvPulls read from `source` (a prefill FakeEngine) beside the steps,
    as the worker's reader thread does: a read started in step n ends `delay` steps later (0: within
    its own step), when its KV lands and every rank reports it. Meanwhile no step may write a block
    the read still fills (a scheduler that reused them would corrupt the prompt's KV)."""

    def __init__(self, scheduler, source: FakeEngine | None = None, fail: bool = False, ranks: int = 1,
                 delay: int = 0, linger: int | None = None, lingering_ranks: int = 1):
        super().__init__(scheduler)
        self.source, self.fail, self.pulls = source, fail, []
        self.ranks = ranks  # with fail: only the last of the group's ranks fails its read
        self.delay = delay
        self.reading: list[tuple[int, object]] = []  # (step it ends, pull)
        # linger: a read failed while still running, on the last `lingering_ranks` ranks: reported
        # failed with lingering 1, it still writes its blocks `linger` steps later (None: never, until
        # `end_lingering`), then reports lingering -1
        self.linger, self.lingering_ranks = linger, lingering_ranks
        self.lingering: list[tuple[float, object, int]] = []  # (step it ends, pull, rank)
        self.tally = PullTally(ranks)  # as the executor counts its ranks' reports

    def step(self):
        s = self.scheduler
        plan = s.schedule()
        self.plans.append(plan)
        self.pulls.extend(plan.kv_pulls)
        self.reading += [(plan.step + self.delay, pull) for pull in plan.kv_pulls]
        ended = [pull for due, pull in self.reading if due <= plan.step]
        self.reading = [(due, pull) for due, pull in self.reading if due > plan.step]
        per_rank = [[] for _ in range(self.ranks)]
        for pull in ended:
            for remote, local in zip(pull.remote_block_ids, pull.local_block_ids):
                for i in range(BS):
                    value = self.source.kv.get((pull.remote_group, remote * BS + i))
                    if value is not None:
                        self.kv[pull.group, local * BS + i] = value
            for rank, reads in enumerate(per_rank):
                if self.linger is not None and rank >= self.ranks - self.lingering_ranks:
                    reads.append(KvPullDone(pull.request_id, error="timed out", lingering=1))
                    self.lingering.append((plan.step + self.linger, pull, rank))
                    continue
                failed = self.fail and rank == self.ranks - 1
                reads.append(KvPullDone(pull.request_id, error="connection refused") if failed
                             else KvPullDone(pull.request_id, num_bytes=len(pull.local_block_ids)))
        for due, pull, rank in [x for x in self.lingering if x[0] <= plan.step]:
            self.lingering.remove((due, pull, rank))
            for local in pull.local_block_ids:  # the late READ lands: garbage for whoever holds the block now
                for i in range(BS):
                    self.kv[pull.group, local * BS + i] = -1
            per_rank[rank].append(KvPullDone(pull.request_id, lingering=-1))
        done = self.tally.add(per_rank)
        for req, message in s.take_failed():
            self.failed[req.request_id] = message
            self.finished[req.request_id] = req
        being_read = {(pull.group, b) for _, pull, *_ in self.reading + self.lingering for b in pull.local_block_ids}
        sampled = []
        for batch in plan.groups:
            for seq in batch.seqs:
                assert seq.request_id not in {p.request_id for _, p in self.reading}, "scheduled before its KV landed"
                written = {(batch.group, seq.block_table[p // BS]) for p in range(seq.start_pos, seq.start_pos + seq.num_tokens)}
                assert not written & being_read, f"{seq.request_id} writes blocks a read still fills"
                self._run_seq(batch.group, seq)
                if seq.sample:
                    sampled.append(SampledToken(seq.request_id, 7))
        for req in s.update(plan, StepResult(plan.step, sampled, kv_pulls=done)):
            if req.num_output_tokens >= req.max_output_tokens:
                self.finished[req.request_id] = s.finish_request(req.request_id, "length")
        for req, message in s.take_failed():
            self.failed[req.request_id] = message
            self.finished[req.request_id] = req
        s.check_invariants()
        return plan


def prefill(eng: FakeEngine, rid: str, prompt: list[int]) -> RemotePrefill:
    req = make_request(rid, prompt, max_tokens=1)
    req.remote_decode = True
    eng.scheduler.add_request(req)
    eng.run()
    pin = eng.scheduler.pins.get(rid)
    assert pin is not None and pin.prompt_digest == prompt_digest(prompt)
    return RemotePrefill("engine-p", rid, pin.block_ids, "127.0.0.1", 9)


def decode_request(rid: str, prompt: list[int], remote: RemotePrefill, max_tokens: int = 3):
    req = make_request(rid, prompt, max_tokens=max_tokens)
    req.remote_prefill = remote
    return req


def test_prefill_pins_its_blocks_until_released():
    eng = FakeEngine(make_scheduler(num_blocks=16, block_size=BS))
    s = eng.scheduler
    remote = prefill(eng, "p", list(range(10)))
    assert len(remote.block_ids) == 3 and s.total_block_usage().in_use == 3
    assert s.stats()["kv_blocks_pinned_remote"] == 3
    s.check_invariants()  # pins count as holders
    assert s.release_pin("p") is not None and s.release_pin("p") is None
    assert s.total_block_usage().in_use == 0 and s.pins.num_blocks == 0
    s.check_invariants()


def test_pinned_blocks_survive_pool_pressure():
    eng = FakeEngine(make_scheduler(num_blocks=8, block_size=BS))
    remote = prefill(eng, "p", list(range(16)))  # 4 blocks pinned, 4 left
    snapshot = {k: v for k, v in eng.kv.items() if k[1] // BS in remote.block_ids}
    eng.scheduler.add_request(make_request("other", list(range(100, 114)), max_tokens=2))
    eng.run()
    assert eng.finished["other"].finish_reason == "length"
    assert {k: eng.kv[k] for k in snapshot} == snapshot  # nobody wrote into the pinned blocks


def test_pins_expire_in_pin_order():
    pins = KvPins(expiry_s=10, max_blocks=100)
    pins.pin("a", 0, [1, 2], "d", now=0.0)
    pins.pin("b", 0, [3], "d", now=5.0)
    assert pins.expire(9.9) == []
    assert [p.request_id for p in pins.expire(10.0)] == ["a"]
    assert [p.request_id for p in pins.expire(100.0)] == ["b"]
    assert (pins.num_expired, len(pins)) == (2, 0)


def test_pins_make_room_oldest_first_within_their_group():
    pins = KvPins(expiry_s=10, max_blocks=4)
    pins.pin("a", 0, [1, 2], "d", now=0.0)
    pins.pin("x", 1, [1, 2, 3], "d", now=0.5)  # another group's pool: its own room
    pins.pin("b", 0, [3], "d", now=1.0)
    assert pins.make_room(0, 1) == []
    assert [p.request_id for p in pins.make_room(0, 2)] == ["a"]
    assert (pins.blocks_in(0), pins.blocks_in(1), pins.num_evicted) == (1, 3, 1)
    assert [p.request_id for p in pins.make_room(0, 4)] == ["b"]
    assert pins.num_blocks == 3 and pins.get("x") is not None


def test_new_pins_displace_the_oldest_past_the_cap_and_plain_requests_keep_room():
    """Prefills nobody decodes hold at most half the pool (the default cap): a plain request that
    needs the other half runs at once instead of waiting for the pins to expire."""
    eng = FakeEngine(make_scheduler(num_blocks=16, block_size=BS))
    s = eng.scheduler
    assert s.pins.max_blocks == 8
    for rid in ("a", "b", "c"):
        prefill(eng, rid, [ord(rid)] * 15)  # 4 blocks each
    assert [p.request_id for p in s.take_evicted_pins()] == ["a"] and s.take_evicted_pins() == []
    assert s.pins.get("a") is None and s.pins.num_blocks == 8 and s.stats()["kv_pins_evicted"] == 1
    s.check_invariants()
    s.add_request(make_request("plain", list(range(500, 531)), max_tokens=1))  # 8 blocks: all that is left
    eng.run()
    assert eng.finished["plain"].finish_reason == "length"
    s.check_invariants()


def test_the_cap_is_a_setting_and_a_prompt_past_it_is_refused():
    eng = FakeEngine(make_scheduler(num_blocks=16, block_size=BS, kv_max_pinned_blocks=3))
    req = make_request("big", list(range(13)), max_tokens=1)  # 4 blocks > 3
    req.remote_decode = True
    with pytest.raises(RequestError, match="--kv-max-pinned-blocks") as e:
        eng.scheduler.add_request(req)
    assert e.value.status == 400
    prefill(eng, "small", list(range(12)))  # 3 blocks fit
    assert eng.scheduler.pins.num_blocks == 3


def test_a_prefill_that_generates_past_its_prompt_pins_the_prompts_blocks_only():
    """A client (not the router, which sends max_tokens 1) asks a prefill server for many tokens: the
    pin held the blocks of every generated token too, past the cap (an AssertionError in the engine
    loop) and past what a decoder of the prompt reads (remote_block_ids no decoder accepted)."""
    eng = FakeEngine(make_scheduler(num_blocks=16, block_size=BS, kv_max_pinned_blocks=3))
    s = eng.scheduler
    req = make_request("long", list(range(12)), max_tokens=9)  # 3 prompt blocks, then 2 more for the tokens
    req.remote_decode = True
    s.add_request(req)
    eng.run()
    pin = s.pins.get("long")
    assert pin is not None and len(pin.block_ids) == 3 and s.pins.num_blocks == 3
    assert s.total_block_usage().in_use == 3
    s.check_invariants()
    d = PullingEngine(make_scheduler(num_blocks=16, block_size=BS), source=eng)
    d.scheduler.add_request(decode_request("d", list(range(12)), RemotePrefill("engine-p", "long", pin.block_ids,
                                                                               "127.0.0.1", 9)))
    d.run()
    assert d.finished["d"].num_output_tokens == 3 and not d.failed


def test_scheduler_frees_expired_pins():
    eng = FakeEngine(make_scheduler(num_blocks=16, block_size=BS))
    prefill(eng, "p", list(range(9)))
    pin = eng.scheduler.pins.get("p")
    assert eng.scheduler.expire_pins(pin.deadline - 1) == []
    assert [p.request_id for p in eng.scheduler.expire_pins(pin.deadline)] == ["p"]
    assert eng.scheduler.total_block_usage().in_use == 0
    eng.scheduler.check_invariants()


def test_aborted_or_failed_prefill_pins_nothing():
    eng = FakeEngine(make_scheduler(num_blocks=16, block_size=BS))
    req = make_request("p", list(range(9)), max_tokens=1)
    req.remote_decode = True
    eng.scheduler.add_request(req)
    eng.scheduler.abort_request("p")
    assert eng.scheduler.pins.num_blocks == 0 and eng.scheduler.total_block_usage().in_use == 0


@pytest.mark.parametrize("prompt_len", [1, 4, 5, 9, 16, 37])
def test_decode_pulls_all_but_the_last_token_and_computes_one(prompt_len):
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS))
    prompt = [(i * 13) % 50 + 1 for i in range(prompt_len)]
    remote = prefill(p, "p", prompt)
    d = PullingEngine(make_scheduler(num_blocks=32, block_size=BS), source=p)
    d.scheduler.add_request(decode_request("d", prompt, remote))
    assert not d.step().groups[0].seqs  # the read runs first; the request waits for it
    plan = d.step()
    (seq,) = plan.groups[0].seqs
    assert (seq.start_pos, seq.num_tokens, seq.sample) == (prompt_len - 1, 1, True)
    (pull,) = d.pulls
    fetched = -(-(prompt_len - 1) // BS)
    assert pull.remote_block_ids == remote.block_ids[:fetched]
    assert pull.local_block_ids == seq.block_table[:fetched]
    assert pull.remote_request_id == "p" and pull.engine_id == "engine-p"
    d.run()
    assert d.finished["d"].num_output_tokens == 3 and not d.failed
    assert d.scheduler.num_prompt_tokens_computed == 1
    assert d.scheduler.total_block_usage().in_use == 0


def test_decode_skips_blocks_its_prefix_cache_holds():
    shared = list(range(1, 13))  # three full blocks
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS))
    d = PullingEngine(make_scheduler(num_blocks=32, block_size=BS), source=p)
    first = shared + [40, 41, 42]
    d.scheduler.add_request(decode_request("d1", first, prefill(p, "p1", first)))
    d.run()
    second = shared + [50, 51, 52, 53, 54, 55]  # 18 tokens: the 17 before the last fill five blocks
    remote = prefill(p, "p2", second)
    d.scheduler.add_request(decode_request("d2", second, remote))
    d.run()
    first_pull, second_pull = d.pulls
    assert len(first_pull.remote_block_ids) == 4
    assert second_pull.remote_block_ids == remote.block_ids[3:5]  # blocks 0-2 were prefix-cache hits
    assert d.scheduler.prefix_cache_stats().hit_tokens >= 12


def test_a_fully_cached_prompt_still_releases_its_pin():
    prompt = list(range(1, 10))  # 9 tokens: the 8 before the last fill two blocks
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS))
    d = PullingEngine(make_scheduler(num_blocks=32, block_size=BS), source=p)
    d.scheduler.add_request(decode_request("d1", prompt, prefill(p, "p1", prompt)))
    d.run()
    d.scheduler.add_request(decode_request("d2", prompt, prefill(p, "p2", prompt)))
    d.run()
    assert d.pulls[1].remote_block_ids == [] and d.pulls[1].remote_request_id == "p2"


def test_failed_pull_fails_the_request_with_503_and_frees_its_blocks():
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS))
    prompt = list(range(1, 20))
    d = PullingEngine(make_scheduler(num_blocks=32, block_size=BS), source=p, fail=True)
    d.scheduler.add_request(decode_request("d", prompt, prefill(p, "p", prompt)))
    d.run()
    req = d.finished["d"]
    assert req.finish_reason == "error" and req.error_status == 503 and "connection refused" in req.error
    usage = d.scheduler.total_block_usage()
    assert usage.in_use == 0 and usage.cached == 0  # unread blocks were never offered to the prefix cache
    assert d.scheduler.num_kv_pull_failures == 1


def test_one_failed_rank_fails_the_request_on_every_rank():
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS))
    prompt = list(range(1, 20))
    d = PullingEngine(make_scheduler(num_blocks=32, block_size=BS), source=p, fail=True, ranks=2)
    d.scheduler.add_request(decode_request("d", prompt, prefill(p, "p", prompt)))
    d.run()
    assert d.finished["d"].error_status == 503 and d.scheduler.total_block_usage().in_use == 0


def test_a_pull_reads_from_the_prefill_group_the_answer_names():
    """Two attention groups on each side: the prefill lands in group 1 (group 0 is busy), the pull
    names it, and the decoder's reads land in its own group's pool whichever it is."""
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS, num_groups=2))
    busy = make_request("busy", list(range(60, 70)), max_tokens=50)
    p.scheduler.add_request(busy)
    p.step()
    prompt = list(range(1, 14))
    req = make_request("p", prompt, max_tokens=1)
    req.remote_decode = True
    p.scheduler.add_request(req)
    while p.scheduler.pins.get("p") is None:
        p.step()
    pin = p.scheduler.pins.get("p")
    assert pin.group == 1
    remote = RemotePrefill("engine-p", "p", pin.block_ids, "127.0.0.1", 9, group=pin.group)
    d = PullingEngine(make_scheduler(num_blocks=32, block_size=BS, num_groups=2), source=p)
    d.scheduler.add_request(decode_request("d", prompt, remote))
    d.run()
    (pull,) = d.pulls
    assert pull.remote_group == 1
    assert d.finished["d"].num_output_tokens == 3 and not d.failed  # FakeEngine checked every context read back


def test_decode_refuses_block_ids_that_do_not_fit_the_prompt():
    s = make_scheduler(num_blocks=32, block_size=BS)
    remote = RemotePrefill("e", "p", [0, 1], "127.0.0.1", 9)
    with pytest.raises(RequestError, match="remote_block_ids names 2 blocks"):
        s.add_request(decode_request("d", list(range(20)), remote))
    assert not s.has_unfinished()


def test_a_preempted_decode_recomputes_instead_of_pulling_again():
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS))
    prompt = list(range(1, 14))
    d = PullingEngine(make_scheduler(num_blocks=6, block_size=BS, max_num_batched_tokens=64), source=p)
    d.scheduler.add_request(decode_request("d", prompt, prefill(p, "p", prompt), max_tokens=8))
    d.scheduler.add_request(make_request("hog", list(range(100, 108)), max_tokens=8))
    d.run()
    assert len(d.pulls) == 1
    assert d.finished["d"].num_output_tokens == 8 and d.finished["hog"].num_output_tokens == 8


def test_other_requests_keep_stepping_while_a_read_runs():
    p = FakeEngine(make_scheduler(num_blocks=64, block_size=BS))
    prompt = list(range(1, 30))
    remote = prefill(p, "p", prompt)
    d = PullingEngine(make_scheduler(num_blocks=64, block_size=BS), source=p, delay=3)
    d.scheduler.add_request(make_request("stream", [5, 6, 7], max_tokens=20))
    d.step()
    d.scheduler.add_request(decode_request("d", prompt, remote))
    steps = [d.step() for _ in range(4)]
    # the stream decodes in every step of the read; "d" runs only in the step after it ended
    assert all(any(q.request_id == "stream" for q in plan.groups[0].seqs) for plan in steps)
    assert [any(q.request_id == "d" for q in plan.groups[0].seqs) for plan in steps] == [False] * 4
    assert d.scheduler.requests["d"].status.value == "running"
    d.run()
    assert d.finished["d"].num_output_tokens == 3 and not d.failed


def test_an_engine_waiting_only_for_a_read_steps_empty_until_it_ends():
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS))
    prompt = list(range(1, 10))
    d = PullingEngine(make_scheduler(num_blocks=32, block_size=BS), source=p, delay=5)
    d.scheduler.add_request(decode_request("d", prompt, prefill(p, "p", prompt)))
    assert not d.scheduler.pulls_in_flight
    d.step()
    assert d.scheduler.pulls_in_flight
    for _ in range(5):
        assert d.step().num_tokens == 0
    assert not d.scheduler.pulls_in_flight
    d.run()
    assert d.finished["d"].num_output_tokens == 3


def test_an_aborted_pull_keeps_its_blocks_until_every_rank_has_read():
    """Aborted mid-read: the request ends at once, but its blocks go back to the pool only when the
    read is done (a one-sided read still writes them); a request waiting for blocks gets them then."""
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS))
    prompt = list(range(1, 21))  # 5 blocks
    d = PullingEngine(make_scheduler(num_blocks=6, block_size=BS), source=p, delay=3, ranks=2)
    d.scheduler.add_request(decode_request("d", prompt, prefill(p, "p", prompt)))
    d.step()
    assert d.scheduler.abort_request("d").finish_reason == "abort"
    assert not d.scheduler.has_unfinished() and d.scheduler.pulls_in_flight
    usage = d.scheduler.total_block_usage()
    assert (usage.in_use, usage.free) == (5, 1)  # the read's five blocks are still held
    d.scheduler.add_request(make_request("next", list(range(40, 56)), max_tokens=2))  # needs 5 blocks
    d.run()  # PullingEngine fails if "next" is given a block the read still fills
    assert d.finished["next"].num_output_tokens == 2
    assert not d.scheduler.pulls_in_flight and d.scheduler.total_block_usage().in_use == 0


def test_a_request_waiting_for_its_read_is_never_preempted():
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS))
    prompt = list(range(1, 13))  # 3 blocks
    d = PullingEngine(make_scheduler(num_blocks=6, block_size=BS, max_num_batched_tokens=64), source=p, delay=6)
    d.scheduler.add_request(make_request("hog", [9, 8, 7], max_tokens=12))  # grows to 4 blocks
    d.step()
    d.scheduler.add_request(decode_request("d", prompt, prefill(p, "p", prompt), max_tokens=2))
    d.run()
    assert len(d.pulls) == 1  # "d" was never preempted and pulled again
    assert d.finished["d"].num_output_tokens == 2 and d.finished["hog"].num_output_tokens == 12


def test_a_pull_is_done_only_when_every_rank_of_its_group_has_reported():
    tally = PullTally(ranks_per_group=2)
    assert tally.add([[KvPullDone("a", 10, 0.1)], []]) == [] and len(tally) == 1
    assert tally.add([[], [KvPullDone("b", 5)]]) == []
    (a,) = tally.add([[], [KvPullDone("a", 20, 0.3, error="timed out")]])
    assert (a.request_id, a.num_bytes, a.seconds, a.error) == ("a", 30, 0.3, "timed out")
    (b,) = tally.add([[KvPullDone("b", 5)], []])
    assert (b.num_bytes, b.error) == (10, None) and len(tally) == 0


def test_a_second_pull_that_does_not_fit_waits_for_the_first_ones_blocks():
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS))
    first, second = list(range(1, 17)), list(range(21, 37))  # 4 blocks each
    d = PullingEngine(make_scheduler(num_blocks=6, block_size=BS), source=p, delay=3)
    d.scheduler.add_request(decode_request("d1", first, prefill(p, "p1", first), max_tokens=1))
    d.scheduler.add_request(decode_request("d2", second, prefill(p, "p2", second), max_tokens=1))
    d.run()
    assert not d.failed and [q.request_id for q in d.pulls] == ["d1", "d2"]


# ---- a read failed while still running: its blocks are held until it ends (quarantine) -------------------
def lingering_decode(num_blocks: int, linger: float, ranks: int = 1, lingering_ranks: int = 1):
    """A decoder whose read of a 5-block prompt ("d", 4 blocks read) fails on `lingering_ranks` of
    its group's `ranks` without being cancelled; it ends `linger` steps later."""
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS))
    prompt = list(range(1, 21))
    d = PullingEngine(make_scheduler(num_blocks=num_blocks, block_size=BS), source=p, ranks=ranks, linger=linger,
                      lingering_ranks=lingering_ranks)
    d.scheduler.add_request(decode_request("d", prompt, prefill(p, "p", prompt)))
    d.step()
    return d, prompt


def test_a_read_that_may_still_land_holds_its_blocks_out_of_the_pool_and_the_prefix_cache():
    d, prompt = lingering_decode(num_blocks=8, linger=float("inf"))
    s = d.scheduler
    req = d.finished["d"]
    assert req.error_status == 503 and "timed out" in req.error and s.num_kv_pull_failures == 1
    (pull,) = d.pulls
    held = set(pull.local_block_ids)
    assert s.num_blocks_quarantined == 5 and s.stats()["kv_blocks_quarantined"] == 5 and s.stats()["kv_quarantines"] == 1
    usage = s.total_block_usage()
    assert (usage.in_use, usage.free, usage.cached) == (5, 3, 0)
    blocks = s.groups[0].blocks
    assert all(blocks.ref_count(b) == 1 for b in held)
    # the same prompt again: nothing of it is in the prefix cache, so it is computed afresh elsewhere
    d.scheduler.add_request(make_request("again", prompt[:8], max_tokens=2))
    d.run(max_steps=20)  # PullingEngine fails if a step writes a block the read may still fill
    assert d.finished["again"].num_output_tokens == 2 and not d.failed.get("again")
    assert s.total_block_usage().in_use == 5 and s.groups[0].blocks.num_cached > 0
    assert not held & set(blocks._by_key.values())
    s.check_invariants()


def test_a_new_request_never_gets_the_blocks_of_a_read_that_may_still_land():
    """9 blocks, 5 held: a 4-block request fits beside them; a 4-block second one waits for the first
    one's blocks, never the held ones, and both read back their own KV (the late write lands in the
    held blocks only: FakeEngine would see it in a context otherwise)."""
    d, _ = lingering_decode(num_blocks=9, linger=6)
    s = d.scheduler
    s.add_request(make_request("a", list(range(40, 53)), max_tokens=3))
    s.add_request(make_request("b", list(range(60, 73)), max_tokens=3))
    d.step()
    assert s.requests["b"].status.value == "waiting" and s.num_blocks_quarantined == 5
    assert s.pulls_in_flight  # a request waits for blocks: steps go on to hear of the read's end
    for _ in range(3):
        d.step()
        assert s.num_blocks_quarantined == 5
    d.run()
    assert d.finished["a"].num_output_tokens == 3 and d.finished["b"].num_output_tokens == 3
    assert s.num_blocks_quarantined == 0 and s.total_block_usage().in_use == 0 and not s.pulls_in_flight


def test_held_blocks_return_to_the_pool_once_the_read_ends():
    d, _ = lingering_decode(num_blocks=8, linger=3)
    s = d.scheduler
    assert s.num_blocks_quarantined == 5 and not s.pulls_in_flight  # idle: no step runs for it alone
    for _ in range(3):
        d.step()
    assert s.num_blocks_quarantined == 0 and s.stats()["kv_quarantines"] == 1
    usage = s.total_block_usage()
    assert (usage.in_use, usage.free, usage.cached) == (0, 8, 0)
    s.check_invariants()


@pytest.mark.parametrize("lingering_ranks", [1, 2])
def test_any_rank_whose_read_may_still_land_holds_the_blocks_until_every_such_rank_ends(lingering_ranks):
    d, _ = lingering_decode(num_blocks=8, linger=2, ranks=2, lingering_ranks=lingering_ranks)
    s = d.scheduler
    assert d.finished["d"].error_status == 503 and s.num_blocks_quarantined == 5
    if lingering_ranks == 2:  # the ranks' reads end one step apart
        d.lingering[0] = (d.lingering[0][0] + 1, *d.lingering[0][1:])
        d.step()
        d.step()
        assert s.num_blocks_quarantined == 5 and len(d.lingering) == 1
    d.step()
    d.step()
    assert s.num_blocks_quarantined == 0 and s.total_block_usage().in_use == 0


def test_an_aborted_pull_whose_read_may_still_land_is_held_too():
    p = FakeEngine(make_scheduler(num_blocks=32, block_size=BS))
    prompt = list(range(1, 21))
    d = PullingEngine(make_scheduler(num_blocks=8, block_size=BS), source=p, delay=2, linger=3)
    d.scheduler.add_request(decode_request("d", prompt, prefill(p, "p", prompt)))
    d.step()
    d.scheduler.abort_request("d")
    d.step()
    d.step()  # the read is reported failed, and may still land
    assert d.scheduler.num_blocks_quarantined == 5 and d.scheduler.total_block_usage().in_use == 5
    for _ in range(3):
        d.step()
    assert d.scheduler.num_blocks_quarantined == 0 and d.scheduler.total_block_usage().in_use == 0


def test_the_tally_nets_a_lingering_read_that_ends_before_its_pull_is_done():
    tally = PullTally(ranks_per_group=2)
    assert tally.add([[], [KvPullDone("a", error="timed out", lingering=1)]]) == []
    assert tally.add([[], [KvPullDone("a", lingering=-1)]]) == []  # ended before rank 0 reported
    (a,) = tally.add([[KvPullDone("a", 10)], []])
    assert a.error == "timed out" and a.lingering == 0
    (b,) = tally.add([[KvPullDone("b", error="x", lingering=1)], [KvPullDone("b", error="y", lingering=1)]])
    assert b.lingering == 2  # both ranks' reads may still land: the blocks wait for two ends
    assert tally.add([[KvPullDone("b", lingering=-1)], []]) == [KvPullDone("b", lingering=-1)]


def test_a_quarantine_reports_its_blocks_reads_and_age():
    """/health shows these (server/kv_health.py): blocks held, failed reads still running (one per
    rank), and how long the oldest has been held."""
    import time

    d, _ = lingering_decode(num_blocks=8, linger=float("inf"), ranks=2, lingering_ranks=2)
    later = d.scheduler.quarantine_stats(now=time.monotonic() + 100)
    assert later["kv_blocks_quarantined"] == 5 and later["kv_reads_quarantined"] == 2
    assert later["kv_quarantine_oldest_s"] >= 100
    stats = d.scheduler.stats()
    assert stats["kv_reads_quarantined"] == 2 and stats["kv_quarantine_oldest_s"] >= 0
    assert d.scheduler.quarantine_stats() != {} and make_scheduler(num_blocks=8, block_size=BS).quarantine_stats() == {
        "kv_blocks_quarantined": 0, "kv_reads_quarantined": 0, "kv_quarantine_oldest_s": 0.0}
