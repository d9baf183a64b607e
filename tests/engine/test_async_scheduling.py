"""The host one step ahead (`async_scheduling`, engine/engine_core.py): step N+1 is scheduled and
submitted before step N's tokens are read back, its pending tokens filled in by the worker, and every
output equals the synchronous engine's: stop conditions, sampling state, logprobs, preemption, aborts,
and the multi-rank executors."""
from __future__ import annotations

import json
import random
import re

import pytest

from moeserve import LLM, SamplingParams
from moeserve.engine.engine_core import EngineCore
from tiny_models import make_checkpoint


def _events(llm: LLM) -> list[tuple[str, int]]:
    """Record ("schedule", step) and ("read", step) as the engine does them."""
    engine, events = llm.engine, []
    schedule, submit = engine.scheduler.schedule, engine.executor.submit

    def scheduled():
        plan = schedule()
        events.append(("schedule", plan.step))
        return plan

    def submitted(plan, ahead=True):
        future = submit(plan, ahead)
        result = future.result

        def read():
            events.append(("read", plan.step))
            return result()

        future.result = read
        return future

    engine.scheduler.schedule, engine.executor.submit = scheduled, submitted
    return events


def test_step_n_plus_1_is_scheduled_before_step_n_is_read(tmp_path):
    _, path = make_checkpoint("mixtral", tmp_path)
    rng = random.Random(1)
    prompts = [[rng.randrange(3, 96) for _ in range(n)] for n in (3, 8, 5)]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    want = [o.token_ids for o in _run(str(path), prompts, params, kernels="torch", block_size=4, async_scheduling=False)]
    llm = LLM(model=str(path), kernels="torch", block_size=4, async_scheduling=True)
    events = _events(llm)
    try:
        assert [o.token_ids for o in llm.generate(prompts, params)] == want
    finally:
        llm.shutdown()
    reads = [step for kind, step in events if kind == "read"]
    assert len(reads) >= 6 and reads == sorted(reads)
    for step in reads:
        if ("schedule", step + 1) in events and ("read", step + 1) in events:  # a step that was followed
            assert events.index(("schedule", step + 1)) < events.index(("read", step))


def _run(model, prompts, params, **settings):
    llm = LLM(model=model, **settings)
    try:
        return llm.generate(prompts, params)
    finally:
        llm.shutdown()


def _same(got, want):
    for g, w in zip(got, want, strict=True):
        assert (g.token_ids, g.text, g.finish_reason, g.stop_reason) == (w.token_ids, w.text, w.finish_reason,
                                                                          w.stop_reason)
        assert g.logprobs == w.logprobs and g.prompt_logprobs == w.prompt_logprobs


def test_every_sampling_feature_gives_the_synchronous_outputs():
    """The built-in model (it has a tokenizer): stop strings and EOS, seeded sampling, penalties, logit
    bias, min_tokens, logprobs and prompt logprobs, with the host a step ahead and without."""
    prompts = ["The quick brown fox", "Once upon a time", "1, 2, 3,", "Hello", "Paris is the capital of"]
    params = [
        SamplingParams(temperature=0.0, max_tokens=12, stop=[" the", "."]),
        SamplingParams(temperature=0.8, top_p=0.9, top_k=20, seed=7, max_tokens=10, logprobs=3),
        SamplingParams(temperature=0.0, max_tokens=9, presence_penalty=0.5, frequency_penalty=0.3,
                       repetition_penalty=1.2, logit_bias={11: 3.0}),
        SamplingParams(temperature=1.0, seed=3, min_tokens=4, max_tokens=8, prompt_logprobs=2),
        SamplingParams(temperature=0.0, max_tokens=7, logprobs=0),
    ]
    settings = dict(kernels="torch", max_num_batched_tokens=16)
    want = _run(None, prompts, params, async_scheduling=False, **settings)
    _same(_run(None, prompts, params, async_scheduling=True, **settings), want)


