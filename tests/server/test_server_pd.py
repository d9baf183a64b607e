"""Prefill/decode disaggregation end to end on loopback: a `--kv-role prefill` and a `--kv-role
decode` server, spoken to exactly as vllm-router speaks (and, when it is installed, through
vllm-router itself). Greedy tokens must equal a colocated server's (the prefill server serves plain
requests colocated: the oracle); blocks must come back; failures must be 4xx/503, never a dead engine."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from server_harness import ServerProcess

if not any(__import__("importlib.util").util.find_spec(m) for m in ("nixl_cu12", "nixl")):
    pytest.skip("NIXL is not installed (pip install 'moeserve[pd]')", allow_module_level=True)

pytestmark = pytest.mark.slow

ARGS = ("--kv-cache-blocks", "160", "--max-model-len", "1024", "--max-num-seqs", "8")
ENV = {"UCX_NET_DEVICES": "lo"}
EXPIRY_S = 15
# byte for byte what vllm-router 0.1.17 adds to the prefill call
ROUTER_PREFILL = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                  "remote_block_ids": None, "remote_host": None, "remote_port": None}
SHARED = "In the beginning the river ran through the valley, and the people built their houses on its banks. "
PROMPTS = {
    "short": "Hello world",
    "one-block": "The quick brown fox jumps over",
    "long": " ".join(f"word{i} and thing{i * 7 % 13}" for i in range(120)),  # ~40 blocks of 16
    "shared-a": SHARED * 3 + "The first story is about",
    "shared-b": SHARED * 3 + "The second story tells of",
}


@pytest.fixture(scope="module")
def pd():
    prefill = ServerProcess(*ARGS, "--kv-role", "prefill", "--kv-expiry-s", str(EXPIRY_S), env=ENV)
    try:
        decode = ServerProcess(*ARGS, "--kv-role", "decode", env=ENV)
    except BaseException:
        prefill.kill()
        raise
    try:
        yield prefill, decode
    finally:
        decode.kill()
        prefill.kill()


def post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=120)


def start_router(prefill, decode) -> tuple[subprocess.Popen, str]:
    """vllm-router in P/D mode in front of the two servers, on a free port: (process, url)."""
    port = _free_port()
    router = subprocess.Popen(
        ["vllm-router", "--vllm-pd-disaggregation", "--prefill", prefill.url, "--decode", decode.url,
         "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(_free_port())],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, **ENV))
    return router, f"http://127.0.0.1:{port}"


def first_routed(url: str, body: dict, timeout_s: float = 300) -> httpx.Response:
    """The first 200 answer of a starting router to `body` (the router starts while multi-rank servers
    share 2 cores)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            r = post(url, "/v1/completions", body)
            if r.status_code == 200:
                return r
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "vllm-router never answered"
        time.sleep(0.5)


def two_calls(prefill, decode, body: dict, path: str = "/v1/completions") -> dict | list[dict]:
    """The router's two calls: the prefill call, then the original request with its answer's params."""
    first = post(prefill.url, path, dict(body, max_tokens=1, min_tokens=1, stream=False, kv_transfer_params=ROUTER_PREFILL))
    assert first.status_code == 200, first.text
    params = first.json()["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["remote_block_ids"]
    return decoded(decode.url, path, dict(body, kv_transfer_params=params))


def decoded(url: str, path: str, body: dict) -> dict | list[dict]:
    if not body.get("stream"):
        r = post(url, path, body)
        assert r.status_code == 200, r.text
        return r.json()
    with httpx.stream("POST", url + path, json=body, timeout=120) as r:
        assert r.status_code == 200
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]


def metric(url: str, name: str) -> float:
    """The value at the next heartbeat: engine numbers reach /metrics with the engine's heartbeat (0.2 s)."""
    time.sleep(0.5)
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def wait_for(check, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.2)


