"""Prefill/decode across simulated hosts, as it is deployed: servers on their own hosts, each with its
host's address facing the pool (--kv-side-channel-host, where its side channel and UCX listen) and the
pool's secret given to all, vllm-router on a host of its own, KV blocks read over UCX's TCP transport
between hosts. Greedy tokens equal a colocated server's and the decoder computes only each prompt's last
token; a pool may span hosts (--nodes 2 under torchrun: every rank's agent, on its own host, is named in
/layout and read from); a killed router or prefill host fails what they held and nothing else, and
leaves no process and no /dev/shm segment behind. (A host of a spanning server that goes away is
named and ends that server: test_two_hosts.py, test_interfaces.py.)"""
from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from servers import SECRET, Router, Server

from moeserve.kv_transfer.peer_calls import get_json
from moeserve.kv_transfer.trust import PoolKey

if not any(importlib.util.find_spec(m) for m in ("nixl_cu12", "nixl")):
    pytest.skip("NIXL is not installed (pip install 'moeserve[pd]')", allow_module_level=True)

pytestmark = pytest.mark.slow  # several servers on several hosts

# no UCX_* variable: moeserve binds UCX to each host's interface facing the pool itself
ENV = dict({k: "" for k in os.environ if k.startswith("UCX_")}, MOESERVE_KV_SECRET=SECRET)
ARGS = ["--kv-cache-blocks", "160", "--max-model-len", "1024", "--max-num-seqs", "8"]
ROUTER_PREFILL = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                  "remote_block_ids": None, "remote_host": None, "remote_port": None}
PROMPTS = ["Hello world", "The quick brown fox jumps over the lazy dog " * 3,
           " ".join(f"word{i} and thing{i * 7 % 13}" for i in range(60)), "In the beginning the river ran " * 6]


def facing(host) -> list[str]:
    return ["--kv-side-channel-host", host.address]


def body(model: str, prompt: str, **extra) -> dict:
    return {"model": model, "prompt": prompt, "max_tokens": 10, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True, **extra}


def tokens(r: httpx.Response) -> list[int]:
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def prefill_call(host, prefill: Server, b: dict) -> dict:
    """The router's first call, made from `host`: the signed kv_transfer_params."""
    r = host.call(httpx.post, prefill.url + "/v1/completions", timeout=120,
                  json=dict(b, max_tokens=1, min_tokens=1, stream=False, kv_transfer_params=ROUTER_PREFILL))
    assert r.status_code == 200, r.text
    return r.json()["kv_transfer_params"]


@pytest.fixture(scope="module")
def pool(make_module_cluster):
    """host-a: prefill --tp 2; host-b: decode --ep 2; host-c: vllm-router in front of them; host-d and
    host-e: a pool --ep 4 --tp 2 --nodes 2 (torchrun on each) with --kv-role both --kv-transfer nixl, so
    it decodes from host-a and prefills for host-b: a side spanning hosts in both roles. Started side
    by side."""
    a, b, c, d, e = make_module_cluster(5)
    with ThreadPoolExecutor(3) as starting:
        launches = [
            starting.submit(Server, [a], [*ARGS, "--tp", "2", "--kv-role", "prefill", *facing(a)], env=ENV, public=True),
            starting.submit(Server, [b], [*ARGS, "--ep", "2", "--kv-role", "decode", *facing(b)], env=ENV, public=True),
            starting.submit(Server, [d, e], [*ARGS, "--ep", "4", "--tp", "2", "--kv-role", "both", "--kv-transfer",
                                             "nixl", "--step-timeout-s", "20"], nproc=2, per_host=facing, env=ENV,
                            public=True),
        ]
        servers = []
        for launch in launches:
            try:
                servers.append(launch.result())
            except BaseException:
                for f in launches:
                    if f.exception() is None:
                        f.result().kill()
                raise
    prefill, decode, spanning = servers
    router = Router(c, [prefill], [decode])
    colocated = [tokens(prefill.post("/v1/completions", body(prefill.model, p))) for p in PROMPTS]
    try:
        yield dict(hosts=(a, b, c, d, e), prefill=prefill, decode=decode, spanning=spanning, router=router,
                   colocated=colocated)
    finally:
        router.kill()
        for server in servers:
            server.kill()


def test_prefill_tp2_decode_ep2_router_on_three_hosts(pool):
    prefill, decode, router, colocated = pool["prefill"], pool["decode"], pool["router"], pool["colocated"]
    router.first(body(prefill.model, "warm up"))
    computed = decode.metric("moeserve_prompt_tokens_computed_total")
    with ThreadPoolExecutor(len(PROMPTS)) as threads:  # at once: both of the decoder's attention groups read
        routed = list(threads.map(lambda p: tokens(router.post("/v1/completions", body(prefill.model, p))), PROMPTS))
    assert routed == colocated
    # the decoder computed only the last token of each prompt: the rest crossed from host-a
    assert decode.metric("moeserve_prompt_tokens_computed_total") == computed + len(PROMPTS)
    assert decode.metric("moeserve_kv_transfer_bytes_total") > 0


