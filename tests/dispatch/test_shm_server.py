"""`moeserve serve --ep 2 --dispatch shm` over HTTP: the single-rank greedy tokens; then a rank killed by
SIGKILL during traffic (rank 1, a spawned worker; or rank 0, the engine process itself) gives the
pending request an error, /health 503 within 30 s, and leaves no process and no /dev/shm segment."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "server"))
from server_harness import ServerProcess, alive, child_pids, descendants  # noqa: E402

pytestmark = pytest.mark.slow  # spawns ranks, servers or builds: left out of the quick run

PROMPTS = ["Hello, world!", "Experts are placed on ranks"]


def _completion(srv: ServerProcess, prompt: str, max_tokens: int) -> httpx.Response:
    body = {"model": srv.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    return httpx.post(srv.url + "/v1/completions", json=body, timeout=120)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("victim", ["rank 1", "rank 0"])
def test_shm_server_tokens_then_kill_9_gives_503_and_leaves_nothing(victim):
    from moeserve import LLM, SamplingParams

    ref = LLM(max_model_len=2048)
    try:
        want = [o.token_ids for o in ref.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))]
    finally:
        ref.shutdown()
    srv = ServerProcess("--ep", "2", "--tp", "1", "--dispatch", "shm", "--max-model-len", "2048", startup_timeout_s=600)
    try:
        engine = child_pids(srv.proc.pid)
        tree = descendants(srv.proc.pid)
        workers = [p for p in tree if p not in engine]
        got = [_completion(srv, p, 12).json()["choices"][0]["token_ids"] for p in PROMPTS]
        assert got == want
        results: list[object] = []

        def long_request() -> None:
            try:
                results.append(_completion(srv, "Hello", 1500).status_code)
            except httpx.HTTPError as e:
                results.append(type(e).__name__)

        t = threading.Thread(target=long_request)
        t.start()
        time.sleep(3)
        os.kill(workers[0] if victim == "rank 1" else engine[0], signal.SIGKILL)
        killed_at = time.monotonic()
        t.join(timeout=120)
        assert results and results[0] != 200
        while httpx.get(srv.url + "/health", timeout=5).status_code != 503:
            assert time.monotonic() - killed_at < 30, "/health still 200 30 s after a rank died"
            time.sleep(0.5)
        deadline = time.monotonic() + 30
        while any(alive(p) for p in tree):
            assert time.monotonic() < deadline, "a rank or the engine process outlived the failure"
            time.sleep(0.5)
        assert not [n for e in engine for n in os.listdir("/dev/shm") if n.startswith(f"moeserve-{e}-")]
    finally:
        srv.kill()
