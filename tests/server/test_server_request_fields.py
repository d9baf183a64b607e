"""Request fields whose meaning comes from OpenAI's spec or vLLM: nullable fields, the chat template
switches, text parts, and logprobs JSON can carry."""
from __future__ import annotations

import json
import math

import httpx
import pytest
from server_settings import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}"}
C, CHAT = "/v1/completions", "/v1/chat/completions"


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=120)


def test_null_means_the_default_for_nullable_openai_fields(server):
    """OpenAI types n, stream, echo and (chat) logprobs as 'X or null'; some SDKs send every unset field."""
    base = {"prompt": "Hello", "max_tokens": 4, "temperature": 0}
    plain = post(server, C, base)
    nulls = post(server, C, dict(base, n=None, stream=None, echo=None, logprobs=None))
    assert nulls.status_code == 200, nulls.text
    assert nulls.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"]
    assert len(nulls.json()["choices"]) == 1 and nulls.json()["choices"][0]["logprobs"] is None
    chat = post(server, CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "n": None,
                               "logprobs": None, "stream": None})
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["logprobs"] is None


def test_whole_floats_count_as_integers(server):
    """JSON has one number type: 4.0 is 4 (vLLM accepts it too); 2.5 stays a 400 (the bad-request table)."""
    base = {"prompt": "Hello", "max_tokens": 4, "temperature": 0, "logprobs": 1, "n": 1, "seed": 7}
    ints = post(server, C, base)
    floats = post(server, C, dict(base, max_tokens=4.0, logprobs=1.0, n=1.0, seed=7.0))
    assert floats.status_code == 200, floats.text
    assert floats.json()["choices"] == ints.json()["choices"]
    assert floats.json()["usage"]["completion_tokens"] == 4
    chat = post(server, CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2.0,
                               "logprobs": True, "top_logprobs": 2.0})
    assert chat.status_code == 200, chat.text
    assert len(chat.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 2


# vLLM's extensions are Optional[bool] there: null is their default, as for OpenAI's nullable fields
_NULLABLE_EXTENSIONS = ("return_token_ids", "ignore_eos", "skip_special_tokens", "include_stop_str_in_output")


@pytest.mark.parametrize("stream", [False, True])
def test_null_means_the_default_for_vllm_extensions(server, stream):
    base = {"prompt": "Hello", "max_tokens": 4, "temperature": 0, "stream": stream}
    if stream:
        base["stream_options"] = {"include_usage": True}
    nulls = dict(base, **dict.fromkeys(_NULLABLE_EXTENSIONS), seed=None, max_tokens=4)
    if stream:
        nulls["stream_options"] = {"include_usage": None, "continuous_usage_stats": None}
    plain, with_nulls = post(server, C, base), post(server, C, nulls)
    assert with_nulls.status_code == 200, with_nulls.text
    if stream:  # include_usage: null is false, so no usage chunk and no usage key
        events = [json.loads(line[6:]) for line in with_nulls.text.splitlines() if line.startswith("data: {")]
        assert all("usage" not in e and "token_ids" not in e["choices"][0] for e in events)
        text = "".join(e["choices"][0]["text"] for e in events)
        assert text == "".join(json.loads(line[6:])["choices"][0]["text"] for line in plain.text.splitlines()
                               if line.startswith("data: {") and json.loads(line[6:])["choices"])
    else:
        assert with_nulls.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"]
        assert "token_ids" not in with_nulls.json()["choices"][0]
    msgs = [{"role": "user", "content": "Tell me"}, {"role": "assistant", "content": "Once upon"}]
    chat_nulls = {"add_generation_prompt": None, "continue_final_message": None, **dict.fromkeys(_NULLABLE_EXTENSIONS)}
    chat = post(server, CHAT, {"messages": msgs, "max_tokens": 2, "temperature": 0, "stream": stream, **chat_nulls})
    assert chat.status_code == 200, chat.text
    assert _prompt_ids(server, {"messages": msgs, "add_generation_prompt": None, "continue_final_message": None}) == \
        _prompt_ids(server, {"messages": msgs})


@pytest.mark.parametrize("seed", [-(2**63), -1, 0, 2**63 - 1, 2**63, 2**64 - 1])
def test_seeds_cover_signed_and_unsigned_64_bits(server, seed):
    """Any seed in [-2^63, 2^64) is served and reproducible, n > 1 included (choice i samples with
    (seed + i) mod 2^63, so the choices of 2^64 - 1 wrap around to 0)."""
    body = {"prompt": "Once upon a time", "max_tokens": 6, "temperature": 1.0, "ignore_eos": True, "seed": seed, "n": 2,
            "return_token_ids": True}
    first, again = post(server, C, body), post(server, C, body)
    assert first.status_code == 200, first.text
    ids = [c["token_ids"] for c in sorted(first.json()["choices"], key=lambda c: c["index"])]
    assert ids == [c["token_ids"] for c in sorted(again.json()["choices"], key=lambda c: c["index"])]


def test_a_negative_seed_samples_as_its_unsigned_twos_complement(server):
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0, "ignore_eos": True, "return_token_ids": True}
    ids = {seed: post(server, C, dict(body, seed=seed)).json()["choices"][0]["token_ids"] for seed in (-1, 2**64 - 1, 7)}
    assert ids[-1] == ids[2**64 - 1] != ids[7]


