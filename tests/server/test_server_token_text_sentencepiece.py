"""Token texts in logprobs served from a SentencePiece-style checkpoint (sentencepiece_checkpoint.py: a
tiny Mixtral with a byte-fallback Metaspace tokenizer): /v1/completions' tokens, top_logprobs keys and
text_offset, echo included; chat's token, bytes and top_logprobs; prompt_logprobs' decoded_token; all
as vLLM shows them (engine/token_texts.py). Each token's text was decode([id]) alone, which drops a
"▁" token's space and shows U+FFFD for each byte of a split character: the tokens did not add up to the
text and the offsets drifted from it."""
from __future__ import annotations

import json

import httpx
import pytest
from sentencepiece_checkpoint import save_checkpoint
from server_harness import ServerProcess
from test_token_texts import TEXT, WANT

ANSWER = " Paris → café ü ok"  # generated under a choice constraint, so the random model writes text


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("sentencepiece-mixtral")
    tokenizer = save_checkpoint(path)
    with ServerProcess("--model", str(path), "--kv-cache-blocks", "64", "--block-size", "8", "--max-model-len", "128") as srv:
        with httpx.Client(base_url=srv.url, timeout=120) as http:
            yield http, tokenizer


def _constrained(tokenizer, answer: str) -> dict:
    """Sampling fields that make the random model write `answer`: the choice, and ASCII's byte pieces
    banned (the grammar allows "<0x20>" for a space, which decodes alone to "" in vLLM as here)."""
    ascii_bytes = tokenizer.convert_tokens_to_ids([f"<0x{b:02X}>" for b in range(0x20, 0x7F)])
    return {"temperature": 0, "max_tokens": 40, "structured_outputs": {"choice": [answer]},
            "logit_bias": {str(i): -100 for i in ascii_bytes}}


def _post(http, path: str, body: dict) -> dict:
    r = http.post(path, json=body)
    assert r.status_code == 200, r.text[:500]
    return r.json()


def _stream(http, path: str, body: dict) -> list[dict]:
    with http.stream("POST", path, json=dict(body, stream=True)) as r:
        assert r.status_code == 200
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    return [json.loads(line)["choices"][0] for line in lines if json.loads(line)["choices"]]


def _check_offsets(text: str, tokens: list[str], offsets: list[int]) -> None:
    """The tokens add up to the text, then the end-of-sequence token the text leaves out (as vLLM's)."""
    assert tokens[-1] == "</s>" and "".join(tokens[:-1]) == text
    assert offsets == [sum(map(len, tokens[:i])) for i in range(len(tokens))]
    assert all(text[o:o + len(t)] == t for o, t in zip(offsets[:-1], tokens[:-1]))


def test_completion_tokens_and_offsets_add_up_to_the_text(served):
    http, tokenizer = served
    body = {"prompt": "The capital of France is", "logprobs": 2, "return_token_ids": True, **_constrained(tokenizer, ANSWER)}
    choice = _post(http, "/v1/completions", body)["choices"][0]
    assert choice["text"] == ANSWER
    lp = choice["logprobs"]
    _check_offsets(ANSWER, lp["tokens"], lp["text_offset"])
    assert all(token in top for token, top in zip(lp["tokens"], lp["top_logprobs"]))
    plain = _post(http, "/v1/completions", {k: v for k, v in body.items() if k != "logprobs"})["choices"][0]
    assert plain["token_ids"] == choice["token_ids"]  # greedy tokens are what they are without logprobs
    streamed = _stream(http, "/v1/completions", body)  # one token a chunk: "→"'s bytes in three chunks
    assert [t for c in streamed if c["logprobs"] for t in c["logprobs"]["tokens"]] == lp["tokens"]
    assert [o for c in streamed if c["logprobs"] for o in c["logprobs"]["text_offset"]] == lp["text_offset"]


def test_echo_and_prompt_logprobs_show_the_prompts_tokens_as_vllm(served):
    http, tokenizer = served
    body = {"prompt": TEXT, "echo": True, "logprobs": 1, "prompt_logprobs": 2, **_constrained(tokenizer, ANSWER)}
    choice = _post(http, "/v1/completions", body)["choices"][0]
    n = len(WANT)
    assert choice["text"] == tokenizer.decode(tokenizer.encode(TEXT)) + ANSWER
    lp = choice["logprobs"]
    assert lp["tokens"][:n] == WANT
    _check_offsets(choice["text"], lp["tokens"], lp["text_offset"])
    scored = choice["prompt_logprobs"]
    assert len(scored) == n and scored[0] is None
    for want, position in zip(WANT[1:], scored[1:]):
        assert next(iter(position.values()))["decoded_token"] == want  # the prompt token, first
    # an alternative's text is the same in top_logprobs and prompt_logprobs
    for top, position in zip(lp["top_logprobs"][1:n], scored[1:]):
        assert set(top) <= {v["decoded_token"] for v in position.values()}


def test_chat_tokens_bytes_and_alternatives(served):
    http, tokenizer = served
    answer = ANSWER.lstrip()  # after the chat template's newline: the first space would be a byte piece
    body = {"messages": [{"role": "user", "content": "Where?"}], "logprobs": True, "top_logprobs": 2,
            **_constrained(tokenizer, answer)}
    choice = _post(http, "/v1/chat/completions", body)["choices"][0]
    assert choice["message"]["content"] == answer
    content = choice["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == answer + "</s>"
    assert " ok" in [e["token"] for e in content] or " " in [e["token"] for e in content]  # a space kept
    for e in content:
        assert e["bytes"] == list(e["token"].encode())
        assert all(a["bytes"] == list(a["token"].encode()) for a in e["top_logprobs"])
    arrow = [e for e in content if e["token"] == "→"]
    assert arrow and arrow[0]["bytes"] == [226, 134, 146]  # the completing piece carries the character
    assert [e["token"] for e in content].count("") >= 3  # <0xE2> <0x86>, <0xC3> ..., as vLLM: no bytes
    streamed = [e for c in _stream(http, "/v1/chat/completions", body) if c["logprobs"] for e in c["logprobs"]["content"]]
    assert [(e["token"], e["bytes"], [a["token"] for a in e["top_logprobs"]]) for e in streamed] == [
        (e["token"], e["bytes"], [a["token"] for a in e["top_logprobs"]]) for e in content]
