"""`load_trace`: any supported trace file, with readers for other engines' routing dumps, detected from the content.

- SGLang expert-distribution counts (DeepSeek): one JSON object `{"logical_count": [[E] x layers]}`.
  All-zero layers (the dense layers in front of the MoE layers) are dropped; `layer_ids` keeps the
  model's numbering. One window, no per-token choices.
- Per-token JSONL (e.g. vLLM hooks on Mixtral): one object per (prompt, token, layer) with
  `layer`, `experts` (top-k ids) and `token_idx` or `token_pos`, optionally `dataset`/`problem_id`.
  Each prompt (dataset, problem_id) becomes one window; every record is kept as a token sample.
"""
from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np

from moeserve.placement.trace import TokenSample, Trace, TraceFormatError, default_meta, read_npz


def load_trace(path: str) -> Trace:
    """Read any supported trace file, choosing the reader from the content, not the file name."""
    with open(path, "rb") as f:
        data = f.read()
    name = os.path.splitext(os.path.basename(path))[0]
    if data[:4] == b"PK\x03\x04" and zipfile.is_zipfile(io.BytesIO(data)):
        trace = read_npz(data)
    else:
        trace = parse_text(data.decode("utf-8"), path)
    if "name" not in trace.meta:
        trace = trace.with_meta(name=name)
    if trace.meta.get("phase") is None and name.startswith(("prefill", "decode")):
        trace = trace.with_meta(phase=name.split("_")[0])  # SGLang dumps name the phase only in the file name
    return trace


_FORMATS = "moeserve .npz, SGLang counts JSON ({'logical_count': [[...]]}), per-token JSONL"


def parse_text(text: str, source: str = "<text>") -> Trace:
    """Parse a text trace, trying each known JSON shape."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError:
            obj = None  # several objects: JSON lines
        if isinstance(obj, dict) and "logical_count" in obj:
            return from_sglang_counts(obj)
        if isinstance(obj, dict) and "experts" in obj:
            return from_token_records([obj])
        if obj is None:
            records = [json.loads(line) for line in stripped.splitlines() if line.strip()]
            if records and all("experts" in r and "layer" in r for r in records):
                return from_token_records(records)
    raise TraceFormatError(f"{source}: not a known trace format (tried {_FORMATS})")


def from_sglang_counts(obj: dict) -> Trace:
    counts = np.asarray(obj["logical_count"], dtype=np.float64)
    if counts.ndim == 3:  # some dumps keep a leading window axis
        counts = counts.sum(axis=0)
    if counts.ndim != 2:
        raise TraceFormatError(f"logical_count must be [layers, experts], got shape {counts.shape}")
    layer_ids = [i for i in range(counts.shape[0]) if counts[i].any()]
    if not layer_ids:
        raise TraceFormatError("logical_count is all zero")
    counts = counts[layer_ids]
    e = counts.shape[1]
    meta = default_meta(len(layer_ids), e, layer_ids=layer_ids, source_format="sglang-logical-count")
    if e == 256:  # DeepSeek-V3/R1 are the only 256-expert models that SGLang dumps this way
        meta.update(model="deepseek-v3", top_k=8, num_groups=8, topk_groups=4)
    return Trace(counts[None], meta)


def from_token_records(records: list[dict]) -> Trace:
    layers = sorted({int(r["layer"]) for r in records})
    layer_index = {lay: i for i, lay in enumerate(layers)}
    k = max(len(r["experts"]) for r in records)
    num_experts = max(max(r["experts"]) for r in records) + 1
    prompts: dict[tuple, int] = {}
    token_keys: dict[tuple, int] = {}
    n = len(records)
    layer, win, tid = np.empty(n, np.int32), np.empty(n, np.int64), np.empty(n, np.int64)
    topk = np.full((n, k), -1, np.int32)
    for i, r in enumerate(records):
        prompt = (r.get("dataset"), r.get("problem_id"))
        w = prompts.setdefault(prompt, len(prompts))
        pos = r.get("token_idx", r.get("token_pos", i))
        layer[i], win[i] = layer_index[int(r["layer"])], w
        tid[i] = token_keys.setdefault((w, pos), len(token_keys))
        topk[i, : len(r["experts"])] = r["experts"]
    counts = np.zeros((len(prompts), len(layers), num_experts))
    for j in range(k):
        ok = topk[:, j] >= 0
        np.add.at(counts, (win[ok], layer[ok], topk[ok, j]), 1.0)
    meta = default_meta(len(layers), num_experts, layer_ids=layers, top_k=k, source_format="per-token-jsonl")
    meta["windows"] = [{"dataset": d, "problem_id": p} for d, p in prompts]
    if num_experts == 8 and k == 2:
        meta["model"] = "mixtral-8x7b"
    tokens = TokenSample(layer, topk, np.full(n, -1, np.int32), tid)
    return Trace(counts, meta, tokens)
