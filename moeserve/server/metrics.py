"""Prometheus metrics of the front end (`GET /metrics`).

Request-level numbers (finish reasons, latencies, token counts) are measured here as outputs
arrive. Engine-level numbers (queues, KV blocks, prefix cache) come from the engine's latest
heartbeat and are read at scrape time by a collector, so /metrics never blocks on the engine.
Each server owns its own CollectorRegistry, so several servers can live in one process (tests).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from moeserve.server.vllm_metrics import (REQUEST_LATENCY_BUCKETS, TOKEN_LATENCY_BUCKETS, TTFT_BUCKETS, WithVllmNames,
                                          with_vllm_buckets)

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_PREFIX = "moeserve_"
FINISH_REASONS = ("stop", "length", "abort", "error")


class EngineStatsCollector(Collector):
    """Gauges and counters mirrored from EngineCore.stats() as of the last heartbeat."""

    def __init__(self, stats: Callable[[], dict[str, Any]], healthy: Callable[[], bool]):
        self._stats = stats
        self._healthy = healthy

    def collect(self) -> Iterator[Any]:
        s = self._stats()
        yield GaugeMetricFamily(_PREFIX + "engine_healthy", "1 while the engine answers heartbeats", value=float(self._healthy()))
        gauges = {
            "num_requests_running": ("num_running", "requests being computed"),
            "num_requests_waiting": ("num_waiting", "requests waiting to be scheduled"),
            "kv_cache_blocks_total": ("kv_blocks_total", "KV-cache blocks in all pools"),
            "kv_cache_blocks_used": ("kv_blocks_in_use", "KV-cache blocks held by live requests"),
            "kv_cache_blocks_free": ("kv_blocks_free", "KV-cache blocks neither used nor cached"),
            "kv_cache_blocks_cached": ("kv_blocks_cached", "free KV-cache blocks still holding a reusable prefix"),
            "kv_cache_usage": ("kv_usage", "fraction of KV-cache blocks held by live requests"),
            "kv_blocks_pinned_remote": ("kv_blocks_pinned_remote", "KV blocks of finished prefills held for remote decoders"),
            "kv_cache_blocks_quarantined": ("kv_blocks_quarantined", "KV blocks held because a failed KV read still running may write into them"),
            "kv_reads_quarantined": ("kv_reads_quarantined", "failed KV reads still running whose blocks are held (one per rank)"),
            "kv_quarantine_oldest_seconds": ("kv_quarantine_oldest_s", "seconds the oldest failed KV read still running has held its blocks"),
        }
        for name, (key, doc) in gauges.items():
            if key in s:
                yield GaugeMetricFamily(_PREFIX + name, doc, value=float(s[key]))
        queries, hits = s.get("prefix_cache_query_tokens"), s.get("prefix_cache_hit_tokens")
        if queries is not None and hits is not None:
            yield CounterMetricFamily(_PREFIX + "prefix_cache_query_tokens", "prompt tokens looked up in the prefix cache", value=float(queries))
            yield CounterMetricFamily(_PREFIX + "prefix_cache_hit_tokens", "prompt tokens found in the prefix cache", value=float(hits))
            rate = float(hits) / float(queries) if queries else 0.0
            yield GaugeMetricFamily(_PREFIX + "prefix_cache_hit_rate", "prefix-cache hit tokens / query tokens since start", value=rate)
        for key, doc in (("eplb_balancedness_mean", "mean over MoE layers of mean/max GPU load in the last window"),
                         ("eplb_balancedness_min", "worst MoE layer's mean/max GPU load in the last window"),
                         ("eplb_last_move_s", "seconds the last rebalance spent moving expert weights"),
                         ("eplb_last_plan_s", "seconds the last re-plan took"),
                         ("eplb_last_bytes_moved", "bytes of expert weights moved by the last rebalance")):
            if s.get(key) is not None:
                yield GaugeMetricFamily(_PREFIX + key, doc, value=float(s[key]))
        layers = s.get("eplb_layer_balancedness")
        if layers:
            family = GaugeMetricFamily(_PREFIX + "eplb_layer_balancedness", "per MoE layer mean/max GPU load, last window", labels=["layer"])
            for i, value in enumerate(layers):
                family.add_metric([str(i)], float(value))
            yield family
        for key, name, doc in (("num_steps", "engine_steps", "engine steps run"),
                               ("eplb_rebalances", "eplb_rebalances", "online rebalances applied"),
                               ("eplb_bytes_moved_total", "eplb_bytes_moved", "bytes of expert weights moved by rebalancing"),
                               ("num_preemptions", "preemptions", "requests preempted (recomputed) for lack of KV blocks"),
                               ("prompt_tokens_computed", "prompt_tokens_computed", "prompt tokens whose KV this instance computed (a decode instance: about one per transferred prompt)"),
                               ("kv_transfer_bytes", "kv_transfer_bytes", "KV bytes moved between prefill and decode instances, read by this one or from it"),
                               ("kv_blocks_transferred", "kv_blocks_transferred", "KV blocks moved between prefill and decode instances, read by this one or from it"),
                               ("kv_transfer_failures", "kv_transfer_failures", "KV reads from a prefill instance that failed"),
                               ("kv_quarantines", "kv_quarantines", "failed KV reads still running at their failure, whose blocks were held until they ended"),
                               ("kv_pins_evicted", "kv_pins_evicted", "pins of unread prefills released early to keep pinned blocks under --kv-max-pinned-blocks")):
            if key in s:
                yield CounterMetricFamily(_PREFIX + name, doc, value=float(s[key]))
        yield from _transfer_histogram(s)
        yield from _spec_decode(s)


def _spec_decode(s: dict[str, Any]) -> Iterator[Any]:
    """Speculative decoding's counters, named after vLLM's spec_decode metrics (core/spec_scheduling.py)."""
    if "spec_decode_num_drafts" not in s:
        return
    for key, doc in (("num_drafts", "verify steps of one sequence that carried drafts"),
                     ("num_draft_tokens", "draft tokens verified"),
                     ("num_accepted_tokens", "draft tokens accepted")):
        yield CounterMetricFamily(_PREFIX + "spec_decode_" + key, doc, value=float(s["spec_decode_" + key]))
    family = CounterMetricFamily(_PREFIX + "spec_decode_num_accepted_tokens_per_pos",
                                 "draft tokens accepted at each draft position (0 = the first draft)", labels=["position"])
    for position, count in enumerate(s.get("spec_decode_num_accepted_tokens_per_pos") or []):
        family.add_metric([str(position)], float(count))
    yield family
    yield GaugeMetricFamily(_PREFIX + "spec_decode_mean_acceptance_length",
                            "tokens a verify step yields per sequence since start: 1 + accepted / drafts "
                            "(what `moeserve configure --mtp-accept` takes)", value=float(s["spec_decode_mean_acceptance_length"]))


def _transfer_histogram(s: dict[str, Any]) -> Iterator[Any]:
    """The KV read latency histogram the engine keeps as cumulative bucket counts (kv_transfer/connector.py)."""
    counts = s.get("kv_transfer_seconds_buckets")
    if not counts:
        return
    from moeserve.kv_transfer.connector import LATENCY_BUCKETS

    bounds = [str(b) for b in LATENCY_BUCKETS] + ["+Inf"]
    yield HistogramMetricFamily(_PREFIX + "kv_transfer_seconds", "time of one request's KV read from a prefill instance",
                                buckets=list(zip(bounds, (float(c) for c in counts))),
                                sum_value=float(s.get("kv_transfer_seconds_sum", 0.0)))


class ServerMetrics:
    """Every series of /metrics, each under moeserve's name and, where vLLM has one, vLLM's too
    (vllm_metrics.TWINS): `model_name` labels the vLLM-named ones, as vLLM's served model name does."""

    def __init__(self, stats: Callable[[], dict[str, Any]], healthy: Callable[[], bool], model_name: str):
        own: list[Collector] = []

        def keep(metric: Any) -> Any:
            own.append(metric)
            return metric

        self.requests = keep(Counter(_PREFIX + "requests", "finished engine requests by finish reason", ["finish_reason"], registry=None))
        for reason in FINISH_REASONS:  # every reason's series exists from the start, as vLLM's do
            self.requests.labels(finish_reason=reason)
        self.prompt_tokens = keep(Counter(_PREFIX + "prompt_tokens", "prompt tokens admitted", registry=None))
        self.prompt_tokens_prefilled = keep(Counter(_PREFIX + "prompt_tokens_prefilled",
                                                    "prompt tokens of requests that reached their first token", registry=None))
        self.generation_tokens = keep(Counter(_PREFIX + "generation_tokens", "tokens generated", registry=None))
        self.ttft = keep(Histogram(_PREFIX + "time_to_first_token_seconds", "arrival to first token",
                                   buckets=with_vllm_buckets(_LATENCY_BUCKETS, TTFT_BUCKETS), registry=None))
        self.tpot = keep(Histogram(_PREFIX + "time_per_output_token_seconds", "mean gap between output tokens of a request",
                                   buckets=with_vllm_buckets(_LATENCY_BUCKETS, TOKEN_LATENCY_BUCKETS), registry=None))
        self.itl = keep(Histogram(_PREFIX + "inter_token_latency_seconds", "gap between consecutive outputs of a request",
                                  buckets=with_vllm_buckets(_LATENCY_BUCKETS, TOKEN_LATENCY_BUCKETS), registry=None))
        self.e2e = keep(Histogram(_PREFIX + "e2e_request_latency_seconds", "arrival to last token",
                                  buckets=with_vllm_buckets(_LATENCY_BUCKETS, REQUEST_LATENCY_BUCKETS), registry=None))
        self.http = keep(Counter(_PREFIX + "http_responses", "HTTP responses by route and status", ["route", "status"], registry=None))
        self.stream_buffered = keep(Gauge(_PREFIX + "stream_buffered_bytes", "output bytes (estimated) waiting for their clients to read them, all requests", registry=None))
        self.stream_buffered_peak = keep(Gauge(_PREFIX + "stream_buffered_bytes_peak", "the most output bytes one request has had waiting for its client", registry=None))
        self.slow_client_aborts = keep(Counter(_PREFIX + "slow_client_aborts", "requests aborted because their client stopped reading (--max-stream-buffer-bytes)", registry=None))
        own.append(EngineStatsCollector(stats, healthy))
        self.registry = CollectorRegistry()
        self.registry.register(WithVllmNames(own, model_name))

    def on_admitted(self, prompt_tokens: int) -> None:
        self.prompt_tokens.inc(prompt_tokens)

    def on_tokens(self, n: int, prompt_tokens: int = 0, since_last: float | None = None) -> None:
        """`n` new tokens of one request: its first ones with `prompt_tokens` (its prompt's length, then
        prefilled), later ones with `since_last`, the seconds since its previous output."""
        if n:
            self.generation_tokens.inc(n)
        if prompt_tokens:
            self.prompt_tokens_prefilled.inc(prompt_tokens)
        if since_last is not None:
            self.itl.observe(since_last)

    def on_finished(self, reason: str, arrival: float, first: float | None, end: float, num_tokens: int) -> None:
        self.requests.labels(finish_reason=reason).inc()
        if first is None:
            return
        self.ttft.observe(first - arrival)
        self.e2e.observe(end - arrival)
        if num_tokens > 1:
            self.tpot.observe((end - first) / (num_tokens - 1))

    def render(self) -> bytes:
        return generate_latest(self.registry)
