"""500s: an unexpected exception and a request the engine fails both answer the OpenAI error shape
(an SSE error event, then [DONE], once a stream has begun); the client never sees the exception's
text, and the server log holds the request id with the full traceback. In-process, fake engine."""
from __future__ import annotations

import asyncio
import json
import logging
import re

from server_fakes import FakeEngine, FakeTokenizer, make_app
from test_server_bad_requests import check_error

from moeserve.outputs import RequestOutput

SECRET = "cannot read /srv/secret/vocab.json (object at 0x7f00deadbeef)"


class ExplodingTokenizer(FakeTokenizer):
    """encode fails (a non-streaming request fails before generating); decode too, for logprobs
    text mid-stream."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if "explode" in text:
            raise RuntimeError(SECRET)
        return super().encode(text, add_special_tokens)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        raise RuntimeError(SECRET)


class FailingEngine(FakeEngine):
    """Ends every request with finish_reason "error" after its first token, as EngineCore does for a
    request the scheduler can never fit; the message carries a path and an address."""

    def step(self) -> list[RequestOutput]:
        outs = super().step()
        for i, out in enumerate(outs):
            if out.new_token_ids and out.finish_reason is None:
                self.requests.pop(out.request_id, None)
                outs[i] = RequestOutput(out.request_id, out.prompt_token_ids, out.token_ids, text=out.text,
                                        finish_reason="error", error=f"request failed in /srv/engine.py at 0x7f0011223344")
        return outs


def sse_events(text: str) -> list:
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def request_id(message: str) -> str:
    m = re.search(r"request id (\S+?)\)?$", message)
    assert m, message
    return m.group(1)


def run(engine: FakeEngine, tokenizer, *requests: tuple[str, dict]) -> list:
    async def main():
        http, client, _ = await make_app(engine, tokenizer=tokenizer)
        responses = [await http.post(path, json=body) for path, body in requests]
        health = await http.get("/health")
        await client.shutdown(1.0)
        return responses + [health]

    return asyncio.run(main())


def test_an_unexpected_error_is_a_generic_500_whose_id_is_logged_with_the_traceback(caplog):
    caplog.set_level(logging.ERROR, logger="moeserve.server")
    r, health = run(FakeEngine(), ExplodingTokenizer(), ("/v1/completions", {"prompt": "explode", "max_tokens": 2}))
    check_error(r, 500, None)
    err = r.json()["error"]
    assert err["type"] == "server_error" and err["code"] == "internal_error"
    assert "secret" not in err["message"] and err["message"].startswith("internal server error")
    logged = [rec for rec in caplog.records if request_id(err["message"]) in rec.getMessage()]
    assert logged and logged[0].exc_info and SECRET in str(logged[0].exc_info[1])
    assert health.status_code == 200


def test_an_unexpected_error_mid_stream_is_an_error_event_then_done(caplog):
    caplog.set_level(logging.ERROR, logger="moeserve.server")
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "logprobs": True, "stream": True}
    r, health = run(FakeEngine(), ExplodingTokenizer(), ("/v1/chat/completions", body))
    assert r.status_code == 200  # the stream had begun: its first chunk is the role
    events = sse_events(r.text)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-1] == "[DONE]" and set(events[-2]) == {"error"}
    err = events[-2]["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == "internal_error"
    assert "secret" not in r.text and "0x7f" not in r.text
    assert any(request_id(err["message"]) in rec.getMessage() and rec.exc_info for rec in caplog.records)
    assert health.status_code == 200


def test_a_request_the_engine_fails_is_a_500_not_a_finish_reason():
    plain = ("/v1/completions", {"prompt": [1, 2], "max_tokens": 5})
    streamed = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True})
    r, s, health = run(FailingEngine(), FakeTokenizer(), plain, streamed)
    check_error(r, 500, None)
    assert r.json()["error"]["code"] == "engine_error" and "choices" not in r.json()
    assert "request failed" in r.json()["error"]["message"]  # the engine's own words, less path and address
    events = sse_events(s.text)
    assert events[-1] == "[DONE]" and set(events[-2]["error"]) == {"message", "type", "param", "code"}
    assert all(c["finish_reason"] != "error" for e in events[:-2] for c in e["choices"])
    assert "/srv" not in s.text and "0x7f" not in s.text
    assert health.status_code == 200  # one failed request leaves the engine serving


def test_a_draining_server_says_why_when_its_engine_died_first():
    """A lost host stops the launch, whose SIGTERM drains the server: /health keeps the engine's reason
    (a client polling it learns what happened), and a plain shutdown says only that."""
    from types import SimpleNamespace

    import httpx

    from moeserve.server.app import Gate
    from moeserve.server.metrics import ServerMetrics

    async def ok(scope, receive, send):
        raise AssertionError("a draining server must not reach the app")

    async def health(dead_reason):
        state = SimpleNamespace(config=SimpleNamespace(api_key=None, allowed_origins=()), draining=True,
                                client=SimpleNamespace(dead_reason=dead_reason),
                                metrics=ServerMetrics(lambda: {}, lambda: False, "m"))
        transport = httpx.ASGITransport(app=Gate(ok, state, {"/health"}))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return await http.get("/health")

    lost = "host-b (10.0.0.2, ranks 2, 3) did not answer for 10 s"
    r = asyncio.run(health(lost))
    assert r.status_code == 503
    assert r.json()["error"]["message"] == f"the server is shutting down: the engine is not available: {lost}"
    for reason in (None, "the server is shutting down"):
        r = asyncio.run(health(reason))
        assert r.status_code == 503 and r.json()["error"]["message"] == "the server is shutting down"
