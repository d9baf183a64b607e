"""--generation-config: fields a request leaves out sample with the checkpoint's generation_config.json, as vLLM's
server does (`auto`, the default), or with OpenAI's defaults (`vllm`)."""
from __future__ import annotations

import asyncio
import json

import pytest

from moeserve.errors import ConfigError
from moeserve.server.cli import _sampling_defaults
from moeserve.server.config_file import ServerConfig
from tests.server.server_fakes import FakeEngine, make_app

DEFAULTS = {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "repetition_penalty": 1.05, "max_tokens": 5}


class RecordingEngine(FakeEngine):
    def __init__(self):
        super().__init__(max_waiting=8)
        self.params = []

    def add_request(self, request_id, prompt_token_ids, params, owner=None) -> None:
        self.params.append(params)
        super().add_request(request_id, prompt_token_ids, params, owner)


def _post(body: dict, endpoint: str, defaults: dict):
    engine = RecordingEngine()

    async def go():
        http, client, theirs = await make_app(engine, sampling_defaults=defaults)
        try:
            return await http.post(endpoint, json=body)
        finally:
            await http.aclose()
            await client.shutdown()
            theirs.close()

    return asyncio.run(go()), engine.params


def test_checkpoint_defaults_fill_what_the_request_leaves_out():
    chat = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
    r, params = _post(chat, "/v1/chat/completions", DEFAULTS)
    assert r.status_code == 200, r.text
    p = params[0]
    assert (p.temperature, p.top_p, p.top_k, p.repetition_penalty, p.max_tokens) == (0.6, 0.95, 20, 1.05, 5)
    # a field the request sends wins; max_tokens given wins over max_new_tokens
    r, params = _post({**chat, "temperature": 0.0, "top_k": 3, "max_tokens": 7}, "/v1/chat/completions", DEFAULTS)
    p = params[0]
    assert (p.temperature, p.top_k, p.top_p, p.max_tokens) == (0.0, 3, 0.95, 7)
    r, params = _post({"model": "fake", "prompt": [1, 2]}, "/v1/completions", DEFAULTS)
    assert r.status_code == 200 and params[0].temperature == 0.6 and params[0].max_tokens == 16  # completions' own 16
    r, params = _post(chat, "/v1/chat/completions", {})  # --generation-config vllm: OpenAI's defaults
    p = params[0]
    assert (p.temperature, p.top_p, p.top_k, p.repetition_penalty) == (1.0, 1.0, -1, 1.0)


def test_the_flag_reads_a_generation_config(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 5, "do_sample": True}))
    got = _sampling_defaults("auto", str(tmp_path))
    assert got == {"temperature": 0.6, "top_p": 0.95, "max_tokens": 5}
    assert _sampling_defaults("vllm", str(tmp_path)) == {}
    assert _sampling_defaults(str(tmp_path), None) == got
    assert _sampling_defaults("auto", None) == {}  # the built-in model: no checkpoint directory
    with pytest.raises(ConfigError, match="--generation-config"):
        ServerConfig(generation_config=str(tmp_path / "missing")).validate()
