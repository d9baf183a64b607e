"""POST /tokenize and /detokenize (vLLM's extensions) on the real server: the ids they return are the
ids the generation endpoints serve for the same prompt or messages."""
from __future__ import annotations

import httpx
import pytest
from server_settings import API_KEY

from moeserve import SamplingParams

AUTH = {"Authorization": f"Bearer {API_KEY}"}
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=120)


def test_tokenize_prompt_gives_the_ids_completions_serves(server, llm):
    r = post(server, "/tokenize", {"model": server.model, "prompt": "The quick brown fox", "return_token_strs": True})
    assert r.status_code == 200, r.text
    body = r.json()
    ref = llm.generate(["The quick brown fox"], SamplingParams(max_tokens=1))[0]
    assert body["tokens"] == ref.prompt_token_ids
    assert body["count"] == len(ref.prompt_token_ids)
    assert body["max_model_len"] == 256
    assert len(body["token_strs"]) == body["count"] and all(isinstance(s, str) for s in body["token_strs"])
    assert post(server, "/tokenize", {"prompt": "The quick brown fox"}).json()["token_strs"] is None


def test_tokenize_messages_gives_the_ids_chat_serves(server):
    r = post(server, "/tokenize", {"model": server.model, "messages": MESSAGES})
    assert r.status_code == 200, r.text
    chat = post(server, "/v1/chat/completions", {"model": server.model, "messages": MESSAGES, "max_tokens": 1,
                                                 "return_token_ids": True})
    assert r.json()["tokens"] == chat.json()["prompt_token_ids"]
    without = post(server, "/tokenize", {"messages": MESSAGES, "add_generation_prompt": False}).json()
    assert without["count"] < r.json()["count"]
    assert r.json()["tokens"][: without["count"]] == without["tokens"]


def test_detokenize_inverts_tokenize(server):
    text = "Once upon a time there was"
    ids = post(server, "/tokenize", {"prompt": text, "add_special_tokens": False}).json()["tokens"]
    r = post(server, "/detokenize", {"model": server.model, "tokens": ids})
    assert r.status_code == 200, r.text
    assert r.json() == {"prompt": text}
    assert post(server, "/detokenize", {"tokens": []}).json() == {"prompt": ""}


@pytest.mark.parametrize("path, body, status, param", [
    ("/tokenize", {"prompt": "hi", "model": "other"}, 404, "model"),
    ("/tokenize", {"prompt": 5}, 400, "prompt"),
    ("/tokenize", {}, 400, "prompt"),
    ("/tokenize", {"messages": []}, 400, "messages"),
    ("/tokenize", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "messages.0.content.0.type"),
    ("/tokenize", {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}, 400, "messages.0.content.0.type"),
    ("/detokenize", {"tokens": [1, 10**9]}, 400, "tokens"),
    ("/detokenize", {"tokens": [-1]}, 400, "tokens"),
    ("/detokenize", {"tokens": "abc"}, 400, "tokens"),
])
def test_bad_tokenize_requests_get_openai_errors(server, path, body, status, param):
    r = post(server, path, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"] and err["type"]


def test_tokenize_refuses_prompt_shapes_it_does_not_take_by_naming_the_one_it_does(server):
    """/tokenize takes a text prompt only (as vLLM's): its message must not offer completions' shapes."""
    for prompt in ([1, 2], ["a", "b"], [[1, 2]]):
        r = post(server, "/tokenize", {"prompt": prompt})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text
        message = r.json()["error"]["message"]
        assert "must be a string" in message and "token id" not in message and "list" not in message, message


def test_tokenize_takes_null_for_its_defaulted_fields(server):
    plain = post(server, "/tokenize", {"prompt": "hi"}).json()
    nulls = post(server, "/tokenize", {"prompt": "hi", "add_special_tokens": None, "return_token_strs": None,
                                       "messages": None})
    assert nulls.status_code == 200 and nulls.json() == plain, nulls.text
    chat = post(server, "/tokenize", {"messages": MESSAGES, "add_generation_prompt": None, "continue_final_message": None,
                                      "return_token_strs": None})
    assert chat.status_code == 200 and chat.json() == post(server, "/tokenize", {"messages": MESSAGES}).json(), chat.text


def test_tokenize_routes_need_the_api_key(server):
    for path, body in (("/tokenize", {"prompt": "hi"}), ("/detokenize", {"tokens": [1]})):
        r = httpx.post(server.url + path, json=body, timeout=60)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
