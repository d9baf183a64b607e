"""The front end in-process (ASGI) against a fake engine loop over a socket: fan-out, and what
happens when the engine dies or gets stuck. Fast: no model, no subprocess."""
from __future__ import annotations

import asyncio
import json
import re
import threading
import time

from server_fakes import FakeEngine, FakeTokenizer, make_app


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


def test_a_fan_out_wider_than_the_queue_is_a_400_not_a_429():
    """prompts x n over --max-queued-requests can never be admitted: retrying (429) would be in vain."""
    async def main():
        http, client, _ = await make_app(FakeEngine(max_waiting=2), max_queued_requests=2)
        wide = await http.post("/v1/completions", json={"prompt": [1, 2], "n": 3, "max_tokens": 2})
        fits = await http.post("/v1/completions", json={"prompt": [1, 2], "n": 2, "max_tokens": 2})
        await client.shutdown(1.0)
        return wide, fits

    wide, fits = asyncio.run(main())
    assert wide.status_code == 400 and wide.json()["error"]["param"] == "n", wide.text
    assert fits.status_code == 200, fits.text


class GatedTokenizer(FakeTokenizer):
    """encode waits until the test opens the gate: a slow tokenization, with no clock in the test."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.timed_out = False

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.timed_out = not self.gate.wait(10)
        return super().encode(text, add_special_tokens)


def test_http_responses_are_counted_by_route_with_a_bounded_label_set():
    """Every response counts (2xx and errors), and client-chosen paths cannot add series."""
    async def main():
        http, client, _ = await make_app(FakeEngine(max_waiting=10))
        ok = await http.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 2})
        for i in range(20):
            await http.get(f"/v1/models/m{i}")
            await http.get(f"/nothing/{i}")
        metrics = (await http.get("/metrics")).text
        await client.shutdown(1.0)
        return ok, metrics

    ok, metrics = asyncio.run(main())
    assert ok.status_code == 200
    counts = {m[1]: float(m[2]) for m in re.finditer(r"^moeserve_http_responses_total\{(.*)\} (\S+)$", metrics, re.M)}
    assert counts['route="/v1/completions",status="200"'] == 1
    assert counts['route="/v1/models/{model}",status="404"'] == 20
    assert counts['route="other",status="404"'] == 20
    assert len(counts) == 3, counts


def test_tokenizing_a_prompt_does_not_block_other_requests():
    """While one request's prompt is being tokenized, /health and a token-id request are answered (the
    gate opens only after they are); tokenizing on the event loop would wait out the gate's timeout."""
    async def main():
        tokenizer = GatedTokenizer()
        http, client, _ = await make_app(FakeEngine(), tokenizer=tokenizer)
        slow = asyncio.create_task(http.post("/v1/completions", json={"prompt": "tokenize me", "max_tokens": 2}))
        await asyncio.sleep(0.2)
        health = await http.get("/health")
        other = await http.post("/v1/completions", json={"prompt": [5, 6], "max_tokens": 2})
        tokenizer.gate.set()
        r = await slow
        await client.shutdown(1.0)
        return tokenizer.timed_out, health, other, r

    timed_out, health, other, r = asyncio.run(main())
    assert not timed_out
    assert health.status_code == 200 and other.status_code == 200 and r.status_code == 200, r.text


def test_a_large_body_is_parsed_off_the_event_loop(monkeypatch):
    """While a 5 MB body is parsed, /health answers at once. Parsing it waits on a gate that opens only
    after /health has answered (or after 5 s): parsed on the event loop, the loop would wait it out."""
    gate, parsing, timed_out = threading.Event(), threading.Event(), []
    loads = json.loads

    def gated_loads(text, *args, **kwargs):
        if len(text) > 1_000_000:
            parsing.set()
            timed_out.append(not gate.wait(5))
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", gated_loads)
    body = json.dumps({"prompt": [7] * 1_700_000, "max_tokens": 2}).encode()
    assert len(body) > 5_000_000

    async def main():
        http, client, _ = await make_app(FakeEngine())
        start = time.monotonic()
        big = asyncio.create_task(http.post("/v1/completions", content=body, headers={"content-type": "application/json"}))
        while not parsing.is_set():
            await asyncio.sleep(0.01)
        health = await http.get("/health")
        waited = time.monotonic() - start
        gate.set()
        r = await big
        await client.shutdown(1.0)
        return health, waited, r

    health, waited, r = asyncio.run(main())
    assert timed_out == [False]
    assert health.status_code == 200 and waited < 1.0, waited
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"  # 1.7M tokens cannot fit, whatever max_tokens


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


