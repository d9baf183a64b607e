"""Checkpoint name mapping for routed experts, in both on-disk layouts.

Per-expert layout (what transformers' save_pretrained writes for Mixtral/Qwen-MoE/OLMoE/DeepSeek):
    {prefix}.experts.{e}.{gate}.weight [I, H], {prefix}.experts.{e}.{up}.weight [I, H],
    {prefix}.experts.{e}.{down}.weight [H, I]
with (gate, up, down) = (gate_proj, up_proj, down_proj), or Mixtral's (w1, w3, w2).
Fused 3D layout (the transformers >= 5 in-memory state dict; Llama-4 ships the transposed form):
    {prefix}.experts.gate_up_proj [E, 2I, H] (gate rows first) or transposed [E, H, 2I]
    {prefix}.experts.down_proj    [E, H, I]                     or transposed [E, I, H]
(an optional `.weight` suffix is accepted). The orientation is read from the shapes; when H == 2I
the untransposed transformers layout is assumed. gpt-oss's interleaved gate/up layout with expert
biases, in BF16 or MXFP4, has its own loader (models/gpt_oss_experts.py).
FP8 block-scaled experts (models/quant_fp8.py) stay FP8 where the rank's kernels keep FP8 and the
shards are in block form (per-expert layout only); otherwise they are read dequantized.
Only this rank's experts (and its tp slice of each) are read; the others are claimed unread.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeserve.models.checkpoint import CheckpointError, CheckpointReader
from moeserve.moe.layer import MoELayer


@dataclass(frozen=True)
class ExpertNames:
    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"


MIXTRAL_EXPERT_NAMES = ExpertNames("w1", "w3", "w2")


def _fused_name(reader: CheckpointReader, base: str) -> str | None:
    for name in (base, f"{base}.weight"):
        if reader.has(name):
            return name
    return None


def load_experts(reader: CheckpointReader, moe: MoELayer, prefix: str, names: ExpertNames = ExpertNames()) -> None:
    """Fill `moe.experts` for this rank's slots from `{prefix}.experts.*` (prefix e.g. 'model.layers.0.mlp')."""
    gate_up = _fused_name(reader, f"{prefix}.experts.gate_up_proj")
    if gate_up is not None:
        down = _fused_name(reader, f"{prefix}.experts.down_proj")
        if down is None:
            raise CheckpointError(f"checkpoint has {gate_up} but no {prefix}.experts.down_proj")
        _load_fused(reader, moe, gate_up, down)
    else:
        _load_per_expert(reader, moe, prefix, names)


def tp_rows(moe: MoELayer) -> tuple[int, int]:
    """[start, end) of this rank's share of the intermediate dimension."""
    Il = moe.intermediate_local
    rank = moe.ctx.tp_rank if moe.ctx.ep_size == 1 else 0
    return rank * Il, (rank + 1) * Il


def _load_per_expert(reader: CheckpointReader, moe: MoELayer, prefix: str, names: ExpertNames) -> None:
    lo, hi = tp_rows(moe)
    fp8 = _keeps_fp8(reader, moe, prefix, names, lo)
    for slot, e in enumerate(moe.local_slot_experts()):
        base = f"{prefix}.experts.{e}"
        gate, up, down = (f"{base}.{n}.weight" for n in (names.gate, names.up, names.down))
        if fp8:
            moe.experts.set_slot_fp8(slot, reader.read_fp8(gate, 0, lo, hi), reader.read_fp8(up, 0, lo, hi),
                                     reader.read_fp8(down, 1, lo, hi))
        else:
            moe.experts.set_slot(slot, reader.read(gate, 0, lo, hi), reader.read(up, 0, lo, hi),
                                 reader.read(down, 1, lo, hi))
    all_names = [
        f"{prefix}.experts.{e}.{n}.weight" for e in range(moe.num_experts) for n in (names.gate, names.up, names.down)
    ]
    reader.claim(all_names)


def _keeps_fp8(reader: CheckpointReader, moe: MoELayer, prefix: str, names: ExpertNames, lo: int) -> bool:
    """Whether this layer's expert shards stay FP8 (models/quant_fp8.py): the reader keeps FP8 for the
    rank's kernels, every local expert's tensors are FP8, each shard starts on a block boundary, and
    gate and up stack into w13 in whole row blocks. Decided once for all of the layer's slots."""
    keepable = getattr(reader, "fp8_keepable", None)
    if keepable is None or moe.intermediate_local % reader.fp8_block[0]:
        return False
    for e in set(moe.local_slot_experts()):
        base = f"{prefix}.experts.{e}"
        if not (keepable(f"{base}.{names.gate}.weight", 0, lo) and keepable(f"{base}.{names.up}.weight", 0, lo)
                and keepable(f"{base}.{names.down}.weight", 1, lo)):
            return False
    return True


def _load_fused(reader: CheckpointReader, moe: MoELayer, gate_up: str, down: str) -> None:
    # E experts, H hidden, I full intermediate
    E, H, I = moe.num_experts, moe.hidden, moe.intermediate_full
    gu_shape, d_shape = reader.shape(gate_up), reader.shape(down)
    if gu_shape == (E, 2 * I, H) and d_shape == (E, H, I):
        transposed = False
    elif gu_shape == (E, H, 2 * I) and d_shape == (E, I, H):
        transposed = True
    else:
        raise CheckpointError(
            f"{gate_up} {gu_shape} / {down} {d_shape} match neither fused layout "
            f"[E, 2I, H] / [E, H, I] nor [E, H, 2I] / [E, I, H] with E={E}, H={H}, I={I}"
        )
    lo, hi = tp_rows(moe)
    rows, up_rows, full = slice(lo, hi), slice(I + lo, I + hi), slice(None)
    for slot, e in enumerate(moe.local_slot_experts()):
        if transposed:
            g = reader.read_index(gate_up, (e, full, rows)).t()
            u = reader.read_index(gate_up, (e, full, up_rows)).t()
            d = reader.read_index(down, (e, rows, full)).t()
        else:
            g = reader.read_index(gate_up, (e, rows, full))
            u = reader.read_index(gate_up, (e, up_rows, full))
            d = reader.read_index(down, (e, full, rows))
        moe.experts.set_slot(slot, g, u, d)
    reader.claim([gate_up, down])
