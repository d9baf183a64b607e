"""vLLM's `prompt_logprobs` on /v1/completions and /v1/chat/completions (lm-eval-harness, reward and
RL pipelines send it): each prompt token after the first scored as transformers scores it
(log_softmax of the forward pass over the prompt), with its rank and top alternatives in vLLM's
shape, across prefill chunks and whatever the prefix cache holds; greedy tokens unchanged."""
from __future__ import annotations

import json

import httpx
import pytest
import torch
from server_settings import API_KEY
from server_harness import ServerProcess

import moeserve.engine.builtin_model as bm

AUTH = {"Authorization": f"Bearer {API_KEY}"}
CHUNK = 16  # --max-num-batched-tokens: a prompt of 40+ tokens is computed over several steps
TOP = 3
LONG = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
        "want of a wife. However little known the feelings or views of such a man may be")


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--kv-cache-blocks", "128", "--block-size", "4", "--max-model-len", "256",
                       "--max-num-batched-tokens", str(CHUNK), "--max-num-seqs", "8", "--api-key", API_KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def oracle():
    """ids -> [len(ids), V] fp32 log_softmax of transformers' forward pass over them."""
    from transformers import MixtralForCausalLM

    hf = MixtralForCausalLM.from_pretrained(bm.builtin_model_dir(), dtype=torch.float32).eval()

    def scores(ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), dim=-1)

    return scores


def _check(prompt_logprobs, ids, ref, top=TOP):
    """vLLM's shape, and every value transformers' within fp32 noise."""
    tok = bm.build_tokenizer()
    assert len(prompt_logprobs) == len(ids) and prompt_logprobs[0] is None
    for pos in range(1, len(ids)):
        entry, row, token = prompt_logprobs[pos], ref[pos - 1], ids[pos]
        assert next(iter(entry)) == str(token)  # the prompt token first, as vLLM's dict holds it
        got = entry[str(token)]
        assert set(got) == {"logprob", "rank", "decoded_token"} and got["decoded_token"] == tok.decode([token])
        assert abs(got["logprob"] - float(row[token])) <= 1e-4, pos
        assert int((row > row[token] + 1e-4).sum()) + 1 <= got["rank"] <= int((row >= row[token] - 1e-4).sum()), pos
        alternatives = [(int(t), entry[str(int(t))]) for t in row.topk(top).indices]
        assert len(entry) == top + (token not in {t for t, _ in alternatives})
        for r, (t, alt) in enumerate(alternatives, 1):
            assert abs(alt["logprob"] - float(row[t])) <= 1e-4
            assert alt["rank"] == r  # a prompt token among them takes its place's rank, as in vLLM's dict


def _complete(http, **body):
    r = http.post("/v1/completions", json={"temperature": 0, "max_tokens": 4, "ignore_eos": True, **body})
    assert r.status_code == 200, r.text[:300]
    return r.json()


