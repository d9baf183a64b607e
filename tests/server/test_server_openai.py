"""The official `openai` client (sync, async, streaming) against the real server; greedy results must
be token-identical to the Python API (`LLM.generate`)."""
from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from server_settings import API_KEY

from moeserve import SamplingParams

PROMPTS = ["Hello world", "The quick brown fox", "Once upon a time there was"]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def reference(llm):
    """Greedy outputs of the Python API for PROMPTS (12 tokens, eos ignored so lengths are fixed)."""
    return llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))


def test_models_and_version(client, server):
    models = client.models.list().data
    assert [m.id for m in models] == [server.model]
    assert client.models.retrieve(server.model).id == server.model
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
    r = httpx.get(server.url + "/version", headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 200 and r.json()["version"]
    r = httpx.get(server.url + "/version", headers={"Authorization": f"bearer {API_KEY}"})  # case-insensitive scheme
    assert r.status_code == 200
    for spacing in ("  ", "\t", " \t "):  # RFC 9110: one or more spaces or tabs after the scheme
        r = httpx.get(server.url + "/version", headers={"Authorization": f"Bearer{spacing}{API_KEY}"})
        assert r.status_code == 200, repr(spacing)
    listed = httpx.get(server.url + "/v1/models/", headers={"Authorization": f"Bearer {API_KEY}"})  # trailing slash
    assert listed.status_code == 200 and [m["id"] for m in listed.json()["data"]] == [server.model]


def test_completions_greedy_matches_python_api(client, server, reference):
    resp = client.completions.create(model=server.model, prompt=PROMPTS, max_tokens=12, temperature=0,
                                     extra_body={"ignore_eos": True, "return_token_ids": True})
    assert len(resp.choices) == len(PROMPTS)
    for choice, ref in zip(sorted(resp.choices, key=lambda c: c.index), reference):
        assert choice.model_extra["token_ids"] == ref.token_ids
        assert choice.model_extra["prompt_token_ids"] == ref.prompt_token_ids
        assert choice.text == ref.text
        assert choice.finish_reason == "length"
    assert resp.usage.completion_tokens == 12 * len(PROMPTS)
    assert resp.usage.prompt_tokens == sum(len(r.prompt_token_ids) for r in reference)


def test_token_id_prompts_give_the_same_tokens(client, server, reference):
    ids = [r.prompt_token_ids for r in reference]
    resp = client.completions.create(model=server.model, prompt=ids, max_tokens=12, temperature=0,
                                     extra_body={"ignore_eos": True, "return_token_ids": True})
    got = [c.model_extra["token_ids"] for c in sorted(resp.choices, key=lambda c: c.index)]
    assert got == [r.token_ids for r in reference]


def test_streaming_completion_concatenates_to_the_same_output(client, server, reference):
    stream = client.completions.create(model=server.model, prompt=PROMPTS[1], max_tokens=12, temperature=0, stream=True,
                                       stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True, "return_token_ids": True})
    text, ids, finish, usage = "", [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == []
            continue
        choice = chunk.choices[0]
        text += choice.text
        ids += choice.model_extra["token_ids"]
        finish = choice.finish_reason or finish
    assert ids == reference[1].token_ids and text == reference[1].text
    assert finish == "length" and usage.completion_tokens == 12


def test_async_client_concurrent_requests(server, reference):
    async def main():
        aclient = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
        calls = [aclient.completions.create(model=server.model, prompt=p, max_tokens=12, temperature=0,
                                            extra_body={"ignore_eos": True, "return_token_ids": True}) for p in PROMPTS]
        out = await asyncio.gather(*calls)
        await aclient.close()
        return out

    results = asyncio.run(main())
    assert [r.choices[0].model_extra["token_ids"] for r in results] == [r.token_ids for r in reference]


def test_n_seeded_choices_are_the_python_apis_samples(client, server, llm):
    # choice i and LLM.generate's sample i run with SamplingParams.for_choice(i): the same seed gives the
    # same n samples through either API (2^63 - 2: the third choice's seed wraps around to 0)
    seed = 2**63 - 2
    resp = client.completions.create(model=server.model, prompt=PROMPTS[1], max_tokens=8, temperature=1.0, seed=seed,
                                      n=3, extra_body={"ignore_eos": True, "return_token_ids": True})
    got = [c.model_extra["token_ids"] for c in sorted(resp.choices, key=lambda c: c.index)]
    out = llm.generate(PROMPTS[1], SamplingParams(n=3, temperature=1.0, seed=seed, max_tokens=8, ignore_eos=True))[0]
    assert got == [c.token_ids for c in out.outputs] and len(set(map(tuple, got))) == 3
    assert [c.text for c in sorted(resp.choices, key=lambda c: c.index)] == [c.text for c in out.outputs]


def test_n_choices_share_the_prompts_prefill_and_usage_reports_the_hit(client, server, llm):
    """Choice 0 computes the prompt, choices 1 and 2 take its full blocks from the prefix cache
    (core/siblings.py): usage reports them as cached; greedy tokens are n=1's."""
    prompt = ("In the tale of the seven lighthouses, a keeper climbed the stairs every evening, counting "
              "the steps aloud, and watched the ships pass the rocks where his father once rescued a crew.")
    resp = client.completions.create(model=server.model, prompt=prompt, max_tokens=5, temperature=0, n=3,
                                      extra_body={"ignore_eos": True, "return_token_ids": True})
    ids = llm.tokenizer.encode(prompt)
    block = llm.engine.scheduler.block_size
    assert len(ids) > 2 * block
    assert resp.usage.prompt_tokens == len(ids)
    assert resp.usage.prompt_tokens_details.cached_tokens == (len(ids) - 1) // block * block
    want = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=5, ignore_eos=True))[0].token_ids
    assert [c.model_extra["token_ids"] for c in resp.choices] == [want] * 3


