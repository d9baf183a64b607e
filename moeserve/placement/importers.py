"""`load_trace`: any supported trace file, with readers for other engines' routing dumps, detected from the content.

- SGLang expert-distribution counts (DeepSeek): one JSON object `{"logical_count": [[E] x layers]}`.
  All-zero layers (the dense layers in front of the MoE layers) are dropped; `layer_ids` keeps the
  model's numbering. One window, no per-token choices.
- Per-token JSONL (e.g. vLLM hooks on Mixtral): one object per (prompt, token, layer) with
  `layer`, `experts` (top-k ids) and `token_idx` or `token_pos`, optionally `dataset`/`problem_id`.
  Each prompt (dataset, problem_id) becomes one window; every record is kept as a token sample.

Every field is checked against the bounds of `file_limits.py` before anything sized by it is
allocated; a broken file is one `TraceFormatError` naming the file, the line and the field.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from moeserve.placement.file_limits import (
    MAX_COUNT, MAX_EXPERTS, MAX_LAYERS, MAX_TOKEN_ID, MAX_TOKEN_RECORDS, MAX_TOP_K,
    FileContentError, TrailingData, check_cells, decode_text, int_list, parse_json, read_bounded, show, whole,
)
from moeserve.placement.trace import TokenSample, Trace, TraceFormatError, default_meta
from moeserve.placement.trace_npz import read_npz

_ZIP_MAGIC = b"PK\x03\x04"


def load_trace(path: str) -> Trace:
    """Read any supported trace file, choosing the reader from the content, not the file name."""
    try:
        with open(path, "rb") as f:
            is_npz = f.read(4) == _ZIP_MAGIC
            f.seek(0)
            trace = read_npz(f) if is_npz else parse_text(decode_text(read_bounded(f)))
    except OSError as e:
        raise TraceFormatError(f"cannot read trace {path}: {e.strerror or e}") from None
    except (FileContentError, TraceFormatError) as e:
        raise TraceFormatError(f"trace {path}: {e}") from None
    name = os.path.splitext(os.path.basename(path))[0]
    if "name" not in trace.meta:
        trace = trace.with_meta(name=name)
    if trace.meta.get("phase") is None and name.startswith(("prefill", "decode")):
        # SGLang dumps name the phase only in the file name
        trace = trace.with_meta(phase="prefill" if name.startswith("prefill") else "decode")
    return trace


_FORMATS = "moeserve .npz, SGLang counts JSON ({'logical_count': [[...]]}), per-token JSONL"


def parse_text(text: str) -> Trace:
    """Parse a text trace, trying each known JSON shape."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            obj = parse_json(stripped)
        except TrailingData:
            return from_json_lines(stripped)
        if isinstance(obj, dict) and "logical_count" in obj:
            return from_sglang_counts(obj)
        if isinstance(obj, dict) and "experts" in obj:
            return from_token_records([obj])
    raise TraceFormatError(f"not a known trace format (tried {_FORMATS})")


def from_sglang_counts(obj: dict) -> Trace:
    counts = _count_array(obj["logical_count"])
    if counts.ndim == 3:  # some dumps keep a leading window axis
        counts = counts.sum(axis=0)
    layer_ids = [i for i in range(counts.shape[0]) if counts[i].any()]
    if not layer_ids:
        raise TraceFormatError("field 'logical_count' is all zero")
    counts = counts[layer_ids]
    e = counts.shape[1]
    meta = default_meta(len(layer_ids), e, layer_ids=layer_ids, source_format="sglang-logical-count")
    if e == 256:  # DeepSeek-V3/R1 are the only 256-expert models that SGLang dumps this way
        meta.update(model="deepseek-v3", top_k=8, num_groups=8, topk_groups=4)
    return Trace(counts[None], meta)


def _count_array(value) -> np.ndarray:
    """`logical_count` ([layers][experts], or [windows][layers][experts]) as float64, every number
    finite and >= 0, its sizes within bounds (checked before the array is built)."""
    field = "field 'logical_count'"
    three_d = isinstance(value, list) and value and isinstance(value[0], list) and value[0] and isinstance(value[0][0], list)
    matrices = value if three_d else [value]
    shape = (len(matrices), *_matrix_shape(matrices[0], field))
    if not 1 <= shape[1] <= MAX_LAYERS or not 1 <= shape[2] <= MAX_EXPERTS:
        raise TraceFormatError(f"{field} is [{shape[1]} layers, {shape[2]} experts]: layers must be in [1, {MAX_LAYERS}], "
                               f"experts in [1, {MAX_EXPERTS}]")
    check_cells(shape, field)
    for w, matrix in enumerate(matrices):
        if _matrix_shape(matrix, field) != shape[1:]:
            raise TraceFormatError(f"{field} window {w} is {_matrix_shape(matrix, field)}, window 0 {shape[1:]}")
    try:
        counts = np.array(value, dtype=np.float64)
    except OverflowError:
        raise TraceFormatError(f"{field} holds a number too large for a count") from None
    bad = ~np.isfinite(counts) | (counts < 0) | (counts > MAX_COUNT)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise TraceFormatError(f"{field} holds {counts[at]} at {list(at)}: counts are finite, >= 0 and at most "
                               f"{MAX_COUNT:.0f}")
    return counts


