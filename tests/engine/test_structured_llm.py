"""Structured outputs through the engine (`LLM`): preemption keeps each matcher where its output is,
and a multi-rank layout (two attention groups, each sampling its own requests in its own process) gives
the single-rank engine's tokens. The built-in model; its answers validate against the schema."""
from __future__ import annotations

import json

import jsonschema
import pytest

from moeserve import LLM, SamplingParams

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
pytest.importorskip("xgrammar")

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "items"],
          "properties": {"name": {"type": "string", "maxLength": 16},
                         "items": {"type": "array", "minItems": 2, "maxItems": 4,
                                   "items": {"type": "object", "required": ["id", "ok"], "additionalProperties": False,
                                             "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
                                                            "ok": {"type": "boolean"}}}}}}
PROMPTS = ["Once upon a time", "The weather today", "A letter to my sister", "In the morning"]


def params() -> list[SamplingParams]:
    """Greedy and seeded samples, a schema, a regex and a choice."""
    out = []
    for i, p in enumerate(PROMPTS):
        kind = [{"json": SCHEMA}, {"regex": r"[A-Z][a-z]+( [a-z]+){3,6}\."}, {"json": SCHEMA}, {"choice": ["yes", "no"]}][i]
        out.append(SamplingParams(temperature=0.0 if i % 2 == 0 else 0.8, seed=i, max_tokens=160, structured_outputs=kind))
    return out


def check(outputs) -> None:
    for out, p in zip(outputs, params()):
        spec = p.structured_outputs
        if spec.json is not None:
            jsonschema.validate(json.loads(out.text), SCHEMA)
        assert out.finish_reason == "stop", out.text


SETTINGS = dict(kv_cache_blocks=14, block_size=16, max_model_len=224)  # too small for all four at once


@pytest.fixture(scope="module")
def alone():
    """The requests run one at a time on one rank, and the engine that ran them."""
    llm = LLM(**SETTINGS)
    try:
        yield llm, [llm.generate([prompt], p)[0] for prompt, p in zip(PROMPTS, params())]
    finally:
        llm.shutdown()


def test_preemption_keeps_the_matchers(alone):
    """A pool too small for all four at once preempts (recompute); every request keeps its output and
    its matcher's state, so the tokens are those of the requests run one at a time."""
    llm, want = alone
    before = llm.engine.stats()["num_preemptions"]
    together = llm.generate(PROMPTS, params())
    assert llm.engine.stats()["num_preemptions"] > before
    check(together)
    assert [o.token_ids for o in together] == [o.token_ids for o in want]


def test_two_attention_groups_sample_as_one_rank(alone):
    _, want = alone
    check(want)
    ep2 = LLM(ep=2, tp=1, **SETTINGS)  # two ranks, two attention groups, a sampler (and matchers) in each
    try:
        engine = ep2.engine
        for i, (prompt, p) in enumerate(zip(PROMPTS, params())):
            engine.add_request(f"r{i}", ep2.tokenizer.encode(prompt), p)
        assert {r.group for r in engine.scheduler.requests.values()} == {0, 1}
        done = {}
        while len(done) < len(PROMPTS):
            done.update({o.request_id: o for o in engine.step() if o.finished})
    finally:
        ep2.shutdown()
    assert [done[f"r{i}"].token_ids for i in range(len(PROMPTS))] == [o.token_ids for o in want]
