"""Summaries of a benchmark run: throughput, latency percentiles and goodput, as a table or JSON."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PERCENTILES = (50, 90, 99)


@dataclass
class RequestRecord:
    """One request as the client saw it; times in seconds from when it was sent."""

    ok: bool
    input_tokens: int
    output_tokens: int = 0
    ttft: float | None = None
    e2e: float | None = None
    itls: list[float] = field(default_factory=list)  # gaps between successive content chunks
    error: str | None = None

    @property
    def tpot(self) -> float | None:
        if self.ttft is None or self.e2e is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _dist_ms(values: list[float]) -> dict[str, float | None]:
    """Mean and percentiles in ms; None where there is nothing to measure (TPOT and ITL of one-token
    outputs): JSON has no NaN, and a NaN there broke strict readers."""
    if not values:
        return {"mean": None, **{f"p{q}": None for q in PERCENTILES}}
    out = {"mean": 1000.0 * sum(values) / len(values)}
    out.update({f"p{q}": 1000.0 * percentile(values, q) for q in PERCENTILES})
    return out


def summarize(records: list[RequestRecord], duration_s: float, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    good = [r for r in ok if _meets_slo(r, slo_ttft_ms, slo_tpot_ms)]
    errors: dict[str, int] = {}
    for r in records:
        if not r.ok:
            errors[r.error or "unknown"] = errors.get(r.error or "unknown", 0) + 1
    return {
        "num_requests": len(records),
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "errors": errors,
        "duration_s": duration_s,
        "input_tokens": sum(r.input_tokens for r in ok),
        "output_tokens": out_tokens,
        "request_throughput": len(ok) / duration_s if duration_s else 0.0,
        "output_throughput": out_tokens / duration_s if duration_s else 0.0,
        "total_token_throughput": (out_tokens + sum(r.input_tokens for r in ok)) / duration_s if duration_s else 0.0,
        "goodput": len(good) / duration_s if duration_s else 0.0,
        "goodput_fraction": len(good) / len(records) if records else 0.0,
        "slo_ttft_ms": slo_ttft_ms,
        "slo_tpot_ms": slo_tpot_ms,
        "ttft_ms": _dist_ms([r.ttft for r in ok if r.ttft is not None]),
        "tpot_ms": _dist_ms([r.tpot for r in ok if r.tpot is not None]),
        "itl_ms": _dist_ms([x for r in ok for x in r.itls]),
        "e2e_ms": _dist_ms([r.e2e for r in ok if r.e2e is not None]),
    }


_SPEC_PREFIXES = ("moeserve_spec_decode_", "vllm:spec_decode_")


def spec_counters(text: str) -> dict[str, Any] | None:
    """Speculative decoding counters from a Prometheus /metrics page (moeserve's or vLLM's names):
    num_drafts, num_draft_tokens, num_accepted_tokens and per_pos {position: accepted}; None without."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, Any] = {"per_pos": {}}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        return None
    for family in families:
        prefix = next((p for p in _SPEC_PREFIXES if family.name.startswith(p)), None)
        if prefix is None:
            continue
        key = family.name[len(prefix):].removesuffix("_total")
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            if key == "num_accepted_tokens_per_pos":
                position = int(sample.labels.get("position", 0))
                found["per_pos"][position] = found["per_pos"].get(position, 0.0) + sample.value
            elif key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
                found[key] = found.get(key, 0.0) + sample.value
    return found if "num_drafts" in found else None


def spec_decode_summary(before: str, after: str) -> dict[str, Any] | None:
    """What the server's speculative decoding did between two /metrics pages; None when it exports no
    counters. mean_acceptance_length = 1 + accepted / drafts (tokens per verify of one sequence)."""
    b, a = spec_counters(before), spec_counters(after)
    if a is None:
        return None
    b = b or {"per_pos": {}}
    d = {k: a.get(k, 0.0) - b.get(k, 0.0) for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    drafts = d["num_drafts"]
    positions = sorted(a["per_pos"])
    return {
        "num_drafts": int(drafts), "num_draft_tokens": int(d["num_draft_tokens"]),
        "num_accepted_tokens": int(d["num_accepted_tokens"]),
        "acceptance_rate": d["num_accepted_tokens"] / d["num_draft_tokens"] if d["num_draft_tokens"] else None,
        "mean_acceptance_length": 1.0 + d["num_accepted_tokens"] / drafts if drafts else None,
        "per_position_acceptance_rate": [(a["per_pos"][p] - b["per_pos"].get(p, 0.0)) / drafts if drafts else None
                                         for p in positions],
    }


def _meets_slo(r: RequestRecord, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> bool:
    if slo_ttft_ms is not None and (r.ttft is None or 1000.0 * r.ttft > slo_ttft_ms):
        return False
    if slo_tpot_ms is not None and r.tpot is not None and 1000.0 * r.tpot > slo_tpot_ms:
        return False
    return True


def format_table(s: dict[str, Any]) -> str:
    rows = [
        ("requests completed / failed", f"{s['completed']} / {s['failed']}"),
        ("duration (s)", f"{s['duration_s']:.2f}"),
        ("input / output tokens", f"{s['input_tokens']} / {s['output_tokens']}"),
        ("request throughput (req/s)", f"{s['request_throughput']:.2f}"),
        ("output throughput (tok/s)", f"{s['output_throughput']:.1f}"),
        ("total throughput (tok/s)", f"{s['total_token_throughput']:.1f}"),
    ]
    slo = [f"TTFT <= {s['slo_ttft_ms']} ms" if s["slo_ttft_ms"] is not None else "",
           f"TPOT <= {s['slo_tpot_ms']} ms" if s["slo_tpot_ms"] is not None else ""]
    rows.append((f"goodput (req/s) [{', '.join(x for x in slo if x) or 'no SLO'}]",
                 f"{s['goodput']:.2f} ({100 * s['goodput_fraction']:.0f}%)"))
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")):
        d = s[key]
        rows.append((f"{label} ms mean / p50 / p90 / p99",
                     " / ".join("n/a" if d[k] is None else f"{d[k]:.1f}" for k in ("mean", "p50", "p90", "p99"))))
    spec = s.get("spec_decode")
    if spec:
        rate, length = spec["acceptance_rate"], spec["mean_acceptance_length"]
        rows.append(("spec decode drafts / draft tokens / accepted",
                     f"{spec['num_drafts']} / {spec['num_draft_tokens']} / {spec['num_accepted_tokens']}"))
        rows.append(("spec decode acceptance rate / mean length",
                     ("n/a" if rate is None else f"{100 * rate:.1f}%") + " / " + ("n/a" if length is None else f"{length:.2f}")))
        per = ", ".join("n/a" if r is None else f"{r:.2f}" for r in spec["per_position_acceptance_rate"])
        rows.append(("spec decode acceptance per position", per or "n/a"))
    for error, count in s["errors"].items():
        rows.append((f"error x{count}", error[:60]))
    width = max(len(k) for k, _ in rows)
    line = "-" * (width + 24)
    return "\n".join([line, *(f"{k:<{width}}  {v}" for k, v in rows), line])
