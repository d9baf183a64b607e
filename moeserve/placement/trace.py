"""Routing traces: the project's own format (version 1) and loading any supported file.

A `Trace` holds per-window logical expert counts `[W, L, E]` plus metadata, and optionally a
sample of per-token choices. On disk it is one `.npz` file (see traces/README.md):

    counts        float64 [W, L, E]   tokens routed to each logical expert, per window and MoE layer
    meta          JSON string         format/version, model, layer_ids, top_k, num_groups, phase, ...
    token_layer   int32   [N]         (optional) MoE-layer index (0..L-1) of each sampled token record
    token_topk    int32   [N, k]      (optional) logical expert ids the token chose, -1 = none
    token_rank    int32   [N]         (optional) rank the token came from, -1 = unknown
    token_id      int64   [N]         (optional) token key, equal across layers for one token, -1 = unknown
    placement     int32   [L, P]      (optional) phy2log of the placement in force while recording

`trace_npz.py` reads this format back, checking every array and field; other engines' dumps are read
by `importers.py`, whose `load_trace` picks the reader from the content.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import numpy as np

from moeserve.placement.file_limits import check_cells

FORMAT_NAME = "moeserve-trace"
FORMAT_VERSION = 1
_TOKEN_FIELDS = ("token_layer", "token_topk", "token_rank", "token_id")


class TraceFormatError(ValueError):
    """A trace file that cannot be read, that no reader accepts (the message names the formats tried),
    or whose content breaks the format or a bound (the message names the file and the field)."""


@dataclass(frozen=True)
class TokenSample:
    """Sampled per-token choices. N records, one per (token, MoE layer); k = top_k."""

    layer: np.ndarray  # int32 [N], MoE-layer index into the trace's layers
    topk: np.ndarray  # int32 [N, k], logical expert ids, -1 = dropped
    rank: np.ndarray  # int32 [N], source rank of the token, -1 = unknown
    token_id: np.ndarray  # int64 [N], same id across layers for one token, -1 = unknown

    def __post_init__(self) -> None:
        n = len(self.layer)
        assert self.topk.ndim == 2 and len(self.topk) == n and len(self.rank) == n and len(self.token_id) == n

    def coactivation(self, num_layers: int, num_experts: int) -> np.ndarray:
        """Pair counts [L, E, E] (symmetric, zero diagonal): how often two experts serve one token."""
        check_cells((num_layers, num_experts, num_experts), "expert co-activation counts [layers, experts, experts]")
        out = np.zeros((num_layers, num_experts, num_experts))
        k = self.topk.shape[1]
        for a in range(k):
            for b in range(a + 1, k):
                ea, eb = self.topk[:, a], self.topk[:, b]
                ok = (ea >= 0) & (eb >= 0) & (ea != eb)
                np.add.at(out, (self.layer[ok], ea[ok], eb[ok]), 1.0)
                np.add.at(out, (self.layer[ok], eb[ok], ea[ok]), 1.0)
        return out


@dataclass(frozen=True)
class Trace:
    counts: np.ndarray  # float64 [W, L, E]
    meta: dict = field(default_factory=dict)
    tokens: TokenSample | None = None
    placement: np.ndarray | None = None  # int32 [L, P] phy2log in force while recording

    def __post_init__(self) -> None:
        assert self.counts.ndim == 3, f"counts must be [W, L, E], got shape {self.counts.shape}"

    @property
    def num_windows(self) -> int:
        return self.counts.shape[0]

    @property
    def num_layers(self) -> int:
        return self.counts.shape[1]

    @property
    def num_experts(self) -> int:
        return self.counts.shape[2]

    @property
    def loads(self) -> np.ndarray:
        """Counts summed over windows [L, E]."""
        return self.counts.sum(axis=0)

    @property
    def name(self) -> str:
        return str(self.meta.get("name", "trace"))

    def with_meta(self, **updates) -> "Trace":
        return replace(self, meta={**self.meta, **updates})


def default_meta(num_layers: int, num_experts: int, **overrides) -> dict:
    """Metadata of a version-1 trace; unknown values are None."""
    meta = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "model": None,
        "layer_ids": list(range(num_layers)),
        "num_experts": num_experts,
        "top_k": None,
        "num_groups": None,
        "phase": None,  # "prefill", "decode", "mixed" or None
        "tokens_per_window": None,
        "steps_per_window": None,
    }
    meta.update(overrides)
    return meta


def save_trace(trace: Trace, path: str) -> None:
    """Write `trace` as a version-1 `.npz` (uncompressed: counts are small and load fast)."""
    arrays = {"counts": np.asarray(trace.counts, dtype=np.float64)}
    meta = {**default_meta(trace.num_layers, trace.num_experts), **trace.meta}
    meta["format"], meta["version"] = FORMAT_NAME, FORMAT_VERSION
    arrays["meta"] = np.array(json.dumps(meta))
    if trace.tokens is not None:
        t = trace.tokens
        arrays.update(token_layer=t.layer, token_topk=t.topk, token_rank=t.rank, token_id=t.token_id)
    if trace.placement is not None:
        arrays["placement"] = np.asarray(trace.placement, dtype=np.int32)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def merge_traces(traces: list[Trace]) -> Trace:
    """One trace with the windows of all `traces` (same layers and experts), token samples concatenated."""
    first = traces[0]
    for t in traces[1:]:
        if t.counts.shape[1:] != first.counts.shape[1:]:
            raise TraceFormatError(f"{t.name} has [layers, experts] {t.counts.shape[1:]}, {first.name} {first.counts.shape[1:]}")
    counts = np.concatenate([t.counts for t in traces])
    samples = [t.tokens for t in traces if t.tokens is not None]
    tokens = None
    if samples:
        k = max(s.topk.shape[1] for s in samples)
        offset, ids = 0, []
        for s in samples:  # keep token ids distinct across traces
            ids.append(np.where(s.token_id >= 0, s.token_id + offset, -1))
            offset += int(s.token_id.max(initial=-1)) + 1
        pad = [np.pad(s.topk, ((0, 0), (0, k - s.topk.shape[1])), constant_values=-1) for s in samples]
        tokens = TokenSample(
            np.concatenate([s.layer for s in samples]), np.concatenate(pad),
            np.concatenate([s.rank for s in samples]), np.concatenate(ids),
        )
    meta = {**first.meta, "name": "+".join(t.name for t in traces)}
    return Trace(counts, meta, tokens)
