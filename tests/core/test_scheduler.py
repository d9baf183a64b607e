import pytest
from core_fakes import FakeEngine, make_request, make_scheduler

from moeserve.core.request import RequestStatus
from moeserve.errors import QueueFullError, RequestError


def seqs_of(plan, group: int = 0):
    return {s.request_id: s for s in plan.groups[group].seqs}


def test_chunked_prefill_splits_a_long_prompt_under_the_budget():
    eng = FakeEngine(make_scheduler(max_num_batched_tokens=16))
    eng.scheduler.add_request(make_request("a", list(range(50)), max_tokens=2))
    chunks = [seqs_of(eng.step())["a"] for _ in range(4)]
    assert [(c.start_pos, c.num_tokens, c.sample) for c in chunks] == [(0, 16, False), (16, 16, False), (32, 16, False), (48, 2, True)]
    assert [len(c.block_table) for c in chunks] == [4, 8, 12, 13]
    assert chunks[-1].block_table[:12] == chunks[2].block_table  # a block table only grows
    eng.run()
    assert eng.finished["a"].output_token_ids and eng.finished["a"].finish_reason == "length"


def test_decode_and_prefill_mix_in_one_step_decode_first():
    eng = FakeEngine(make_scheduler(max_num_batched_tokens=10))
    s = eng.scheduler
    s.add_request(make_request("a", list(range(5)), max_tokens=10))
    eng.step()  # a: whole prompt, samples
    s.add_request(make_request("b", list(range(100, 130)), max_tokens=2))
    plan = eng.step()
    assert [x.request_id for x in plan.groups[0].seqs] == ["a", "b"]
    a, b = seqs_of(plan)["a"], seqs_of(plan)["b"]
    assert (a.num_tokens, a.sample) == (1, True)
    assert (b.start_pos, b.num_tokens, b.sample) == (0, 9, False)
    assert [r.request_id for r in plan.new_requests] == ["b"]


def test_max_num_seqs_caps_the_running_set():
    eng = FakeEngine(make_scheduler(max_num_seqs=2))
    for i in range(5):
        eng.scheduler.add_request(make_request(f"r{i}", [i] * 6, max_tokens=3))
    plan = eng.step()
    assert len(plan.groups[0].seqs) == 2 and eng.scheduler.num_running == 2 and eng.scheduler.num_waiting == 3
    eng.run()  # FakeEngine asserts len(seqs) <= max_num_seqs every step
    assert len(eng.finished) == 5


def test_prefix_hit_shares_blocks_and_counts_cached_tokens():
    eng = FakeEngine(make_scheduler(block_size=4))
    s = eng.scheduler
    shared = list(range(40))
    s.add_request(make_request("a", shared + [500, 501], max_tokens=8))
    eng.step()
    s.add_request(make_request("b", shared + [600, 601, 602], max_tokens=8))
    b = seqs_of(eng.step())["b"]
    req_a, req_b = s.requests["a"], s.requests["b"]
    assert req_b.num_cached_prompt_tokens == 40 and b.start_pos == 40
    assert req_b.block_ids[:10] == req_a.block_ids[:10]
    assert req_b.block_ids[10] != req_a.block_ids[10]
    bm = s.groups[0].blocks
    assert all(bm.ref_count(x) == 2 for x in req_a.block_ids[:10])
    s.abort_request("a")
    assert all(bm.ref_count(x) == 1 for x in req_b.block_ids[:10])
    stats = s.stats()
    assert (stats["prefix_cache_queries"], stats["prefix_cache_query_tokens"], stats["prefix_cache_hit_tokens"]) == (2, 85, 40)
    eng.run()
    assert bm.num_in_use == 0 and bm.num_cached > 0


def test_a_fully_cached_prompt_still_computes_its_last_token():
    eng = FakeEngine(make_scheduler(block_size=4))
    s = eng.scheduler
    s.add_request(make_request("a", list(range(16)), max_tokens=1))
    eng.run()
    s.add_request(make_request("b", list(range(16)), max_tokens=1))
    b = seqs_of(eng.step())["b"]
    assert (b.start_pos, b.token_ids, b.sample) == (12, [12, 13, 14, 15], True)


