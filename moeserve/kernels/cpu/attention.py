"""The CPU set's paged attention: decode sequences through the C++ kernel that reads the cache in
place (kernels/cpu/paged_decode.py), everything else through the torch set's gather + SDPA path.

A decode step (one query per sequence) runs the kernel for all of it; a mixed step runs it for its
sequences of few new tokens (a decode, a speculative verify: row by row, each row at its position)
and the gather path for the others, so a decoding sequence's query is not padded to the longest
prefill's. Where the kernel does not apply (not built, another dtype,
`MOESERVE_DECODE_ATTENTION=0`) every step takes the torch path.

Shape legend: N new tokens, B sequences, Q max new tokens per sequence, hq / hk query / KV heads,
D head dim, NB cache blocks, BS block size. `meta`: the step's AttentionMetadata.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from moeserve.kernels.cpu import paged_decode
from moeserve.kernels.reference.attention import block_tables_and_bias, gathered_attention, windowed
from moeserve.kernels.reference.attention import paged_attention as torch_paged_attention


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: Any,
    scale: float,
    sliding_window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [N, hq, D]; caches [NB, BS, hk, D] already holding this step's K/V; sinks [hq] fp32 or None
    -> out [N, hq, D]."""
    N = q.shape[0]
    if N == 0 or not paged_decode.applies(q, k_cache):
        return torch_paged_attention(q, k_cache, v_cache, meta, scale, sliding_window, sinks, thread_invariant_sdpa)
    if meta.is_decode:
        return paged_decode.decode(q, k_cache, v_cache, meta.block_tables, meta.positions, scale, sliding_window, sinks)
    tables, bias = block_tables_and_bias(meta)
    split = mixed_split(meta)
    if split is None:
        return torch_paged_attention(q, k_cache, v_cache, meta, scale, sliding_window, sinks, thread_invariant_sdpa)
    if sliding_window:
        bias = windowed(bias, meta, sliding_window)
    return mixed_attention(q, k_cache, v_cache, meta, tables, bias.to(q.dtype), split, scale, sliding_window, sinks)


# a sequence with at most this many new tokens (a decode, a speculative verify of up to 16 drafts)
# attends row by row through the decode kernel: row q at position p sees keys <= p, which is the
# causal mask, and gets the bits a decode step at p would get
KERNEL_ROWS = 17


def mixed_split(meta: Any) -> tuple[torch.Tensor, ...] | None:
    """A mixed step's sequences with few new tokens (`few`: the sequence of each of their `tokens`)
    and the others (`rest`, their queries `index` cut to the longest of them, and the cells `rows` =
    b * Q + q of their real queries), or None when no sequence has few. Worked out once per step, for
    every layer (meta.derived)."""
    if "mixed_split" not in meta.derived:
        lens = meta.query_valid.sum(1)  # [B]
        short = lens <= KERNEL_ROWS
        split = None
        if bool(short.any()):
            few, rest = short.nonzero().squeeze(1), (~short).nonzero().squeeze(1)
            valid = meta.query_valid[rest]
            Q = int(valid.sum(1).max()) if rest.numel() else 0  # the longest of these queries, not of the step's
            rows = valid[:, :Q].reshape(-1).nonzero().squeeze(1)  # the cells of real queries, b * Q + q
            tokens = meta.query_index[few][meta.query_valid[few]]  # in sequence order, rows in order
            split = (few.repeat_interleave(lens[few]), tokens, rest, meta.query_index[rest, :Q], rows)
        meta.derived["mixed_split"] = split
    return meta.derived["mixed_split"]


def mixed_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: Any,
    tables: torch.Tensor,
    bias: torch.Tensor,
    split: tuple[torch.Tensor, ...],
    scale: float,
    sliding_window: int | None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """A mixed step (`split` from mixed_split): the sequences with few new tokens through the decode
    kernel, row by row, the others (prefills, chunks) through the gather + SDPA path on just their rows
    and queries, so a decoding sequence's query is not padded to the longest prefill's. Each sequence
    gets the bits it would get in a step of its own kind."""
    seq_of, tokens, rest, index, rows = split
    out = torch.empty_like(q)
    out[tokens] = paged_decode.decode(q[tokens], k_cache, v_cache, tables[seq_of], meta.positions[tokens], scale,
                                      sliding_window, sinks)
    if rest.numel():
        Q = index.shape[1]
        prefills = gathered_attention(q, k_cache, v_cache, tables[rest], bias[rest, :, :Q], index, rows, scale, sinks,
                                      thread_invariant_sdpa)
        out[index.reshape(-1)[rows]] = prefills
    return out


# query rows per (sequence, KV head) for which torch's CPU flash attention gives other bits with one
# OpenMP thread than with several (seen on torch 2.13, AVX2; 2 and 4-16 rows do not differ)
THREAD_SENSITIVE_ROWS = (1, 3)


def thread_invariant_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """scaled_dot_product_attention with q [b, h, R, D], an additive bias [b, 1, R or 1, L]. R of 1 or 3
    is padded with a zero query row (sliced off after), so the bits do not depend on the thread count
    (kernels/cpu/step_threads.py switches it between steps); each row's result is its own either way."""
    rows = q.shape[-2]
    if rows not in THREAD_SENSITIVE_ROWS:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    q = F.pad(q, (0, 0, 0, 1))
    if bias.shape[-2] == rows:
        bias = F.pad(bias, (0, 0, 0, 1))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)[..., :rows, :]
