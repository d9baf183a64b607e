"""/v1/completions fields whose meaning a differential check against vLLM 0.32 pinned down: what
vLLM does (read in its source and observed), encoded here without vLLM."""
from __future__ import annotations

import concurrent.futures
import json

import httpx
import pytest
from server_harness import ServerProcess
from server_settings import API_KEY, SERVER_ARGS

AUTH = {"Authorization": f"Bearer {API_KEY}"}
C, CHAT = "/v1/completions", "/v1/chat/completions"
MAX_MODEL_LEN = int(SERVER_ARGS[SERVER_ARGS.index("--max-model-len") + 1])


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=120)


def _events(r: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]


def test_null_max_tokens_is_the_default_16(server):
    """OpenAI's legacy completions and vLLM: max_tokens null is its default, 16, not the rest of the
    context (an SDK that sends every unset field as null would otherwise run to max_model_len)."""
    body = {"prompt": "Hello", "temperature": 0, "ignore_eos": True}
    null = post(server, C, dict(body, max_tokens=None))
    assert null.status_code == 200, null.text
    assert null.json()["usage"]["completion_tokens"] == 16
    assert null.json()["choices"][0]["text"] == post(server, C, body).json()["choices"][0]["text"]


def test_truncation_side_right_keeps_the_first_tokens(server):
    """vLLM's truncation_side: "right" cuts the end (keeps the first k tokens), "left" (the default) the start."""
    prompt = [101, 102, 103, 104, 105, 106]
    body = {"prompt": prompt, "max_tokens": 2, "temperature": 0, "return_token_ids": True, "truncate_prompt_tokens": 2}
    right = post(server, C, dict(body, truncation_side="right"))
    assert right.status_code == 200, right.text
    assert right.json()["choices"][0]["prompt_token_ids"] == prompt[:2]
    left = post(server, C, dict(body, truncation_side="left"))
    assert left.json()["choices"][0]["prompt_token_ids"] == prompt[-2:]
    bad = post(server, C, dict(body, truncation_side="middle"))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "truncation_side", bad.text