def test_preemption_by_recompute_resumes_and_finishes():
    # 8 blocks of 4 tokens; two requests of 8 prompt + 12 output tokens need 5 blocks each.
    eng = FakeEngine(make_scheduler(num_blocks=8, block_size=4, prefix_caching=False))
    s = eng.scheduler
    s.add_request(make_request("a", list(range(8)), max_tokens=12))
    s.add_request(make_request("b", list(range(50, 58)), max_tokens=12))
    resumed = None
    while s.has_unfinished():
        plan = eng.step()
        seq = seqs_of(plan).get("b")
        if resumed is None and seq is not None and s.requests.get("b") and s.requests["b"].num_preemptions:
            resumed = seq
    assert eng.scheduler.num_preemptions >= 1
    assert resumed is not None and resumed.start_pos == 0 and len(resumed.token_ids) > 8  # prompt + outputs
    assert all(not r.request_id == "b" for p in eng.plans[1:] for r in p.new_requests)  # workers keep b's state
    assert {r: eng.finished[r].num_output_tokens for r in "ab"} == {"a": 12, "b": 12}
    assert not eng.failed


def test_recompute_chunks_sample_only_at_the_last_token():
    eng = FakeEngine(make_scheduler(num_blocks=6, block_size=4, max_num_batched_tokens=5, prefix_caching=False))
    s = eng.scheduler
    s.add_request(make_request("a", list(range(4)), max_tokens=16))
    s.add_request(make_request("b", list(range(10, 14)), max_tokens=16))
    eng.run()  # FakeEngine asserts sample == (chunk reaches the last token) on every seq
    assert s.num_preemptions >= 1
    assert all(eng.finished[r].num_output_tokens == 16 for r in "ab")


def test_a_request_that_can_never_fit_ends_with_an_error():
    eng = FakeEngine(make_scheduler(num_blocks=4, block_size=4))
    s = eng.scheduler
    s.add_request(make_request("big", list(range(10)), max_tokens=20))  # prompt fits, 30 tokens do not
    s.add_request(make_request("ok", list(range(100, 104)), max_tokens=2))
    eng.run(max_steps=200)
    assert "big" in eng.failed and "raise --kv-cache-blocks" in eng.failed["big"]
    assert eng.finished["big"].finish_reason == "error" and eng.finished["big"].num_output_tokens == 7  # 16 slots hold 16 tokens, the 17th is sampled
    assert eng.finished["ok"].finish_reason == "length"
    assert any("big" in p.finished_request_ids for p in eng.plans)
    assert s.groups[0].blocks.num_in_use == 0


def test_add_request_rejects_what_can_never_run():
    s = make_scheduler(num_blocks=4, block_size=4, max_model_len=64)
    with pytest.raises(RequestError, match="KV cache has 4 blocks"):
        s.add_request(make_request("a", list(range(17)), max_tokens=1))
    with pytest.raises(RequestError, match="maximum context length is 64") as e:
        s.add_request(make_request("b", list(range(10)), max_tokens=55))
    assert e.value.param == "max_tokens"  # fewer would fit
    with pytest.raises(RequestError, match="maximum context length is 64") as e:
        s.add_request(make_request("b", list(range(64)), max_tokens=1))
    assert e.value.param == "prompt"  # no max_tokens would
    with pytest.raises(RequestError, match="empty"):
        s.add_request(make_request("c", [], max_tokens=1))
    s.add_request(make_request("d", [1, 2], max_tokens=1))
    with pytest.raises(RequestError, match="already in use"):
        s.add_request(make_request("d", [1, 2], max_tokens=1))
    assert s.num_waiting == 1


def test_queue_full_raises_queue_full_error():
    s = make_scheduler(max_queued_requests=3)
    for i in range(3):
        s.add_request(make_request(f"r{i}", [1, 2, 3]))
    with pytest.raises(QueueFullError) as err:
        s.add_request(make_request("r3", [1, 2, 3]))
    assert err.value.status == 429
    s.schedule()  # admitting frees queue room
    s.add_request(make_request("r3", [1, 2, 3]))


