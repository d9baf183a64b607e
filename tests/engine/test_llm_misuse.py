"""The Python API under a caller's mistakes: each raises a ValueError or TypeError that names the
argument, as vLLM's `LLM.generate` and `SamplingParams` do, and the same LLM serves the next call."""
from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
import torch

from moeserve import LLM, SamplingParams
from moeserve.engine import engine_core

GREEDY = SamplingParams(temperature=0.0, max_tokens=4)


@pytest.fixture(scope="module")
def hello(llm) -> list[int]:
    """Greedy tokens of "Hello" before any misuse: every test checks the LLM still gives them."""
    return llm.generate("Hello", GREEDY)[0].token_ids


def _still_serves(llm: LLM, hello: list[int]) -> None:
    assert llm.engine.scheduler.requests == {}  # nothing of a refused call stays queued
    assert llm.generate("Hello", GREEDY)[0].token_ids == hello


def test_the_engine_refuses_non_integer_token_ids(llm, hello):
    # 1.5 lies in the vocabulary's range: it was admitted, failed in the detokenizer after the scheduler
    # had queued it, and every later step failed on it (LLM.generate now refuses it before the engine)
    for ids in ([1.5, 2.0], [True, 5]):
        with pytest.raises(ValueError, match="prompt token ids must be integers"):
            llm.engine.add_request("bad", ids, GREEDY)
        _still_serves(llm, hello)


