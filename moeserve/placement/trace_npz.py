"""`read_npz`: a version-1 `.npz` trace (trace.py, traces/README.md), every array and metadata field checked.

Order: the metadata (small and bounded) first, then each array's header against the sizes the
metadata and `file_limits` declare, and only then the array itself; values (finite non-negative
counts, expert ids below the expert count, layers below the layer count) before anything indexes
with them. Every problem is a `FileContentError` naming the array or field.
"""
from __future__ import annotations

from typing import BinaryIO

import numpy as np

from moeserve.placement.file_limits import (
    MAX_COUNT, MAX_EXPERTS, MAX_LAYERS, MAX_META_CHARS, MAX_SLOTS, MAX_TOKEN_ID, MAX_TOKEN_RECORDS, MAX_TOP_K,
    FileContentError, check_cells, int_list, optional_whole, parse_json, show, whole,
)
from moeserve.placement.npz_reader import NpzReader
from moeserve.placement.trace import _TOKEN_FIELDS, FORMAT_NAME, FORMAT_VERSION, TokenSample, Trace

_INTS, _NUMBERS = "iu", "iuf"
_INT32 = np.iinfo(np.int32).max


def read_npz(f: BinaryIO) -> Trace:
    """A version-1 trace from an open `.npz` file."""
    z = NpzReader(f)
    try:
        meta = _read_meta(z)
        counts = _read_counts(z, meta)
        _, num_layers, num_experts = counts.shape
        return Trace(counts, meta, _read_tokens(z, meta, num_layers, num_experts),
                     _read_placement(z, num_layers, num_experts))
    finally:
        z.close()


def _checked_header(z: NpzReader, name: str, ndim: int, kinds: str) -> tuple[int, ...]:
    shape, dtype = z.header(name)
    if len(shape) != ndim:
        raise FileContentError(f"array {name!r} has {len(shape)} dimensions (shape {shape}), not {ndim}")
    if dtype.kind not in kinds:
        raise FileContentError(f"array {name!r} has dtype {dtype}, not {'an integer' if kinds == _INTS else 'a number'} type")
    return shape


