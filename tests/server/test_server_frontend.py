"""The front end in-process (ASGI) against a fake engine loop over a socket: fan-out, and what
happens when the engine dies or gets stuck. Fast: no model, no subprocess."""
from __future__ import annotations

import asyncio
import socket
import threading

import httpx
from server_fakes import FakeEngine, FakeTokenizer

from moeserve.config import EngineConfig
from moeserve.server import ipc
from moeserve.server.app import build_app
from moeserve.server.common import ServerState
from moeserve.server.config_file import ServerConfig
from moeserve.server.engine_client import EngineClient
from moeserve.server.engine_process import Channel, EngineLoop
from moeserve.server.metrics import ServerMetrics


def start_fake_engine(engine: FakeEngine) -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    channel = Channel(theirs)

    def serve() -> None:
        channel.send(ipc.Ready("fake", engine.max_model_len, engine.vocab_size, "/nonexistent"))
        try:
            EngineLoop(engine, channel, heartbeat_s=0.05).run()
        except OSError:
            pass  # the test closed the socket: the "engine" is gone

    threading.Thread(target=serve, daemon=True).start()
    return ours, theirs


async def make_app(engine: FakeEngine, health_timeout_s: float = 60.0):
    ours, theirs = start_fake_engine(engine)
    client = EngineClient(EngineConfig(), health_timeout_s=health_timeout_s)
    ready = await client.attach(ours)
    state = ServerState(client, ServerConfig(), FakeTokenizer(), ready.model_name, ready.max_model_len, 100,
                        ServerMetrics(lambda: client.stats, lambda: client.healthy))
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(state)), base_url="http://test", timeout=30)
    return http, client, theirs


def fake_tokens(prompt: list[int], n: int) -> list[int]:
    return [(sum(prompt) + k) % 50 for k in range(n)]


def test_fan_out_over_prompts_and_n():
    async def main():
        http, client, _ = await make_app(FakeEngine(max_waiting=100))
        r = await http.post("/v1/completions", json={"prompt": [[1, 2], [30]], "n": 2, "max_tokens": 3,
                                                      "return_token_ids": True})
        await client.shutdown(1.0)
        return r

    r = asyncio.run(main())
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    assert [c["token_ids"] for c in choices] == [fake_tokens([1, 2], 3)] * 2 + [fake_tokens([30], 3)] * 2
    assert choices[0]["text"] == "".join(f"t{t} " for t in fake_tokens([1, 2], 3))
    assert r.json()["usage"] == {"prompt_tokens": 3, "completion_tokens": 12, "total_tokens": 15,
                                 "prompt_tokens_details": {"cached_tokens": 0}}


def test_engine_death_fails_pending_requests_and_health():
    async def main():
        http, client, theirs = await make_app(FakeEngine())
        assert (await http.get("/health")).status_code == 200
        pending = asyncio.create_task(http.post("/v1/completions", json={"prompt": [1], "max_tokens": 900}))
        await asyncio.sleep(0.3)
        theirs.close()  # the engine vanishes mid-request
        r = await pending
        health = await http.get("/health")
        late = await http.post("/v1/completions", json={"prompt": [1], "max_tokens": 2})
        await client.shutdown(1.0)
        return r, health, late

    r, health, late = asyncio.run(main())
    for resp in (r, health, late):
        assert resp.status_code == 503, resp.text
        assert set(resp.json()["error"]) == {"message", "type", "param", "code"}


def test_stuck_engine_turns_health_503_and_fails_pending():
    class StuckEngine(FakeEngine):
        def step(self):
            if self.steps == 3:
                threading.Event().wait(3.0)  # a step that never seems to end
            return super().step()

    async def main():
        http, client, _ = await make_app(StuckEngine(), health_timeout_s=0.5)
        r = await http.post("/v1/completions", json={"prompt": [1], "max_tokens": 50})
        health = await http.get("/health")
        await client.shutdown(1.0)
        return r, health

    r, health = asyncio.run(main())
    assert r.status_code == 503 and "heartbeat" in r.json()["error"]["message"]
    assert health.status_code == 503