def test_abort_frees_blocks_and_tells_workers_next_plan():
    eng = FakeEngine(make_scheduler())
    s = eng.scheduler
    s.add_request(make_request("run", list(range(9)), max_tokens=50))
    eng.step()
    s.add_request(make_request("wait", list(range(3)), max_tokens=5))
    assert s.abort_request("run").finish_reason == "abort"
    assert s.abort_request("wait") is not None and s.abort_request("nope") is None
    plan = eng.step()
    assert plan.finished_request_ids == ["run", "wait"] and plan.num_tokens == 0
    assert s.stats()["kv_blocks_in_use"] == 0 and not s.has_unfinished()


def test_update_skips_a_request_aborted_after_schedule():
    eng = FakeEngine(make_scheduler())
    s = eng.scheduler
    s.add_request(make_request("a", [1, 2, 3], max_tokens=5))
    plan = s.schedule()
    req = s.abort_request("a")
    from moeserve.core.step_plan import SampledToken, StepResult

    assert s.update(plan, StepResult(plan.step, [SampledToken("a", 7)])) == []
    assert req.output_token_ids == [] and req.status is RequestStatus.FINISHED
    s.check_invariants()


def test_requests_go_to_the_least_loaded_group():
    eng = FakeEngine(make_scheduler(num_groups=3))
    s = eng.scheduler
    s.add_request(make_request("long", list(range(40)), max_tokens=4))
    s.add_request(make_request("x", list(range(10)), max_tokens=4))
    s.add_request(make_request("y", list(range(10)), max_tokens=4))
    s.add_request(make_request("z", list(range(10)), max_tokens=4))
    assert [s.requests[r].group for r in ("long", "x", "y", "z")] == [0, 1, 2, 1]
    plan = eng.step()
    assert [len(g.seqs) for g in plan.groups] == [1, 2, 1]
    eng.run()
    assert len(eng.finished) == 4


def _cached_in_group_0(busy_tokens: int):
    """Request "a" (40 tokens) computed and cached in group 0, then a running request of
    `busy_tokens` there; returns the engine."""
    eng = FakeEngine(make_scheduler(num_groups=2, block_size=4))
    s = eng.scheduler
    s.add_request(make_request("a", list(range(40)), max_tokens=4))
    eng.run()
    assert s.groups[0].blocks.num_cached >= 10
    s.add_request(make_request("busy", list(range(500, 500 + busy_tokens)), max_tokens=50))
    assert s.requests["busy"].group == 0  # both idle: the tie goes to group 0
    return eng


def test_a_follow_up_goes_to_the_group_that_caches_its_prefix():
    # a follow-up extending an earlier prompt got 140 cached tokens at ep 1
    # and none at ep 2, because it went to the other (less loaded) group
    eng = _cached_in_group_0(busy_tokens=8)
    s = eng.scheduler
    s.add_request(make_request("b", list(range(40)) + [900, 901, 902, 903, 904], max_tokens=2))
    assert s.requests["b"].group == 0  # 40 cached tokens outweigh 8 tokens of extra load
    eng.step()
    assert s.requests["b"].num_cached_prompt_tokens == 40
    eng.run()
    assert len(eng.finished) == 3


def test_load_outweighs_a_small_cached_prefix():
    eng = _cached_in_group_0(busy_tokens=100)
    s = eng.scheduler
    s.add_request(make_request("b", list(range(40)) + [900], max_tokens=2))
    assert s.requests["b"].group == 1  # 100 tokens of extra load against 40 cached
    s.add_request(make_request("c", list(range(300, 310)), max_tokens=2))
    assert s.requests["c"].group == 1  # nothing cached anywhere: the least loaded
    eng.run()
    assert len(eng.finished) == 4


