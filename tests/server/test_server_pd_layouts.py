"""Prefill/decode pairs whose layouts differ: --tp 1 against --tp 2 both ways, and --ep 2 (two attention
groups, each with its own KV pool) against one. Each server runs `--kv-role both --kv-transfer nixl`,
so it is prefill server, decode server and colocated oracle at once, and three servers make every
pair. Greedy tokens through the router's two calls must equal the colocated server's."""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from server_harness import PD_ENV, ROUTER_PREFILL, ServerProcess, decoded, metric, post

from moeserve.kv_transfer.peer_calls import get_json
from moeserve.kv_transfer.trust import PoolKey
from test_server_pd import PROMPTS, body_for, first_routed, start_router, wait_for

if not any(__import__("importlib.util").util.find_spec(m) for m in ("nixl_cu12", "nixl")):
    pytest.skip("NIXL is not installed (pip install 'moeserve[pd]')", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SECRET = "this pool's secret, given on the command line"
ARGS = ("--kv-cache-blocks", "160", "--max-model-len", "1024", "--max-num-seqs", "8", "--kv-role", "both",
        "--kv-transfer", "nixl", "--kv-secret", SECRET)
LAYOUTS = {"tp1": (), "tp2": ("--tp", "2"), "ep2": ("--ep", "2")}
PAIRS = [("tp1", "tp2"), ("tp2", "tp1"), ("ep2", "tp1"), ("tp1", "ep2"), ("tp2", "ep2")]


@pytest.fixture(scope="module")
def servers():
    started: dict[str, ServerProcess] = {}

    def start(name: str) -> None:
        started[name] = ServerProcess(*ARGS, *LAYOUTS[name], env=PD_ENV)

    try:
        with ThreadPoolExecutor(len(LAYOUTS)) as pool:
            list(pool.map(start, LAYOUTS))  # side by side: each start is mostly waiting for its ranks
        yield started
    finally:
        for server in started.values():
            server.kill()


def transfer(prefill: ServerProcess, decode: ServerProcess, body: dict) -> tuple[dict, dict | list[dict]]:
    """The router's two calls: (the prefill answer's kv_transfer_params, the decode server's answer)."""
    first = post(prefill.url, "/v1/completions", dict(body, max_tokens=1, min_tokens=1, stream=False,
                                                      kv_transfer_params=ROUTER_PREFILL))
    assert first.status_code == 200, first.text
    params = first.json()["kv_transfer_params"]
    return params, decoded(decode.url, "/v1/completions", dict(body, kv_transfer_params=params))


def colocated(server: ServerProcess, body: dict) -> list[int]:
    return post(server.url, "/v1/completions", body).json()["choices"][0]["token_ids"]


def fresh(pair: tuple[str, str], prompt: str) -> str:
    """A prompt no server has cached yet: a decoder's prefix cache would otherwise hold its blocks and
    nothing would cross (colocated oracles run on the decoder only after the transfer)."""
    return f"From {pair[0]} to {pair[1]}: {prompt}"


@pytest.mark.parametrize("name", ["short", "long"])
@pytest.mark.parametrize("pair", PAIRS, ids="->".join)
def test_greedy_tokens_equal_colocated(servers, pair, name):
    prefill, decode = servers[pair[0]], servers[pair[1]]
    body = body_for(prefill, fresh(pair, PROMPTS[name]))
    expected = colocated(prefill, body)
    computed = metric(decode.url, "moeserve_prompt_tokens_computed_total")
    params, out = transfer(prefill, decode, body)
    assert out["choices"][0]["token_ids"] == expected
    # the decoder computed only the last prompt token: every rank got its heads over NIXL
    assert metric(decode.url, "moeserve_prompt_tokens_computed_total") == computed + 1
    assert colocated(decode, body) == expected  # the two layouts agree colocated too
    assert params["tp_size"] == (2 if pair[0] == "tp2" else 1)


@pytest.mark.parametrize("pair", [("tp1", "tp2"), ("tp2", "tp1")], ids="->".join)
def test_streamed_decode_equals_colocated(servers, pair):
    prefill, decode = servers[pair[0]], servers[pair[1]]
    body = body_for(prefill, fresh(pair, PROMPTS["shared-a"]) + " streamed")
    expected = colocated(prefill, body)
    _, chunks = transfer(prefill, decode, dict(body, stream=True))
    assert [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids") or []] == expected


def test_an_ep_prefill_names_the_group_holding_the_blocks(servers):
    """Prefills arriving together spread over the ep2 server's two attention groups; each answer names
    its group, and the decoder reads from that group's pool."""
    prefill, decode = servers["ep2"], servers["tp1"]
    words = PROMPTS["long"].split()

    def prefill_call(body: dict) -> dict:
        r = post(prefill.url, "/v1/completions", dict(body, max_tokens=1, min_tokens=1, kv_transfer_params=ROUTER_PREFILL))
        assert r.status_code == 200, r.text
        return r.json()["kv_transfer_params"]

    groups: set[int] = set()
    # on a loaded machine six posts may reach the server one after another, each prefill done before the
    # next arrives (so all go to the idle group 0): a fresh round of six, up to three, until both were named
    for attempt in range(3):
        bodies = [body_for(prefill, f"groups {attempt}: " + " ".join(words[7 * i: 7 * i + 30]), max_tokens=6)
                  for i in range(6)]
        with ThreadPoolExecutor(len(bodies)) as pool:
            params = list(pool.map(prefill_call, bodies))
        if attempt == 0:
            wrong = dict(params[0], remote_group=1 - params[0]["remote_group"])
            r = post(decode.url, "/v1/completions", dict(bodies[0], kv_transfer_params=wrong))
            assert r.status_code == 400 and "not signed" in r.json()["error"]["message"]  # the group is signed
        # every round's blocks are read (and so released) by the decoder, which gets the colocated tokens
        outs = [decoded(decode.url, "/v1/completions", dict(b, kv_transfer_params=p)) for b, p in zip(bodies, params)]
        assert [o["choices"][0]["token_ids"] for o in outs] == [colocated(decode, b) for b in bodies]
        groups |= {p["remote_group"] for p in params}
        if groups == {0, 1}:
            break
    assert groups == {0, 1}


def test_an_ep_decoder_pulls_into_whichever_group_takes_the_request(servers):
    """Decode requests arriving together spread over the ep2 decoder's groups; each group's rank reads
    into its own pool."""
    prefill, decode = servers["tp1"], servers["ep2"]
    words = PROMPTS["long"].split()
    bodies = [body_for(prefill, "decode groups: " + " ".join(words[5 * i: 5 * i + 25]), max_tokens=6) for i in range(6)]
    expected = [colocated(prefill, b) for b in bodies]
    with ThreadPoolExecutor(len(bodies)) as pool:
        outs = list(pool.map(lambda b: transfer(prefill, decode, b)[1], bodies))
    assert [o["choices"][0]["token_ids"] for o in outs] == expected


def test_both_sides_count_the_bytes_every_rank_moved(servers):
    """tp1 -> tp2: each decode rank keeps half of each block's heads, but reads the whole blocks
    (staged: one range per block instead of one per slot); both sides count what crossed, twice the
    blocks' bytes."""
    prefill, decode = servers["tp1"], servers["tp2"]
    before = (metric(prefill.url, "moeserve_kv_transfer_bytes_total"), metric(decode.url, "moeserve_kv_transfer_bytes_total"),
              metric(decode.url, "moeserve_kv_blocks_transferred_total"))
    body = body_for(prefill, " ".join(f"count{i}" for i in range(70)), max_tokens=2)  # many blocks, none cached
    params, _ = transfer(prefill, decode, body)
    status, layout = get_json(params["remote_host"], params["remote_port"], PoolKey.from_secret(SECRET, "test"), "/layout", 10)
    assert status == 200
    block_bytes = sum(layout["ranks"][0]["block_bytes"])
    n = metric(decode.url, "moeserve_kv_blocks_transferred_total") - before[2]  # the last token's block may stay
    assert n >= len(params["remote_block_ids"]) - 1 > 4
    wait_for(lambda: metric(prefill.url, "moeserve_kv_transfer_bytes_total") > before[0])
    assert metric(decode.url, "moeserve_kv_transfer_bytes_total") - before[1] == 2 * n * block_bytes
    assert metric(prefill.url, "moeserve_kv_transfer_bytes_total") - before[0] == 2 * n * block_bytes


@pytest.mark.skipif(shutil.which("vllm-router") is None, reason="vllm-router is not installed (pip install 'moeserve[pd]')")
def test_through_vllm_router_from_ep2_to_tp2(servers):
    prefill, decode = servers["ep2"], servers["tp2"]
    router, url = start_router(prefill, decode)
    try:
        body = body_for(prefill, fresh(("ep2", "tp2"), PROMPTS["long"]) + " routed")
        expected = colocated(prefill, body)
        r = first_routed(url, body)
        assert r.json()["choices"][0]["token_ids"] == expected
        chunks = decoded(url, "/v1/completions", dict(body, prompt=body["prompt"] + " again", stream=True))
        streamed = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids") or []]
        assert streamed == colocated(decode, dict(body, prompt=body["prompt"] + " again"))
    finally:
        router.kill()
        router.wait(10)


def test_pools_are_idle_afterwards(servers):
    for server in servers.values():
        wait_for(lambda: metric(server.url, "moeserve_kv_blocks_pinned_remote") == 0, 60)
        wait_for(lambda: metric(server.url, "moeserve_kv_cache_blocks_used") == 0)


def test_prefill_killed_every_decode_rank_fails_the_request_with_a_503_and_lives(servers):
    """Last: it kills the tp1 server. Both ranks of the tp2 decoder fail their reads (or the front end
    finds the side channel gone first): a 503, no rank hangs, and the server serves on."""
    prefill, decode = servers["tp1"], servers["tp2"]
    body = body_for(prefill, PROMPTS["long"])
    first = post(prefill.url, "/v1/completions", dict(body, max_tokens=1, kv_transfer_params=ROUTER_PREFILL)).json()
    prefill.kill()
    r = post(decode.url, "/v1/completions", dict(body, kv_transfer_params=first["kv_transfer_params"]))
    assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"
    assert httpx.get(decode.url + "/health", timeout=10).status_code == 200
    assert post(decode.url, "/v1/completions", body).status_code == 200
    wait_for(lambda: metric(decode.url, "moeserve_kv_cache_blocks_used") == 0)
