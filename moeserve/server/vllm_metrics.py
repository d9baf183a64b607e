"""vLLM's metric names for the series moeserve measures (`GET /metrics`).

Dashboards, alerts, autoscalers (KEDA/HPA on `vllm:num_requests_waiting`) and routers written for
vLLM key on `vllm:*` names with `model_name` and `engine` labels. Rather than keep a second set of
numbers, `WithVllmNames` re-exports moeserve's own families at scrape time under vLLM V1's names: the
same measurement, two names, one table (`TWINS`). A histogram keeps the union of moeserve's and
vLLM's bucket bounds, so its vLLM twin carries exactly vLLM's buckets (a subset of the cumulative
counts, no re-binning) and `histogram_quantile` over it means what it means against vLLM.

Only series whose definitions match vLLM's get a twin; docs/server.md lists the differences.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# vLLM V1's histogram bounds (vllm/v1/metrics/loggers.py), in seconds.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                         40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0)
ENGINE = "0"  # vLLM's `engine` label is the data-parallel engine index; a moeserve server runs one engine


@dataclass(frozen=True)
class Twin:
    """vLLM's name for one moeserve family: `name` without the `_total` of counters."""

    name: str
    doc: str
    labels: dict[str, str] = field(default_factory=dict)  # moeserve label -> vLLM label
    buckets: tuple[float, ...] | None = None  # vLLM's bounds: a histogram's twin keeps only these


# moeserve family (prometheus_client's name: no `_total`) -> its vLLM names. The gpu_* names are
# vLLM's before 0.9, which vLLM served beside the new ones for a while and which production-stack's
# router (vllm_router) still reads to pick engines.
TWINS: dict[str, tuple[Twin, ...]] = {
    "moeserve_num_requests_running": (
        Twin("vllm:num_requests_running", "requests in the running batch (moeserve_num_requests_running)"),),
    "moeserve_num_requests_waiting": (
        Twin("vllm:num_requests_waiting", "requests waiting to be scheduled (moeserve_num_requests_waiting)"),),
    "moeserve_kv_cache_usage": (
        Twin("vllm:kv_cache_usage_perc", "fraction of KV-cache blocks held by live requests, 0 to 1 (moeserve_kv_cache_usage)"),
        Twin("vllm:gpu_cache_usage_perc", "vLLM's name before 0.9 for vllm:kv_cache_usage_perc (moeserve_kv_cache_usage)"),),
    "moeserve_prefix_cache_query_tokens": (
        Twin("vllm:prefix_cache_queries", "prompt tokens looked up in the prefix cache (moeserve_prefix_cache_query_tokens)"),
        Twin("vllm:gpu_prefix_cache_queries", "vLLM's name before 0.9 for vllm:prefix_cache_queries (moeserve_prefix_cache_query_tokens)"),),
    "moeserve_prefix_cache_hit_tokens": (
        Twin("vllm:prefix_cache_hits", "prompt tokens found in the prefix cache (moeserve_prefix_cache_hit_tokens)"),
        Twin("vllm:gpu_prefix_cache_hits", "vLLM's name before 0.9 for vllm:prefix_cache_hits (moeserve_prefix_cache_hit_tokens)"),),
    "moeserve_preemptions": (
        Twin("vllm:num_preemptions", "requests preempted by the engine (moeserve_preemptions)"),),
    "moeserve_prompt_tokens_prefilled": (
        Twin("vllm:prompt_tokens", "prompt tokens of requests that reached their first token (moeserve_prompt_tokens_prefilled)"),),
    "moeserve_generation_tokens": (
        Twin("vllm:generation_tokens", "tokens generated (moeserve_generation_tokens)"),),
    "moeserve_requests": (
        Twin("vllm:request_success", "finished requests by finish reason (moeserve_requests)",
             labels={"finish_reason": "finished_reason"}),),
    "moeserve_time_to_first_token_seconds": (
        Twin("vllm:time_to_first_token_seconds", "arrival to first token (moeserve_time_to_first_token_seconds)",
             buckets=TTFT_BUCKETS),),
    "moeserve_e2e_request_latency_seconds": (
        Twin("vllm:e2e_request_latency_seconds", "arrival to last token (moeserve_e2e_request_latency_seconds)",
             buckets=REQUEST_LATENCY_BUCKETS),),
    "moeserve_time_per_output_token_seconds": (
        Twin("vllm:request_time_per_output_token_seconds",
             "per request (last token - first token) / (tokens - 1) (moeserve_time_per_output_token_seconds)",
             buckets=TOKEN_LATENCY_BUCKETS),),
    # vLLM 0.11 renamed its per-output gap from time_per_output_token to inter_token_latency and served
    # both (same values) until the old name's removal: older dashboards still read the old one
    "moeserve_inter_token_latency_seconds": (
        Twin("vllm:inter_token_latency_seconds",
             "gap between consecutive outputs of a request (moeserve_inter_token_latency_seconds)",
             buckets=TOKEN_LATENCY_BUCKETS),
        Twin("vllm:time_per_output_token_seconds",
             "vLLM's name before 0.11 for vllm:inter_token_latency_seconds (moeserve_inter_token_latency_seconds)",
             buckets=TOKEN_LATENCY_BUCKETS)),
}


def with_vllm_buckets(ours: Iterable[float], vllm: Iterable[float]) -> tuple[float, ...]:
    """moeserve's bounds plus vLLM's: both sets of `le` series stay exact."""
    return tuple(sorted(set(ours) | set(vllm)))


class WithVllmNames(Collector):
    """Each family of `sources`, followed by its twins in TWINS under vLLM's names and labels.

    Nothing is counted here: a twin is the moeserve family it follows, read once per scrape."""

    def __init__(self, sources: Iterable[Collector], model_name: str):
        self._sources = list(sources)
        self._labels = {"model_name": model_name, "engine": ENGINE}

    def collect(self) -> Iterator[Metric]:
        for source in self._sources:
            for family in source.collect():
                yield family
                for twin in TWINS.get(family.name, ()):
                    yield self._rename(family, twin)

    def _rename(self, family: Metric, twin: Twin) -> Metric:
        out = Metric(twin.name, twin.doc, family.type)
        for s in family.samples:
            suffix = s.name[len(family.name):]  # "", _total, _bucket, _sum, _count, _created
            if suffix == "_created":
                continue  # vLLM serves no _created series
            labels = {twin.labels.get(k, k): v for k, v in s.labels.items()}
            if suffix == "_bucket" and twin.buckets is not None and labels["le"] != "+Inf" \
                    and float(labels["le"]) not in twin.buckets:
                continue
            out.add_sample(twin.name + suffix, {**self._labels, **labels}, s.value, s.timestamp, s.exemplar)
        return out
