"""The routing recorder and online rebalancing behind the HTTP API: /v1/trace/{start,stop,dump}
and the EPLB gauges in /metrics; rebalancing while serving leaves greedy tokens unchanged."""
from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from server_settings import API_KEY
from server_harness import ServerProcess

from moeserve import SamplingParams
from moeserve.placement.importers import load_trace

PROMPTS = ["Hello, world!", "Experts are placed on ranks"]


@pytest.fixture(scope="module")
def recording_server(tmp_path_factory):
    out = tmp_path_factory.mktemp("traces")
    with ServerProcess("--ep", "2", "--record-trace-dir", str(out), "--eplb-interval", "4", "--kv-cache-blocks", "96",
                       "--max-model-len", "256") as srv:
        yield srv, out


def _complete(srv, prompt: str) -> list[int]:
    body = {"model": srv.model, "prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    r = httpx.post(srv.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


@pytest.mark.slow
def test_rebalancing_while_serving_keeps_tokens_and_shows_gauges(recording_server, llm):
    srv, _ = recording_server
    want = [o.token_ids for o in llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True))]
    for _ in range(3):  # enough steps for several re-plans at --eplb-interval 4
        assert [_complete(srv, p) for p in PROMPTS] == want
    time.sleep(0.5)  # engine gauges arrive with the next heartbeat
    metrics = httpx.get(srv.url + "/metrics", timeout=10).text
    rebalances = [line for line in metrics.splitlines() if line.startswith("moeserve_eplb_rebalances")]
    assert rebalances and float(rebalances[0].split()[-1]) >= 1
    assert "moeserve_eplb_layer_balancedness{layer=" in metrics


def test_trace_start_stop_dump_over_http(recording_server):
    srv, out = recording_server
    assert httpx.post(srv.url + "/v1/trace/start", timeout=30).status_code == 200
    _complete(srv, "Routing counts for the trace")
    assert httpx.post(srv.url + "/v1/trace/stop", timeout=30).status_code == 200
    r = httpx.post(srv.url + "/v1/trace/dump", timeout=30)
    assert r.status_code == 200, r.text
    path = Path(r.json()["path"])
    assert path.parent == out and path.exists()
    trace = load_trace(str(path))
    assert trace.counts.sum() > 0
    bad = httpx.post(srv.url + "/v1/trace/rewind", timeout=30)
    assert bad.status_code == 404 and "error" in bad.json()


@pytest.mark.parametrize("action", ["start", "stop", "dump"])
def test_trace_routes_without_a_trace_dir_say_how_to_configure_one(server, action):
    """The session server has no --record-trace-dir: nothing recorded could ever be written."""
    r = httpx.post(f"{server.url}/v1/trace/{action}", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == "trace_dir_not_configured"
    assert "--record-trace-dir" in err["message"] and "record_trace_dir" in err["message"]
