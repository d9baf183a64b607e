"""A client that goes away (streaming or not; queued or running) aborts its request and its KV blocks
are free again within a few steps, as /metrics shows. Other requests are untouched."""
from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest
from server_settings import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def metric(server, name: str, labels: str = "") -> float:
    text = httpx.get(server.url + "/metrics", headers=AUTH, timeout=30).text
    m = re.search(rf"^{re.escape(name + labels)} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def wait_until(cond, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def aborts(server) -> float:
    return metric(server, "moeserve_requests_total", '{finish_reason="abort"}')


def idle(server) -> bool:
    return (metric(server, "moeserve_kv_cache_blocks_used") == 0 and metric(server, "moeserve_num_requests_running") == 0
            and metric(server, "moeserve_num_requests_waiting") == 0)


def long_body(stream: bool) -> dict:
    return {"prompt": "Tell me a long story", "max_tokens": 200, "temperature": 0, "ignore_eos": True, "stream": stream}


def test_disconnect_mid_stream_frees_kv(server):
    wait_until(lambda: idle(server))
    before = aborts(server)
    with httpx.stream("POST", server.url + "/v1/completions", json=long_body(True), headers=AUTH, timeout=60) as r:
        lines = r.iter_lines()
        got = 0
        for line in lines:
            got += line.startswith("data: ")
            if got == 3:
                break
        assert metric(server, "moeserve_kv_cache_blocks_used") > 0 or got == 3
    # leaving the block closed the connection mid-stream
    wait_until(lambda: aborts(server) == before + 1)
    wait_until(lambda: idle(server), 10.0)


def test_disconnect_while_waiting_for_a_non_streaming_answer(server):
    wait_until(lambda: idle(server))
    before = aborts(server)
    try:
        # 200 decode steps take well over 0.2 s (each step is milliseconds of Python and GEMMs)
        httpx.post(server.url + "/v1/completions", json=long_body(False), headers=AUTH, timeout=httpx.Timeout(60, read=0.2))
        raise AssertionError("a 200-token answer should take longer than 0.2 s")
    except httpx.ReadTimeout:
        pass
    wait_until(lambda: aborts(server) == before + 1)
    wait_until(lambda: idle(server), 10.0)


@pytest.mark.slow
def test_disconnect_while_queued_leaves_running_requests_alone(server):
    """max_num_seqs is 8: eight streams run, the ninth waits; dropping it must not touch the others."""
    wait_until(lambda: idle(server))
    finishes: list = []

    def stream_one(i: int) -> None:
        body = dict(long_body(True), max_tokens=240, prompt=f"Runner {i}")  # long enough to overlap on a fast engine
        with httpx.stream("POST", server.url + "/v1/completions", json=body, headers=AUTH, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    reason = json.loads(line[6:])["choices"][0]["finish_reason"]
                    if reason:
                        finishes.append(reason)

    runners = [threading.Thread(target=stream_one, args=(i,)) for i in range(8)]
    for t in runners:
        t.start()
    wait_until(lambda: metric(server, "moeserve_num_requests_running") == 8)
    before = aborts(server)
    try:
        httpx.post(server.url + "/v1/completions", json=long_body(False), headers=AUTH, timeout=httpx.Timeout(60, read=0.5))
    except httpx.ReadTimeout:
        pass
    wait_until(lambda: aborts(server) == before + 1)
    wait_until(lambda: metric(server, "moeserve_num_requests_waiting") == 0, 10.0)  # engine stats lag a heartbeat
    for t in runners:
        t.join(180)
    assert finishes == ["length"] * 8
    wait_until(lambda: idle(server), 10.0)
