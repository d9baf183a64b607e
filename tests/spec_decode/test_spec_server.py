"""Speculative decoding behind the HTTP server: n-gram drafts on the built-in model stream the same
text as without them, with stop strings and logprobs, count on /metrics and in `moeserve bench`; and
MTP drafts on the decode side of a prefill/decode pair give the colocated tokens."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "server"))
from server_harness import ROUTER_PREFILL, ServerProcess, decoded, metric, pd_pair, post  # noqa: E402

from moeserve import LLM, SamplingParams  # noqa: E402

pytestmark = pytest.mark.slow  # servers in subprocesses

NGRAM = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'
PROMPT = "said he, and she said, and he said, and she said,"


@pytest.fixture(scope="module")
def ngram_server():
    with ServerProcess("--speculative-config", NGRAM, "--max-num-seqs", "8") as srv:
        yield srv


def _text(url: str, model: str, stream: bool, **extra) -> tuple[str, str | None, list]:
    body = {"model": model, "prompt": PROMPT, "max_tokens": 40, "temperature": 0, "ignore_eos": True, **extra,
            "stream": stream}
    out = decoded(url, "/v1/completions", body)
    if not stream:
        choice = out["choices"][0]
        return choice["text"], choice["finish_reason"], (choice.get("logprobs") or {}).get("token_logprobs") or []
    text, finish, lps = "", None, []
    for chunk in out:
        for c in chunk["choices"]:
            text += c.get("text") or ""
            finish = c.get("finish_reason") or finish
            lps += (c.get("logprobs") or {}).get("token_logprobs") or []
    return text, finish, lps


def test_ngram_streams_the_text_of_plain_decoding(ngram_server):
    llm = LLM()
    try:
        plain = llm.generate([PROMPT] * 2, [SamplingParams(temperature=0, max_tokens=40, ignore_eos=True),
                                            SamplingParams(temperature=0, max_tokens=40, ignore_eos=True,
                                                           stop=["and the first, and"])])
    finally:
        llm.shutdown()
    url, model = ngram_server.url, ngram_server.model
    for stream in (False, True):
        text, finish, _ = _text(url, model, stream)
        assert (text, finish) == (plain[0].text, "length")
        text, finish, _ = _text(url, model, stream, stop=["and the first, and"])
        assert (text, finish) == (plain[1].text, plain[1].finish_reason)
    streamed = _text(url, model, True, logprobs=2)[2]
    assert len(streamed) == 40 and streamed == pytest.approx(_text(url, model, False, logprobs=2)[2], abs=1e-4)
    assert metric(url, "moeserve_spec_decode_num_accepted_tokens_total") > 0
    assert metric(url, "moeserve_spec_decode_mean_acceptance_length") > 1.0


def test_bench_reports_acceptance(ngram_server, tmp_path):
    from moeserve.server import bench

    dataset = tmp_path / "loops.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": PROMPT, "output_len": 24}) + "\n" for _ in range(4)))
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    out = tmp_path / "bench.json"
    args = p.parse_args(["--base-url", ngram_server.url, "--model", ngram_server.model, "--dataset", str(dataset),
                         "--num-requests", "4", "--concurrency", "2", "--json", str(out)])
    assert bench.run(args) == 0
    spec = json.loads(out.read_text())["spec_decode"]
    assert spec["num_drafts"] > 0 and spec["mean_acceptance_length"] > 1.0
    assert len(spec["per_position_acceptance_rate"]) == 3


@pytest.fixture(scope="module")
def mtp_pd(tmp_path_factory):
    if not any(__import__("importlib.util").util.find_spec(m) for m in ("nixl_cu12", "nixl")):
        pytest.skip("NIXL is not installed (pip install 'moeserve[pd]')")
    from mtp_checkpoints import make_mtp_checkpoint

    path = tmp_path_factory.mktemp("v3-mtp-pd")
    make_mtp_checkpoint(path)
    args = ("--model", str(path), "--kv-cache-blocks", "64", "--block-size", "8", "--max-num-seqs", "4",
            "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}')
    with pd_pair(*args) as pair:
        yield pair


@pytest.mark.parametrize("stream", [False, True])
def test_mtp_on_the_decode_side_of_a_pd_pair(mtp_pd, stream):
    """Both sides run the MTP layer: the prefill side's first pass fills its KV cache over the prompt,
    which moves with the rest of the prompt's KV (docs/speculative_decoding.md)."""
    prefill, decode = mtp_pd
    prompt = [(i * 37 + 5 + stream) % 90 + 3 for i in range(21)]
    body = {"model": prefill.model, "prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    colocated = post(prefill.url, "/v1/completions", body).json()["choices"][0]["token_ids"]
    first = post(prefill.url, "/v1/completions", dict(body, max_tokens=1, min_tokens=1, kv_transfer_params=ROUTER_PREFILL))
    out = decoded(decode.url, "/v1/completions", dict(body, stream=stream, kv_transfer_params=first.json()["kv_transfer_params"]))
    tokens = ([t for chunk in out for c in chunk["choices"] for t in c.get("token_ids") or []] if stream
              else out["choices"][0]["token_ids"])
    assert tokens == colocated
    assert metric(decode.url, "moeserve_spec_decode_num_draft_tokens_total") > 0
