"""GET /health of a decode server shows the KV blocks it holds for failed reads still running (the
quarantine, docs/disaggregation.md "Failures"): 200 always while the engine lives, with the counts in
the body, and "degraded" once a held read is old (its prefill peer was likely killed) or the held
blocks are a large share of the cache. Before, they showed on /metrics only."""
from __future__ import annotations

import asyncio

import pytest
from server_fakes import FakeEngine, make_app

from moeserve.server import kv_health

TRANSFER = {"kv_transfer_failures": 1, "kv_blocks_total": 100}


class QuarantineEngine(FakeEngine):
    def __init__(self, quarantine: dict):
        super().__init__()
        self.quarantine = quarantine

    def stats(self) -> dict:
        return dict(super().stats(), **self.quarantine)


async def _health(stats: dict) -> tuple[int, dict]:
    http, client, _ = await make_app(QuarantineEngine(stats))
    try:
        for _ in range(400):  # until the first heartbeat has carried the engine's numbers
            if "num_steps" in client.stats:
                break
            await asyncio.sleep(0.025)
        r = await http.get("/health")
        return r.status_code, r.json()
    finally:
        await client.shutdown(1.0)


@pytest.mark.parametrize("held, status, degraded", [
    ({"kv_blocks_quarantined": 0, "kv_reads_quarantined": 0, "kv_quarantine_oldest_s": 0.0}, "ok", None),
    ({"kv_blocks_quarantined": 5, "kv_reads_quarantined": 2, "kv_quarantine_oldest_s": 12.34}, "ok", None),
    ({"kv_blocks_quarantined": 5, "kv_reads_quarantined": 1, "kv_quarantine_oldest_s": 600.0}, "degraded", "600 s"),
    ({"kv_blocks_quarantined": 40, "kv_reads_quarantined": 1, "kv_quarantine_oldest_s": 1.0}, "degraded", "40%"),
])
def test_health_shows_held_blocks_and_stays_200(held, status, degraded):
    code, body = asyncio.run(_health(dict(TRANSFER, **held)))
    assert code == 200 and body["status"] == status, body
    report = body["kv_quarantine"]
    assert report["blocks_held"] == held["kv_blocks_quarantined"]
    assert report["reads_outstanding"] == held["kv_reads_quarantined"]
    assert report["oldest_s"] == round(held["kv_quarantine_oldest_s"], 1)
    assert report["share_of_cache"] == held["kv_blocks_quarantined"] / 100
    assert (degraded is None) == ("reason" not in body) and (degraded is None or degraded in body["reason"])


def test_a_server_without_a_kv_transfer_says_ok_only():
    code, body = asyncio.run(_health({"kv_blocks_quarantined": 0}))
    assert (code, body) == (200, {"status": "ok"})
    assert kv_health.kv_quarantine({}) is None
