"""One server spanning two simulated hosts, as an operator runs it: `torchrun` on each host with
`--ep 4 --tp 2 --nodes 2` (ranks 0-1 on host-a, 2-3 on host-b). Its greedy tokens are one host's with
every dispatch backend that spans hosts (auto picks the hierarchical one); the interface between the
hosts is the one routing to the master (logged); a link taken down while the server idles is named
within the step timeout (plus the idle probe's interval), /health turns 503, and every process on
both hosts exits, leaving nothing in either host's /dev/shm."""
from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from servers import Server, run_offline

from moeserve import SamplingParams

pytestmark = pytest.mark.slow  # two torchrun launches of a whole server

PROMPTS = ["Experts are placed on ranks", "The quick brown fox jumps over the lazy dog because",
           " ".join(f"word{i}" for i in range(40)), "Hello"]
ARGS = ["--ep", "4", "--tp", "2", "--kv-cache-blocks", "96", "--max-model-len", "256", "--step-timeout-s", "10"]


@pytest.fixture(scope="module")
def one_host_tokens() -> list[list[int]]:
    from moeserve import LLM

    llm = LLM(kv_cache_blocks=96, max_model_len=256, num_threads=1)  # no start-up timing of thread counts: 14 s
    try:
        return [o.token_ids for o in llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))]
    finally:
        llm.shutdown()


def test_ep4_tp2_over_two_hosts_serves_one_hosts_tokens_and_a_link_down_ends_it_cleanly(make_cluster, one_host_tokens):
    a, b = make_cluster(2)
    server = Server([a, b], ARGS, nproc=2)
    try:
        with ThreadPoolExecutor(len(PROMPTS)) as pool:  # at once: both attention groups (one per host) serve
            answers = list(pool.map(lambda p: server.completion(p)["choices"][0]["token_ids"], PROMPTS))
        assert answers == one_host_tokens
        log = server.log_tail(400)
        assert re.search(r"rank 2: other hosts over eth0 \(10\.77\.0\.2\b", log), log
        assert "hierarchical dispatch: shm inside each of 2 hosts of 2 ranks" in log, log

        b.set_link(False)  # while the server idles
        down = time.monotonic()
        health = None
        while True:
            try:
                health = server.get("/health", timeout=10)
            except httpx.ConnectError:  # it answered 503 and exited between two polls: its log says why
                health = None
                break
            if health.status_code != 200:
                break
            assert time.monotonic() - down < 10 + 5 + 10, "/health still 200 long after host-b's link went down"
            time.sleep(0.5)
        if health is not None:
            assert health.status_code == 503
            message = health.json()["error"]["message"]
            assert not re.search(r"/\w+/|\.cc:|\.py\b|0x[0-9a-f]{6,}", message), message
        else:
            message = server.log_tail(400)
        # host-a's launch ends with its rank 0; host-b's ranks hear nothing more and exit on their own
        assert server.wait(10 + 5 + 10 + 30) != [None, None], server.log_tail()
        if message.startswith("the server is shutting down") and "did not answer" not in message:
            # the launch's SIGTERM reached the server before the engine's own error did: /health said it
            # was shutting down, and the log names the host
            message = server.log_tail(400)
        assert "host-b (10.77.0.2, ranks 2, 3) did not answer" in message, message
        left = a.cluster.wait_clean(30)
        assert left == {}, left
    finally:
        server.kill()


# the hierarchical backend (auto's pick across hosts) runs in the server test above
@pytest.mark.parametrize("dispatch, built", [("a2a", "A2ADispatcher"), ("agrs", "AgrsDispatcher")])
def test_the_collective_backends_across_two_hosts_give_one_hosts_tokens(make_cluster, one_host_tokens, dispatch, built):
    a, b = make_cluster(2)
    result = run_offline([a, b], 2, dict(ep=4, tp=2, dispatch=dispatch, kv_cache_blocks=96, max_model_len=256),
                         PROMPTS, max_tokens=12)
    assert result["dispatcher"] == built
    assert result["tokens"] == one_host_tokens
    left = a.cluster.wait_clean(30)
    assert left == {}, left
