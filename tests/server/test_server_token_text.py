"""Token texts in logprobs: the tokenizer's, or vLLM's "token_id:N" for a checkpoint without one
(a tokenizer-less checkpoint used to answer a logprobs request with a 500)."""
from __future__ import annotations

from types import SimpleNamespace

from moeserve.server import chat, common, completions


def _state(tokenizer):
    from moeserve.engine.token_texts import token_texts

    return SimpleNamespace(tokenizer=tokenizer, token_texts=token_texts(tokenizer))


def test_without_a_tokenizer_tokens_are_named_by_id():
    state = _state(None)
    assert common.token_decoder(state)([17]) == "token_id:17"
    out = completions._logprobs(state, [(5, None, None), (7, -0.5, [(7, -0.5), (9, -1.5)])], 0)
    assert out["tokens"] == ["token_id:5", "token_id:7"]
    assert out["top_logprobs"] == [None, {"token_id:7": -0.5, "token_id:9": -1.5}]
    assert out["text_offset"] == [0, len("token_id:5")]
    choice = SimpleNamespace(logprobs=[(3, -0.25, [(3, -0.25)])])
    content = chat._logprobs(state, choice, 0)["content"]
    assert content[0]["token"] == "token_id:3" and content[0]["top_logprobs"][0]["token"] == "token_id:3"


def test_with_a_tokenizer_its_decode_is_used():
    state = _state(SimpleNamespace(decode=lambda ids: "".join(chr(97 + t) for t in ids)))
    assert common.token_decoder(state)([0, 1]) == "ab"
    assert completions._logprobs(state, [(0, -0.5, [(1, -1.0)])], 0)["tokens"] == ["a"]


# ---- a checkpoint without a tokenizer serves token ids; what needs text is a 400 -----------------
# (echo, text prompts, chat, /tokenize and /detokenize used to answer 500)
def _no_tokenizer():
    return SimpleNamespace(tokenizer=None, vocab_size=100, token_texts=None)


def _refused(fn, *args):
    import pytest

    from moeserve.server.api_errors import ApiError

    with pytest.raises(ApiError) as e:
        fn(*args)
    assert e.value.status == 400 and e.value.code == "no_tokenizer"
    assert "needs a tokenizer and this checkpoint has none" in e.value.message
    return e.value


def test_without_a_tokenizer_token_id_prompts_are_served_and_echoed_by_id():
    state = _no_tokenizer()
    assert completions._prompts(state, [[5, 6, 7]]) == [[5, 6, 7]]
    assert completions._decode_all(state, [[5, 6]]) == ["token_id:5token_id:6"]


def test_without_a_tokenizer_text_prompts_chat_and_tokenize_are_refused():
    from moeserve.server import tokenize_routes
    from moeserve.server.protocol import ChatCompletionRequest, DetokenizeRequest, TokenizeRequest

    state = _no_tokenizer()
    assert _refused(completions._prompts, state, "hello").param == "prompt"
    assert _refused(completions._prompts, state, [[1, 2], "mixed"]).param == "prompt"
    chat_req = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    assert _refused(chat.render_messages, state, chat_req).param == "messages"
    assert _refused(tokenize_routes._encode, state, TokenizeRequest.model_validate({"prompt": "hi"})).param == "prompt"
    assert DetokenizeRequest.model_validate({"tokens": [1]}).tokens == [1]
    assert _refused(common.require_tokenizer, state, "/detokenize", "tokens").param == "tokens"
