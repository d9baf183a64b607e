"""gpt-oss's routed experts on disk: one fused 3D tensor per projection, gate and up interleaved, with
biases; BF16 (transformers' `save_pretrained`, the BF16 re-releases) or MXFP4 (the openai/gpt-oss
releases, `quantization_config.quant_method: "mxfp4"`).

    {p}.gate_up_proj        [E, H, 2I]  column 2i is gate row i, column 2i + 1 up row i ([E, 2I, H] also read)
    {p}.gate_up_proj_bias   [E, 2I]     interleaved the same way
    {p}.down_proj           [E, I, H]   ([E, H, I] also read)
    {p}.down_proj_bias      [E, H]
MXFP4 replaces the two weights with `{p}.gate_up_proj_blocks` / `_scales` (rows 2I, columns H) and
`{p}.down_proj_blocks` / `_scales` (rows H, columns I), see models/mxfp4.py; the biases stay BF16.
{p} is `model.layers.{i}.mlp.experts`. E experts, H hidden, I intermediate, Il = this rank's share of I.

A rank reads only its experts and, under expert tensor parallelism, its share [lo, hi) of I: the
interleaved gate/up rows 2 lo .. 2 hi are one contiguous run, so no rank reads another's; the down
projection's columns lo .. hi (MXFP4: the 32-column groups holding them). The down bias is read by tp
rank 0 only (the reduced partial sums add it once); the others hold zeros.
"""

from __future__ import annotations

import logging
import weakref

import torch

from moeserve.models import mxfp4
from moeserve.models.checkpoint import CheckpointError, CheckpointReader
from moeserve.models.expert_loading import tp_rows
from moeserve.moe.layer import MoELayer

logger = logging.getLogger(__name__)
_SAID: "weakref.WeakSet[CheckpointReader]" = weakref.WeakSet()


def load_gpt_oss_experts(reader: CheckpointReader, moe: MoELayer, prefix: str) -> None:
    """Fill `moe.experts` (weights and biases) for this rank's slots from `{prefix}.*` (prefix e.g.
    'model.layers.0.mlp.experts')."""
    quantized = reader.has(f"{prefix}.gate_up_proj_blocks")
    read_gate_up, read_down = (_mxfp4_readers if quantized else _dense_readers)(reader, moe, prefix)
    lo, hi = tp_rows(moe)
    gets_down_bias = moe.ctx.ep_size > 1 or moe.ctx.tp_rank == 0
    for slot, e in enumerate(moe.local_slot_experts()):
        gate_up = read_gate_up(e, lo, hi)  # [2Il, H] interleaved
        bias = reader.read_index(f"{prefix}.gate_up_proj_bias", (e, slice(2 * lo, 2 * hi)))
        down_bias = (reader.read_index(f"{prefix}.down_proj_bias", (e, slice(None))) if gets_down_bias
                     else torch.zeros(moe.hidden))
        moe.experts.set_slot(slot, gate_up[0::2], gate_up[1::2], read_down(e, lo, hi),
                             (bias[0::2], bias[1::2], down_bias))
    names = ["gate_up_proj_bias", "down_proj_bias"]
    names += ["gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales"] if quantized \
        else ["gate_up_proj", "down_proj"]
    reader.claim([f"{prefix}.{n}" for n in names])


def _dense_readers(reader: CheckpointReader, moe: MoELayer, prefix: str):
    """(gate_up(e, lo, hi) -> [2Il, H], down(e, lo, hi) -> [H, Il]) over BF16/FP32 fused tensors."""
    E, H, I = moe.num_experts, moe.hidden, moe.intermediate_full
    gate_up, down = f"{prefix}.gate_up_proj", f"{prefix}.down_proj"
    gu_shape, d_shape = reader.shape(gate_up), reader.shape(down)
    # gpt-oss's own orientation first: x @ W with W [H, 2I] and [I, H] (the only reading when H == 2I)
    if gu_shape == (E, H, 2 * I) and d_shape == (E, I, H):
        return (lambda e, lo, hi: reader.read_index(gate_up, (e, slice(None), slice(2 * lo, 2 * hi))).t(),
                lambda e, lo, hi: reader.read_index(down, (e, slice(lo, hi), slice(None))).t())
    if gu_shape == (E, 2 * I, H) and d_shape == (E, H, I):
        return (lambda e, lo, hi: reader.read_index(gate_up, (e, slice(2 * lo, 2 * hi), slice(None))),
                lambda e, lo, hi: reader.read_index(down, (e, slice(None), slice(lo, hi))))
    raise CheckpointError(
        f"{gate_up} {gu_shape} / {down} {d_shape} match neither gpt-oss layout [E, H, 2I] / [E, I, H] nor "
        f"[E, 2I, H] / [E, H, I] with E={E}, H={H}, I={I}")


def _mxfp4_readers(reader: CheckpointReader, moe: MoELayer, prefix: str):
    """The same readers over MXFP4 blocks and scales, dequantized (fp32) as they are read."""
    E, H, I = moe.num_experts, moe.hidden, moe.intermediate_full
    gate_up, down = f"{prefix}.gate_up_proj", f"{prefix}.down_proj"
    mxfp4.check_shapes(reader, gate_up, (E,), 2 * I, H)
    mxfp4.check_shapes(reader, down, (E,), H, I)
    if reader not in _SAID:  # once per load, not per layer
        _SAID.add(reader)
        logger.warning("MXFP4 expert weights are dequantized to %s at load: moeserve has no MXFP4 kernel, so the "
                       "experts take %.1fx the memory of the checkpoint's blocks", moe.dtype,
                       torch.finfo(moe.dtype).bits / 4.25)
    return (lambda e, lo, hi: mxfp4.read_rows_columns(reader, gate_up, (e,), slice(2 * lo, 2 * hi), (0, H)),
            lambda e, lo, hi: mxfp4.read_rows_columns(reader, down, (e,), slice(None), (lo, hi)))