def test_every_served_name_is_listed_and_accepted_and_answers_carry_the_first():
    from moeserve.server.config_file import ServerConfig

    async def main():
        http, client, _ = await make_app(FakeEngine(), config=ServerConfig(served_model_aliases=("alias", "fake")))
        listed = (await http.get("/v1/models")).json()["data"]
        one = await http.get("/v1/models/alias")
        ok = await http.post("/v1/completions", json={"model": "alias", "prompt": [1], "max_tokens": 2})
        unknown = await http.post("/v1/completions", json={"model": "other", "prompt": [1], "max_tokens": 2})
        await client.shutdown(1.0)
        return listed, one, ok, unknown

    listed, one, ok, unknown = asyncio.run(main())
    assert [c["id"] for c in listed] == ["fake", "alias"] and {c["root"] for c in listed} == {"fake"}  # no duplicate
    assert one.status_code == 200 and one.json()["id"] == "alias"
    assert ok.status_code == 200 and ok.json()["model"] == "fake"  # responses carry the first name, as vLLM's
    assert unknown.status_code == 404 and "'fake', 'alias'" in unknown.json()["error"]["message"]


class StatsEngine(FakeEngine):
    """Engine numbers that move with every step, so each vLLM-named twin has something to follow."""

    def stats(self) -> dict:
        return {**super().stats(), "num_waiting": self.steps % 3, "num_preemptions": self.steps // 2,
                "kv_usage": (self.steps % 10) / 10, "prefix_cache_query_tokens": 16 * self.steps,
                "prefix_cache_hit_tokens": 4 * self.steps}


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_vllm_names_carry_the_same_measurements_as_their_moeserve_twins():
    """Every vLLM name of vllm_metrics.TWINS is on /metrics with vLLM's labels (model_name = the served
    name, engine), vLLM's histogram buckets, and the value of its moeserve twin in the same scrape."""
    from moeserve.server.vllm_metrics import TWINS

    async def main():
        http, client, _ = await make_app(StatsEngine(max_waiting=100))
        await http.post("/v1/completions", json={"prompt": [[1, 2], [30]], "n": 2, "max_tokens": 3})
        await http.post("/v1/completions", json={"prompt": [7, 8, 9], "max_tokens": 1})
        await asyncio.sleep(0.5)  # a heartbeat after the last step: the engine numbers are non-zero
        metrics = (await http.get("/metrics")).text
        await client.shutdown(1.0)
        return metrics

    samples = _samples(asyncio.run(main()))
    vllm_labels = {("model_name", "fake"), ("engine", "0")}
    for ours, twins in TWINS.items():
        mine = {(n, labels): v for (n, labels), v in samples.items() if n.startswith(ours) and not n.endswith("_created")
                and n[len(ours):] in ("", "_total", "_bucket", "_sum", "_count")}
        assert mine, ours
        for twin in twins:
            theirs = {(n, labels): v for (n, labels), v in samples.items() if n.startswith(twin.name + "_") or n == twin.name}
            expected = {}
            for (n, labels), v in mine.items():
                le = dict(labels).get("le")
                if le is not None and le != "+Inf" and float(le) not in twin.buckets:
                    continue
                renamed = frozenset((twin.labels.get(k, k), x) for k, x in labels) | vllm_labels
                expected[(twin.name + n[len(ours):], renamed)] = v
            assert theirs == expected, twin.name
            if twin.buckets is not None:  # exactly vLLM's bounds, so its quantile queries read the same buckets
                les = sorted(float(dict(labels)["le"]) for n, labels in theirs if n.endswith("_bucket"))
                assert les == [*twin.buckets, float("inf")], twin.name

    def value(name: str, **labels: str) -> float:
        return samples[(name, frozenset(labels.items()) | vllm_labels)]

    # the numbers moved: 4 choices of 3 tokens and 1 of 1 token
    assert value("vllm:generation_tokens_total") == 13 and value("vllm:prompt_tokens_total") == 2 * 2 + 2 * 1 + 3
    assert value("vllm:request_success_total", finished_reason="length") == 5
    assert value("vllm:request_success_total", finished_reason="abort") == 0  # every reason's series exists
    assert value("vllm:time_to_first_token_seconds_count") == 5 and value("vllm:e2e_request_latency_seconds_count") == 5
    assert value("vllm:request_time_per_output_token_seconds_count") == 4  # a 1-token request has no decode time
    assert value("vllm:inter_token_latency_seconds_count") == 4 * 2 == value("vllm:time_per_output_token_seconds_count")
    assert value("vllm:prefix_cache_queries_total") > 0 and value("vllm:num_preemptions_total") > 0


def test_vllm_names_stay_behind_the_api_key():
    from moeserve.server.config_file import ServerConfig

    async def main():
        http, client, _ = await make_app(FakeEngine(max_waiting=10), config=ServerConfig(api_key="sk-1"))
        without = await http.get("/metrics")
        with_key = await http.get("/metrics", headers={"Authorization": "Bearer sk-1"})
        await client.shutdown(1.0)
        return without, with_key

    without, with_key = asyncio.run(main())
    assert without.status_code == 401 and "vllm:" not in without.text
    assert with_key.status_code == 200 and 'vllm:request_success_total{engine="0",finished_reason="stop",model_name="fake"} 0.0' in with_key.text
