"""Decode attention through a C++ kernel that reads the paged KV cache in place.

Why: torch's path (dense/attention.py `decode_attention`) gathers each sequence's context blocks
into a padded [b, hk, L, D] copy with `index_select` and runs `scaled_dot_product_attention` over
it with an additive mask. At decode that is a copy of the whole context per step for a handful of
FLOPs; at 64 sequences of tiny-mixtral the two calls were 19% of a step's CPU time
(docs/performance.md). `csrc/decode_attention.cpp` reads each key and value where it lies in the
cache, through the block table.

Bits: each sequence is computed by one thread in a fixed order, so a sequence's result
does not depend on the other sequences of the step nor on the intra-op thread count
(kernels/cpu/step_threads.py switches that between steps). It differs from SDPA by fp32 rounding.

Where it applies: fp32 or bf16 caches and queries on CPU (bf16 widened on load; scores, softmax
and sums in fp32, as torch's CPU attention computes bf16), the sequences of a step that have one
new token. Not loaded (kernels/cpu/cpu_kernels.py), another dtype, or `MOESERVE_DECODE_ATTENTION=0`:
callers use torch's path.
"""

from __future__ import annotations

import torch

from moeserve import envs

from moeserve.kernels.cpu import cpu_kernels

_state: dict[str, bool] = {}


def available() -> bool:
    """Whether torch.ops.moeserve.decode_attention is loaded and switched on (building it on first use)."""
    if "on" not in _state:
        _state["on"] = envs.DECODE_ATTENTION.get() and cpu_kernels.load()
    return _state["on"]


KERNEL_DTYPES = (torch.float32, torch.bfloat16)


def applies(q: torch.Tensor, k_cache: torch.Tensor) -> bool:
    """Whether the kernel takes these tensors (fp32 or bf16 on CPU, contiguous caches) and is available."""
    return (
        q.dtype in KERNEL_DTYPES and k_cache.dtype in KERNEL_DTYPES and q.device.type == "cpu"
        and k_cache.device.type == "cpu" and k_cache.is_contiguous() and available()
    )


def decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
    window: int | None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [b, hq, D]; caches [NB, BS, hk, D] holding this step's K/V; tables [b, C] block ids;
    positions [b] the query positions; sinks [hq] fp32 attention-sink logits or None -> [b, hq, D].
    A query at p sees keys p - window < pos <= p."""
    return torch.ops.moeserve.decode_attention(q, k_cache, v_cache, tables, positions, scale, window or 0, sinks)
