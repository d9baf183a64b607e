"""The server over several ranks: `--ep 16 --tp 4` on the built-in model answers with the same greedy
tokens as one rank; a rank killed during traffic turns into errors and /health 503, and every rank
and the engine process exit."""
from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest
from server_harness import ServerProcess, alive, child_pids, descendants

from moeserve import SamplingParams

pytestmark = pytest.mark.slow  # 16 ranks behind a server, and rank failures

PROMPTS = ["Hello, world!", "Experts are placed on ranks", "The quick brown fox jumps"]


def _completion(url: str, model: str, prompt: str, max_tokens: int = 12) -> list[int]:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    r = httpx.post(url + "/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


@pytest.mark.timeout(900)
def test_ep16_tp4_serves_the_same_greedy_tokens_as_one_rank(llm):
    srv = ServerProcess("--ep", "16", "--tp", "4", "--dispatch", "shm", "--kv-cache-blocks", "96", "--max-model-len", "256",
                        startup_timeout_s=800)
    try:
        ranks = descendants(srv.proc.pid)
        assert len(ranks) >= 16  # the engine process (rank 0) and 15 rank workers
        params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
        want = [o.token_ids for o in llm.generate(PROMPTS, params)]
        got = [None] * len(PROMPTS)

        def ask(i: int) -> None:
            got[i] = _completion(srv.url, srv.model, PROMPTS[i])

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == want
    finally:
        srv.kill()
        for pid in descendants(srv.proc.pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(600)
def test_killed_rank_gives_errors_health_503_and_no_rank_left():
    srv = ServerProcess("--ep", "2", "--tp", "1", "--max-model-len", "2048", startup_timeout_s=400)
    try:
        engine = child_pids(srv.proc.pid)
        ranks = descendants(srv.proc.pid)
        workers = [p for p in ranks if p not in engine]
        assert workers, "expected a rank worker process"
        results: list[int | str] = []

        def long_request() -> None:
            body = {"model": srv.model, "prompt": "Hello", "max_tokens": 1500, "temperature": 0, "ignore_eos": True}
            try:
                r = httpx.post(srv.url + "/v1/completions", json=body, timeout=120)
                results.append(r.status_code)
            except httpx.HTTPError as e:
                results.append(type(e).__name__)

        t = threading.Thread(target=long_request)
        t.start()
        time.sleep(3)
        os.kill(workers[0], signal.SIGKILL)
        killed_at = time.monotonic()
        t.join(timeout=120)
        assert results and results[0] != 200  # the pending request got an error, not silence
        while httpx.get(srv.url + "/health", timeout=5).status_code != 503:
            assert time.monotonic() - killed_at < 30, "/health still 200 30 s after a rank died"
            time.sleep(0.5)
        deadline = time.monotonic() + 30
        while any(alive(p) for p in ranks):
            assert time.monotonic() < deadline, "a rank or the engine process outlived the failure"
            time.sleep(0.5)
    finally:
        srv.kill()


@pytest.mark.timeout(900)
def test_stopped_rank_times_out_and_no_process_outlives_the_server():
    """A rank that stops making progress (SIGSTOP: alive, holding its sockets, running nothing, not even
    its own parent watcher) fails the pending request after --step-timeout-s, turns /health to 503,
    and is gone once the server has exited: only SIGKILL ends a stopped process."""
    srv = ServerProcess("--ep", "2", "--tp", "1", "--max-model-len", "2048", "--step-timeout-s", "5",
                        startup_timeout_s=400)
    stopped = None
    try:
        engine = child_pids(srv.proc.pid)
        tree = descendants(srv.proc.pid)
        stopped = next(p for p in tree if p not in engine)
        results: list[int | str] = []

        def long_request() -> None:
            body = {"model": srv.model, "prompt": "Hello", "max_tokens": 1500, "temperature": 0, "ignore_eos": True}
            try:
                results.append(httpx.post(srv.url + "/v1/completions", json=body, timeout=120).status_code)
            except httpx.HTTPError as e:
                results.append(type(e).__name__)

        t = threading.Thread(target=long_request)
        t.start()
        time.sleep(3)
        os.kill(stopped, signal.SIGSTOP)
        stopped_at = time.monotonic()
        t.join(timeout=120)
        assert results and results[0] != 200
        while (health := httpx.get(srv.url + "/health", timeout=5)).status_code != 503:
            assert time.monotonic() - stopped_at < 30, "/health still 200 30 s after a rank stopped"
            time.sleep(0.5)
        assert "rank 1 is stopped" in health.json()["error"]["message"], health.text  # not a peer's exit
        srv.terminate()
        srv.wait(60)
        deadline = time.monotonic() + 20
        while any(alive(p) for p in tree):
            assert time.monotonic() < deadline, [p for p in tree if alive(p)]
            time.sleep(0.5)
    finally:
        if stopped is not None and alive(stopped):
            os.kill(stopped, signal.SIGKILL)
        srv.kill()