def body_for(prefill, prompt: str, **extra) -> dict:
    return {"model": prefill.model, "prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True, **extra}


@pytest.mark.parametrize("name", list(PROMPTS))
def test_greedy_tokens_equal_colocated(pd, name):
    prefill, decode = pd
    body = body_for(prefill, PROMPTS[name])
    computed = metric(decode.url, "moeserve_prompt_tokens_computed_total")
    colocated = post(prefill.url, "/v1/completions", body).json()["choices"][0]
    out = two_calls(prefill, decode, body)["choices"][0]
    assert out["token_ids"] == colocated["token_ids"] and out["text"] == colocated["text"]
    # the decode instance computed only the last prompt token; the rest came over NIXL or its prefix cache
    assert metric(decode.url, "moeserve_prompt_tokens_computed_total") == computed + 1


@pytest.mark.parametrize("name", ["short", "long"])
def test_streamed_decode_equals_colocated(pd, name):
    prefill, decode = pd
    body = body_for(prefill, PROMPTS[name])
    colocated = post(prefill.url, "/v1/completions", body).json()["choices"][0]["text"]
    chunks = two_calls(prefill, decode, dict(body, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == colocated


def test_chat_through_the_two_calls(pd):
    prefill, decode = pd
    body = dict(model=prefill.model, messages=[{"role": "user", "content": PROMPTS["shared-a"]}], max_tokens=10,
                temperature=0, ignore_eos=True)
    colocated = post(prefill.url, "/v1/chat/completions", body).json()["choices"][0]["message"]["content"]
    out = two_calls(prefill, decode, body, "/v1/chat/completions")
    assert out["choices"][0]["message"]["content"] == colocated


def test_decode_refetches_nothing_its_prefix_cache_holds(pd):
    prefill, decode = pd
    body = body_for(prefill, PROMPTS["long"], max_tokens=2)
    n = two_calls(prefill, decode, body)["usage"]["prompt_tokens"]
    blocks = metric(decode.url, "moeserve_kv_blocks_transferred_total")
    two_calls(prefill, decode, body)  # the same prompt again: every full block is in the decoder's cache
    partial_tail = 1 if (n - 1) % 16 else 0  # the last prompt token's block, unless full, is never cached
    assert metric(decode.url, "moeserve_kv_blocks_transferred_total") == blocks + partial_tail
    assert metric(decode.url, "moeserve_kv_transfer_bytes_total") > 0
    assert metric(decode.url, "moeserve_kv_transfer_seconds_count") >= 1


def test_pools_are_idle_after_many_requests(pd):
    prefill, decode = pd
    words = PROMPTS["long"].split()

    def one(i: int) -> None:
        prompt = " ".join(words[i % 50 : i % 50 + 5 + i % 37])
        out = two_calls(prefill, decode, body_for(prefill, prompt, max_tokens=1 + i % 2))
        assert len(out["choices"][0]["token_ids"]) == 1 + i % 2

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(200)))
    wait_for(lambda: metric(prefill.url, "moeserve_kv_blocks_pinned_remote") == 0)
    for url in (prefill.url, decode.url):
        wait_for(lambda: metric(url, "moeserve_kv_cache_blocks_used") == 0)


def test_bad_parameters_are_400s_and_stale_ones_too(pd):
    prefill, decode = pd
    body = body_for(prefill, PROMPTS["one-block"])
    first = post(prefill.url, "/v1/completions", dict(body, max_tokens=1, kv_transfer_params=ROUTER_PREFILL)).json()
    params = first["kv_transfer_params"]
    cases = [
        ({"do_remote_prefill": True}, "remote_block_ids"),
        (dict(params, remote_block_ids="0"), "remote_block_ids"),
        (dict(params, remote_port=70000), "remote_port"),
        (dict(params, remote_engine_id="someone-else"), "remote_engine_id"),
        (dict(params, remote_block_ids=[b + 1 for b in params["remote_block_ids"]]), "remote_block_ids"),
        (dict(params, remote_request_id="cmpl-unknown-0"), "holds no KV blocks"),
    ]
    for bad, words in cases:
        r = post(decode.url, "/v1/completions", dict(body, kv_transfer_params=bad))
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["param"] == "kv_transfer_params" and words in r.json()["error"]["message"]
    other_prompt = post(decode.url, "/v1/completions", dict(body, prompt="Another prompt", kv_transfer_params=params))
    assert other_prompt.status_code == 400 and "not the one" in other_prompt.json()["error"]["message"]
    assert post(decode.url, "/v1/completions", dict(body, kv_transfer_params=params)).status_code == 200
    stale = post(decode.url, "/v1/completions", dict(body, kv_transfer_params=params))  # read already
    assert stale.status_code == 400 and stale.json()["error"]["code"] == "stale_kv_transfer_params"
    wrong_role = post(prefill.url, "/v1/completions", dict(body, kv_transfer_params=params))
    assert wrong_role.status_code == 400 and "--kv-role prefill" in wrong_role.json()["error"]["message"]
    streamed_prefill = post(prefill.url, "/v1/completions", dict(body, stream=True, kv_transfer_params=ROUTER_PREFILL))
    assert streamed_prefill.status_code == 400
    assert post(decode.url, "/v1/completions", dict(body, n=2, kv_transfer_params=params)).status_code == 400


def test_prefill_frees_blocks_no_decoder_reads_at_expiry(pd):
    prefill, _ = pd
    wait_for(lambda: metric(prefill.url, "moeserve_kv_blocks_pinned_remote") == 0, EXPIRY_S + 15)
    r = post(prefill.url, "/v1/completions", body_for(prefill, PROMPTS["long"], max_tokens=1,
                                                        kv_transfer_params=ROUTER_PREFILL))
    pinned = len(r.json()["kv_transfer_params"]["remote_block_ids"])
    assert metric(prefill.url, "moeserve_kv_blocks_pinned_remote") == pinned
    wait_for(lambda: metric(prefill.url, "moeserve_kv_blocks_pinned_remote") == 0, EXPIRY_S + 15)
    wait_for(lambda: metric(prefill.url, "moeserve_kv_cache_blocks_used") == 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("vllm-router") is None, reason="vllm-router is not installed (pip install 'moeserve[pd]')")
def test_through_vllm_router(pd):
    prefill, decode = pd
    router, url = start_router(prefill, decode)
    try:
        body = body_for(prefill, PROMPTS["shared-b"])
        colocated = post(prefill.url, "/v1/completions", body).json()["choices"][0]
        r = first_routed(url, body)
        assert r.json()["choices"][0]["text"] == colocated["text"]
        chunks = decoded(url, "/v1/completions", dict(body, stream=True))
        assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == colocated["text"]
    finally:
        router.kill()
        router.wait(10)


def test_prefill_killed_decode_answers_503_and_lives(pd):
    """Last: it kills the prefill server."""
    prefill, decode = pd
    body = body_for(prefill, PROMPTS["one-block"])
    first = post(prefill.url, "/v1/completions", dict(body, max_tokens=1, kv_transfer_params=ROUTER_PREFILL)).json()
    prefill.kill()
    r = post(decode.url, "/v1/completions", dict(body, kv_transfer_params=first["kv_transfer_params"]))
    assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"
    assert httpx.get(decode.url + "/health", timeout=10).status_code == 200
    assert post(decode.url, "/v1/completions", body).status_code == 200
    wait_for(lambda: metric(decode.url, "moeserve_kv_cache_blocks_used") == 0)