def test_chat_completion_uses_the_chat_template(client, server, llm):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]
    prompt = llm.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = llm.tokenizer.encode(prompt, add_special_tokens=False)
    ref = llm.chat(messages, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))[0]  # LLM.chat renders alike
    assert ref.prompt_token_ids == ids and ref.prompt == prompt
    tokenized = httpx.post(server.url + "/tokenize", json={"messages": messages},
                           headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60).json()
    assert tokenized["tokens"] == ids
    resp = client.chat.completions.create(model=server.model, messages=messages, max_tokens=8, temperature=0,
                                          extra_body={"ignore_eos": True, "return_token_ids": True})
    choice = resp.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == ref.text
    assert choice.model_extra["token_ids"] == ref.token_ids
    assert resp.usage.prompt_tokens == len(ids) and resp.usage.completion_tokens == 8


def test_chat_streaming_sends_role_first_then_content(client, server):
    stream = client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=6, temperature=0, stream=True, extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.object == "chat.completion.chunk" for c in chunks)


def test_n_seed_stop_echo_logprobs(client, server, reference):
    # n > 1 with a seed: n samples, reproducible.
    kw = dict(model=server.model, prompt=PROMPTS[0], max_tokens=8, temperature=1.0, seed=1234, n=3)
    a, b = client.completions.create(**kw), client.completions.create(**kw)
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert sorted(c.index for c in a.choices) == [0, 1, 2]
    # stop string taken from the greedy output: the text ends right before it.
    ref = reference[2]
    stop = ref.text[len(ref.text) // 2 :][:3]
    if stop.strip():
        resp = client.completions.create(model=server.model, prompt=PROMPTS[2], max_tokens=12, temperature=0,
                                         stop=[stop], extra_body={"ignore_eos": True})
        assert resp.choices[0].finish_reason == "stop"
        assert resp.choices[0].text == ref.text[: ref.text.index(stop)]
        stream = client.completions.create(model=server.model, prompt=PROMPTS[2], max_tokens=12, temperature=0,
                                           stop=[stop], stream=True, extra_body={"ignore_eos": True})
        assert "".join(c.choices[0].text for c in stream) == resp.choices[0].text  # nothing past the stop leaks
    # echo and logprobs
    echo = client.completions.create(model=server.model, prompt=PROMPTS[0], max_tokens=4, temperature=0, echo=True)
    assert echo.choices[0].text.startswith(PROMPTS[0])
    lp = client.completions.create(model=server.model, prompt=PROMPTS[0], max_tokens=4, temperature=0, logprobs=2,
                                   extra_body={"ignore_eos": True})
    logprobs = lp.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == 4
    assert all(v <= 0 for v in logprobs.token_logprobs)
    assert all(len(t) >= 1 for t in logprobs.top_logprobs)


def test_logit_bias_steers_greedy_tokens(client, server, reference):
    ref = reference[0].token_ids
    banned = client.completions.create(model=server.model, prompt=PROMPTS[0], max_tokens=4, temperature=0,
                                       logit_bias={str(ref[0]): -100}, extra_body={"ignore_eos": True,
                                                                                   "return_token_ids": True})
    assert banned.choices[0].token_ids[0] != ref[0]
    forced = client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=3, temperature=0.8, logit_bias={"42": 100},
                                            extra_body={"ignore_eos": True})
    assert forced.choices[0].message.content is not None
    plain = client.completions.create(model=server.model, prompt=PROMPTS[0], max_tokens=4, temperature=0,
                                      logit_bias={"42": 100}, extra_body={"ignore_eos": True, "return_token_ids": True})
    assert plain.choices[0].token_ids == [42] * 4