def test_truncate_minus_one_keeps_what_fits_with_max_tokens(server):
    """-1 keeps the prompt's tail that leaves room for max_tokens (a tail of max_model_len tokens, as
    before, left none: every prompt longer than the context was a 400); without max_tokens (chat),
    room for one token, as vLLM's -1 keeps max_model_len - 1."""
    prompt = [100 + i % 50 for i in range(MAX_MODEL_LEN + 40)]
    r = post(server, C, {"prompt": prompt, "max_tokens": 5, "truncate_prompt_tokens": -1, "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["usage"] == dict(r.json()["usage"], prompt_tokens=MAX_MODEL_LEN - 5, completion_tokens=5)
    text = " ".join(["word"] * (MAX_MODEL_LEN + 40))
    chat = post(server, CHAT, {"messages": [{"role": "user", "content": text}], "truncate_prompt_tokens": -1})
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["prompt_tokens"] == MAX_MODEL_LEN - 1


def test_stream_return_token_ids_sends_the_prompt_ids_first(server):
    """vLLM: with return_token_ids, each choice's first stream chunk carries its prompt_token_ids
    (the later ones only their new token_ids), as the non-streamed choice carries them."""
    prompts = [[101, 102, 103], [104, 105]]
    r = post(server, C, {"prompt": prompts, "max_tokens": 3, "n": 2, "temperature": 1, "seed": 1, "stream": True,
                         "return_token_ids": True, "ignore_eos": True})
    assert r.status_code == 200, r.text
    seen: dict[int, list] = {}
    for e in _events(r):
        c = e["choices"][0]
        seen.setdefault(c["index"], []).append(c)
    assert sorted(seen) == [0, 1, 2, 3]
    for index, chunks in seen.items():
        assert chunks[0]["prompt_token_ids"] == prompts[index // 2]
        assert all("prompt_token_ids" not in c for c in chunks[1:])
        assert sum(len(c["token_ids"]) for c in chunks) == 3


def test_logprob_token_ids_is_refused_not_ignored(server):
    """vLLM's logprob_token_ids asks for the logprobs of named tokens; ignored, the top alternatives
    would come back in their place."""
    r = post(server, C, {"prompt": "Hello", "max_tokens": 2, "logprobs": 2, "logprob_token_ids": [101, 102]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprob_token_ids", r.text
    assert post(server, C, {"prompt": "Hello", "max_tokens": 2, "logprob_token_ids": None}).status_code == 200


@pytest.mark.parametrize("stream", [False, True])
def test_allowed_token_ids_are_the_only_tokens_produced(server, stream):
    """vLLM's allowed_token_ids (it was refused): greedy or sampled, every token is one of them."""
    allowed = [101, 202, 303]
    for path, body in ((C, {"prompt": "Hello"}), (CHAT, {"messages": [{"role": "user", "content": "hi"}]})):
        r = post(server, path, dict(body, max_tokens=6, temperature=1, seed=3, ignore_eos=True, return_token_ids=True,
                                    allowed_token_ids=allowed, stream=stream))
        assert r.status_code == 200, r.text
        chunks = _events(r) if stream else [r.json()]
        ids = [t for e in chunks for c in e["choices"] for t in c.get("token_ids") or []]
        assert len(ids) == 6 and set(ids) <= set(allowed), ids


def _contains(ids: list[int], seq: list[int]) -> bool:
    return any(ids[i:i + len(seq)] == seq for i in range(len(ids) - len(seq) + 1))


def test_bad_words_keep_a_word_of_the_greedy_output_out(server):
    """vLLM's bad_words (it was refused): a word the greedy output holds is not produced again, as it
    starts the text nor after a space (its tokenizations as the engine bans them)."""
    body = {"prompt": "Hello", "max_tokens": 12, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    plain = post(server, C, body).json()["choices"][0]
    word = max(plain["text"].split(), key=len)
    seqs = [httpx.post(server.url + "/tokenize", headers=AUTH, json={"prompt": text, "add_special_tokens": False})
            .json()["tokens"] for text in (word, " " + word)]
    assert any(_contains(plain["token_ids"], seq) for seq in seqs), (word, seqs, plain["token_ids"])
    for path, extra in ((C, body), (CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12,
                                           "temperature": 0, "return_token_ids": True})):
        r = post(server, path, dict(extra, bad_words=[word]))
        assert r.status_code == 200, r.text
        ids = r.json()["choices"][0]["token_ids"]
        assert not any(_contains(ids, seq) for seq in seqs if len(seq) == len(seqs[0]) or seq is seqs[0]), (word, ids)
    assert post(server, C, dict(body, bad_words=[""])).json()["error"]["param"] == "bad_words"


@pytest.mark.parametrize("path,body,param", [
    (C, {"prompt": "hi", "logprobs": 21}, "logprobs"),
    (C, {"prompt": "hi", "logprobs": -1}, "logprobs"),
    (C, {"prompt": "hi", "prompt_logprobs": 21}, "prompt_logprobs"),
    (CHAT, {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
])
def test_default_max_logprobs_is_20(server, path, body, param):
    r = post(server, path, dict(body, max_tokens=1))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and "at most 20 (--max-logprobs)" in err["message"], err


@pytest.mark.slow
def test_max_logprobs_raises_the_bound_and_minus_one_is_the_vocabulary():
    """vLLM's --max-logprobs: a server started with 30 returns 30 alternatives (logprobs, top_logprobs,
    prompt_logprobs) and refuses 31; with -1 a request's -1 asks for the whole vocabulary."""
    with ServerProcess(*SERVER_ARGS, "--max-logprobs", "30") as srv:
        r = post(srv, C, {"prompt": "Hello", "max_tokens": 2, "logprobs": 30, "echo": True})
        assert r.status_code == 200, r.text
        top = r.json()["choices"][0]["logprobs"]["top_logprobs"]
        assert top[0] is None and all(len(t) >= 30 for t in top[1:])
        prompt = r.json()["choices"][0]["prompt_logprobs"]
        assert all(len(entry) >= 30 for entry in prompt[1:])
        chat = post(srv, CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "logprobs": True,
                                "top_logprobs": 30})
        assert len(chat.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 30
        over = post(srv, C, {"prompt": "Hello", "max_tokens": 1, "logprobs": 31})
        assert over.status_code == 400 and "at most 30" in over.json()["error"]["message"], over.text
        assert post(srv, C, {"prompt": "Hello", "max_tokens": 1, "logprobs": -1}).status_code == 400
    with ServerProcess(*SERVER_ARGS, "--max-logprobs", "-1") as srv:
        r = post(srv, C, {"prompt": "Hello", "max_tokens": 1, "logprobs": -1})
        assert r.status_code == 200, r.text
        top = r.json()["choices"][0]["logprobs"]["top_logprobs"][0]
        assert len(top) > 500  # keyed by text, so tokens that read alike share a key


def test_max_logprobs_is_a_config_key_with_vllms_default():
    from moeserve.config import EngineConfig, ModelConfig
    from moeserve.errors import ConfigError
    from moeserve.settings import ENGINE_KEYS, config_default

    assert config_default(ENGINE_KEYS["max_logprobs"]) == 20
    assert ModelConfig(max_logprobs=-1).max_logprobs_for(4096) == 4096
    with pytest.raises(ConfigError, match="--max-logprobs"):
        EngineConfig(model=ModelConfig(max_logprobs=-2)).validate()


def test_a_clients_request_id_names_the_response(server):
    """vLLM's: an X-Request-Id header (else the body's request_id) becomes the response's id after the
    endpoint's prefix, and the header comes back; streamed chunks carry the same id. Two requests with
    the same id run side by side as their own (the engine's ids stay the server's)."""
    body = {"prompt": "Hello", "max_tokens": 3, "temperature": 0}
    r = httpx.post(server.url + C, json=body, headers={**AUTH, "X-Request-Id": "trace-42"}, timeout=120)
    assert r.status_code == 200 and r.json()["id"] == "cmpl-trace-42" and r.headers["x-request-id"] == "trace-42"
    chat = post(server, CHAT, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "request_id": "b-7"})
    assert chat.json()["id"] == "chatcmpl-b-7" and chat.headers["x-request-id"] == "b-7", chat.text
    both = httpx.post(server.url + C, json=dict(body, request_id="body"), headers={**AUTH, "X-Request-Id": "head"},
                      timeout=120)
    assert both.json()["id"] == "cmpl-head"  # the header wins, as in vLLM
    stream = httpx.post(server.url + C, json=dict(body, stream=True, n=2), headers={**AUTH, "X-Request-Id": "s-1"},
                        timeout=120)
    assert stream.headers["x-request-id"] == "s-1"
    assert {e["id"] for e in _events(stream)} == {"cmpl-s-1"}
    plain = post(server, C, body)
    assert plain.json()["id"].startswith("cmpl-") and "x-request-id" not in plain.headers
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        same = list(pool.map(lambda p: httpx.post(server.url + C, json=dict(body, prompt=p, max_tokens=8, ignore_eos=True),
                                                  headers={**AUTH, "X-Request-Id": "dup"}, timeout=120),
                             ["one two", "three four five", "six", "seven eight"]))
    alone = [post(server, C, dict(body, prompt=p, max_tokens=8, ignore_eos=True)).json()["choices"][0]["text"]
             for p in ["one two", "three four five", "six", "seven eight"]]
    assert [s.json()["choices"][0]["text"] for s in same] == alone


@pytest.mark.parametrize("value", ["", "has space", "x" * 257, "caf\u00e9"])
def test_a_bad_request_id_is_a_400(server, value):
    r = post(server, C, {"prompt": "Hello", "max_tokens": 1, "request_id": value})
    assert r.status_code == 400 and r.json()["error"]["param"] == "request_id", r.text
