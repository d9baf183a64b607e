"""Token texts in logprobs: the tokenizer's, or vLLM's "token_id:N" for a checkpoint without one
(a tokenizer-less checkpoint used to answer a logprobs request with a 500)."""
from __future__ import annotations

from types import SimpleNamespace

from moeserve.server import chat, common, completions


def test_without_a_tokenizer_tokens_are_named_by_id():
    state = SimpleNamespace(tokenizer=None)
    assert common.token_decoder(state)([17]) == "token_id:17"
    out = completions._logprobs(state, [(5, None, None), (7, -0.5, [(7, -0.5), (9, -1.5)])], 0)
    assert out["tokens"] == ["token_id:5", "token_id:7"]
    assert out["top_logprobs"] == [None, {"token_id:7": -0.5, "token_id:9": -1.5}]
    assert out["text_offset"] == [0, len("token_id:5")]
    choice = SimpleNamespace(logprobs=[(3, -0.25, [(3, -0.25)])])
    content = chat._logprobs(state, choice, 0)["content"]
    assert content[0]["token"] == "token_id:3" and content[0]["top_logprobs"][0]["token"] == "token_id:3"


def test_with_a_tokenizer_its_decode_is_used():
    state = SimpleNamespace(tokenizer=SimpleNamespace(decode=lambda ids: "".join(chr(97 + t) for t in ids)))
    assert common.token_decoder(state)([0, 1]) == "ab"