def _matrix_shape(rows, field: str) -> tuple[int, int]:
    """(layers, experts) of a rectangular list of lists of numbers."""
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], list):
        raise TraceFormatError(f"{field} must be a [layers][experts] list of counts, got {show(rows)}")
    width = len(rows[0])
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != width:
            raise TraceFormatError(f"{field} row {i} is {show(row)}, not a list of {width} counts like row 0")
        if not all(type(x) is float or type(x) is int for x in row):
            x = next(x for x in row if not (type(x) is float or type(x) is int))
            raise TraceFormatError(f"{field} row {i} holds {show(x)}, not a number")
    return len(rows), width


def from_json_lines(text: str) -> Trace:
    """Per-token JSONL: one record per line (blank lines skipped), each checked as it is read."""
    records: list[_Record] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = parse_json(line)
        except FileContentError as e:
            raise TraceFormatError(f"line {number} {e}") from None
        if not records and not (isinstance(record, dict) and "experts" in record and "layer" in record):
            raise TraceFormatError(f"not a known trace format (tried {_FORMATS}): line {number} is {show(record)}")
        if len(records) == MAX_TOKEN_RECORDS:
            raise TraceFormatError(f"has more than {MAX_TOKEN_RECORDS} token records")
        records.append(_checked_record(record, number))
    return _from_checked(records)


def from_token_records(records: list) -> Trace:
    """A trace of per-token records (parsed JSON objects), each checked."""
    return _from_checked([_checked_record(r, i + 1) for i, r in enumerate(records)])


class _Record(NamedTuple):
    layer: int  # model layer number
    experts: list[int]  # chosen expert ids, -1 = none
    prompt: tuple  # (dataset, problem_id): the window
    pos: int | None  # token position in the prompt, if given


def _checked_record(r, line: int) -> _Record:
    """One per-token record, every field checked; `line` names it in messages."""
    try:
        if not isinstance(r, dict):
            raise FileContentError(f"is {show(r)}, not a JSON object")
        for key in ("layer", "experts"):
            if key not in r:
                raise FileContentError(f"lacks the field {key!r}")
        layer = whole(r["layer"], "layer", 0, MAX_LAYERS - 1, "a model layer number")
        experts = int_list(r["experts"], "experts", -1, MAX_EXPERTS - 1, MAX_TOP_K,
                           f"expert ids are below {MAX_EXPERTS}, the most experts a trace may have; -1 = none")
        chosen = [e for e in experts if e >= 0]
        if not experts or len(set(chosen)) != len(chosen):
            raise FileContentError(f"field 'experts' must list 1..{MAX_TOP_K} distinct expert ids, got {show(experts)}")
        for key in ("dataset", "problem_id"):
            if r.get(key) is not None and type(r[key]) not in (str, int):
                raise FileContentError(f"field {key!r} must be a string or a whole number, got {show(r[key])}")
        key = "token_idx" if "token_idx" in r else "token_pos"
        pos = None if r.get(key) is None else whole(r[key], key, 0, MAX_TOKEN_ID)
        return _Record(layer, experts, (r.get("dataset"), r.get("problem_id")), pos)
    except FileContentError as e:
        raise TraceFormatError(f"line {line} {e}") from None


def _from_checked(records: list[_Record]) -> Trace:
    """Counts [prompts, layers, experts] and the token sample; their sizes checked before allocating."""
    layers = sorted({r.layer for r in records})
    layer_index = {lay: i for i, lay in enumerate(layers)}
    k = max(len(r.experts) for r in records)
    num_experts = max(max(r.experts) for r in records) + 1
    if num_experts < 1:
        raise TraceFormatError("field 'experts' is -1 (none) in every record: no expert was chosen")
    prompts: dict[tuple, int] = {}
    for r in records:
        prompts.setdefault(r.prompt, len(prompts))
    n = len(records)
    check_cells((len(prompts), len(layers), num_experts), "the counts [prompts, layers, experts]")
    check_cells((n, k), "the token sample [records, top-k]")
    token_keys: dict[tuple, int] = {}
    layer, win, tid = np.empty(n, np.int32), np.empty(n, np.int64), np.empty(n, np.int64)
    topk = np.full((n, k), -1, np.int32)
    for i, (lay, experts, prompt, pos) in enumerate(records):
        w = prompts[prompt]
        layer[i], win[i] = layer_index[lay], w
        tid[i] = token_keys.setdefault((w, i if pos is None else pos), len(token_keys))
        topk[i, : len(experts)] = experts
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
