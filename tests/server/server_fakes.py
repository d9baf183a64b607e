"""A deterministic stand-in for EngineCore (same API) for tests of the engine loop and IPC, and the
front end in-process (ASGI) in front of it over a real socket: `make_app`."""
from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import httpx

from moeserve.config import EngineConfig
from moeserve.errors import QueueFullError, RequestError
from moeserve.outputs import RequestOutput
from moeserve.server import ipc
from moeserve.server.app import build_app
from moeserve.server.common import ServerState
from moeserve.server.config_file import ServerConfig
from moeserve.server.engine_client import EngineClient
from moeserve.server.engine_process import Channel, EngineLoop
from moeserve.server.metrics import ServerMetrics


class FakeEngine:
    """Token k of a request is (sum(prompt) + k) % 50; one token per running request per step."""

    model_name = "fake"
    max_model_len = 1000
    vocab_size = 100
    config = SimpleNamespace(model=SimpleNamespace(model="/nonexistent/fake"))

    def __init__(self, max_waiting: int = 2, fail_on_step: int | None = None):
        self.requests: dict[str, tuple[list[int], object, list[int]]] = {}
        self.pending: list[RequestOutput] = []
        self.max_waiting = max_waiting
        self.fail_on_step = fail_on_step
        self.steps = 0
        self.shut = False

    def add_request(self, request_id, prompt_token_ids, params, owner=None) -> None:
        if len(prompt_token_ids) + params.max_tokens > self.max_model_len:
            raise RequestError("too long", param="max_tokens")
        if len(self.requests) >= self.max_waiting:
            raise QueueFullError("queue full", code="queue_full")
        self.requests[request_id] = (prompt_token_ids, params, [])

    def abort_request(self, request_id, output: bool = True) -> None:
        if self.requests.pop(request_id, None) is not None and output:
            self.pending.append(RequestOutput(request_id, [], finish_reason="abort"))

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests or self.pending)

    def step(self) -> list[RequestOutput]:
        self.steps += 1
        time.sleep(0.002)  # a step takes time, so tests can act between steps
        if self.steps == self.fail_on_step:
            raise RuntimeError("boom")
        outs, self.pending = self.pending, []
        for rid, (prompt, params, toks) in list(self.requests.items()):
            tok = (sum(prompt) + len(toks)) % 50
            toks.append(tok)
            done = len(toks) >= params.max_tokens
            text = "".join(f"t{t} " for t in toks)
            outs.append(RequestOutput(rid, prompt, list(toks), text=text, new_token_ids=[tok], delta_text=f"t{tok} ",
                                      new_logprobs=[(-0.5, [(tok, -0.5), (tok + 1, -1.5)], 1)],
                                      finish_reason="length" if done else None))
            if done:
                del self.requests[rid]
        return outs

    def stats(self) -> dict:
        return {"num_running": len(self.requests), "num_waiting": 0, "num_steps": self.steps, "nested": {"x": 1}}

    def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        self.shut = True


class FakeTokenizer:
    """Character-level: enough for the front end's encode / decode / chat-template calls."""

    chat_template = None

    def __len__(self) -> int:
        return 100

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) % 100 for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(f"t{i} " for i in ids)

    def apply_chat_template(self, messages, chat_template=None, add_generation_prompt=True, continue_final_message=False,
                            tokenize=False) -> str:
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + ("assistant:" if add_generation_prompt else "")


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


async def make_app(engine: FakeEngine, health_timeout_s: float = 60.0, max_queued_requests: int | None = None,
                   tokenizer=None, config: ServerConfig | None = None, engine_config: EngineConfig | None = None,
                   sampling_defaults: dict | None = None):
    """The real front end (ASGI, in-process) talking ipc to `engine`'s loop over a socket pair:
    (httpx client, EngineClient, the engine side's socket; close it and the engine is gone)."""
    ours, theirs = start_fake_engine(engine)
    client = EngineClient(engine_config or EngineConfig(), health_timeout_s=health_timeout_s)
    ready = await client.attach(ours)
    state = ServerState(client, config or ServerConfig(), tokenizer or FakeTokenizer(), ready.model_name, ready.max_model_len, 100,
                        ServerMetrics(lambda: client.stats, lambda: client.healthy, ready.model_name), max_queued_requests,
                        sampling_defaults=sampling_defaults or {})
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(state)), base_url="http://test", timeout=30)
    return http, client, theirs
