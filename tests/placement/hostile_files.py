"""A corpus of crafted trace and plan files, each breaking one thing; the tests read every one and
expect a one-line error naming the file and the field (`needle`), never a traceback or a large
allocation. Builders return the file's bytes."""
from __future__ import annotations

import io
import json
import warnings
import zipfile

import numpy as np

DEEP = 100_000  # nesting that overflows json's recursion limit


def _meta(**over) -> dict:
    meta = {"format": "moeserve-trace", "version": 1, "model": "m", "layer_ids": [0, 1, 2], "num_experts": 8,
            "top_k": 2, "num_groups": None, "phase": None}
    meta.update(over)
    return meta


def npz(meta: dict | str | None = None, drop: tuple[str, ...] = (), **arrays) -> bytes:
    """A trace archive: counts [2, 3, 8] and metadata unless replaced (`arrays`) or dropped."""
    base = {"counts": np.ones((2, 3, 8)), "meta": np.array(meta if isinstance(meta, str) else json.dumps(meta or _meta()))}
    base.update(arrays)
    buf = io.BytesIO()
    np.savez(buf, **{k: v for k, v in base.items() if k not in drop})
    return buf.getvalue()


def tokens(n: int = 4, k: int = 2, **over) -> dict:
    arrays = {"token_layer": np.zeros(n, np.int32), "token_topk": np.tile(np.arange(k, dtype=np.int32), (n, 1)),
              "token_rank": np.full(n, -1, np.int32), "token_id": np.arange(n, dtype=np.int64)}
    arrays.update(over)
    return arrays


def npy_bytes(descr: str, shape: tuple, data: bytes = b"") -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": shape})
    return f.getvalue() + data


def npy_of(array: np.ndarray) -> bytes:
    f = io.BytesIO()
    np.save(f, array)
    return f.getvalue()


def raw_zip(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name it is asked to write
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in members:
                z.writestr(name, data)
    return buf.getvalue()


def _lines(*records) -> bytes:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records).encode()


def _rec(**over) -> dict:
    r = {"dataset": "d", "problem_id": 0, "layer": 0, "experts": [0, 1], "token_idx": 0}
    r.update(over)
    return r


def _sglang(rows) -> bytes:
    return json.dumps({"logical_count": rows}).encode()


_GOOD_ROWS = [[0.0] * 8, [1.0] * 8, [2.0, 0, 0, 0, 1, 1, 1, 1]]
_META_TEXT = json.dumps(_meta())