def test_prompt_logprobs_request_skips_prefix_hits_and_gets_its_targets_per_chunk():
    from moeserve.core.request import Request
    from moeserve.sampling_params import SamplingParams

    eng = FakeEngine(make_scheduler(block_size=4, max_num_batched_tokens=16))
    s = eng.scheduler
    shared = list(range(40))
    s.add_request(make_request("a", shared + [500, 501], max_tokens=8))
    eng.step(), eng.step(), eng.step()  # a's prompt is computed and its blocks published
    prompt = shared + [600, 601, 602]
    s.add_request(Request("b", prompt, SamplingParams(max_tokens=2, prompt_logprobs=1)))
    chunks = []
    while "b" in s.requests and not s.requests["b"].output_token_ids:
        seq = seqs_of(eng.step()).get("b")
        if seq is not None:
            chunks.append(seq)
    assert chunks[0].start_pos == 0 and s.requests["b"].num_cached_prompt_tokens == 0  # no prefix hit
    targets = [t for c in chunks for t in (c.prompt_targets or [])]
    assert targets == prompt[1:]  # every prompt token after the first, exactly once, in order
    for c in chunks:
        assert c.prompt_targets == prompt[c.start_pos + 1 : min(c.start_pos + c.num_tokens, len(prompt) - 1) + 1]
    decode = seqs_of(eng.step())["b"]
    assert decode.prompt_targets is None
    assert all(seq.prompt_targets is None for p in eng.plans for seq in p.groups[0].seqs if seq.request_id == "a")


def test_ahead_the_next_plan_computes_the_pending_token_as_a_placeholder():
    """Async scheduling: the plan scheduled before the previous plan's update decodes each request's
    sampled-but-unread token as PENDING_TOKEN; the update then appends the real token."""
    from moeserve.core.step_plan import PENDING_TOKEN, SampledToken, StepResult

    s = make_scheduler(ahead=True)
    s.add_request(make_request("a", [5, 6, 7], max_tokens=3))
    first = s.schedule()
    assert seqs_of(first)["a"].token_ids == [5, 6, 7]
    a = s.requests["a"]
    assert (a.num_computed_tokens, a.num_pending, a.num_tokens) == (3, 1, 4)
    second = s.schedule()  # step 0 still "running"
    seq = seqs_of(second)["a"]
    assert (seq.token_ids, seq.start_pos, seq.sample) == ([PENDING_TOKEN], 3, True)
    assert (a.num_computed_tokens, a.num_pending) == (4, 2)
    assert s.update(first, StepResult(first.step, [SampledToken("a", 42)])) == [a]
    assert a.output_token_ids == [42] and a.num_pending == 1 and a.all_token_ids == [5, 6, 7, 42]
    third = s.schedule()  # step 1's token is pending now; a needs one more after it
    assert seqs_of(third)["a"].token_ids == [PENDING_TOKEN] and seqs_of(third)["a"].start_pos == 4
    s.update(second, StepResult(second.step, [SampledToken("a", 43)]))
    # a's token of step 2 (its third) ends it by max_tokens whatever it is: no step computes past it
    assert seqs_of(s.schedule()) == {}
    s.update(third, StepResult(third.step, [SampledToken("a", 44)]))
    assert a.output_token_ids == [42, 43, 44] and a.num_pending == 0


def test_ahead_a_request_preempted_while_its_token_is_pending_keeps_the_token():
    from moeserve.core.group_scheduler import GroupStep
    from moeserve.core.request import RequestStatus
    from moeserve.core.step_plan import SampledToken, StepResult

    s = make_scheduler(num_blocks=2, block_size=2, ahead=True)
    s.add_request(make_request("a", [1, 2], max_tokens=8))
    first = s.schedule()
    a = s.requests["a"]
    s.groups[0]._preempt(a, GroupStep(tokens_left=0))  # as block pressure in the next schedule would
    assert a.status is RequestStatus.PREEMPTED and a.num_pending == 1
    assert s.update(first, StepResult(first.step, [SampledToken("a", 9)])) == [a]
    assert a.all_token_ids == [1, 2, 9] and a.num_pending == 0 and a.num_computed_tokens == 0
