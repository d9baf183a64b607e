"""The n samples of one prompt share its prefill (core/siblings.py): one computes the prompt, the others
wait in the queue, without blocking anyone behind them, and then take it from the prefix cache."""
import random

import pytest
from core_fakes import FakeEngine, make_request, make_scheduler

from moeserve.core.request import Request, RequestStatus
from moeserve.sampling_params import SamplingParams

PROMPT = list(range(100, 130))  # 30 tokens: 7 full blocks of 4 a hit may cover, 28 tokens


def sample(owner: str, i: int, prompt: list[int] = PROMPT, max_tokens: int = 3, **params) -> Request:
    return Request(request_id=f"{owner}-{i}", prompt_token_ids=prompt,
                   sampling=SamplingParams(max_tokens=max_tokens, **params), owner=owner)


def scheduled(plan) -> dict[str, tuple[int, int]]:
    """request id -> (start_pos, tokens) of every sequence the plan computes"""
    return {s.request_id: (s.start_pos, s.num_tokens) for b in plan.groups for s in b.seqs}


def test_siblings_wait_for_the_first_prompt_then_hit_it_and_others_pass():
    eng = FakeEngine(make_scheduler(block_size=4, max_num_batched_tokens=64))
    s = eng.scheduler
    for i in range(3):
        s.add_request(sample("a", i))
    s.add_request(sample("b", 0, prompt=list(range(500, 510))))  # unrelated, queued behind the samples
    first = scheduled(eng.step())
    assert first == {"a-0": (0, 30), "b-0": (0, 10)}  # b is not blocked behind the held samples
    assert [r.request_id for r in s.groups[0].waiting] == ["a-1", "a-2"]
    second = scheduled(eng.step())
    assert second["a-1"] == second["a-2"] == (28, 2)  # the prompt's 7 full blocks come from the cache
    assert s.requests["a-1"].num_cached_prompt_tokens == s.requests["a-2"].num_cached_prompt_tokens == 28
    assert s.requests["a-0"].num_cached_prompt_tokens == 0
    assert s.requests["a-1"].block_ids[:7] == s.requests["a-0"].block_ids[:7]
    eng.run()
    assert s.num_prompt_tokens_computed == 30 + 2 * 2 + 10
    assert all(eng.finished[f"a-{i}"].num_output_tokens == 3 for i in range(3))


def test_a_chunked_prompt_holds_its_siblings_until_its_last_full_block_is_computed():
    eng = FakeEngine(make_scheduler(block_size=4, max_num_batched_tokens=12))
    s = eng.scheduler
    for i in range(2):
        s.add_request(sample("a", i))
    s.add_request(sample("b", 0, prompt=[7, 8, 9]))
    plans = [scheduled(eng.step()) for _ in range(4)]
    assert plans[0] == {"a-0": (0, 12)}  # the budget is spent
    assert plans[1] == {"a-0": (12, 12)}
    assert plans[2] == {"a-0": (24, 6), "b-0": (0, 3)}  # b passes the held sibling
    assert plans[3] == {"a-0": (30, 1), "b-0": (3, 1), "a-1": (28, 2)}  # a-0's 7 prompt blocks are published
    eng.run()
    assert s.requests == {} and eng.finished["a-1"].num_cached_prompt_tokens == 28


@pytest.mark.parametrize("how", ["abort", "finish"])
def test_the_next_sibling_leads_when_the_first_leaves(how):
    eng = FakeEngine(make_scheduler(block_size=4, max_num_batched_tokens=12))
    s = eng.scheduler
    for i in range(3):
        s.add_request(sample("a", i))
    assert scheduled(eng.step()) == {"a-0": (0, 12)}
    if how == "abort":
        s.abort_request("a-0")
    else:  # e.g. a stop the engine saw: gone before its prompt is done
        s.finish_request("a-0", "stop")
    assert scheduled(eng.step()) == {"a-1": (12, 12)}  # the blocks a-0 computed are cached: a-1 goes on from them
    assert s.requests["a-1"].num_cached_prompt_tokens == 12
    assert [r.request_id for r in s.groups[0].waiting] == ["a-2"]  # held behind the new leader
    eng.step()
    assert scheduled(eng.step())["a-2"] == (28, 2)
    eng.run()


def test_without_prefix_caching_every_sample_is_admitted_at_once():
    eng = FakeEngine(make_scheduler(block_size=4, max_num_batched_tokens=128, prefix_caching=False))
    for i in range(3):
        eng.scheduler.add_request(sample("a", i))
    assert scheduled(eng.step()) == {f"a-{i}": (0, 30) for i in range(3)}
    eng.run()


def test_who_is_not_held():
    eng = FakeEngine(make_scheduler(block_size=4, max_num_batched_tokens=256))
    s = eng.scheduler
    for i in range(2):  # prompt logprobs need every position's logits: a hit would skip them
        s.add_request(sample("lp", i, prompt_logprobs=1))
    for i in range(2):  # one block: nothing a hit may cover
        s.add_request(sample("short", i, prompt=[1, 2, 3, 4]))
    for i in range(2):  # no owner: requests of their own
        s.add_request(make_request(f"solo-{i}", PROMPT))
    s.add_request(sample("x", 0))  # same prompt, other owners
    s.add_request(sample("y", 0))
    assert len(scheduled(eng.step())) == 8
    eng.run()