# name -> (bytes of the file, text the one-line error must contain)
TRACE_CASES: dict[str, tuple[bytes, str]] = {
    # per-token JSONL
    "jsonl_expert_id_1e9": (b'{"layer": 0, "experts": [1000000000], "token_idx": 0}\n', "'experts'"),
    "jsonl_expert_float": (_lines(_rec(), _rec(experts=[1.5, 2])), "line 2 field 'experts'"),
    "jsonl_expert_string": (_lines(_rec(experts=["3", 1])), "'experts'"),
    "jsonl_expert_bool": (_lines(_rec(), _rec(experts=[True, 1])), "'experts'"),
    "jsonl_expert_negative": (_lines(_rec(), _rec(experts=[-7, 1])), "'experts'"),
    "jsonl_expert_twice": (_lines(_rec(), _rec(experts=[3, 3])), "distinct"),
    "jsonl_top_k_past_bound": (_lines(_rec(), _rec(experts=list(range(100)))), "'experts' has 100 entries"),
    "jsonl_no_experts": (_lines(_rec(), _rec(experts=[])), "'experts'"),
    "jsonl_experts_not_a_list": (_lines(_rec(), _rec(experts=5)), "'experts'"),
    "jsonl_all_dropped": (_lines(_rec(experts=[-1, -1])), "'experts'"),
    "jsonl_layer_huge": (_lines(_rec(), _rec(layer=10**12)), "'layer'"),
    "jsonl_layer_negative": (_lines(_rec(), _rec(layer=-1)), "'layer'"),
    "jsonl_layer_string": (_lines(_rec(), _rec(layer="3")), "'layer'"),
    "jsonl_missing_layer": (_lines(_rec(), {"experts": [0, 1]}), "line 2 lacks the field 'layer'"),
    "jsonl_duplicate_key": (_lines(_rec(), '{"layer": 0, "layer": 1, "experts": [0, 1]}'), "'layer' appears twice"),
    "jsonl_truncated_last_line": (_lines(_rec(), _rec())[:-20], "line 2 is not valid JSON"),
    "jsonl_line_not_an_object": (_lines(_rec(), [1, 2]), "line 2 is [1, 2]"),
    "jsonl_dataset_object": (_lines(_rec(), _rec(dataset={"a": 1})), "'dataset'"),
    "jsonl_token_idx_list": (_lines(_rec(), _rec(token_idx=[1])), "'token_idx'"),
    "jsonl_nan_expert": (_lines(_rec(), '{"layer": 0, "experts": [NaN]}'), "NaN"),
    "jsonl_deep_line": (_lines(_rec()) + b'{"layer": 0, "experts": ' + b"[" * DEEP + b"]" * DEEP + b"}\n",
                        "line 2 nests deeper than"),
    "jsonl_deep_single_object": (b'{"layer": 0, "experts": ' + b"[" * DEEP + b"]" * DEEP + b"}", "nests deeper than"),
    "jsonl_huge_int_literal": (b'{"layer": 0, "experts": [' + b"9" * 5000 + b"]}", "not valid JSON"),
    # SGLang logical counts
    "sglang_ragged": (_sglang([[1.0] * 8, [1.0] * 7]), "'logical_count' row 1"),
    "sglang_negative": (_sglang([[1.0] * 8, [-3.0] + [1.0] * 7]), "'logical_count' holds -3.0"),
    "sglang_inf": (b'{"logical_count": [[1e999, 1.0]]}', "'logical_count' holds inf"),
    "sglang_overflow_when_summed": (_sglang([_GOOD_ROWS, [[1e308] * 8] * 3]), "'logical_count' holds 1e+308"),
    "sglang_nan_literal": (b'{"logical_count": [[NaN, 1.0]]}', "NaN"),
    "sglang_string_count": (_sglang([[1.0, "2"]]), "'logical_count' row 0 holds '2'"),
    "sglang_bool_count": (_sglang([[1.0, True]]), "'logical_count' row 0 holds True"),
    "sglang_null_count": (_sglang([[1.0, None]]), "'logical_count' row 0 holds None"),
    "sglang_experts_past_bound": (_sglang([[1] * 5000]), "5000 experts"),
    "sglang_layers_past_bound": (_sglang([[1]] * 2000), "2000 layers"),
    "sglang_int_too_large": (b'{"logical_count": [[1' + b"0" * 400 + b', 1]]}', "too large"),
    "sglang_all_zero": (_sglang([[0] * 8] * 3), "all zero"),
    "sglang_scalar": (_sglang(5), "'logical_count' must be"),
    "sglang_four_dimensions": (_sglang([[[[1.0]]]]), "'logical_count'"),
    "sglang_windows_disagree": (_sglang([_GOOD_ROWS, _GOOD_ROWS[:2]]), "window 1"),
    "sglang_duplicate_key": (b'{"logical_count": [[1]], "logical_count": [[2]]}', "'logical_count' appears twice"),
    "sglang_deep": (b'{"logical_count": ' + b"[" * DEEP + b"]" * DEEP + b"}", "nests deeper than"),
    "sglang_truncated": (_sglang(_GOOD_ROWS)[:-7], "not valid JSON"),
    # any text
    "not_utf8": (b'{"logical_count": [[1, 2]], "x": "\xff\xfe"}', "not UTF-8"),
    "empty": (b"", "not a known trace format"),
    "binary_noise": (bytes(range(256)) * 4, "not UTF-8"),
    "unknown_object": (b'{"something": 1}', "not a known trace format"),
    # moeserve npz
    "npz_no_meta": (npz(drop=("meta",)), "lacks the array 'meta'"),
    "npz_no_counts": (npz(drop=("counts",)), "lacks the array 'counts'"),
    "npz_counts_2d": (npz(counts=np.ones((3, 8))), "array 'counts' has 2 dimensions"),
    "npz_counts_complex": (npz(counts=np.ones((2, 3, 8), complex)), "array 'counts' has dtype complex128"),
    "npz_counts_text": (npz(counts=np.full((2, 3, 8), "1")), "array 'counts' has dtype"),
    "npz_counts_bool": (npz(counts=np.ones((2, 3, 8), bool)), "array 'counts' has dtype bool"),
    "npz_counts_pickled": (npz(counts=np.array([{"a": 1}], dtype=object)), "array 'counts' has dtype object"),
    "npz_counts_structured": (npz(counts=np.zeros(3, dtype=[("a", "f8")])), "array 'counts' has dtype"),
    "npz_counts_nan": (npz(counts=np.full((2, 3, 8), np.nan)), "array 'counts' holds nan"),
    "npz_counts_negative": (npz(counts=-np.ones((2, 3, 8))), "array 'counts' holds -1.0"),
    # finite each, infinite summed: every balancedness NaN (place --json printed NaN, place -o planned on it)
    "npz_counts_overflow_when_summed": (npz(counts=np.full((2, 3, 8), 1e308)), "at most 9007199254740992"),
    "npz_counts_no_windows": (npz(counts=np.ones((0, 3, 8))), "array 'counts' has shape (0, 3, 8)"),
    "npz_counts_experts_past_bound": (npz(counts=np.ones((1, 1, 5000)), meta=_meta(layer_ids=None, num_experts=None)),
                                      "array 'counts' has shape (1, 1, 5000)"),
    "npz_meta_not_json": (npz(meta="{oops"), "array 'meta' is not valid JSON"),
    "npz_meta_deep": (npz(meta='{"x": ' + "[" * DEEP + "]" * DEEP + "}"), "array 'meta' nests deeper"),
    "npz_meta_list": (npz(meta="[1, 2]"), "array 'meta' must be a JSON object"),
    "npz_meta_number": (raw_zip([("meta.npy", npy_of(np.array(5))), ("counts.npy", npy_of(np.ones((2, 3, 8))))]),
                        "array 'meta' must be one JSON string"),
    "npz_meta_duplicate_key": (npz(meta=_META_TEXT[:-1] + ', "top_k": 3}'), "'top_k' appears twice"),
    "npz_meta_format": (npz(meta=_meta(format="other")), "meta field 'format'"),
    "npz_meta_version_newer": (npz(meta=_meta(version=99)), "trace version 99 is newer"),
    "npz_meta_version_text": (npz(meta=_meta(version="1")), "meta field 'version'"),
    "npz_meta_version_missing": (npz(meta={k: v for k, v in _meta().items() if k != "version"}), "meta field 'version'"),
    "npz_meta_num_experts_disagrees": (npz(meta=_meta(num_experts=9)), "meta field 'num_experts' is 9"),
    "npz_meta_num_experts_huge": (npz(meta=_meta(num_experts=10**12)), "meta field 'num_experts'"),
    "npz_meta_layer_ids_short": (npz(meta=_meta(layer_ids=[0, 1])), "meta field 'layer_ids'"),
    "npz_meta_layer_ids_repeat": (npz(meta=_meta(layer_ids=[0, 0, 1])), "meta field 'layer_ids'"),
    "npz_meta_layer_ids_text": (npz(meta=_meta(layer_ids="012")), "meta field 'layer_ids'"),
    "npz_meta_top_k_zero": (npz(meta=_meta(top_k=0)), "meta field 'top_k'"),
    "npz_meta_top_k_past_experts": (npz(meta=_meta(top_k=9)), "meta field 'top_k'"),
    "npz_meta_num_groups": (npz(meta=_meta(num_groups=3)), "meta field 'num_groups' is 3"),
    "npz_meta_name_not_text": (npz(meta=_meta(name=[1])), "meta field 'name'"),
    "npz_tokens_partial": (npz(token_topk=tokens()["token_topk"]), "lacks ['token_layer', 'token_rank', 'token_id']"),
    "npz_token_expert_past_count": (npz(**tokens(token_topk=np.full((4, 2), 10**9, np.int64))),
                                    "array 'token_topk' holds 1000000000"),
    "npz_token_expert_wraps_int32": (npz(**tokens(token_topk=np.full((4, 2), 2**32 + 1, np.int64))),
                                     "array 'token_topk' holds 4294967297"),
    "npz_token_layer_past_layers": (npz(**tokens(token_layer=np.full(4, 3, np.int32))), "array 'token_layer' holds 3"),
    "npz_token_rank_below_minus_one": (npz(**tokens(token_rank=np.full(4, -2, np.int32))), "array 'token_rank' holds -2"),
    "npz_token_lengths_disagree": (npz(**tokens(token_rank=np.full(5, -1, np.int32))), "array 'token_rank' has shape (5,)"),
    "npz_token_k_past_top_k": (npz(**tokens(k=3)), "array 'token_topk' has shape (4, 3)"),
    "npz_token_float_ids": (npz(**tokens(token_topk=np.zeros((4, 2)))), "array 'token_topk' has dtype float64"),
    "npz_placement_bad_expert": (npz(placement=np.full((3, 8), 8, np.int32)), "array 'placement' holds 8"),
    "npz_placement_wrong_layers": (npz(placement=np.zeros((2, 8), np.int32)), "array 'placement' has shape (2, 8)"),
    "npz_truncated": (npz()[:300], "not a readable npz archive"),
    "npz_only_magic": (b"PK\x03\x04" + b"\x00" * 64, "not a readable npz archive"),
    "npz_counts_header_declares_8_tib": (raw_zip([("meta.npy", npy_of(np.array(_META_TEXT))),
                                                  ("counts.npy", npy_bytes("<f8", (10**4, 10**4, 10**4), bytes(64)))]),
                                         "array 'counts' is truncated"),
    "npz_counts_header_negative": (raw_zip([("meta.npy", npy_of(np.array(_META_TEXT))),
                                            ("counts.npy", npy_bytes("<f8", (2, -3, 8)))]), "array 'counts'"),
    "npz_counts_header_garbage": (raw_zip([("meta.npy", npy_of(np.array(_META_TEXT))),
                                           ("counts.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': ((((((}\n")]),
                                  "array 'counts' has an unreadable .npy header"),
    "npz_counts_not_npy": (raw_zip([("meta.npy", npy_of(np.array(_META_TEXT))), ("counts.npy", b"hello")]),
                           "array 'counts' has an unreadable .npy header"),
    "npz_duplicate_member": (raw_zip([("meta.npy", npy_of(np.array(_META_TEXT))), ("counts.npy", npy_of(np.ones((2, 3, 8)))),
                                      ("counts.npy", npy_of(np.ones((2, 3, 8))))]), "array 'counts' appears twice"),
}


