"""LLM.generate compiles a call's distinct grammars at once, as the server does, before it submits any."""
from __future__ import annotations

import re
import threading

import pytest

from moeserve import SamplingParams
from moeserve.errors import RequestError

pytest.importorskip("xgrammar")


def _params(regex: str) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=4, structured_outputs={"regex": regex})


def test_distinct_grammars_compile_at_the_same_time(llm, monkeypatch):
    """The first two compiles meet at a barrier: compiled one after another, the first would wait
    there alone (a broken barrier after its deadlock guard) and the call would raise."""
    compile_grammar, meet, calls = llm.engine.compile_grammar, threading.Barrier(2, timeout=60), []

    def together(params):
        calls.append(params.structured_outputs.regex)
        if len(calls) <= 2:
            meet.wait()
        compile_grammar(params)

    monkeypatch.setattr(llm.engine, "compile_grammar", together)
    regexes = ["[0-9]{3}", "[a-z]{3}", "[0-9]{3}"]  # the third is the first's grammar: compiled once before
    outs = llm.generate(["A", "B", "C"], [_params(r) for r in regexes], use_tqdm=False)
    assert sorted(calls[:2]) == ["[0-9]{3}", "[a-z]{3}"]
    assert all(re.fullmatch(r, o.text) for r, o in zip(regexes, outs))


def test_a_grammar_that_does_not_compile_queues_nothing(llm):
    with pytest.raises(RequestError, match="regex") as e:
        llm.generate(["A", "B"], [_params("[0-9]{3}"), _params("(unclosed")], use_tqdm=False)
    assert e.value.param == "structured_outputs"
    assert llm.engine.stats()["num_waiting"] + llm.engine.stats()["num_running"] == 0
