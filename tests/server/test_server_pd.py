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
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from server_harness import PD_ENV, ROUTER_PREFILL, decoded, metric, pd_pair, post

if not any(__import__("importlib.util").util.find_spec(m) for m in ("nixl_cu12", "nixl")):
    pytest.skip("NIXL is not installed (pip install 'moeserve[pd]')", allow_module_level=True)

pytestmark = pytest.mark.slow

ARGS = ("--kv-cache-blocks", "160", "--max-model-len", "1024", "--max-num-seqs", "8")
EXPIRY_S = 15
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
    with pd_pair(*ARGS, prefill_args=("--kv-expiry-s", str(EXPIRY_S))) as pair:
        yield pair


def start_router(prefill, decode) -> tuple[subprocess.Popen, str]:
    """vllm-router in P/D mode in front of the two servers, on a free port: (process, url)."""
    port = _free_port()
    router = subprocess.Popen(
        ["vllm-router", "--vllm-pd-disaggregation", "--prefill", prefill.url, "--decode", decode.url,
         "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(_free_port())],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, **PD_ENV))
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


def test_structured_output_is_the_decoders_to_apply(pd):
    """The decode instance samples every output token, so its grammar makes the answer: equal to the
    colocated one (greedy), streamed or not, and valid."""
    import jsonschema

    prefill, decode = pd
    schema = {"type": "object", "required": ["n", "tags"], "additionalProperties": False,
              "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 999},
                             "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "minItems": 1, "maxItems": 3}}}
    body = {"model": prefill.model, "prompt": PROMPTS["shared-b"], "max_tokens": 120, "temperature": 0,
            "return_token_ids": True, "structured_outputs": {"json": schema}}
    colocated = post(prefill.url, "/v1/completions", body).json()["choices"][0]
    out = two_calls(prefill, decode, body)["choices"][0]
    assert out["token_ids"] == colocated["token_ids"] and out["finish_reason"] == "stop"
    jsonschema.validate(json.loads(out["text"]), schema)
    chunks = two_calls(prefill, decode, dict(body, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == out["text"]


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
    malformed = [
        ({"do_remote_prefill": True}, "remote_block_ids"),
        (dict(params, remote_block_ids="0"), "remote_block_ids"),
        (dict(params, remote_port=70000), "remote_port"),
        (dict(params, remote_host="127.0.0.1\r\nX: y"), "remote_host"),
        (dict(params, remote_host="[::1"), "remote_host"),
        (dict(params, remote_request_id="../layout"), "remote_request_id"),
        (dict(params, remote_request_id="a?b=c"), "remote_request_id"),
        (dict(params, remote_request_id="x\x00" * 50_000), "remote_request_id"),
        (dict(params, tp_size=2**64), "tp_size"),
        (dict(params, remote_block_ids=[2**64]), "remote_block_ids"),
    ]
    for bad, words in malformed:
        r = post(decode.url, "/v1/completions", dict(body, kv_transfer_params=bad))
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["param"] == "kv_transfer_params" and words in r.json()["error"]["message"]
    tampered = [dict(params, remote_engine_id="someone-else"), dict(params, remote_block_ids=[b + 1 for b in params["remote_block_ids"]]),
                dict(params, remote_request_id="cmpl-unknown-0"), dict(params, remote_port=params["remote_port"] + 1),
                {k: v for k, v in params.items() if k != "moeserve_signature"}]
    for bad in tampered:
        r = post(decode.url, "/v1/completions", dict(body, kv_transfer_params=bad))
        assert r.status_code == 400 and "not signed by a prefill server of this KV pool" in r.json()["error"]["message"]
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


class ListeningPeer:
    """A TCP port that counts the connections made to it and answers each as the forged side channel
    of an attacker would (every pin exists; /layout redirects to the real side channel)."""

    def __init__(self, answer: bytes):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.answer = answer
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                    conn.sendall(self.answer)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def test_forged_parameters_make_no_connection_and_poison_nothing(pd):
    """The attack: another request's real engine id and blocks, the attacker's own side channel (which
    vouches for anything), and a digest of the attacker's prompt. The decoder refuses before it
    connects anywhere, and the attacker's prompt later gets its own continuation."""
    prefill, decode = pd
    victim = body_for(prefill, PROMPTS["shared-a"])
    real = post(prefill.url, "/v1/completions", dict(victim, max_tokens=1, kv_transfer_params=ROUTER_PREFILL))
    real = real.json()["kv_transfer_params"]
    attacker_prompt = "Poison: " + PROMPTS["one-block"]
    tokens = post(prefill.url, "/tokenize", {"model": prefill.model, "prompt": attacker_prompt}).json()["tokens"]
    digest = __import__("moeserve.kv_transfer.params", fromlist=["x"]).prompt_digest(tokens)
    pin = json.dumps({"engine_id": real["remote_engine_id"], "block_ids": real["remote_block_ids"],
                      "prompt_digest": digest, "group": 0, "claimed": True}).encode()
    fake = ListeningPeer(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                         str(len(pin)).encode() + b"\r\n\r\n" + pin)
    try:
        forged = dict(real, remote_host="127.0.0.1", remote_port=fake.port, prompt_digest=digest)
        for params in (forged, {k: v for k, v in forged.items() if k != "moeserve_signature"}):
            r = post(decode.url, "/v1/completions", dict(body_for(prefill, attacker_prompt), kv_transfer_params=params))
            assert r.status_code == 400 and r.json()["error"]["param"] == "kv_transfer_params", r.text
        # the victim's genuine parameters with the attacker's prompt: its digest is signed
        r = post(decode.url, "/v1/completions", dict(body_for(prefill, attacker_prompt), kv_transfer_params=real))
        assert r.status_code == 400 and "not the one" in r.json()["error"]["message"]
        assert fake.connections == 0
    finally:
        fake.close()
    honest = body_for(prefill, attacker_prompt)
    out = post(decode.url, "/v1/completions", honest).json()
    assert out["choices"][0]["token_ids"] == post(prefill.url, "/v1/completions", honest).json()["choices"][0]["token_ids"]
    assert two_calls(prefill, decode, victim)["choices"][0]["token_ids"] == \
        post(prefill.url, "/v1/completions", victim).json()["choices"][0]["token_ids"]


def test_the_side_channel_answers_the_pool_only(pd):
    prefill, decode = pd
    body = body_for(prefill, PROMPTS["short"])
    params = post(prefill.url, "/v1/completions", dict(body, max_tokens=1, kv_transfer_params=ROUTER_PREFILL)).json()
    params = params["kv_transfer_params"]
    side = f"http://127.0.0.1:{params['remote_port']}"
    release = {"request_id": params["remote_request_id"], "engine_id": params["remote_engine_id"], "token": "x" * 32}
    for method, path, payload in (("GET", "/layout", None), ("GET", f"/pins/{params['remote_request_id']}", None),
                                  ("POST", "/claim", release), ("POST", "/release", release)):
        r = httpx.request(method, side + path, json=payload, timeout=10)
        assert r.status_code == 401, (path, r.status_code)
        r = httpx.request(method, side + path, json=payload, timeout=10, headers={"X-Moeserve-Auth": "1.abc"})
        assert r.status_code == 401
    out = decoded(decode.url, "/v1/completions", dict(body, kv_transfer_params=params))  # the pin was untouched
    assert out["choices"][0]["token_ids"] == post(prefill.url, "/v1/completions", body).json()["choices"][0]["token_ids"]


def listening_sockets(pids: list[int]) -> list[str]:
    """Local addresses ("ip:port") of the TCP sockets in LISTEN state the processes hold."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    out = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            hex_ip, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_ip)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # per 32-bit word, host order
            out.append(f"{socket.inet_ntop(family, raw)}:{int(hex_port, 16)}")
    return out


def test_every_listening_socket_is_on_loopback(pd):
    """Started without any UCX_* variable, the servers' process trees (front end, engine, NIXL/UCX
    agents, side channel) listen on loopback only."""
    from server_harness import descendants

    prefill, decode = pd
    two_calls(prefill, decode, body_for(prefill, PROMPTS["short"]))  # every agent has been used
    for server in (prefill, decode):
        sockets = listening_sockets([server.proc.pid, *descendants(server.proc.pid)])
        assert sockets, "found no listening socket at all: the check itself is broken"
        assert all(s.startswith(("127.", "::1:")) for s in sockets), sockets


def test_unread_pins_never_starve_plain_requests(pd):
    """Remote-decode prefills nobody decodes pin at most half the pool (--kv-max-pinned-blocks): older
    pins give way, so a plain request that needs the rest runs now, not after --kv-expiry-s."""
    prefill, _ = pd
    words = PROMPTS["long"].split()
    evicted = metric(prefill.url, "moeserve_kv_pins_evicted_total")
    started = time.monotonic()
    for i in range(4):  # ~48 blocks of 160 each: the four would hold more than the pool
        prompt = f"Flood {i}: " + " ".join(words * 2)[:2600]
        r = post(prefill.url, "/v1/completions", body_for(prefill, prompt, max_tokens=1, kv_transfer_params=ROUTER_PREFILL))
        assert r.status_code == 200, r.text
    plain = post(prefill.url, "/v1/completions", body_for(prefill, "Plain: " + " ".join(words * 2)[:2600], max_tokens=4))
    assert plain.status_code == 200
    assert time.monotonic() - started < EXPIRY_S  # nothing waited for a pin to expire
    assert metric(prefill.url, "moeserve_kv_blocks_pinned_remote") <= 80
    assert metric(prefill.url, "moeserve_kv_pins_evicted_total") >= evicted + 2


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
