"""The JSON form of a placement plan (what `moeserve place -o` writes), every field checked.

{"format": "moeserve-placement", "version": 1, "num_ranks": G, "num_nodes": N, "num_experts": E,
 "layer_ids": [L model layer numbers] or null, "phy2log": [[P logical expert ids] x L]}

`format`, `version`, `num_nodes`, `num_experts` and `layer_ids` may be left out (hand-written
plans): 1 node, and as many experts as the slots name. Sizes are checked against `file_limits.py`
before any array is built; `PlacementPlan.validate` then checks the plan's own invariants.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeserve.placement.file_limits import (
    MAX_EXPERTS, MAX_LAYERS, MAX_SLOTS, FileContentError, check_cells, decode_text, int_list, parse_json, read_bounded,
    show, whole,
)

PLAN_FORMAT = "moeserve-placement"
PLAN_VERSION = 1


@dataclass(frozen=True)
class PlanFields:
    phy2log: np.ndarray  # int64 [L, P]
    num_experts: int
    num_ranks: int
    num_nodes: int
    layer_ids: list[int] | None


def read_plan_file(path: str) -> PlanFields:
    """The fields of the plan file at `path`; OSError when it cannot be read, else FileContentError."""
    with open(path, "rb") as f:
        data = read_bounded(f)
    return plan_fields(parse_json(decode_text(data)))


def plan_fields(obj: dict) -> PlanFields:
    """The checked fields of a plan's JSON object."""
    if not isinstance(obj, dict):
        raise FileContentError("must be a JSON object (moeserve place writes one)")
    if "format" in obj and obj["format"] != PLAN_FORMAT:
        raise FileContentError(f"field 'format' is {show(obj['format'])}, not {PLAN_FORMAT!r}")
    version = obj.get("version", PLAN_VERSION)
    if type(version) is int and version > PLAN_VERSION:
        raise FileContentError(f"field 'version': plan version {version} is newer than this reader ({PLAN_VERSION})")
    whole(version, "version", 1, PLAN_VERSION)
    for key in ("phy2log", "num_ranks"):
        if key not in obj:
            raise FileContentError(f"lacks the field {key!r}")
    phy2log = _phy2log(obj["phy2log"])
    num_layers, num_slots = phy2log.shape
    if "num_experts" in obj:
        num_experts = obj["num_experts"]
        if type(num_experts) is not int or num_experts < 1:
            raise FileContentError(f"field 'num_experts' must be a whole number >= 1, got {show(num_experts)}")
        whole(num_experts, "num_experts", 1, min(MAX_EXPERTS, num_slots), "every expert needs one of the slots")
    else:
        num_experts = int(phy2log.max()) + 1  # what the slots hold
    num_ranks = whole(obj["num_ranks"], "num_ranks", 1, num_slots, "every rank holds at least one slot")
    num_nodes = whole(obj.get("num_nodes", 1), "num_nodes", 1, num_ranks)
    layer_ids = obj.get("layer_ids")
    if layer_ids is not None:
        int_list(layer_ids, "layer_ids", 0, MAX_LAYERS - 1, MAX_LAYERS)
        if len(layer_ids) != num_layers or len(set(layer_ids)) != num_layers:
            raise FileContentError(f"field 'layer_ids' must name {num_layers} distinct layers (one per row of "
                                   f"'phy2log'), got {show(layer_ids)}")
    return PlanFields(phy2log, num_experts, num_ranks, num_nodes, layer_ids)


def _phy2log(rows) -> np.ndarray:
    """phy2log [L, P] as int64, rectangular, each id a whole number below MAX_EXPERTS."""
    if not isinstance(rows, list) or not 1 <= len(rows) <= MAX_LAYERS:
        raise FileContentError(f"field 'phy2log' must be a list of 1..{MAX_LAYERS} layers, got {show(rows)}")
    width = len(rows[0]) if isinstance(rows[0], list) else -1
    if not 1 <= width <= MAX_SLOTS:
        raise FileContentError(f"field 'phy2log' layer 0 must list 1..{MAX_SLOTS} slots, got {show(rows[0])}")
    check_cells((len(rows), width), "field 'phy2log'")
    for layer, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != width:
            raise FileContentError(f"field 'phy2log' layer {layer} is {show(row)}, not {width} slots like layer 0")
        for slot, expert in enumerate(row):
            if type(expert) is not int or not 0 <= expert < MAX_EXPERTS:
                raise FileContentError(f"field 'phy2log' layer {layer} slot {slot} holds {show(expert)}, "
                                       f"not an expert id in [0, {MAX_EXPERTS})")
    return np.array(rows, dtype=np.int64)