def test_engine_seeds_stay_in_the_signed_64_bit_range():
    from moeserve.sampling_params import engine_seed

    for seed in (-(2**63), -1, 0, 2**63 - 1, 2**63, 2**64 - 1):
        for index in (0, 1, 127):
            assert 0 <= engine_seed(seed, index) < 2**63
    assert engine_seed(2**64 - 1, 1) == 0 and engine_seed(-1, 0) == engine_seed(2**64 - 1, 0) == 2**63 - 1


def _prompt_ids(server, body: dict) -> list[int]:
    r = post(server, CHAT, dict(body, max_tokens=1, return_token_ids=True))
    assert r.status_code == 200, r.text
    return r.json()["prompt_token_ids"]  # a chat: at the top level, as vLLM's


def test_chat_template_switches_follow_vllm(server, llm):
    tok = llm.tokenizer
    msgs = [{"role": "user", "content": "Tell me"}, {"role": "assistant", "content": "Once upon"}]

    def rendered(**kw) -> list[int]:
        from moeserve.engine.builtin_model import CHAT_TEMPLATE

        text = tok.apply_chat_template(msgs, chat_template=tok.chat_template or CHAT_TEMPLATE, tokenize=False, **kw)
        return tok.encode(text, add_special_tokens=False)

    opened = _prompt_ids(server, {"messages": msgs})
    closed = _prompt_ids(server, {"messages": msgs, "add_generation_prompt": False})
    continued = _prompt_ids(server, {"messages": msgs, "add_generation_prompt": False, "continue_final_message": True})
    assert opened == rendered(add_generation_prompt=True)
    assert closed == rendered(add_generation_prompt=False)
    assert continued == rendered(add_generation_prompt=False, continue_final_message=True)
    assert continued != closed and tok.decode(continued).rstrip().endswith("Once upon")
    tokenized = post(server, "/tokenize", {"messages": msgs, "add_generation_prompt": False, "continue_final_message": True})
    assert tokenized.json()["tokens"] == continued


def test_text_parts_join_with_newlines(server):
    """vLLM joins a message's text parts with newlines: the same prompt as the joined string."""
    parts = [{"type": "text", "text": "first line"}, {"type": "text", "text": "second line"}]
    as_parts = _prompt_ids(server, {"messages": [{"role": "user", "content": parts}]})
    as_text = _prompt_ids(server, {"messages": [{"role": "user", "content": "first line\nsecond line"}]})
    assert as_parts == as_text


@pytest.mark.parametrize("stream", [False, True])
def test_logprobs_stay_valid_json_when_every_token_is_a_stop_id(server, llm, stream):
    """min_tokens with stop ids covering the vocabulary: nothing is masked into an all -inf row, and
    every logprob in the response is a finite JSON number (NaN and -inf are not JSON)."""
    vocab = len(llm.tokenizer)
    body = {"prompt": "The cat", "max_tokens": 3, "temperature": 0, "min_tokens": 2, "ignore_eos": True,
            "stop_token_ids": list(range(vocab)), "logprobs": 1, "stream": stream}
    r = post(server, C, body)
    assert r.status_code == 200, r.text
    if stream:
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        values = [v for e in events for c in e["choices"] for v in c["logprobs"]["token_logprobs"]]
    else:
        values = r.json()["choices"][0]["logprobs"]["token_logprobs"]
    assert values and all(math.isfinite(v) for v in values)


