"""The front end's limits against abusive bodies and headers (docs/limits.md), in-process (ASGI)
against a fake engine: --max-n, guided decoding fields, two Authorization headers, the owner every
choice of a request carries to the engine (the scheduler's unit of fairness)."""
from __future__ import annotations

import asyncio

from server_fakes import FakeEngine, make_app

from moeserve.config import EngineConfig, SchedulerConfig
from moeserve.server.config_file import ServerConfig


async def _post(path: str, body: dict, headers: dict | list | None = None, **app_kwargs):
    engine = app_kwargs.pop("engine", None) or FakeEngine(max_waiting=100)
    http, client, _ = await make_app(engine, **app_kwargs)
    try:
        return await http.post(path, json=body, headers=headers)
    finally:
        await client.shutdown(1.0)


def test_n_above_max_n_is_a_400_naming_the_flag():
    config = EngineConfig(scheduler=SchedulerConfig(max_n=4))
    ok = asyncio.run(_post("/v1/completions", {"prompt": [1, 2], "n": 4, "max_tokens": 2}, engine_config=config))
    assert ok.status_code == 200, ok.text
    for body in ({"prompt": [1, 2], "n": 5, "max_tokens": 2}, {"prompt": [1, 2], "n": 5, "best_of": 5, "max_tokens": 2}):
        r = asyncio.run(_post("/v1/completions", body, engine_config=config))
        assert r.status_code == 400 and r.json()["error"]["param"] == "n" and "--max-n" in r.json()["error"]["message"]
    r = asyncio.run(_post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 5},
                          engine_config=config))
    assert r.status_code == 400 and "--max-n" in r.json()["error"]["message"]


def test_guided_decoding_fields_are_refused_unless_null():
    """`guided_json: {}` was taken for "off" and silently not applied (vLLM constrains by it)."""
    for field, value in (("guided_json", {}), ("guided_choice", []), ("guided_regex", ""), ("structured_outputs", {})):
        r = asyncio.run(_post("/v1/completions", {"prompt": [1], "max_tokens": 2, field: value}))
        assert r.status_code == 400 and r.json()["error"]["param"] == field, (field, r.text)
    r = asyncio.run(_post("/v1/completions", {"prompt": [1], "max_tokens": 2, "guided_json": None}))
    assert r.status_code == 200
    # vLLM's other guided fields were ignored: a whitespace pattern or structural tag not applied, a
    # backend other than the one that runs (xgrammar) not used
    for field, value in (("guided_whitespace_pattern", " "), ("structural_tag", "{}"), ("guided_decoding_backend", "outlines")):
        r = asyncio.run(_post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], field: value}))
        assert r.status_code == 400 and r.json()["error"]["param"] == field, (field, r.text)
    for value in ("xgrammar", "auto", None):
        r = asyncio.run(_post("/v1/completions", {"prompt": [1], "max_tokens": 2, "guided_decoding_backend": value}))
        assert r.status_code == 200, (value, r.text)


def test_two_authorization_headers_are_a_400():
    """The last one won; which one a proxy checked and which the server believed could differ."""
    config = ServerConfig(api_key="sk-right")
    body = {"prompt": [1], "max_tokens": 2}
    both = [("Authorization", "Bearer sk-wrong"), ("Authorization", "Bearer sk-right")]
    r = asyncio.run(_post("/v1/completions", body, headers=both, config=config))
    assert r.status_code == 400 and "more than one Authorization" in r.json()["error"]["message"]
    one = asyncio.run(_post("/v1/completions", body, headers={"Authorization": "Bearer sk-right"}, config=config))
    assert one.status_code == 200


def test_every_choice_of_a_request_carries_its_request_as_owner():
    engine = FakeEngine(max_waiting=100)
    owners: dict[str, str | None] = {}
    add = engine.add_request

    def recording_add(request_id, prompt_token_ids, params, owner=None):
        owners[request_id] = owner
        add(request_id, prompt_token_ids, params, owner)

    engine.add_request = recording_add
    r = asyncio.run(_post("/v1/completions", {"prompt": [[1], [2]], "n": 2, "max_tokens": 2}, engine=engine))
    assert r.status_code == 200
    assert len(owners) == 4 and set(owners.values()) == {r.json()["id"]}
    # a client's own id names the response only: the owner stays the server's
    owners.clear()
    r = asyncio.run(_post("/v1/completions", {"prompt": [[1]], "max_tokens": 2, "request_id": "mine"}, engine=engine))
    assert r.json()["id"] == "cmpl-mine"
    assert len(owners) == 1 and all(o.startswith("cmpl-") and o != "cmpl-mine" for o in owners.values())