def _read_meta(z: NpzReader) -> dict:
    shape, dtype = z.header("meta")
    if shape != () or dtype.kind != "U" or dtype.itemsize // 4 > MAX_META_CHARS:
        raise FileContentError(f"array 'meta' must be one JSON string of at most {MAX_META_CHARS} characters, "
                               f"got dtype {dtype} shape {shape}")
    try:
        meta = parse_json(str(z.array("meta")))
    except FileContentError as e:
        raise FileContentError(f"array 'meta' {e}") from None
    if not isinstance(meta, dict):
        raise FileContentError(f"array 'meta' must be a JSON object, got {show(meta)}")
    if meta.get("format") != FORMAT_NAME:
        raise FileContentError(f"meta field 'format' is {show(meta.get('format'))}: npz file is not a {FORMAT_NAME}")
    version = meta.get("version")
    if type(version) is int and version > FORMAT_VERSION:
        raise FileContentError(f"meta field 'version': trace version {version} is newer than this reader ({FORMAT_VERSION})")
    _in_meta(whole, version, "version", 1, FORMAT_VERSION)
    for key in ("name", "model", "phase"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise FileContentError(f"meta field {key!r} must be a string, got {show(meta[key])}")
    return meta


def _in_meta(check, *args):
    """A file_limits check whose message names a metadata field."""
    try:
        return check(*args)
    except FileContentError as e:
        raise FileContentError(f"meta {e}") from None


def _read_counts(z: NpzReader, meta: dict) -> np.ndarray:
    shape = _checked_header(z, "counts", 3, _NUMBERS)
    windows, layers, experts = shape
    if not (windows >= 1 and 1 <= layers <= MAX_LAYERS and 1 <= experts <= MAX_EXPERTS):
        raise FileContentError(f"array 'counts' has shape {shape}: [windows >= 1, layers in [1, {MAX_LAYERS}], "
                               f"experts in [1, {MAX_EXPERTS}]]")
    check_cells(shape, "array 'counts'")
    _check_meta_sizes(meta, layers, experts)
    counts = z.array("counts").astype(np.float64)
    bad = ~np.isfinite(counts) | (counts < 0) | (counts > MAX_COUNT)
    if bad.any():
        w, l, e = np.argwhere(bad)[0]
        raise FileContentError(f"array 'counts' holds {counts[w, l, e]} at [window {w}, layer {l}, expert {e}]: "
                               f"counts are finite, >= 0 and at most {MAX_COUNT:.0f}")
    return counts


def _check_meta_sizes(meta: dict, layers: int, experts: int) -> None:
    """The metadata's declared sizes agree with the counts' shape."""
    declared = _in_meta(optional_whole, meta, "num_experts", 1, MAX_EXPERTS)
    if declared is not None and declared != experts:
        raise FileContentError(f"meta field 'num_experts' is {declared}; array 'counts' has {experts} experts")
    if meta.get("layer_ids") is not None:
        ids = _in_meta(int_list, meta["layer_ids"], "layer_ids", 0, MAX_LAYERS - 1, MAX_LAYERS)
        if len(ids) != layers or len(set(ids)) != len(ids):
            raise FileContentError(f"meta field 'layer_ids' must name {layers} distinct layers (array 'counts' has {layers}), "
                                   f"got {show(ids)}")
    _in_meta(optional_whole, meta, "top_k", 1, min(experts, MAX_TOP_K))
    groups = _in_meta(optional_whole, meta, "num_groups", 1, experts)
    if groups is not None and experts % groups:
        raise FileContentError(f"meta field 'num_groups' is {groups}, which does not divide the {experts} experts")


def _read_tokens(z: NpzReader, meta: dict, layers: int, experts: int) -> TokenSample | None:
    present = [name for name in _TOKEN_FIELDS if name in z]
    if not present:
        return None
    if len(present) != len(_TOKEN_FIELDS):
        missing = [name for name in _TOKEN_FIELDS if name not in z]
        raise FileContentError(f"has the token arrays {present} but lacks {missing}: a token sample needs all four")
    (n,) = _checked_header(z, "token_layer", 1, _INTS)
    n_k = _checked_header(z, "token_topk", 2, _INTS)
    top_k = meta.get("top_k") or min(experts, MAX_TOP_K)
    if n > MAX_TOKEN_RECORDS or n_k[0] != n or not 1 <= n_k[1] <= top_k:
        raise FileContentError(f"array 'token_topk' has shape {n_k}: must be [{n} records (at most {MAX_TOKEN_RECORDS}), "
                               f"1..{top_k} experts (top_k)]")
    check_cells(n_k, "array 'token_topk'")
    for name in ("token_rank", "token_id"):
        if _checked_header(z, name, 1, _INTS) != (n,):
            raise FileContentError(f"array {name!r} has shape {z.header(name)[0]}, not ({n},) like 'token_layer'")
    layer = _in_range(z, "token_layer", 0, layers - 1, "MoE-layer indices")
    topk = _in_range(z, "token_topk", -1, experts - 1, "expert ids (-1 = none)")
    rank = _in_range(z, "token_rank", -1, _INT32, "ranks (-1 = unknown)")
    token_id = _in_range(z, "token_id", -1, MAX_TOKEN_ID, "token keys (-1 = unknown)")
    return TokenSample(layer.astype(np.int32), topk.astype(np.int32), rank.astype(np.int32), token_id.astype(np.int64))


def _in_range(z: NpzReader, name: str, low: int, high: int, what: str) -> np.ndarray:
    """Array `name` (header already checked), its values within [low, high]."""
    values = z.array(name)
    if values.size and (int(values.min()) < low or int(values.max()) > high):
        at = np.argwhere((values < low) | (values > high))[0]
        where = ", ".join(str(i) for i in at)
        raise FileContentError(f"array {name!r} holds {values[tuple(at)]} at [{where}]: {what} must be in [{low}, {high}]")
    return values


def _read_placement(z: NpzReader, layers: int, experts: int) -> np.ndarray | None:
    if "placement" not in z:
        return None
    shape = _checked_header(z, "placement", 2, _INTS)
    if shape[0] != layers or not experts <= shape[1] <= MAX_SLOTS:
        raise FileContentError(f"array 'placement' has shape {shape}: must be [{layers} layers, "
                               f"{experts}..{MAX_SLOTS} slots]")
    return _in_range(z, "placement", 0, experts - 1, "expert ids").astype(np.int32)