def test_completions_score_every_prompt_token_across_chunks_and_a_cached_prefix(http, oracle):
    first = _complete(http, prompt=LONG, return_token_ids=True)
    ids = first["choices"][0]["prompt_token_ids"]
    assert len(ids) > 2 * CHUNK
    scored = _complete(http, prompt=LONG, prompt_logprobs=TOP, return_token_ids=True)
    again = _complete(http, prompt=LONG, return_token_ids=True)
    # the prefix cache held the prompt: others hit it, the scoring request computed every position
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert scored["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    choice = scored["choices"][0]
    _check(choice["prompt_logprobs"], ids, oracle(ids))
    assert choice["token_ids"] == first["choices"][0]["token_ids"] == again["choices"][0]["token_ids"]
    assert choice["logprobs"] is None and "prompt_logprobs" not in first["choices"][0]


def test_every_choice_carries_its_own_prompts_scores(http, oracle):
    tok = bm.build_tokenizer()
    prompts = [tok.encode(LONG[:60]), tok.encode("Hello there, friend")]
    resp = _complete(http, prompt=prompts, n=2, prompt_logprobs=0, temperature=1.0, seed=7)
    choices = sorted(resp["choices"], key=lambda c: c["index"])
    assert len(choices) == 4
    for c in choices:
        ids = prompts[c["index"] // 2]
        _check(c["prompt_logprobs"], ids, oracle(ids), top=0)
    assert choices[0]["prompt_logprobs"] == choices[1]["prompt_logprobs"]


def test_chat_puts_the_prompts_scores_at_the_top_level(http, oracle):
    messages = [{"role": "user", "content": LONG[:80]}]
    r = http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 3, "temperature": 0,
                                               "prompt_logprobs": 2, "return_token_ids": True})
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    ids = body["prompt_token_ids"]
    _check(body["prompt_logprobs"], ids, oracle(ids), top=2)
    assert "prompt_logprobs" not in body["choices"][0]
    plain = http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 3, "temperature": 0}).json()
    assert "prompt_logprobs" not in plain and plain["choices"][0]["message"] == body["choices"][0]["message"]


def test_echo_with_logprobs_implies_them_and_prompt_logprobs_may_ask_for_more(http, oracle):
    """vLLM: echo with logprobs k asks for prompt_logprobs k when the field is absent, and the choice
    carries them; the OpenAI-shaped logprobs keep at most k alternatives whatever the field asks."""
    echo = _complete(http, prompt=LONG[:50], echo=True, logprobs=1, max_tokens=0, return_token_ids=True)["choices"][0]
    ids = echo["prompt_token_ids"]
    _check(echo["prompt_logprobs"], ids, oracle(ids), top=1)
    more = _complete(http, prompt=LONG[:50], echo=True, logprobs=1, max_tokens=0, prompt_logprobs=4)["choices"][0]
    _check(more["prompt_logprobs"], ids, oracle(ids), top=4)
    assert more["logprobs"] == echo["logprobs"]
    assert all(len(t) <= 2 for t in more["logprobs"]["top_logprobs"][1:])


def test_a_stream_takes_prompt_logprobs_0_and_returns_none(http, server):
    """vLLM refuses a count with stream: true but accepts 0 (and streams no prompt logprobs)."""
    body = {"prompt": "Hello", "max_tokens": 3, "temperature": 0, "stream": True, "prompt_logprobs": 0}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, headers=AUTH, timeout=120) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert events and not any("prompt_logprobs" in c for e in events for c in e["choices"])


@pytest.mark.parametrize("path,body,words", [
    ("/v1/completions", {"prompt": "hi", "prompt_logprobs": -3}, "non-negative integer or -1"),
    ("/v1/completions", {"prompt": "hi", "prompt_logprobs": -1}, "whole vocabulary"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": 21}, "at most 20"),
    ("/v1/completions", {"prompt": "hi", "prompt_logprobs": 2.5}, "prompt_logprobs"),
    ("/v1/completions", {"prompt": "hi", "prompt_logprobs": True}, "prompt_logprobs"),
    ("/v1/completions", {"prompt": "hi", "prompt_logprobs": 1, "stream": True}, "stream"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": -1, "stream": True},
     "whole vocabulary"),
])
def test_bad_prompt_logprobs_are_400s_naming_the_field(http, path, body, words):
    r = http.post(path, json=body)
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "prompt_logprobs" and words in err["message"], err


def test_minus_infinity_reads_as_vllms_floor():
    from types import SimpleNamespace

    from moeserve.server import prompt_logprobs

    entries = [(5, None, None, None), (7, float("-inf"), [(2, -0.1), (7, float("-inf"))], 9)]
    out = prompt_logprobs.to_json(SimpleNamespace(tokenizer=None), entries)
    assert out == [None, {"7": {"logprob": -9999.0, "rank": 2, "decoded_token": None},
                          "2": {"logprob": -0.1, "rank": 1, "decoded_token": None}}]
