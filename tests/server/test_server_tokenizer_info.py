"""GET /tokenizer_info as vLLM serves it, and lm-eval's `local-completions` model running against the
server with no tokenizer argument: it finds /tokenizer_info and /tokenize, tokenizes remotely, and its
loglikelihoods equal the server's own echo logprobs. Without lm-eval installed, the same client steps
(what lm_eval.utils.RemoteTokenizer asks for) run by hand."""
from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest
from server_settings import API_KEY

from moeserve.engine.builtin_model import CHAT_TEMPLATE, build_tokenizer
from moeserve.server.tokenize_routes import tokenizer_info_of

HEADERS = {"Authorization": f"Bearer {API_KEY}"}
PAIRS = [("The capital of France is", " Paris"), ("She opened the letter and", " read it"),
         ("It was a fine morning in", " April.")]


def _get(server, path: str) -> httpx.Response:
    return httpx.get(server.url + path, headers=HEADERS, timeout=60)


def _post(server, path: str, body: dict) -> dict:
    r = httpx.post(server.url + path, json=body, headers=HEADERS, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_tokenizer_info_is_the_tokenizer_config(server):
    r = _get(server, "/tokenizer_info")
    assert r.status_code == 200
    info = r.json()
    tok = build_tokenizer()
    assert info["tokenizer_class"] == type(tok).__name__
    assert (info["eos_token"], info["pad_token"], info["bos_token"]) == ("<|endoftext|>", "<|endoftext|>", None)
    assert info["chat_template"] == CHAT_TEMPLATE
    assert info["added_tokens_decoder"]["2"] == {"content": "<|im_end|>", "special": True}
    assert info["model_max_length"] == 256  # the server's --max-model-len, not the tokenizer's "unbounded"
    assert not any(k in info for k in ("vocab_file", "merges_file", "tokenizer_file", "name_or_path"))
    assert _get(server, "/tokenizer_info").headers["content-type"].startswith("application/json")


def test_tokenizer_info_needs_the_api_key(server):
    assert httpx.get(server.url + "/tokenizer_info", timeout=60).status_code == 401


def test_without_a_tokenizer_it_is_a_400():
    from moeserve.server.api_errors import ApiError
    from moeserve.server.common import require_tokenizer

    with pytest.raises(ApiError) as e:
        require_tokenizer(SimpleNamespace(tokenizer=None), "/tokenizer_info", None)
    assert e.value.status == 400 and e.value.code == "no_tokenizer"


def test_info_of_a_tokenizer_with_a_template_and_bos_of_its_own():
    tok = build_tokenizer()
    tok.chat_template = "{{ messages[0]['content'] }}"
    tok.bos_token = "<|im_start|>"
    info = tokenizer_info_of(tok, max_model_len=64)
    assert info["chat_template"] == "{{ messages[0]['content'] }}" and info["bos_token"] == "<|im_start|>"
    assert info["model_max_length"] == 64


def _server_loglikelihood(server, context: str, continuation: str) -> float:
    """Sum of the server's echo logprobs over the continuation's tokens (lm-eval's definition)."""
    ctx = _post(server, "/tokenize", {"prompt": context, "add_special_tokens": False})["tokens"]
    cont = _post(server, "/tokenize", {"prompt": continuation, "add_special_tokens": False})["tokens"]
    out = _post(server, "/v1/completions", {"model": server.model, "prompt": ctx + cont, "max_tokens": 0,
                                            "echo": True, "logprobs": 0, "temperature": 0})
    return sum(out["choices"][0]["logprobs"]["token_logprobs"][len(ctx):])


def test_the_remote_tokenizer_steps_by_hand(server):
    """What lm_eval.utils.RemoteTokenizer does: /tokenizer_info, then /tokenize without special tokens
    (the eos id is the encoding of eos_token), /detokenize, and the served chat template."""
    from jinja2 import Template

    info = _get(server, "/tokenizer_info").json()
    assert _post(server, "/tokenize", {"prompt": info["eos_token"], "add_special_tokens": False})["tokens"] == [0]
    ids = _post(server, "/tokenize", {"prompt": "Hello there, my friend.", "add_special_tokens": False})["tokens"]
    assert ids == build_tokenizer().encode("Hello there, my friend.", add_special_tokens=False)
    assert _post(server, "/detokenize", {"tokens": ids})["prompt"] == "Hello there, my friend."
    chat = Template(info["chat_template"]).render(messages=[{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    assert chat == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_lm_eval_local_completions_runs_with_no_tokenizer_argument(server, monkeypatch):
    pytest.importorskip("lm_eval")
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a fallback to a hub tokenizer would fail, not download
    lm = LocalCompletionsAPI(base_url=server.url + "/v1/completions", model=server.model, auth_token=API_KEY,
                             num_concurrent=1, max_retries=1, max_length=256)
    assert lm.tokenizer_backend == "remote"
    requests = [Instance(request_type="loglikelihood", doc={}, arguments=pair, idx=i) for i, pair in enumerate(PAIRS)]
    got = [logprob for logprob, _ in lm.loglikelihood(requests, disable_tqdm=True)]
    expected = [_server_loglikelihood(server, *pair) for pair in PAIRS]
    assert got == pytest.approx(expected, abs=1e-4)
    assert all(v < 0 for v in got)