def test_assistant_refusal_parts_read_as_their_text(server):
    """OpenAI's schema allows `refusal` parts on assistant messages (vLLM reads them as text): the prompt
    is the one with the refusal's text as that part's text. Other roles get a 400 (bad-requests table)."""
    user = {"role": "user", "content": "Tell me"}
    refused = [{"type": "text", "text": "I am sorry."}, {"type": "refusal", "refusal": "I cannot help with that."}]
    as_parts = _prompt_ids(server, {"messages": [user, {"role": "assistant", "content": refused}]})
    as_text = _prompt_ids(server, {"messages": [user, {"role": "assistant",
                                                       "content": "I am sorry.\nI cannot help with that."}]})
    assert as_parts == as_text
    tokenized = post(server, "/tokenize", {"messages": [user, {"role": "assistant", "content": refused}]})
    assert tokenized.status_code == 200 and tokenized.json()["tokens"] == as_text, tokenized.text


def _stream_deltas(server, body: dict) -> list[dict]:
    r = post(server, CHAT, dict(body, stream=True))
    assert r.status_code == 200, r.text
    return [json.loads(line[6:])["choices"][0]["delta"] for line in r.text.splitlines()
            if line.startswith("data: {") and json.loads(line[6:])["choices"]]


def test_chat_echo_prefixes_the_continued_assistant_message(server):
    """vLLM's chat `echo`: the content starts with the last message's when that message is the
    assistant's (the turn being continued); streamed, the echo is the first content delta."""
    msgs = [{"role": "user", "content": "Tell me a story"}, {"role": "assistant", "content": "Once upon"}]
    body = {"messages": msgs, "add_generation_prompt": False, "continue_final_message": True, "max_tokens": 6,
            "temperature": 0, "ignore_eos": True}
    plain = post(server, CHAT, body).json()["choices"][0]["message"]["content"]
    echoed = post(server, CHAT, dict(body, echo=True))
    assert echoed.status_code == 200, echoed.text
    assert echoed.json()["choices"][0]["message"]["content"] == "Once upon" + plain
    assert echoed.json()["usage"]["completion_tokens"] == 6  # the echo is not generated
    deltas = _stream_deltas(server, dict(body, echo=True))
    assert deltas[0] == {"role": "assistant", "content": ""} and deltas[1] == {"content": "Once upon"}
    assert "".join(d.get("content", "") for d in deltas) == "Once upon" + plain
    # the last message is the user's: nothing to echo
    user_last = dict(body, messages=msgs[:1], add_generation_prompt=True, continue_final_message=False)
    no_echo = post(server, CHAT, user_last).json()["choices"][0]["message"]["content"]
    assert post(server, CHAT, dict(user_last, echo=True)).json()["choices"][0]["message"]["content"] == no_echo
    assert "".join(d.get("content", "") for d in _stream_deltas(server, dict(user_last, echo=True))) == no_echo