def test_a_prompt_already_cached_holds_no_one():
    eng = FakeEngine(make_scheduler(block_size=4))
    s = eng.scheduler
    s.add_request(make_request("warm", PROMPT, max_tokens=1))
    eng.run()
    for i in range(3):
        s.add_request(sample("a", i))
    assert scheduled(eng.step()) == {f"a-{i}": (28, 2) for i in range(3)}


def test_different_prompts_of_one_owner_are_not_siblings():
    """One HTTP request with a list of prompts: choices of each prompt wait for that prompt's leader."""
    eng = FakeEngine(make_scheduler(block_size=4, max_num_batched_tokens=256))
    s = eng.scheduler
    other = list(range(200, 230))
    for i, prompt in enumerate([PROMPT, PROMPT, other, other]):
        s.add_request(Request(request_id=f"a-{i}", prompt_token_ids=prompt, sampling=SamplingParams(max_tokens=2), owner="a"))
    assert scheduled(eng.step()) == {"a-0": (0, 30), "a-2": (0, 30)}
    assert scheduled(eng.step()) == {"a-0": (30, 1), "a-2": (30, 1), "a-1": (28, 2), "a-3": (28, 2)}
    eng.run()


def test_async_scheduling_releases_the_siblings_one_step_later_too():
    eng = FakeEngine(make_scheduler(block_size=4, ahead=True))
    s = eng.scheduler
    for i in range(3):
        s.add_request(sample("a", i))
    assert scheduled(eng.step()) == {"a-0": (0, 30)}
    assert scheduled(eng.step()) == {"a-0": (30, 1), "a-1": (28, 2), "a-2": (28, 2)}
    eng.run()
    assert all(eng.finished[f"a-{i}"].num_output_tokens == 3 for i in range(3))


def prefilling_siblings(s) -> dict[tuple, int]:
    """(group, owner, prompt) -> running sequences still computing the prompt's cacheable blocks"""
    count: dict[tuple, int] = {}
    for g in s.groups:
        for r in g.running:
            if r.owner is not None and r.num_published_blocks < (r.num_prompt_tokens - 1) // s.block_size:
                key = (g.group, r.owner, tuple(r.prompt_token_ids))
                count[key] = count.get(key, 0) + 1
    return count


def test_a_preempted_leader_leads_again():
    # 20 blocks of 2: the leader (31 tokens, 16 blocks) and a growing decode cannot both fit
    eng = FakeEngine(make_scheduler(num_blocks=20, block_size=2, max_num_batched_tokens=8, max_num_seqs=4))
    s = eng.scheduler
    s.add_request(make_request("long", [9] * 4, max_tokens=30))
    eng.step()
    for i in range(3):
        s.add_request(sample("a", i, prompt=list(range(100, 131)), max_tokens=2))
    while s.has_unfinished():
        eng.step()
        assert max(prefilling_siblings(s).values(), default=0) <= 1
    a = [eng.finished[f"a-{i}"] for i in range(3)]
    assert a[0].num_preemptions == 1  # preempted for long's blocks, most of its prompt evicted meanwhile
    assert [r.num_cached_prompt_tokens for r in a] == [0, 30, 30]  # the others still waited for it
    assert all(r.num_output_tokens == 2 for r in a)


@pytest.mark.parametrize("ahead", [False, True], ids=["sync", "ahead"])
@pytest.mark.parametrize("seed", range(3))
def test_random_fan_outs_with_aborts_keep_invariants(seed, ahead):
    rng = random.Random(seed)
    eng = FakeEngine(make_scheduler(num_blocks=rng.randint(12, 24), block_size=rng.choice([2, 4]),
                                    max_num_batched_tokens=rng.randint(6, 24), max_num_seqs=rng.randint(3, 6),
                                    num_groups=1 + seed % 2, ahead=ahead))
    s = eng.scheduler
    added, aborted = [], set()
    for step in range(300):
        if step < 150 and rng.random() < 0.2:
            prompt = [rng.randrange(1000) for _ in range(rng.randint(1, 20))]
            for i in range(rng.randint(1, 4)):
                s.add_request(sample(f"o{step}", i, prompt=prompt, max_tokens=rng.randint(1, 8)))
                added.append(f"o{step}-{i}")
        if s.requests and rng.random() < 0.05:
            victim = rng.choice(sorted(s.requests))
            s.abort_request(victim)
            aborted.add(victim)
        eng.step()
        assert max(prefilling_siblings(s).values(), default=0) <= 1
    eng.run(max_steps=2000)
    assert set(eng.finished) | aborted == set(added) and not eng.failed
    assert all(r.status is RequestStatus.FINISHED for r in eng.finished.values())
    assert s.prefix_cache_stats().hit_tokens > 0
