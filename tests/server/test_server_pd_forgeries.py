"""Forgeries and floods against a 1P1D pair started as the docs show: both servers with `--api-key`,
neither with `--kv-secret` (docs/disaggregation.md, trust model). What test_server_pd.py does not cover:
a client that holds the API key (every client does), a process that fills the side channel's slots,
headers no ASCII parser would send, and a pool member's release with an absurd byte count. One pair
for the module; each test leaves it as it found it."""
from __future__ import annotations

import socket
import time

import httpx
import pytest
from server_harness import ROUTER_PREFILL, pd_pair
from test_server_pd import ARGS, ListeningPeer

from moeserve.kv_transfer import params as kv
from moeserve.kv_transfer import peer_calls, trust
from moeserve.kv_transfer.side_channel import MAX_CONNECTIONS

pytestmark = pytest.mark.slow

API_KEY = "sk-clients-hold-this-key-0123456789"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def pd():
    with pd_pair(*ARGS, "--api-key", API_KEY) as pair:
        yield pair


def complete(url: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json=body, headers=AUTH, timeout=120)


def body_for(server, prompt: str, **extra) -> dict:
    return {"model": server.model, "prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True, **extra}


def prefilled(prefill, prompt: str) -> dict:
    r = complete(prefill.url, body_for(prefill, prompt, max_tokens=1, min_tokens=1, kv_transfer_params=ROUTER_PREFILL))
    assert r.status_code == 200, r.text
    return r.json()["kv_transfer_params"]


def decodes_as_colocated(prefill, decode, prompt: str) -> None:
    """The honest path through the pair still gives the colocated tokens."""
    params = prefilled(prefill, prompt)
    out = complete(decode.url, body_for(prefill, prompt, kv_transfer_params=params))
    assert out.status_code == 200, out.text
    assert out.json()["choices"][0]["token_ids"] == \
        complete(prefill.url, body_for(prefill, prompt)).json()["choices"][0]["token_ids"]


def test_the_api_key_signs_nothing(pd):
    """The API key was the pool's secret by default: a client holding it fetched /layout (NIXL agent
    metadata and buffer addresses: every KV cache of the pool to read and write) and signed parameters
    naming a side channel of its own, to which the decoder then connected."""
    prefill, decode = pd
    as_client = trust.PoolKey.from_secret(API_KEY, "the API key a client holds")
    real = prefilled(prefill, "Forged by a client with the key")
    assert peer_calls.get_json("127.0.0.1", real["remote_port"], as_client, "/layout", 10)[0] == 401
    prompt = "The attacker's own prompt"
    tokens = httpx.post(prefill.url + "/tokenize", json={"model": prefill.model, "prompt": prompt}, headers=AUTH,
                        timeout=30).json()["tokens"]
    fake = ListeningPeer(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    try:
        forged = trust.sign_params(as_client, kv.prefill_answer(real["remote_engine_id"], real["remote_request_id"],
                                                                real["remote_block_ids"], "127.0.0.1", fake.port, 1, 0,
                                                                kv.prompt_digest(tokens)))
        r = complete(decode.url, body_for(prefill, prompt, kv_transfer_params=forged))
        assert r.status_code == 400 and "not signed by a prefill server of this KV pool" in r.json()["error"]["message"]
        assert fake.connections == 0
    finally:
        fake.close()
    decodes_as_colocated(prefill, decode, "Forged by a client with the key")


def test_idle_connections_do_not_keep_decoders_out(pd):
    """One process holding every slot of the side channel (a byte each, reopened at each deadline) made
    every decode a 503; now idle connections make room for a signed call."""
    prefill, decode = pd
    port = prefilled(prefill, "Idle connections probe")["remote_port"]
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(MAX_CONNECTIONS + 8)]
    try:
        for s in idle:
            s.sendall(b"G")
        time.sleep(0.5)
        decodes_as_colocated(prefill, decode, "Idle connections probe, the real one")
    finally:
        for s in idle:
            s.close()


def test_headers_that_are_no_ascii_are_answered_not_raised(pd):
    """`Content-Length: ²` (a digit to str.isdigit) and a non-ASCII signature raised inside the side
    channel's handler: a traceback in the log and no answer."""
    prefill, decode = pd
    port = prefilled(prefill, "Latin-1 headers probe")["remote_port"]
    stamp = str(int(time.time())).encode()
    for head, status in ((b"Content-Length: \xb2\r\n", b"400"), (b"X-Moeserve-Auth: " + stamp + b".\xe9\xe9\r\n", b"401"),
                         (b"X-Moeserve-Auth: \xb2\xb3.abc\r\n", b"401")):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /layout HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
            assert s.recv(64).startswith(b"HTTP/1.0 " + status), head
    assert "Traceback" not in prefill.log_tail(200)
    decodes_as_colocated(prefill, decode, "Latin-1 headers probe")


def test_a_release_with_an_absurd_byte_count_leaves_the_prefill_engine_alive(pd):
    """A signed release saying 10**100 bytes were read reached the engine's counters, which msgpack could
    not pack: the prefill engine died (/health 503). A pool member's mistake is now a 400."""
    prefill, decode = pd
    pool = trust.key_for(None)  # what both servers use: this user's secret file (or MOESERVE_KV_SECRET)
    params = prefilled(prefill, "Absurd byte count")
    where = ("127.0.0.1", params["remote_port"], pool)
    assert peer_calls.claim(*where, params["remote_request_id"], params["remote_engine_id"], "t" * 32, 10)[0] == 200
    body = {"request_id": params["remote_request_id"], "engine_id": params["remote_engine_id"], "token": "t" * 32,
            "num_bytes": 10**100}
    assert peer_calls.call(*where, "POST", "/release", body, 10)[0] == 400
    assert peer_calls.post_release(*where, params["remote_request_id"], params["remote_engine_id"], "t" * 32, 10)
    time.sleep(1.0)  # two engine heartbeats
    assert httpx.get(prefill.url + "/health", timeout=10).status_code == 200
    decodes_as_colocated(prefill, decode, "Absurd byte count, after")


def test_a_prefill_call_for_many_tokens_pins_the_prompt_only(pd):
    """A client asking the prefill server for 40 tokens with do_remote_decode (the router asks for 1):
    the pin held the generated tokens' blocks too, so its answer named more blocks than the prompt fills
    and the decoder refused it; past --kv-max-pinned-blocks the prefill engine died. Now the prompt's
    blocks alone are pinned and the decode runs."""
    prefill, decode = pd
    prompt = "Many tokens from the prefill server"
    r = complete(prefill.url, body_for(prefill, prompt, max_tokens=40, kv_transfer_params=ROUTER_PREFILL))
    assert r.status_code == 200, r.text
    params = r.json()["kv_transfer_params"]
    assert len(params["remote_block_ids"]) == -(-len(r.json()["choices"][0]["prompt_token_ids"]) // 16)
    out = complete(decode.url, body_for(prefill, prompt, kv_transfer_params=params))
    assert out.status_code == 200, out.text
    assert out.json()["choices"][0]["token_ids"] == \
        complete(prefill.url, body_for(prefill, prompt)).json()["choices"][0]["token_ids"]
