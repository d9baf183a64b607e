"""A dead rank becomes an error, never a hang; an idle attention group keeps entering collectives."""
from __future__ import annotations

import threading
import time

import pytest

from moeserve import LLM, SamplingParams
from moeserve.errors import EngineDeadError
from tiny_models import make_checkpoint


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_checkpoint("mixtral", tmp_path_factory.mktemp("mixtral"), max_position_embeddings=2048)[1]


@pytest.mark.timeout(240)
def test_1000_decode_steps_with_one_idle_group(tiny):
    llm = LLM(model=str(tiny), ep=2, tp=1)  # two attention groups, one request: group 1 idles
    try:
        out = llm.generate([[5, 6, 7]], SamplingParams(temperature=0.0, max_tokens=1000, ignore_eos=True))[0]
        assert len(out.token_ids) == 1000 and out.finish_reason == "length"
        assert llm.engine.num_steps >= 1000
    finally:
        llm.shutdown()
    assert all(p.poll() is not None for p in llm.engine.executor._procs)


@pytest.mark.timeout(240)
def test_killed_rank_turns_into_an_error_and_no_process_is_left(tiny):
    llm = LLM(model=str(tiny), ep=2, tp=1)
    procs = llm.engine.executor._procs
    killer = threading.Timer(1.0, procs[0].kill)
    killer.start()
    started = time.monotonic()
    with pytest.raises(EngineDeadError):
        llm.generate([[5, 6, 7]] * 4, SamplingParams(temperature=0.0, max_tokens=1000, ignore_eos=True))
    assert time.monotonic() - started < 60
    llm.shutdown()
    assert all(p.poll() is not None for p in procs)