def test_vllm_sampling_extensions_match_the_python_api(client, server, llm):
    """repetition_penalty, min_p and min_tokens (vLLM's extra_body fields) mean over HTTP what they mean
    in SamplingParams; continuous_usage_stats puts running counts in every stream chunk."""
    eos = llm.engine.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    extra = {"repetition_penalty": 1.5, "min_p": 0.2, "min_tokens": 4, "logit_bias": {str(eos): 100},
             "return_token_ids": True}
    ref = llm.generate([PROMPTS[2]], SamplingParams(temperature=0, max_tokens=10, repetition_penalty=1.5, min_p=0.2,
                                                    min_tokens=4, logit_bias={eos: 100}))[0]
    assert ref.token_ids[-1] == eos and len(ref.token_ids) == 5  # eos forced, held back for 4 tokens
    got = client.completions.create(model=server.model, prompt=PROMPTS[2], max_tokens=10, temperature=0, extra_body=extra)
    assert got.choices[0].token_ids == ref.token_ids and got.choices[0].finish_reason == "stop"
    stream = client.completions.create(model=server.model, prompt=PROMPTS[2], max_tokens=10, temperature=0, stream=True,
                                       stream_options={"include_usage": True, "continuous_usage_stats": True},
                                       extra_body=extra)
    counts = [(c.usage.completion_tokens, len(c.choices)) for c in stream]
    assert counts[-1] == (5, 0) and counts[-2][0] == 5  # the closing usage chunk, and the last choice chunk's count
    assert [n for n, _ in counts] == sorted(n for n, _ in counts)


def test_chat_logprobs(client, server):
    resp = client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                          temperature=0, logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    content = resp.choices[0].logprobs.content
    assert len(content) == 3 and all(len(e.top_logprobs) == 2 for e in content)


def test_metrics_expose_the_documented_series(server):
    text = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
    for name in ("moeserve_requests_total{finish_reason=\"length\"}", "moeserve_time_to_first_token_seconds_bucket",
                 "moeserve_time_per_output_token_seconds_bucket", "moeserve_e2e_request_latency_seconds_bucket",
                 "moeserve_num_requests_running", "moeserve_num_requests_waiting", "moeserve_kv_cache_blocks_used",
                 "moeserve_kv_cache_blocks_free", "moeserve_prefix_cache_hit_rate", "moeserve_prompt_tokens_total",
                 "moeserve_generation_tokens_total", "moeserve_engine_healthy 1.0"):
        assert name in text, name



def test_metrics_under_vllm_names_follow_their_moeserve_twins(client, server):
    """A vLLM dashboard's series are on /metrics of the real server, labelled with the served model
    name, and equal to their moeserve twins in the same scrape (engine numbers included)."""
    from prometheus_client.parser import text_string_to_metric_families

    client.completions.create(model=server.model, prompt=PROMPTS[0], max_tokens=4, temperature=0)
    r = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"})
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for family in text_string_to_metric_families(r.text) for s in family.samples}
    labels = (("engine", "0"), ("model_name", server.model))
    for ours, theirs in (("moeserve_num_requests_running", "vllm:num_requests_running"),
                         ("moeserve_num_requests_waiting", "vllm:num_requests_waiting"),
                         ("moeserve_kv_cache_usage", "vllm:kv_cache_usage_perc"),
                         ("moeserve_kv_cache_usage", "vllm:gpu_cache_usage_perc"),
                         ("moeserve_prefix_cache_query_tokens_total", "vllm:prefix_cache_queries_total"),
                         ("moeserve_prefix_cache_hit_tokens_total", "vllm:prefix_cache_hits_total"),
                         ("moeserve_preemptions_total", "vllm:num_preemptions_total"),
                         ("moeserve_prompt_tokens_prefilled_total", "vllm:prompt_tokens_total"),
                         ("moeserve_generation_tokens_total", "vllm:generation_tokens_total"),
                         ("moeserve_time_to_first_token_seconds_count", "vllm:time_to_first_token_seconds_count"),
                         ("moeserve_e2e_request_latency_seconds_count", "vllm:e2e_request_latency_seconds_count"),
                         ("moeserve_inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_sum"),
                         ("moeserve_time_per_output_token_seconds_sum", "vllm:request_time_per_output_token_seconds_sum")):
        assert values[(theirs, labels)] == values[(ours, ())], theirs
    length = (("engine", "0"), ("finished_reason", "length"), ("model_name", server.model))
    assert values[("vllm:request_success_total", length)] == values[("moeserve_requests_total", (("finish_reason", "length"),))] >= 1
    assert values[("vllm:generation_tokens_total", labels)] >= 4
    assert httpx.get(server.url + "/metrics").status_code == 401  # --api-key guards it as before