def test_truncate_prompt_tokens_keeps_the_last_tokens(server):
    """vLLM's truncate_prompt_tokens: the prompt's last k tokens are served, as if only they were sent."""
    prompt = [101, 102, 103, 104, 105, 106]
    body = {"max_tokens": 4, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    cut = post(server, C, dict(body, prompt=prompt, truncate_prompt_tokens=2))
    assert cut.status_code == 200, cut.text
    assert cut.json()["usage"]["prompt_tokens"] == 2
    assert cut.json()["choices"][0]["prompt_token_ids"] == prompt[-2:]
    alone = post(server, C, dict(body, prompt=prompt[-2:]))
    assert cut.json()["choices"][0]["token_ids"] == alone.json()["choices"][0]["token_ids"]
    whole = post(server, C, dict(body, prompt=prompt, truncate_prompt_tokens=-1))  # -1: the model's context
    assert whole.json()["usage"]["prompt_tokens"] == len(prompt)
    chat = post(server, CHAT, {"messages": [{"role": "user", "content": "a long enough question"}], "max_tokens": 1,
                               "truncate_prompt_tokens": 3, "return_token_ids": True})
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["prompt_tokens"] == 3


def test_chat_template_kwargs_add_variables_but_not_the_template(server):
    msgs = [{"role": "user", "content": "hi"}]
    same = post(server, CHAT, {"messages": msgs, "max_tokens": 1, "chat_template_kwargs": {"enable_thinking": False},
                               "chat_template": None, "return_token_ids": True})
    assert same.status_code == 200, same.text
    assert same.json()["prompt_token_ids"] == _prompt_ids(server, {"messages": msgs})
    moved = post(server, CHAT, {"messages": msgs, "max_tokens": 1, "chat_template_kwargs": {"add_generation_prompt": False}})
    assert moved.status_code == 400 and "request field" in moved.json()["error"]["message"]


def test_tool_history_reaches_the_template(server):
    """A history's tool calls and results are not dropped: a template that renders them gets them (the
    built-in one shows content only, so the check renders with a template that prints every field)."""
    from types import SimpleNamespace

    from moeserve.engine.builtin_model import build_tokenizer
    from moeserve.server.chat import render_messages
    from moeserve.server.config_file import ServerConfig
    from moeserve.server.protocol import ChatCompletionRequest, validate

    tok = build_tokenizer()
    tok.chat_template = ("{% for m in messages %}<{{ m.role }}|{{ m.name or '' }}|{{ m.tool_call_id or '' }}|"
                         "{{ (m.tool_calls or []) | map(attribute='function') | map(attribute='name') | join(',') }}>"
                         "{{ m.content }}{% endfor %}[{{ flavour }}]{% for d in documents or [] %}({{ d.title }}){% endfor %}")
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    req = validate(ChatCompletionRequest, {
        "messages": [{"role": "user", "content": "q", "name": "ann"},
                     {"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "content": "42", "tool_call_id": "c1"}],
        "chat_template_kwargs": {"flavour": "plain"}, "documents": [{"title": "doc1", "text": "t"}],
        "add_generation_prompt": False})
    text = tok.decode(render_messages(SimpleNamespace(tokenizer=tok, config=ServerConfig()), req))
    assert text == "<user|ann||>q<assistant|||lookup><tool||c1|>42[plain](doc1)"


def test_add_special_tokens_reaches_the_tokenizer():
    """vLLM's defaults: completions' text prompts get the tokenizer's special tokens, a rendered chat not."""
    from types import SimpleNamespace

    from moeserve.engine.builtin_model import build_tokenizer
    from moeserve.server.chat import render_messages
    from moeserve.server.completions import _prompts
    from moeserve.server.config_file import ServerConfig
    from moeserve.server.protocol import ChatCompletionRequest, validate

    tok = build_tokenizer()
    seen = []
    encode = tok.encode

    def recording(text, add_special_tokens=True):
        seen.append(add_special_tokens)
        return encode(text, add_special_tokens=add_special_tokens)

    tok.encode = recording
    state = SimpleNamespace(tokenizer=tok, vocab_size=len(tok), config=ServerConfig())
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    render_messages(state, validate(ChatCompletionRequest, chat))
    render_messages(state, validate(ChatCompletionRequest, dict(chat, add_special_tokens=True)))
    _prompts(state, "hello")
    _prompts(state, "hello", False)
    assert seen == [False, True, True, False]


def test_seed_out_of_range_names_its_bounds(server):
    r = post(server, C, {"prompt": "hi", "max_tokens": 1, "seed": 2**64})
    assert r.status_code == 400 and r.json()["error"]["param"] == "seed"
    assert "2**64 - 1" in r.json()["error"]["message"] and "18446744073709552000" not in r.json()["error"]["message"]


def test_stop_messages_say_what_is_wrong(server):
    empty = post(server, C, {"prompt": "hi", "max_tokens": 1, "stop": ["a", ""]})
    many = post(server, C, {"prompt": "hi", "max_tokens": 1, "stop": [f"s{i}" for i in range(17)]})
    assert "empty string" in empty.json()["error"]["message"]
    assert "at most 16" in many.json()["error"]["message"] and "got 17" in many.json()["error"]["message"]