def test_a_request_that_fails_on_admission_leaves_nothing_in_the_scheduler(llm, hello, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("detokenizer failed")

    monkeypatch.setattr(engine_core, "IncrementalDetokenizer", broken)
    with pytest.raises(RuntimeError, match="detokenizer failed"):
        llm.generate("Hello", GREEDY)
    monkeypatch.undo()
    _still_serves(llm, hello)


def test_every_prompt_shape_vllm_takes(llm, hello):
    ids = llm.tokenizer.encode("Hello")
    shapes = ["Hello", ["Hello"], ids, [ids], tuple(ids), {"prompt": "Hello"}, {"prompt_token_ids": ids},
              [{"prompt": "Hello"}, {"prompt_token_ids": ids}], ("Hello", ids), (p for p in ["Hello"]),
              np.array(ids), np.array([ids]), {"prompt_token_ids": np.array(ids)}, [list(np.array(ids))],
              torch.tensor(ids), torch.tensor([ids])]
    for prompts in shapes:
        outs = llm.generate(prompts, GREEDY)
        assert outs and all(o.token_ids == hello and o.prompt_token_ids == ids for o in outs), prompts
    assert llm.generate([], GREEDY) == []


@pytest.mark.parametrize(
    "prompts, error, match",
    [(None, TypeError, "prompts must be"), (5, TypeError, "prompts must be"), (b"Hello", TypeError, "prompts must be"),
     ([None], TypeError, "a prompt is a str"), (["Hello", 5], TypeError, "got int"),
     ([[1.5, 2.0]], TypeError, "token ids must be integers"), ([1.5, 2.0], TypeError, "token ids must be integers"),
     ([[True, 5]], TypeError, "token ids must be integers"), ([["a", "b"]], TypeError, "token ids must be integers"),
     ({"prompt_token_ids": "Hello"}, TypeError, "got a str"), ({"prompt": [5, 6]}, TypeError, "'prompt' is text"),
     ({"text": "Hello"}, ValueError, "one key"), ({"prompt": "a", "multi_modal_data": {}}, ValueError, "one key"),
     ("", ValueError, "prompt is empty"), ([[]], ValueError, "prompt is empty"),
     ([[10**6]], ValueError, r"prompt token ids must lie in \[0, 4096\)"), ([[-1]], ValueError, "must lie in")],
)
def test_a_bad_prompt_names_prompts_and_the_llm_serves_the_next_call(llm, hello, prompts, error, match):
    if isinstance(prompts, list) and prompts and isinstance(prompts[0], list):
        prompts = ["Hello", *prompts]  # a good prompt before the bad one is not left running either
    with pytest.raises(error, match=match):
        llm.generate(prompts, GREEDY)
    _still_serves(llm, hello)


@pytest.mark.parametrize(
    "params, error, match",
    [([GREEDY], ValueError, "got 2 prompts but 1 sampling_params"), ([GREEDY] * 3, ValueError, "2 prompts but 3"),
     ({"temperature": 0}, TypeError, "sampling_params must be a SamplingParams"),
     ("greedy", TypeError, "sampling_params must be"), ([GREEDY, {"temperature": 0}], TypeError, "must hold SamplingParams")],
)
def test_bad_sampling_params_name_the_argument(llm, hello, params, error, match):
    with pytest.raises(error, match=match):
        llm.generate(["Hello", "World"], params)
    _still_serves(llm, hello)


def test_sampling_params_is_vllms_keyword_and_a_list_gives_one_per_prompt(llm, hello):
    outs = llm.generate(["Hello", "Hello"], sampling_params=[GREEDY, SamplingParams(temperature=0.0, max_tokens=2)])
    assert [o.token_ids for o in outs] == [hello, hello[:2]]


def test_engine_refusals_are_value_errors_naming_the_field(llm, hello):
    cases = [(SamplingParams(stop_token_ids=[10**6]), "stop_token_ids"), (SamplingParams(logit_bias={10**6: 1}), "logit_bias"),
             (SamplingParams(max_tokens=10**6, min_tokens=300), "min_tokens")]
    for params, match in cases:
        with pytest.raises(ValueError, match=match):
            llm.generate("Hello", params)
        _still_serves(llm, hello)


def test_same_seed_same_text_across_calls_and_batches(llm):
    seeded = SamplingParams(temperature=1.0, seed=7, max_tokens=8)
    alone = llm.generate("Hello", seeded)[0].token_ids
    batched = llm.generate(["World", "Hello", "Hello"], seeded)
    assert batched[1].token_ids == alone == batched[2].token_ids
    assert llm.generate("Hello", SamplingParams(temperature=1.0, seed=2**64 - 1, max_tokens=8))[0].token_ids == \
        llm.generate("Hello", SamplingParams(temperature=1.0, seed=-1, max_tokens=8))[0].token_ids  # torch's mod 2^64


def test_max_tokens_unset_runs_to_max_model_len(llm):
    out = llm.generate([[5, 6]], SamplingParams(temperature=0.0, max_tokens=None, ignore_eos=True))[0]
    assert len(out.token_ids) == 256 - 2 and out.finish_reason == "length"


def test_max_tokens_past_the_context_runs_to_its_end_as_vllms_llm(llm):
    """vLLM's LLM generates up to max_model_len (the server refuses such a request instead); a prompt
    that fills the context is still refused."""
    out = llm.generate([[5, 6]], SamplingParams(temperature=0.0, max_tokens=10**6, ignore_eos=True))[0]
    assert len(out.token_ids) == 256 - 2 and out.finish_reason == "length"
    with pytest.raises(ValueError, match="maximum context length"):
        llm.generate([[5] * 256], SamplingParams(max_tokens=10**6))


def test_generate_after_shutdown_raises_and_the_with_block_shuts_down():
    with LLM(kv_cache_blocks=16, max_model_len=64) as llm:
        assert llm.generate("Hello", GREEDY)[0].finish_reason == "length"
    with pytest.raises(RuntimeError, match="shut down"):
        llm.generate("Hello", GREEDY)
    llm.shutdown()  # twice is harmless


def test_min_tokens_past_the_context_left_is_refused_before_it_is_queued(llm, hello):
    # max_tokens None resolves to the 6 tokens the context leaves; min_tokens 10 then failed validation after
    # the scheduler had queued the request, which ran on, untracked, beside every later call
    with pytest.raises(ValueError, match="min_tokens asks for 10 more"):
        llm.generate([[5] * 250], SamplingParams(min_tokens=10, max_tokens=None))
    _still_serves(llm, hello)
    assert len(llm.generate([[5] * 250], SamplingParams(min_tokens=6, max_tokens=None, temperature=0.0))[0].token_ids) == 6


def test_a_call_may_hold_more_prompts_than_the_waiting_queue(llm, hello, monkeypatch):
    # max_queued_requests bounds a server's clients; five prompts with a queue of two raised QueueFullError
    scheduler = llm.engine.scheduler
    monkeypatch.setattr(scheduler, "cfg", dataclasses.replace(scheduler.cfg, max_queued_requests=2))
    outs = llm.generate(["Hello", "World", "Hello", "World", "Hello"], GREEDY)
    assert [o.token_ids for o in outs[::2]] == [hello] * 3 and outs[1].token_ids == outs[3].token_ids
    monkeypatch.undo()
    _still_serves(llm, hello)


def test_calls_from_two_threads_each_get_their_outputs(llm, hello):
    # each call stepped the engine itself: one thread's loop took (and dropped) the other's finished
    # outputs, and the other stepped on forever; concurrent steps raced on the scheduler's state
    got: dict[int, list] = {}

    def call(i: int) -> None:
        got[i] = [o.token_ids for o in llm.generate(["Hello"] * 4, SamplingParams(temperature=0.0, max_tokens=4 + i))]

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)  # a hang detector, not a timing: the calls take about a second
    assert not any(t.is_alive() for t in threads), "a generate call never returned"
    assert got[0] == [hello] * 4 and all(len(ids) == 4 + i for i in got for ids in got[i])
    _still_serves(llm, hello)
