"""Trace importers (on the shared third-party files) and the project's own format."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from placement_shared import DEEPSEEK, MIXTRAL, needs_shared

from moeserve.placement.importers import load_trace
from moeserve.placement.trace import TokenSample, Trace, TraceFormatError, default_meta, merge_traces, save_trace


@needs_shared
def test_sglang_counts_drop_dense_layers():
    trace = load_trace(str(DEEPSEEK / "prefill_in1024.json"))
    raw = np.asarray(json.loads((DEEPSEEK / "prefill_in1024.json").read_text())["logical_count"])
    assert trace.counts.shape == (1, 58, 256)
    assert trace.meta["layer_ids"] == list(range(3, 61))
    np.testing.assert_array_equal(trace.counts[0], raw[3:])
    assert trace.meta["top_k"] == 8 and trace.meta["num_groups"] == 8 and trace.meta["phase"] == "prefill"


@needs_shared
def test_per_token_jsonl_counts_every_choice():
    path = MIXTRAL / "routing_raw.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    trace = load_trace(str(path))
    assert trace.counts.shape[1:] == (32, 8) and trace.meta["top_k"] == 2
    assert len(trace.tokens.layer) == len(records)
    assert trace.counts.sum() == 2 * len(records)
    r = records[5]
    np.testing.assert_array_equal(trace.tokens.topk[5], r["experts"])
    assert trace.tokens.layer[5] == r["layer"]
    # counts of layer 0 are the bincount of the records of layer 0
    ids = np.array([x["experts"] for x in records if x["layer"] == 0]).ravel()
    np.testing.assert_array_equal(trace.loads[0], np.bincount(ids, minlength=8))


@needs_shared
def test_format_detected_from_content_not_name(tmp_path):
    renamed = tmp_path / "no_extension"
    shutil.copy(MIXTRAL / "gsm8k_2_routing.jsonl", renamed)
    assert load_trace(str(renamed)).tokens is not None
    other = tmp_path / "counts.jsonl"
    shutil.copy(DEEPSEEK / "decode_in2000out100.json", other)
    assert load_trace(str(other)).counts.shape == (1, 58, 256)


def test_unknown_format_names_the_formats(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"something": 1}')
    with pytest.raises(TraceFormatError, match="logical_count"):
        load_trace(str(bad))


def _random_trace(rng: np.random.Generator, with_tokens: bool) -> Trace:
    w, l, e, k, n = 3, 4, 16, 2, 50
    counts = rng.integers(0, 100, (w, l, e)).astype(float)
    tokens = None
    if with_tokens:
        tokens = TokenSample(rng.integers(0, l, n).astype(np.int32), rng.integers(-1, e, (n, k)).astype(np.int32),
                             rng.integers(-1, 4, n).astype(np.int32), np.arange(n, dtype=np.int64))
    meta = default_meta(l, e, model="tiny", phase="decode", top_k=k, layer_ids=[1, 2, 3, 4], name="t")
    return Trace(counts, meta, tokens, rng.integers(0, e, (l, 20)).astype(np.int32) if with_tokens else None)


@pytest.mark.parametrize("with_tokens", [False, True])
def test_own_format_round_trips(tmp_path, with_tokens):
    trace = _random_trace(np.random.default_rng(0), with_tokens)
    path = str(tmp_path / "t.npz")
    save_trace(trace, path)
    back = load_trace(path)
    np.testing.assert_array_equal(back.counts, trace.counts)
    assert back.meta["version"] == 1 and back.meta["format"] == "moeserve-trace"
    assert {k: back.meta[k] for k in ("model", "phase", "top_k", "layer_ids")} == {
        "model": "tiny", "phase": "decode", "top_k": 2, "layer_ids": [1, 2, 3, 4]}
    if with_tokens:
        for f in ("layer", "topk", "rank", "token_id"):
            np.testing.assert_array_equal(getattr(back.tokens, f), getattr(trace.tokens, f))
        np.testing.assert_array_equal(back.placement, trace.placement)
    else:
        assert back.tokens is None and back.placement is None


def test_merge_and_coactivation():
    rng = np.random.default_rng(1)
    a, b = _random_trace(rng, True), _random_trace(rng, True)
    merged = merge_traces([a, b])
    assert merged.num_windows == 6 and len(merged.tokens.layer) == 100
    assert len(np.unique(merged.tokens.token_id)) == 100
    tokens = TokenSample(np.array([0, 0, 1], np.int32), np.array([[0, 1], [1, 0], [2, -1]], np.int32),
                         np.full(3, -1, np.int32), np.arange(3))
    pairs = tokens.coactivation(2, 3)
    assert pairs[0, 0, 1] == pairs[0, 1, 0] == 2 and pairs.sum() == 4