def _plan(**over) -> bytes:
    plan = {"format": "moeserve-placement", "version": 1, "num_ranks": 2, "num_nodes": 1, "num_experts": 4,
            "layer_ids": [3, 4], "phy2log": [[0, 1, 2, 3, 0, 1], [3, 2, 1, 0, 2, 2]]}
    plan.update(over)
    return json.dumps({k: v for k, v in plan.items() if v is not _DROP}).encode()


_DROP = object()
_PLAN_TEXT = _plan().decode()

PLAN_CASES: dict[str, tuple[bytes, str]] = {
    "deep": (b'{"phy2log": ' + b"[" * DEEP + b"]" * DEEP + b"}", "nests deeper than"),
    "not_utf8": (_plan(format="\udcff").replace(b"\\udcff", b"\xff"), "not UTF-8"),
    "empty": (b"", "not valid JSON"),
    "truncated": (_plan()[:-30], "not valid JSON"),
    "not_an_object": (b"[[0, 1]]", "must be a JSON object"),
    "duplicate_key": (_PLAN_TEXT[:-1].encode() + b', "num_ranks": 3}', "'num_ranks' appears twice"),
    "nan": (_PLAN_TEXT.replace('"num_ranks": 2', '"num_ranks": NaN').encode(), "NaN"),
    "format": (_plan(format="moeserve-trace"), "field 'format'"),
    "version_newer": (_plan(version=2), "plan version 2 is newer"),
    "version_text": (_plan(version="1"), "field 'version'"),
    "no_phy2log": (_plan(phy2log=_DROP), "lacks the field 'phy2log'"),
    "no_num_ranks": (_plan(num_ranks=_DROP), "lacks the field 'num_ranks'"),
    "num_experts_huge": (_plan(num_experts=10**12), "field 'num_experts'"),
    "num_experts_text": (_plan(num_experts="4"), "field 'num_experts'"),
    "num_experts_past_slots": (_plan(num_experts=7), "field 'num_experts' is 7"),
    "num_experts_fewer_than_ids": (_plan(num_experts=3), "holds expert 3, not in [0, 3)"),
    "num_ranks_text": (_plan(num_ranks="abc"), "field 'num_ranks'"),
    "num_ranks_fraction": (_plan(num_ranks=2.5), "field 'num_ranks'"),
    "num_ranks_zero": (_plan(num_ranks=0), "field 'num_ranks'"),
    "num_ranks_list": (_plan(num_ranks=[2]), "field 'num_ranks'"),
    "num_ranks_uneven": (_plan(num_ranks=4), "6 slots do not split evenly over 4 ranks"),
    "num_nodes_uneven": (_plan(num_ranks=2, num_nodes=3), "field 'num_nodes'"),
    "num_nodes_bool": (_plan(num_nodes=True), "field 'num_nodes'"),
    "phy2log_null": (_plan(phy2log=None), "field 'phy2log'"),
    "phy2log_empty": (_plan(phy2log=[]), "field 'phy2log'"),
    "phy2log_empty_rows": (_plan(phy2log=[[], []]), "field 'phy2log' layer 0"),
    "phy2log_ragged": (_plan(phy2log=[[0, 1, 2, 3, 0, 1], [0, 1, 2, 3]]), "field 'phy2log' layer 1"),
    "phy2log_text": (_plan(phy2log=[[0, 1, 2, 3, 0, "1"], [0, 1, 2, 3, 0, 1]]), "layer 0 slot 5 holds '1'"),
    "phy2log_float": (_plan(phy2log=[[0, 1, 2, 3, 0, 1.0], [0, 1, 2, 3, 0, 1]]), "layer 0 slot 5 holds 1.0"),
    "phy2log_overflow": (_plan(phy2log=[[0, 1, 2, 3, 0, 2**70], [0, 1, 2, 3, 0, 1]]), "layer 0 slot 5 holds"),
    "phy2log_negative": (_plan(phy2log=[[0, 1, 2, 3, 0, -1], [0, 1, 2, 3, 0, 1]]), "layer 0 slot 5 holds -1"),
    "phy2log_three_d": (_plan(phy2log=[[[0, 1]], [[2, 3]]]), "layer 0 slot 0 holds [0, 1]"),
    "phy2log_expert_missing": (_plan(phy2log=[[0, 1, 2, 0, 0, 1], [0, 1, 2, 3, 0, 1]]), "layer 0: expert 3 has no slot"),
    "layer_ids_short": (_plan(layer_ids=[3]), "field 'layer_ids'"),
    "layer_ids_repeat": (_plan(layer_ids=[3, 3]), "field 'layer_ids'"),
    "layer_ids_text": (_plan(layer_ids="34"), "field 'layer_ids'"),
    "layer_ids_huge": (_plan(layer_ids=[3, 10**9]), "field 'layer_ids'"),
}
