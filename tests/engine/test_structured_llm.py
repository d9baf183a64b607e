"""Structured outputs through the engine (`LLM`): preemption keeps each matcher where its output is,
and a multi-rank layout (two attention groups, each sampling its own requests in its own process) gives
the single-rank engine's tokens. The built-in model; its answers validate against the schema."""
from __future__ import annotations

import json
import os

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


HOLD_COMPILES = '''"""Rank processes of the test below: xgrammar's compiles wait for a file (the test's release)."""
import os
import time

from moeserve.engine import grammar

_compile = grammar.GrammarCompiler.compile


def _held(self, spec):
    deadline = time.monotonic() + 30  # the step timeout is longer: a rank that compiles in a step waits it out
    while not os.path.exists(os.environ["TEST_GRAMMAR_RELEASE_FILE"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    return _compile(self, spec)


grammar.GrammarCompiler.compile = _held
'''


def test_a_ranks_compile_holds_back_its_request_only(alone, tmp_path, monkeypatch):
    """The rank sampling group 1 (another process) compiles the grammar beside the steps: while its compile
    is held, the request of group 0 runs to its end and the constrained one waits; once released, the
    constrained one gives the single-rank engine's tokens (which ran in step with the host). A rank that compiled inside a step held every
    step (the collectives wait for it) until its compile ended."""
    _, want = alone
    (tmp_path / "sitecustomize.py").write_text(HOLD_COMPILES)  # imported by the spawned ranks at start-up
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    release = tmp_path / "release"
    monkeypatch.setenv("TEST_GRAMMAR_RELEASE_FILE", str(release))
    ep2 = LLM(ep=2, tp=1, async_scheduling=True, **SETTINGS)  # the host a step ahead, as on a GPU
    try:
        engine = ep2.engine
        engine.add_request("plain", ep2.tokenizer.encode(PROMPTS[1]), SamplingParams(max_tokens=6, ignore_eos=True))
        engine.add_request("json", ep2.tokenizer.encode(PROMPTS[0]), params()[0])
        assert engine.scheduler.requests["json"].group == 1
        done = {}
        while "plain" not in done:
            done.update({o.request_id: o for o in engine.step() if o.finished})
        assert not engine.scheduler.requests["json"].output_token_ids and not release.exists()
        release.touch()
        while "json" not in done:
            done.update({o.request_id: o for o in engine.step() if o.finished})
    finally:
        ep2.shutdown()
    assert len(done["plain"].token_ids) == 6 and done["json"].token_ids == want[0].token_ids


def test_the_ranks_compile_runs_while_the_engines_does(alone):
    """As the server's engine loop adds a constrained request (grammar_pending: it compiles the grammar
    itself on a worker thread), group 1's rank hears of it at once and compiles beside the steps; the
    request runs only once the engine's compile is reported too, with the single-rank engine's tokens.
    A grammar the engine refuses is dropped without an output (its 400 answers the client), whatever
    the rank said."""
    _, want = alone
    ep2 = LLM(ep=2, tp=1, **SETTINGS)
    try:
        engine = ep2.engine
        long_prompt = ep2.tokenizer.encode(" ".join(PROMPTS * 2))  # the load of group 0: both others go to group 1
        engine.add_request("plain", long_prompt, SamplingParams(max_tokens=40, ignore_eos=True))
        engine.add_request("json", ep2.tokenizer.encode(PROMPTS[0]), params()[0], grammar_pending=True)
        bad = SamplingParams(max_tokens=4, structured_outputs={"regex": "(?<=a)b"})
        engine.add_request("bad", ep2.tokenizer.encode(PROMPTS[2]), bad, grammar_pending=True)
        assert engine.scheduler.requests["json"].group == engine.scheduler.requests["bad"].group == 1
        outputs = []
        while engine.scheduler.grammars_in_flight:  # the ranks' compiles, before the engine's has begun
            outputs += engine.step()
        assert {o.request_id for o in outputs} == {"plain"} and not engine.scheduler.take_failed()
        with pytest.raises(Exception, match="Lookbehind"):
            engine.compile_grammar(bad)
        engine.abort_request("bad", output=False)
        engine.compile_grammar(params()[0])
        engine.grammar_compiled("json")
        done = {}
        while "json" not in done or "plain" not in done:
            out = engine.step()
            outputs += out
            done.update({o.request_id: o for o in out if o.finished})
    finally:
        ep2.shutdown()
    assert "bad" not in {o.request_id for o in outputs}
    assert done["json"].token_ids == want[0].token_ids


@pytest.mark.parametrize("choice", [["😀"], ['a "😀" \\ b\n', "no"]])
def test_a_choice_beyond_the_bmp_is_written_as_itself(alone, choice):
    """A choice's grammar held json.dumps' ASCII escapes, and xgrammar read an emoji's surrogate pair
    as two characters: the output was 6 bytes of invalid UTF-8 (U+FFFD six times), not the emoji."""
    llm, _ = alone
    out = llm.generate(["Pick one:"], SamplingParams(temperature=0, max_tokens=24, structured_outputs={"choice": choice}),
                       use_tqdm=False)[0]
    assert out.text in choice and out.finish_reason == "stop", repr(out.text)
