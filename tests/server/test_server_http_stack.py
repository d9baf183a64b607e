"""The front end runs on uvloop + httptools (C), as vLLM's uvicorn does; MOESERVE_FAST_HTTP=0 (or
either missing) falls back to asyncio + h11 (pure Python) with the same answers."""
from __future__ import annotations

import json

import httpx
from conftest import API_KEY, SERVER_ARGS
from server_harness import ServerProcess

from moeserve.server.cli import fast_http

AUTH = {"Authorization": f"Bearer {API_KEY}"}
BODY = {"prompt": "The experts", "max_tokens": 6, "temperature": 0, "stream": True}


def streamed_text(url: str) -> str:
    with httpx.stream("POST", url + "/v1/completions", json=BODY, headers=AUTH, timeout=120) as r:
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1] if json.loads(e)["choices"])


def test_the_default_stack_is_uvloop_and_httptools(server, monkeypatch):
    assert fast_http()  # both are dependencies
    assert any("HTTP front end: uvloop + httptools" in line for line in server.lines), server.log_tail()
    monkeypatch.setenv("MOESERVE_FAST_HTTP", "0")
    assert not fast_http()


def test_the_pure_python_fallback_gives_the_same_answers(server):
    slow = ServerProcess(*SERVER_ARGS, env={"MOESERVE_FAST_HTTP": "0"})
    try:
        assert any("HTTP front end: asyncio + h11" in line for line in slow.lines), slow.log_tail()
        assert streamed_text(slow.url) == streamed_text(server.url)
        for srv in (slow, server):  # errors keep their shape on both stacks
            bad = httpx.post(srv.url + "/v1/completions", content=b"{not json", headers=AUTH, timeout=30)
            assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
            big = httpx.post(srv.url + "/v1/completions", content=b"x" * 70000, headers=AUTH, timeout=30)
            assert big.status_code == 413 and "error" in big.json()
    finally:
        slow.kill()