def test_constrained_requests_give_the_synchronous_outputs():
    """Grammar masks with the host a step ahead: a step's mask is filled after the previous step's
    tokens are accepted (engine/grammar_book.py), so regex, choice and JSON-schema requests batched with
    an unconstrained one give what the synchronous loop gives."""
    from moeserve.sampling_params import StructuredOutputsParams as SO

    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    prompts = ["The quick brown fox", "Once upon a time", "Hello", "Paris is"]
    params = [
        SamplingParams(temperature=0.8, seed=5, max_tokens=24, structured_outputs=SO(regex=r"(yes|no), [a-z]{3,10}\.")),
        SamplingParams(temperature=0.0, max_tokens=8, structured_outputs=SO(choice=["pride", "prejudice"])),
        SamplingParams(temperature=0.7, seed=9, max_tokens=60, logprobs=2, structured_outputs=SO(json=schema)),
        SamplingParams(temperature=0.0, max_tokens=10),
    ]
    settings = dict(kernels="torch", max_num_batched_tokens=16)
    want = _run(None, prompts, params, async_scheduling=False, **settings)
    got = _run(None, prompts, params, async_scheduling=True, **settings)
    for g, w in zip(got, want, strict=True):
        assert (g.token_ids, g.text, g.finish_reason) == (w.token_ids, w.text, w.finish_reason)
        # a request that ends at its grammar's end costs the step ahead a row, so later steps may run
        # other batch sizes: the same tokens, log-probabilities within float noise
        for (lp_g, top_g), (lp_w, top_w) in zip(g.logprobs or [], w.logprobs or [], strict=True):
            assert lp_g == pytest.approx(lp_w, abs=1e-5) and [t for t, _ in top_g] == [t for t, _ in top_w]
            assert [v for _, v in top_g] == pytest.approx([v for _, v in top_w], abs=1e-5)
    assert want[1].text in ("pride", "prejudice") and re.fullmatch(r"(yes|no), [a-z]{3,10}\.", want[0].text)
    assert json.loads(want[2].text).keys() == {"name", "age"}


def test_preemption_and_a_tiny_pool_give_the_synchronous_tokens(tmp_path):
    _, path = make_checkpoint("olmoe", tmp_path)
    rng = random.Random(4)
    prompts = [[rng.randrange(3, 96) for _ in range(rng.randrange(3, 10))] for _ in range(6)]
    params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    settings = dict(kernels="torch", block_size=2, kv_cache_blocks=14, max_num_seqs=4, max_num_batched_tokens=8)
    llm = LLM(model=str(path), async_scheduling=True, **settings)
    try:
        got = llm.generate(prompts, params)
        assert llm.engine.scheduler.num_preemptions > 0
    finally:
        llm.shutdown()
    _same(got, _run(str(path), prompts, params, async_scheduling=False, **settings))


def test_an_abort_while_a_step_is_in_flight_ends_only_that_request(tmp_path):
    _, path = make_checkpoint("mixtral", tmp_path)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    outs = {}
    for ahead in (False, True):
        engine = LLM(model=str(path), kernels="torch", block_size=4, async_scheduling=ahead).engine
        try:
            for rid, prompt in (("keep", [5, 6, 7]), ("drop", [9, 10]), ("also", [11, 12, 13, 14])):
                engine.add_request(rid, prompt, params)
            got: dict[str, list] = {}
            for _ in range(3):
                for out in engine.step():
                    got.setdefault(out.request_id, []).append(out)
            engine.abort_request("drop")
            while engine.has_unfinished_requests():
                for out in engine.step():
                    got.setdefault(out.request_id, []).append(out)
            assert got["drop"][-1].finish_reason == "abort"
            assert engine.scheduler.total_block_usage().in_use == 0
            outs[ahead] = {rid: o[-1].token_ids for rid, o in got.items() if rid != "drop"}
        finally:
            EngineCore.shutdown(engine)
    assert outs[True] == outs[False]


@pytest.mark.slow  # spawns ranks
@pytest.mark.timeout(300)
@pytest.mark.parametrize("ep,tp", [(2, 1), (2, 2)], ids=["two-groups", "tp-broadcast"])
def test_multirank_engines_give_the_synchronous_tokens(ep, tp, tmp_path):
    """Ranks hold each step's result until the next plan (or a drain); with tp > 1 each group's
    sampled ids reach its other TP ranks by broadcast, for their pending tokens."""
    _, path = make_checkpoint("qwen3_moe", tmp_path)
    rng = random.Random(6)
    prompts = [[rng.randrange(3, 96) for _ in range(rng.randrange(3, 12))] for _ in range(5)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (1, 3, 5, 7, 9)]
    settings = dict(ep=ep, tp=tp, block_size=4, max_num_batched_tokens=16)
    _same(_run(str(path), prompts, params, async_scheduling=True, **settings),
          _run(str(path), prompts, params, async_scheduling=False, **settings))
