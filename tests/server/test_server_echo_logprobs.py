"""echo + logprobs on /v1/completions (what lm-eval-harness's loglikelihood sends): the prompt's
tokens scored first (the first one null), then the generated ones as without echo; max_tokens 0
with echo scores the prompt only; streaming sends the scored prompt before the generated tokens."""
from __future__ import annotations

import openai
import pytest
from server_settings import API_KEY

from moeserve import SamplingParams

PROMPT = "The quick brown fox jumps over"


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def _close(a, b):
    return all(abs(x - y) <= 1e-4 for x, y in zip(a, b)) and len(a) == len(b)


def test_echo_logprobs_prompt_then_generated(client, server, llm):
    kw = dict(model=server.model, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=2,
              extra_body={"ignore_eos": True, "return_token_ids": True})
    plain = client.completions.create(**kw).choices[0]
    echo = client.completions.create(echo=True, **kw).choices[0]
    prompt_ids = echo.model_extra["prompt_token_ids"]
    n = len(prompt_ids)
    lp = echo.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n + 5
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v is not None and v <= 0 for v in lp.token_logprobs[1:])
    assert all(len(t) >= 2 for t in lp.top_logprobs[1:])  # top 2 (plus the chosen token when it is not among them)
    # the generated part is what the request without echo returns
    assert lp.tokens[n:] == plain.logprobs.tokens
    assert _close(lp.token_logprobs[n:], plain.logprobs.token_logprobs)
    assert echo.text.endswith(plain.text) and echo.model_extra["token_ids"] == plain.model_extra["token_ids"]
    # the prompt part is the Python API's prompt_logprobs
    ref = llm.generate([prompt_ids], SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=2))[0]
    assert _close(lp.token_logprobs[1:n], [ref.prompt_logprobs[i][prompt_ids[i]].logprob for i in range(1, n)])
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    assert lp.text_offset[n] == len(echo.text) - len(plain.text)


def test_echo_with_max_tokens_0_scores_the_prompt_only(client, server):
    resp = client.completions.create(model=server.model, prompt=[PROMPT, "Hello"], max_tokens=0, echo=True, logprobs=0,
                                     temperature=0, extra_body={"return_token_ids": True})
    full = client.completions.create(model=server.model, prompt=PROMPT, max_tokens=3, echo=True, logprobs=0,
                                     temperature=0, extra_body={"return_token_ids": True}).choices[0]
    for choice in resp.choices:
        n = len(choice.model_extra["prompt_token_ids"])
        assert len(choice.logprobs.token_logprobs) == n and choice.logprobs.token_logprobs[0] is None
        assert choice.model_extra["token_ids"] == [] and choice.finish_reason == "length"
    first = sorted(resp.choices, key=lambda c: c.index)[0]
    n = len(first.model_extra["prompt_token_ids"])
    assert full.text.startswith(first.text) and len(first.text) < len(full.text)
    assert _close(first.logprobs.token_logprobs[1:], full.logprobs.token_logprobs[1:n])
    assert resp.usage.completion_tokens == 0 and resp.usage.total_tokens == resp.usage.prompt_tokens
    # without echo, max_tokens 0 stays an error
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=server.model, prompt=PROMPT, max_tokens=0)


def test_streaming_echo_logprobs_concatenates_to_the_same_output(client, server):
    kw = dict(model=server.model, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=1, echo=True,
              extra_body={"ignore_eos": True})
    whole = client.completions.create(**kw).choices[0]
    chunks = [c.choices[0] for c in client.completions.create(stream=True, **kw) if c.choices]
    assert "".join(c.text for c in chunks) == whole.text
    tokens = [t for c in chunks if c.logprobs for t in c.logprobs.tokens]
    logprobs = [v for c in chunks if c.logprobs for v in c.logprobs.token_logprobs]
    offsets = [v for c in chunks if c.logprobs for v in c.logprobs.text_offset]
    assert tokens == whole.logprobs.tokens and offsets == whole.logprobs.text_offset
    assert logprobs[0] is None and _close(logprobs[1:], whole.logprobs.token_logprobs[1:])
    assert chunks[-1].finish_reason == "length"
    # max_tokens 0: the scored prompt, then an empty final chunk
    chunks = [c.choices[0] for c in client.completions.create(stream=True, **dict(kw, max_tokens=0)) if c.choices]
    n = len(chunks[0].logprobs.tokens)
    assert "".join(c.text for c in chunks) == whole.text[: whole.logprobs.text_offset[n]]
    assert chunks[-1].finish_reason == "length"


def test_offsets_run_on_through_a_prompt_of_byte_tokens(client, server):
    """"🙂" tokenized as single bytes: alone each decodes to one "\ufffd". As vLLM shows them, the
    pieces before the last show "" and the last the whole character, so the prompt's tokens add up to
    its text (they were one "\ufffd" each, longer than the text); offsets are one running sum of token
    texts, as vLLM's."""
    import httpx

    ids = httpx.post(server.url + "/tokenize", json={"model": server.model, "prompt": "st🙂 ok"},
                     headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60).json()["tokens"]
    resp = client.completions.create(model=server.model, prompt=ids, max_tokens=3, echo=True, logprobs=0,
                                     temperature=0, extra_body={"ignore_eos": True})
    offsets = resp.choices[0].logprobs.text_offset
    tokens = resp.choices[0].logprobs.tokens
    assert "".join(tokens[:len(ids)]) == "st🙂 ok" and "" in tokens[:len(ids)]
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
