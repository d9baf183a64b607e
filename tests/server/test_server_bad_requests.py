"""A table of bad requests: each gets the right status and the OpenAI error shape, leaks nothing,
and a good request streaming at the same time finishes correctly."""
from __future__ import annotations

import json
import re
import threading

import httpx
import pytest
from server_settings import API_KEY

from moeserve import SamplingParams

AUTH = {"Authorization": f"Bearer {API_KEY}"}
C, CHAT = "/v1/completions", "/v1/chat/completions"
OK_CHAT = [{"role": "user", "content": "hi"}]


def js(**body) -> bytes:
    return json.dumps(body).encode()


# (name, method, path, body bytes, extra headers, status, param)
CASES = [
    ("malformed json", "POST", C, b'{"prompt": "hi", ', {}, 400, None),
    ("non-utf8 body", "POST", C, b'{"prompt": "\xff\xfe"}', {}, 400, None),
    ("body is a list", "POST", C, b'["hi"]', {}, 400, None),
    ("lone surrogate escape", "POST", C, b'{"prompt": "\\ud800 hi"}', {}, 400, None),
    ("NaN literal", "POST", C, b'{"prompt": "hi", "temperature": NaN}', {}, 400, None),
    ("deep nesting", "POST", C, b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}", {}, 400, None),
    ("missing prompt", "POST", C, js(max_tokens=3), {}, 400, "prompt"),
    ("empty prompt", "POST", C, js(prompt=""), {}, 400, "prompt"),
    ("empty prompt list", "POST", C, js(prompt=[]), {}, 400, "prompt"),
    ("empty token list", "POST", C, js(prompt=[[]]), {}, 400, "prompt"),
    ("prompt is a number", "POST", C, js(prompt=123), {}, 400, "prompt"),
    ("mixed prompt list", "POST", C, js(prompt=[1, "a"]), {}, 400, "prompt"),
    ("token id too large", "POST", C, js(prompt=[1, 99999999]), {}, 400, "prompt"),
    ("negative token id", "POST", C, js(prompt=[-1, 5]), {}, 400, "prompt"),
    ("max_tokens 0", "POST", C, js(prompt="hi", max_tokens=0), {}, 400, "max_tokens"),
    ("max_tokens negative", "POST", C, js(prompt="hi", max_tokens=-5), {}, 400, "max_tokens"),
    ("max_tokens string", "POST", C, js(prompt="hi", max_tokens="10"), {}, 400, "max_tokens"),
    ("max_tokens bool", "POST", C, js(prompt="hi", max_tokens=True), {}, 400, "max_tokens"),
    ("max_tokens 2.5", "POST", C, js(prompt="hi", max_tokens=2.5), {}, 400, "max_tokens"),
    ("n 1.5", "POST", C, js(prompt="hi", n=1.5), {}, 400, "n"),
    ("max_tokens 1e30", "POST", C, js(prompt="hi", max_tokens=10**30), {}, 400, "max_tokens"),
    ("prompt + max_tokens > max_model_len", "POST", C, js(prompt="hi", max_tokens=300), {}, 400, "max_tokens"),
    ("prompt alone > max_model_len", "POST", C, js(prompt=[5] * 300, max_tokens=1), {}, 400, "prompt"),
    ("prompt alone > max_model_len, default max_tokens", "POST", C, js(prompt=[5] * 300), {}, 400, "prompt"),
    ("temperature 5", "POST", C, js(prompt="hi", temperature=5), {}, 400, "temperature"),
    ("temperature string", "POST", C, js(prompt="hi", temperature="hot"), {}, 400, "temperature"),
    ("top_p 0", "POST", C, js(prompt="hi", top_p=0), {}, 400, "top_p"),
    ("top_p 1.5", "POST", C, js(prompt="hi", top_p=1.5), {}, 400, "top_p"),
    ("top_k -5", "POST", C, js(prompt="hi", top_k=-5), {}, 400, "top_k"),
    ("n 0", "POST", C, js(prompt="hi", n=0), {}, 400, "n"),
    ("n 1000", "POST", C, js(prompt="hi", n=1000), {}, 400, "n"),
    ("n 2000", "POST", C, js(prompt="hi", n=2000), {}, 400, "n"),
    ("prompts x n above the choice limit", "POST", C, js(prompt=["hi"] * 9, n=128), {}, 400, "n"),
    ("logprobs 50", "POST", C, js(prompt="hi", logprobs=50), {}, 400, "logprobs"),
    ("presence_penalty 3", "POST", C, js(prompt="hi", presence_penalty=3), {}, 400, "presence_penalty"),
    ("frequency_penalty -3", "POST", C, js(prompt="hi", frequency_penalty=-3.0), {}, 400, "frequency_penalty"),
    ("stop is a number", "POST", C, js(prompt="hi", stop=5), {}, 400, "stop"),
    ("17 stop strings", "POST", C, js(prompt="hi", stop=[f"s{i}" for i in range(17)]), {}, 400, "stop"),
    ("stop_token_ids beyond 64 bits", "POST", C, js(prompt="hi", stop_token_ids=[10**30]), {}, 400, "stop_token_ids"),
    ("empty stop string", "POST", C, js(prompt="hi", stop=[""]), {}, 400, "stop"),
    ("truncate_prompt_tokens 0", "POST", C, js(prompt="hi", truncate_prompt_tokens=0), {}, 400, "truncate_prompt_tokens"),
    ("truncate_prompt_tokens past the context", "POST", CHAT, js(messages=OK_CHAT, truncate_prompt_tokens=10**6), {}, 400,
     "truncate_prompt_tokens"),
    ("a chat template sent with the request", "POST", CHAT, js(messages=OK_CHAT, chat_template="{{ 1 }}"), {}, 400,
     "chat_template"),
    ("a chat template sent to /tokenize", "POST", "/tokenize", js(messages=OK_CHAT, chat_template="{{ 1 }}"), {}, 400,
     "chat_template"),
    ("logits_processors", "POST", C, js(prompt="hi", logits_processors=["my.module:Proc"]), {}, 400, "logits_processors"),
    ("prompt_embeds", "POST", C, js(prompt="hi", prompt_embeds="AAAA"), {}, 400, "prompt_embeds"),
    ("chat_template_kwargs sets a call argument", "POST", CHAT, js(messages=OK_CHAT, chat_template_kwargs={"tokenize": True}),
     {}, 400, "chat_template_kwargs"),
    ("stop is the empty string", "POST", C, js(prompt="hi", stop=""), {}, 400, "stop"),
    ("chat stop is the empty string", "POST", CHAT, js(messages=OK_CHAT, stop=""), {}, 400, "stop"),
    ("chat stop list with an empty string", "POST", CHAT, js(messages=OK_CHAT, stop=["x", ""]), {}, 400, "stop"),
    ("seed beyond 64 bits", "POST", C, js(prompt="hi", seed=-(2**64)), {}, 400, "seed"),
    ("seed below the signed 64-bit range", "POST", C, js(prompt="hi", seed=-(2**63) - 1), {}, 400, "seed"),
    ("seed beyond the unsigned 64-bit range", "POST", C, js(prompt="hi", seed=2**64), {}, 400, "seed"),
    ("stream_options.include_usage a string", "POST", C, js(prompt="hi", stream=True, stream_options={"include_usage": "y"}),
     {}, 400, "stream_options.include_usage"),
    ("seed string", "POST", C, js(prompt="hi", seed="x"), {}, 400, "seed"),
    ("stream string", "POST", C, js(prompt="hi", stream="yes"), {}, 400, "stream"),
    ("stream_options wrong type", "POST", C, js(prompt="hi", stream=True, stream_options=3), {}, 400, "stream_options"),
    ("logit_bias value above 100", "POST", C, js(prompt="hi", logit_bias={"5": 500}), {}, 400, "logit_bias"),
    ("logit_bias key not a token id", "POST", C, js(prompt="hi", logit_bias={"abc": 5}), {}, 400, "logit_bias"),
    ("logit_bias id beyond the vocabulary", "POST", C, js(prompt="hi", logit_bias={str(10**6): 5}), {}, 400, "logit_bias"),
    ("logit_bias value a string", "POST", CHAT, js(messages=OK_CHAT, logit_bias={"5": "x"}), {}, 400, "logit_bias"),
    ("echo with logprobs 21", "POST", C, js(prompt="hi", echo=True, logprobs=21), {}, 400, "logprobs"),
    ("max_tokens 0 with echo and n 0", "POST", C, js(prompt="hi", echo=True, max_tokens=0, n=0), {}, 400, "n"),
    ("best_of > n", "POST", C, js(prompt="hi", best_of=3), {}, 400, "best_of"),
    ("unknown model", "POST", C, js(model="gpt-17", prompt="hi"), {}, 404, "model"),
    ("chat no messages", "POST", CHAT, js(max_tokens=3), {}, 400, "messages"),
    ("chat empty messages", "POST", CHAT, js(messages=[]), {}, 400, "messages"),
    ("chat bad role", "POST", CHAT, js(messages=[{"role": "wizard", "content": "hi"}]), {}, 400, "messages.0.role"),
    ("chat content number", "POST", CHAT, js(messages=[{"role": "user", "content": 5}]), {}, 400, "messages.0.content"),
    ("chat part without a type", "POST", CHAT, js(messages=[{"role": "user", "content": [{"text": "hi"}]}]), {}, 400,
     "messages.0.content.0.type"),
    ("chat text part with a number", "POST", CHAT,
     js(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": 5}]}]), {}, 400,
     "messages.0.content.1.text"),
    ("chat text part without text", "POST", CHAT, js(messages=[{"role": "user", "content": [{"type": "text"}]}]), {},
     400, "messages.0.content.0.text"),
    ("chat refusal part on a user message", "POST", CHAT,
     js(messages=[{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]), {}, 400,
     "messages.0.content.0.type"),
    ("chat refusal part without its refusal", "POST", CHAT,
     js(messages=OK_CHAT + [{"role": "assistant", "content": [{"type": "refusal"}]}]), {}, 400,
     "messages.1.content.0.refusal"),
    ("chat message not object", "POST", CHAT, js(messages=["hi"]), {}, 400, "messages"),
    ("chat tool without its function", "POST", CHAT, js(messages=OK_CHAT, tools=[{"type": "function"}]), {}, 400,
     "tools.0.function"),
    ("chat tool name with a space", "POST", CHAT,
     js(messages=OK_CHAT, tools=[{"type": "function", "function": {"name": "get weather"}}], tool_choice="none"), {}, 400,
     "tools.0.function.name"),
    ("chat tool parameters not an object schema, tool_choice none", "POST", CHAT,
     js(messages=OK_CHAT, tool_choice="none", tools=[{"type": "function", "function": {"name": "f", "parameters": {
         "type": "string"}}}]), {}, 400, "tools.0.function.parameters"),
    ("chat json_schema name with a dot", "POST", CHAT,
     js(messages=OK_CHAT, response_format={"type": "json_schema", "json_schema": {"name": "a.b", "schema": {}}}), {}, 400,
     "response_format.json_schema.name"),
    ("chat tool_choice auto without a parser", "POST", CHAT,
     js(messages=OK_CHAT, tools=[{"type": "function", "function": {"name": "f"}}]), {}, 400, "tool_choice"),
    ("chat user turn without content", "POST", CHAT, js(messages=[{"role": "user"}]), {}, 400, "messages.0.content"),
    ("chat top_logprobs 21", "POST", CHAT, js(messages=OK_CHAT, logprobs=True, top_logprobs=21), {}, 400, "top_logprobs"),
    ("chat top_logprobs without logprobs", "POST", CHAT, js(messages=OK_CHAT, top_logprobs=2), {}, 400, "top_logprobs"),
    ("chat response_format of no such type", "POST", CHAT, js(messages=OK_CHAT, response_format={"type": "yaml"}), {}, 400,
     "response_format.type"),
    ("chat max_tokens too big", "POST", CHAT, js(messages=OK_CHAT, max_tokens=10**6), {}, 400, "max_tokens"),
    ("repetition_penalty 0", "POST", C, js(prompt="hi", repetition_penalty=0), {}, 400, "repetition_penalty"),
    ("min_p above 1", "POST", C, js(prompt="hi", min_p=1.5), {}, 400, "min_p"),
    ("min_tokens above max_tokens", "POST", C, js(prompt="hi", min_tokens=10, max_tokens=2), {}, 400, "min_tokens"),
    ("completions json_schema without its schema object", "POST", C, js(prompt="hi", response_format={"type": "json_schema"}),
     {}, 400, "response_format.json_schema"),
    ("structured_outputs with two constraints", "POST", C, js(prompt="hi", structured_outputs={"regex": "a", "choice": ["b"]}),
     {}, 400, "structured_outputs"),
    # a colocated server (--kv-role both) moves no KV: vllm-router's parameters are refused, not ignored
    ("kv_transfer_params on a colocated server", "POST", C,
     js(prompt="hi", kv_transfer_params={"do_remote_decode": True, "do_remote_prefill": False}), {}, 400,
     "kv_transfer_params"),
    ("kv_transfer_params not an object", "POST", CHAT, js(messages=OK_CHAT, kv_transfer_params=[1]), {}, 400,
     "kv_transfer_params"),
    ("stream_options without stream", "POST", C, js(prompt="hi", stream_options={"include_usage": True}), {}, 400,
     "stream_options"),
    ("chat max_completion_tokens -1", "POST", CHAT, js(messages=OK_CHAT, max_completion_tokens=-1), {}, 400,
     "max_completion_tokens"),
    ("chat image part", "POST", CHAT,
     js(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]), {},
     400, "messages.0.content.0.type"),
    ("guided decoding", "POST", CHAT, js(messages=OK_CHAT, guided_json={"type": "object"}), {}, 400, "guided_json"),
    ("allowed_token_ids empty", "POST", C, js(prompt="hi", allowed_token_ids=[]), {}, 400, "allowed_token_ids"),
    ("allowed_token_ids outside the vocabulary", "POST", C, js(prompt="hi", allowed_token_ids=[10**6]), {}, 400,
     "allowed_token_ids"),
    ("allowed_token_ids with a structured output", "POST", C,
     js(prompt="hi", allowed_token_ids=[1], structured_outputs={"regex": "a+"}), {}, 400, "allowed_token_ids"),
    ("bad_words with an empty word", "POST", C, js(prompt="hi", bad_words=["x", ""]), {}, 400, "bad_words"),
    ("beam search", "POST", C, js(prompt="hi", use_beam_search=True), {}, 400, "use_beam_search"),
    ("prompt_logprobs -2", "POST", C, js(prompt="hi", prompt_logprobs=-2), {}, 400, "prompt_logprobs"),
    ("prompt_logprobs -1 (the vocabulary)", "POST", CHAT, js(messages=OK_CHAT, prompt_logprobs=-1), {}, 400,
     "prompt_logprobs"),
    ("prompt_logprobs 21", "POST", C, js(prompt="hi", prompt_logprobs=21), {}, 400, "prompt_logprobs"),
    ("prompt_logprobs string", "POST", C, js(prompt="hi", prompt_logprobs="2"), {}, 400, "prompt_logprobs"),
    ("prompt_logprobs with stream", "POST", CHAT, js(messages=OK_CHAT, prompt_logprobs=1, stream=True), {}, 400,
     "prompt_logprobs"),
    ("audio output", "POST", CHAT, js(messages=OK_CHAT, modalities=["text", "audio"]), {}, 400, "modalities"),
    ("legacy function calling", "POST", CHAT, js(messages=OK_CHAT, functions=[{"name": "f"}]), {}, 400, "functions"),
    ("stop_token_ids beyond the vocabulary", "POST", C, js(prompt="hi", stop_token_ids=[10**6]), {}, 400,
     "stop_token_ids"),
    ("logit_bias key beyond 64 bits", "POST", C, js(prompt="hi", logit_bias={str(2**64): 1}), {}, 400, "logit_bias"),
    ("logit_bias key with a leading zero", "POST", C, js(prompt="hi", logit_bias={"05": 1}), {}, 400, "logit_bias"),
    ("logit_bias key with a sign", "POST", C, js(prompt="hi", logit_bias={"+5": 1}), {}, 400, "logit_bias"),
    ("continue_final_message with add_generation_prompt", "POST", CHAT,
     js(messages=OK_CHAT, continue_final_message=True), {}, 400, "continue_final_message"),
    ("echo-only prompt filling the context", "POST", C, js(prompt=[5] * 256, echo=True, max_tokens=0, logprobs=0), {},
     400, "prompt"),
    ("number of 5000 digits", "POST", C, b'{"prompt": "hi", "seed": ' + b"9" * 5000 + b"}", {}, 400, None),
    ("body over the limit", "POST", C, js(prompt="a" * 70000), {}, 413, None),
    ("missing api key", "POST", C, js(prompt="hi"), {"Authorization": ""}, 401, None),
    ("wrong api key", "POST", C, js(prompt="hi"), {"Authorization": "Bearer sk-wrong"}, 401, None),
    ("key glued to Bearer", "POST", C, js(prompt="hi"), {"Authorization": f"Bearer{API_KEY}"}, 401, None),
    ("key followed by more text", "POST", C, js(prompt="hi"), {"Authorization": f"Bearer {API_KEY} x"}, 401, None),
    ("key without Bearer", "GET", "/v1/models", b"", {"Authorization": API_KEY}, 401, None),
    ("metrics without key", "GET", "/metrics", b"", {"Authorization": ""}, 401, None),
    ("trace start without --record-trace-dir", "POST", "/v1/trace/start", b"", {}, 400, None),
    ("unknown route", "GET", "/v1/nothing", b"", {}, 404, None),
    ("wrong method", "GET", C, b"", {}, 405, None),
]

_LEAKS = re.compile(r"Traceback|File \"|/work/|/tmp/|site-packages|0x[0-9a-fA-F]{6,}|\.py\b|sys\.")


def check_error(r: httpx.Response, status: int, param: str | None) -> None:
    assert r.status_code == status, r.text[:300]
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str)
    assert not _LEAKS.search(err["message"]), err["message"]
    if param is not None:
        assert err["param"] == param, err


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def test_table_has_at_least_20_kinds():
    assert len(CASES) >= 20


