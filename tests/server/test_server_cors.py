"""CORS (`--allowed-origins`): off by default; when on, a browser's preflight passes without a key,
every other request still needs one, and every answer (a 401 included) carries the CORS headers for
an allowed origin and none for another. In-process, fake engine."""
from __future__ import annotations

import argparse
import asyncio

import pytest
from server_fakes import FakeEngine, make_app

from moeserve.config import ConfigError
from moeserve.server import cli
from moeserve.server.config_file import ServerConfig, configs_from_args, load_yaml

APP = "http://localhost:3000"
PREFLIGHT = {"Origin": APP, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"}
BODY = {"model": "fake", "prompt": [1, 2, 3], "max_tokens": 2}


def run(config: ServerConfig, requests: list[tuple[str, str, dict, dict | None]]) -> list:
    async def main():
        http, client, _ = await make_app(FakeEngine(), config=config)
        try:
            return [await http.request(method, path, headers=headers, json=body)
                    for method, path, headers, body in requests]
        finally:
            await http.aclose()
            await client.shutdown()

    return asyncio.run(main())


def test_off_by_default_no_cors_headers_no_preflight_and_no_web_page_posts():
    preflight, post, plain = run(ServerConfig(), [("OPTIONS", "/v1/completions", PREFLIGHT, None),
                                                  ("POST", "/v1/completions", {"Origin": APP}, BODY),
                                                  ("POST", "/v1/completions", {}, BODY)])
    assert preflight.status_code == 405 and "access-control-allow-origin" not in preflight.headers
    # a web page's POST is refused before it runs: CORS would only have hidden the answer
    assert post.status_code == 403 and post.json()["error"]["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in post.headers
    assert plain.status_code == 200  # curl, SDKs and routers send no Origin


def test_a_web_pages_typeless_body_is_refused_not_read_as_json():
    """fetch(url, {method: "POST", body: new Blob([json])}) sends no Content-Type and needs no preflight:
    read as JSON, any page the user visited could make a server without --api-key generate."""
    async def main():
        http, client, engine = await make_app(FakeEngine(), config=ServerConfig())
        try:
            body = b'{"model": "fake", "prompt": [1, 2, 3], "max_tokens": 2}'
            page = await http.post("/v1/completions", content=body, headers={"Origin": "https://evil.example"})
            script = await http.post("/v1/completions", content=body)
            return page, script
        finally:
            await http.aclose()
            await client.shutdown()

    page, script = asyncio.run(main())
    assert page.status_code == 403 and "https://evil.example" in page.json()["error"]["message"]
    assert script.status_code == 200


def test_allowed_origin_preflight_without_key_then_key_still_required():
    config = ServerConfig(api_key="sk-1", allowed_origins=(APP,))
    key = {"Origin": APP, "Authorization": "Bearer sk-1"}
    preflight, no_key, with_key, stranger, stranger_preflight, health = run(config, [
        ("OPTIONS", "/v1/chat/completions", PREFLIGHT, None),
        ("POST", "/v1/completions", {"Origin": APP}, BODY),
        ("POST", "/v1/completions", key, BODY),
        ("POST", "/v1/completions", {"Origin": "https://evil.example", "Authorization": "Bearer sk-1"}, BODY),
        ("OPTIONS", "/v1/completions", {**PREFLIGHT, "Origin": "https://evil.example"}, None),
        ("GET", "/health", {"Origin": APP}, None),
    ])
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == APP
    assert "POST" in preflight.headers["access-control-allow-methods"]
    allowed = {h.strip() for h in preflight.headers["access-control-allow-headers"].lower().split(",")}
    assert {"authorization", "content-type", "x-stainless-os"} <= allowed  # the OpenAI JS SDK's own headers
    assert "access-control-allow-credentials" not in preflight.headers  # bearer keys, not cookies
    # the key is still checked, and the page can read why it was refused
    assert no_key.status_code == 401 and no_key.json()["error"]["code"] == "invalid_api_key"
    assert no_key.headers["access-control-allow-origin"] == APP
    assert with_key.status_code == 200 and with_key.json()["usage"]["completion_tokens"] == 2
    assert with_key.headers["access-control-allow-origin"] == APP
    # another origin: refused before it runs (CORS alone would only hide the answer from the page),
    # without a CORS header; its preflight is refused
    assert stranger.status_code == 403 and "access-control-allow-origin" not in stranger.headers
    assert stranger_preflight.status_code == 400 and "access-control-allow-origin" not in stranger_preflight.headers
    assert health.status_code == 200 and health.headers["access-control-allow-origin"] == APP


def test_any_origin_with_star():
    (post,) = run(ServerConfig(allowed_origins=("*",)), [("POST", "/v1/completions", {"Origin": "https://x.example"}, BODY)])
    assert post.status_code == 200 and post.headers["access-control-allow-origin"] == "*"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(argv)


def test_flag_and_yaml_forms(tmp_path):
    _, server = configs_from_args(parse(["--allowed-origins", "http://localhost:3000, https://chat.example.com"]))
    assert server.allowed_origins == ("http://localhost:3000", "https://chat.example.com")
    f = tmp_path / "c.yaml"
    f.write_text("allowed_origins: [http://a.example:8080, '*']\n")
    assert load_yaml(str(f))["allowed_origins"] == ("http://a.example:8080", "*")
    f.write_text("allowed_origins: http://a.example, http://b.example\n")
    assert load_yaml(str(f))["allowed_origins"] == ("http://a.example", "http://b.example")
    f.write_text("allowed_origins: {a: 1}\n")
    with pytest.raises(ConfigError, match="list of strings"):
        load_yaml(str(f))


@pytest.mark.parametrize("origin", ["http://localhost:3000/", "localhost:3000", "http://a.example/app", ""])
def test_an_origin_browsers_never_send_is_refused_at_start(origin):
    with pytest.raises(ConfigError, match="scheme://host"):
        ServerConfig(allowed_origins=(origin,)).validate()
