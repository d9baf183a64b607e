"""The Python API under a caller's mistakes: each raises a ValueError or TypeError that names the
argument, as vLLM's `LLM.generate` and `SamplingParams` do, and the same LLM serves the next call."""
from __future__ import annotations

import pytest

from moeserve import LLM, SamplingParams
from moeserve.engine import engine_core

GREEDY = SamplingParams(temperature=0.0, max_tokens=4)


@pytest.fixture(scope="module")
def llm():
    engine = LLM(kv_cache_blocks=96, max_model_len=256)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def hello(llm) -> list[int]:
    """Greedy tokens of "Hello" before any misuse: every test checks the LLM still gives them."""
    return llm.generate("Hello", GREEDY)[0].token_ids


def _still_serves(llm: LLM, hello: list[int]) -> None:
    assert llm.engine.scheduler.requests == {}  # nothing of a refused call stays queued
    assert llm.generate("Hello", GREEDY)[0].token_ids == hello


def test_non_integer_token_ids_are_refused(llm, hello):
    # 1.5 lies in the vocabulary's range: it was admitted, failed in the detokenizer after the scheduler
    # had queued it, and every later step failed on it
    for ids in ([1.5, 2.0], [True, 5]):
        with pytest.raises(ValueError, match="prompt token ids must be integers"):
            llm.generate([ids], GREEDY)
        _still_serves(llm, hello)


def test_a_request_that_fails_on_admission_leaves_nothing_in_the_scheduler(llm, hello, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("detokenizer failed")

    monkeypatch.setattr(engine_core, "IncrementalDetokenizer", broken)
    with pytest.raises(RuntimeError, match="detokenizer failed"):
        llm.generate("Hello", GREEDY)
    monkeypatch.undo()
    _still_serves(llm, hello)