@pytest.mark.slow
def test_bad_requests_while_a_good_one_streams(server, http, llm):
    prompt = "A good request among bad ones"
    ref = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))[0]
    result: dict = {}

    def good() -> None:
        body = {"prompt": prompt, "max_tokens": 40, "temperature": 0, "stream": True, "ignore_eos": True,
                "return_token_ids": True}
        ids, text = [], ""
        with httpx.stream("POST", server.url + C, json=body, headers=AUTH, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    choice = json.loads(line[6:])["choices"][0]
                    ids += choice["token_ids"]
                    text += choice["text"]
                    result["finish"] = choice["finish_reason"] or result.get("finish")
        result.update(ids=ids, text=text)

    t = threading.Thread(target=good)
    t.start()
    failures = []
    for name, method, path, body, headers, status, param in CASES:
        r = http.request(method, path, content=body or None, headers={"Content-Type": "application/json", **AUTH, **headers})
        try:
            check_error(r, status, param)
        except AssertionError as e:
            failures.append(f"{name}: {e}")
    t.join(180)
    assert not failures, "\n".join(failures)
    assert result["ids"] == ref.token_ids and result["finish"] == "length"


def test_n_limits_name_the_limits_their_checks_use(http):
    """n's own range and prompts x n are two limits; each message states the one that refused."""
    def message(body: dict) -> str:
        r = http.post(C, json=body, headers=AUTH)
        check_error(r, 400, "n")
        return r.json()["error"]["message"]

    from moeserve.sampling_params import SamplingParamsError
    from moeserve.server.common import MAX_CHOICES

    with pytest.raises(SamplingParamsError) as own:
        SamplingParams(n=2000)
    assert message({"prompt": "hi", "n": 2000}) == str(own.value)
    too_wide = message({"prompt": ["hi"] * 9, "n": 128})
    assert str(MAX_CHOICES) in too_wide and "1152" in too_wide, too_wide


def test_wrong_method_names_the_allowed_ones(http):
    """A 405 keeps starlette's Allow header (RFC 9110 requires it), in the OpenAI error shape."""
    r = http.get(C, headers=AUTH)
    check_error(r, 405, None)
    assert r.headers["allow"] == "POST"
    r = http.post("/v1/models", headers=AUTH)
    check_error(r, 405, None)
    assert "GET" in r.headers["allow"] and "HEAD" in r.headers["allow"]


def test_head_is_answered_wherever_get_is(http):
    """RFC 9110 9.1: a general-purpose server supports HEAD; the head is GET's, without a body, and the
    API key still guards every route but /health."""
    for path in ("/health", "/version", "/v1/models", "/metrics"):
        got, head = http.get(path, headers=AUTH), http.head(path, headers=AUTH)
        assert head.status_code == got.status_code == 200 and head.content == b"", path
        assert head.headers["content-type"] == got.headers["content-type"], path
    assert http.head("/v1/models").status_code == 401 and http.head("/health").status_code == 200
    assert http.head("/v1/models/no-such-model", headers=AUTH).status_code == 404


def test_error_messages_quote_client_values_clipped(http):
    """A client's value quoted in a message (a model name, a part type, a logit_bias key) is cut to a
    few dozen characters: a 60 KB model name must not come back as a 60 KB message."""
    from moeserve.server.api_errors import MAX_ECHO_CHARS

    long = "m" * 60000
    bodies = [
        (C, 404, "model", {"model": long, "prompt": "hi"}),
        ("/tokenize", 404, "model", {"model": long, "prompt": "hi"}),
        (CHAT, 400, "messages.0.content.0.type", {"messages": [{"role": "user", "content": [{"type": long}]}]}),
        (C, 400, "logit_bias", {"prompt": "hi", "logit_bias": {long: "x"}}),
        (C, 400, "logit_bias", {"prompt": "hi", "logit_bias": {"9" * 4000: 1}}),
    ]
    for path, status, param, body in bodies:
        r = http.post(path, json=body, headers=AUTH)
        check_error(r, status, param)
        message = r.json()["error"]["message"]
        assert len(message) < 400 and "m" * MAX_ECHO_CHARS not in message and "9" * 400 not in message, message[:500]
    assert "'" + "m" * (MAX_ECHO_CHARS - 3) + "...'" in http.post(C, json=bodies[0][3], headers=AUTH).json()["error"]["message"]


def test_queue_full_and_retry_after_shape():
    from moeserve.errors import QueueFullError
    from moeserve.server.api_errors import from_request_error

    e = from_request_error(QueueFullError("the waiting queue is full", code="queue_full"))
    assert e.status == 429 and e.headers["Retry-After"] and e.body()["error"]["type"] == "rate_limit_error"


def test_health_needs_no_key(server):
    assert httpx.get(server.url + "/health").status_code == 200


def test_engine_failure_text_loses_paths_and_addresses():
    from moeserve.server.api_errors import public_reason, unavailable

    gloo = ("step 3 failed: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
            "Connection closed by peer [127.0.0.1]:22928, object at 0x7f8285520540 in /usr/lib/libx.so")
    cleaned = public_reason(gloo)
    assert "Connection closed by peer [127.0.0.1]:22928" in cleaned and "step 3 failed" in cleaned
    assert not _LEAKS.search(cleaned) and "pair.cc" not in cleaned and "libx" not in cleaned, cleaned
    assert public_reason("ids must lie in [0, 4096)") == "ids must lie in [0, 4096)"  # our own text is untouched
    assert len(unavailable("x" * 5000).message) <= 300