def test_a_decode_pool_spanning_two_hosts_reads_from_a_prefill_pool_on_a_third(pool):
    prefill, spanning, colocated = pool["prefill"], pool["spanning"], pool["colocated"]
    c = pool["hosts"][2]
    computed = spanning.metric("moeserve_prompt_tokens_computed_total")

    def pd(prompt: str) -> list[int]:
        b_ = body(prefill.model, prompt)
        return tokens(spanning.post("/v1/completions", dict(b_, kv_transfer_params=prefill_call(c, prefill, b_))))

    with ThreadPoolExecutor(len(PROMPTS)) as threads:  # both attention groups: one per host
        assert list(threads.map(pd, PROMPTS)) == colocated
    assert spanning.metric("moeserve_prompt_tokens_computed_total") == computed + len(PROMPTS)
    assert spanning.metric("moeserve_kv_transfer_failures_total") == 0


def test_a_prefill_pool_spanning_two_hosts_is_read_from_a_third(pool):
    spanning, decode, colocated = pool["spanning"], pool["decode"], pool["colocated"]
    c, d, e = pool["hosts"][2:]
    computed = decode.metric("moeserve_prompt_tokens_computed_total")
    answers = []

    def pd(prompt: str) -> list[int]:
        b_ = body(spanning.model, prompt)
        params = prefill_call(c, spanning, b_)
        answers.append(params)
        return tokens(decode.post("/v1/completions", dict(b_, kv_transfer_params=params)))

    with ThreadPoolExecutor(len(PROMPTS)) as threads:  # both of its attention groups prefill: one per host
        assert list(threads.map(pd, PROMPTS)) == colocated
    assert decode.metric("moeserve_prompt_tokens_computed_total") == computed + len(PROMPTS)
    # /layout names every rank's agent with the address of its own host (its --kv-side-channel-host)
    status, layout = c.call(get_json, d.address, answers[0]["remote_port"], PoolKey.from_secret(SECRET, "test"),
                            "/layout", 10)
    assert status == 200
    assert [(r["group"], r["tp_rank"], r["host"]) for r in layout["ranks"]] == [
        (0, 0, d.address), (0, 1, d.address), (1, 0, e.address), (1, 1, e.address)]
    assert {p["remote_host"] for p in answers} == {d.address}  # the side channel is rank 0's, on host-d


def test_a_killed_router_fails_its_clients_and_nothing_else(pool):
    prefill, decode, router, c = pool["prefill"], pool["decode"], pool["router"], pool["hosts"][2]
    router.kill()
    with pytest.raises(httpx.ConnectError):
        router.post("/v1/completions", body(prefill.model, "Hello"))
    assert c.processes() == [] and c.shm_files() == []
    assert prefill.get("/health").status_code == 200 and decode.get("/health").status_code == 200


def test_a_prefill_host_gone_fails_the_requests_it_held_and_nothing_else(pool):
    prefill, decode, spanning, colocated = pool["prefill"], pool["decode"], pool["spanning"], pool["colocated"]
    a, c = pool["hosts"][0], pool["hosts"][2]
    held = [prefill_call(c, prefill, body(prefill.model, p)) for p in PROMPTS]
    requests = ThreadPoolExecutor(len(PROMPTS))
    futures = [requests.submit(decode.post, "/v1/completions", body(prefill.model, p, kv_transfer_params=k))
               for p, k in zip(PROMPTS[:2], held[:2])]
    a.kill()  # power off, while those two are claimed, read or about to be
    futures += [requests.submit(decode.post, "/v1/completions", body(prefill.model, p, kv_transfer_params=k))
                for p, k in zip(PROMPTS[2:], held[2:])]  # sent after it went, side by side: each waits its timeout
    outcomes = [f.result(timeout=120) for f in futures]
    requests.shutdown()
    late = outcomes[2:]
    for r, expect in zip(outcomes, colocated):
        assert r.status_code in (200, 503), r.text
        if r.status_code == 200:  # read before the host went
            assert tokens(r) == expect
        else:
            assert r.json()["error"]["type"] == "service_unavailable_error"
    assert [r.status_code for r in late] == [503, 503]
    for server in (decode, spanning):  # both decode pools serve on, plain requests included
        assert server.get("/health").status_code == 200
        assert tokens(server.post("/v1/completions", body(prefill.model, PROMPTS[1]))) == colocated[1]


def test_every_server_stops_cleanly_and_leaves_nothing(pool):
    for name in ("decode", "spanning"):
        pool[name].terminate()
    for name in ("decode", "spanning"):
        assert None not in pool[name].wait(90), pool[name].log_tail()
    cluster = pool["hosts"][0].cluster
    left = cluster.wait_clean(30)
    assert left == {}, left
