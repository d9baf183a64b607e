"""Structured outputs on a two-rank server (--ep 2: two attention groups, group 1 sampled by the rank in
another process), which compiles each grammar twice at once (the engine loop's and that rank's):
constrained requests sent together, routed to both groups, give the one-rank Python API's greedy
answers, and a grammar that cannot be compiled is a 400 naming its field (the rank fails it too, maybe
first: that is no 500) while the others run."""
from __future__ import annotations

import threading

import httpx
import pytest
from server_harness import ServerProcess

from moeserve import SamplingParams

pytestmark = pytest.mark.slow
pytest.importorskip("xgrammar")

CONSTRAINTS = [
    {"json": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["n"],
              "additionalProperties": False}},
    {"regex": r"[A-Z][a-z]+( [a-z]+){2,4}\."},
    {"choice": ["yes", "no", "maybe"]},
    {"json": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3}},
]
PROMPTS = ["Once upon a time", "The weather today", "A letter to my sister", "In the morning"]


@pytest.fixture(scope="module")
def srv():
    with ServerProcess("--ep", "2", "--tp", "1", "--max-model-len", "256", "--kv-cache-blocks", "64",
                       startup_timeout_s=400) as server:
        yield server


def test_constrained_requests_on_both_groups_match_one_rank_and_a_bad_grammar_is_a_400(srv, llm):
    want = [llm.generate([p], SamplingParams(temperature=0, max_tokens=24, structured_outputs=c))[0].text
            for p, c in zip(PROMPTS, CONSTRAINTS)]
    bodies = [{"prompt": p, "max_tokens": 24, "temperature": 0, "structured_outputs": c} for p, c in zip(PROMPTS, CONSTRAINTS)]
    bodies += [{"prompt": "Hello", "max_tokens": 4, "structured_outputs": {"regex": "(?<=a)b"}},
               {"prompt": "Hello", "max_tokens": 4, "response_format": {"type": "json_schema", "json_schema": {
                   "name": "s", "schema": {"type": "array", "uniqueItems": True}}}}]
    answers: dict[int, httpx.Response] = {}

    def send(i: int) -> None:
        answers[i] = httpx.post(srv.url + "/v1/completions", json=bodies[i], timeout=300)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(len(PROMPTS)):
        assert answers[i].status_code == 200, answers[i].text
        assert answers[i].json()["choices"][0]["text"] == want[i]
    for i, param in ((4, "structured_outputs"), (5, "response_format")):
        assert answers[i].status_code == 400, answers[i].text
        assert answers[i].json()["error"]["param"] == param
    assert "Lookbehind" in answers[4].json()["error"]["message"]
    assert "uniqueItems" in answers[5].json()["error"]["message"]
    assert httpx.get(srv.url + "/health", timeout=10).status_code == 200
