"""Paged attention (MHA/GQA) over the KV cache in plain torch: the `torch` set's path, and the
per-head reference every kernel is tested against.

One batched path serves prefill, chunked prefill, decode and mixed steps: each sequence's context
blocks are gathered through its block table, queries are padded to [B, Q] with `meta.query_index`,
and one `scaled_dot_product_attention` call with an additive mask covers every sequence of the step.
`meta` is an AttentionMetadata (dense/attention_metadata.py), read only.

Attention sinks (gpt-oss): `sinks` [hq] fp32 holds one learned logit per query head that joins the
softmax's denominator and adds nothing to the output: softmax over [scores..., sink], sink's share
dropped. The gather path gives each KV head g more keys, one per query head sharing it, that score
exactly that head's sink and hold zero values (`sdpa_with_sinks`), so the additive bias stays one per
row, shared by the KV heads, as without sinks.

Shape legend: N new tokens, B sequences, Q max new tokens per sequence, L max context length,
hq / hk query / KV heads on this rank, D head dim, NB cache blocks, BS block size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """scaled_dot_product_attention with q [b, h, R, D] and an additive bias [b, 1, R or 1, L] (the cpu set
    passes its own, thread-count invariant one: kernels/cpu/attention.py)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: Any,
    scale: float,
    sliding_window: int | None = None,
    sinks: torch.Tensor | None = None,
    attend: Callable = sdpa,
) -> torch.Tensor:
    """q [N, hq, D]; caches [NB, BS, hk, D] already holding this step's K/V -> out [N, hq, D].
    attend: the SDPA call (`sdpa`'s contract).

    sliding_window: a query at position p sees keys at positions > p - sliding_window (HF semantics).
    sinks: [hq] fp32 attention-sink logits of this rank's query heads, or None.
    Keys are gathered whole blocks at a time (one index_select per cache, C * BS = Lc keys per
    sequence) and masked with an additive bias: a float mask keeps SDPA off its slow boolean path,
    and gathering blocks instead of single slots copies 16 rows per index.
    GQA without repeating K/V: the g = hq / hk query heads sharing a KV head become g * Q query
    rows of that head, so SDPA sees hk heads and never expands the keys.
    A decode step reads only the O(batch) metadata (its bias comes from seq_lens on the device), so
    it runs inside a CUDA graph; other steps read the padded views built on the host.
    """
    N, hq, D = q.shape
    if N == 0:
        return q.new_empty(0, hq, D)
    if meta.is_decode:  # the query rows of a KV head are its g heads
        tables = meta.block_tables
        groups = meta.decode_groups if meta.host is not None else None
        if not groups or len(groups) == 1:
            bias = decode_bias(meta.seq_lens, tables.shape[1] * k_cache.shape[1], sliding_window, q.dtype)
            return decode_attention(q, k_cache, v_cache, tables, bias, scale, sinks, attend)
        out = torch.empty_like(q)
        for index, c in groups:  # shorter contexts gather fewer blocks
            lc = c * k_cache.shape[1]
            bias = decode_bias(meta.seq_lens[index], lc, sliding_window, q.dtype)
            out[index] = decode_attention(q[index], k_cache, v_cache, tables[index, :c], bias, scale, sinks, attend)
        return out
    tables, bias = block_tables_and_bias(meta)
    if sliding_window:
        bias = windowed(bias, meta, sliding_window)
    views = meta.padded()
    return gathered_attention(q, k_cache, v_cache, tables, bias.to(q.dtype), views.query_index, views.query_rows, scale,
                              sinks, attend)


def decode_bias(seq_lens: torch.Tensor, width: int, window: int | None, dtype: torch.dtype) -> torch.Tensor:
    """[b, 1, 1, width] additive mask of one query per sequence at position seq_lens - 1, built on the
    device from seq_lens [b] int64: 0 for keys it sees (positions < seq_len, and > seq_len - 1 - window
    with a sliding window), -inf elsewhere."""
    key = torch.arange(width, device=seq_lens.device)
    hidden = key[None, :] >= seq_lens[:, None]
    if window:
        hidden |= key[None, :] <= seq_lens[:, None] - 1 - window
    bias = torch.zeros(hidden.shape, dtype=dtype, device=seq_lens.device).masked_fill_(hidden, float("-inf"))
    return bias[:, None, None, :]


def gathered_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: torch.Tensor,
    bias: torch.Tensor,
    query_index: torch.Tensor,
    query_rows: torch.Tensor,
    scale: float,
    sinks: torch.Tensor | None = None,
    attend: Callable = sdpa,
) -> torch.Tensor:
    """Each sequence's context gathered from the cache, one SDPA call for all. q [N, hq, D]; tables
    [B, C]; bias [B, 1, Q, C * BS]; query_index [B, Q]; query_rows [n] int64 the cells b * Q + q of the
    queries wanted; sinks [hq] fp32 or None -> [n, hq, D] in that order."""
    (B, Q), (hq, D), hk = query_index.shape, q.shape[1:], k_cache.shape[-2]
    Lc, g = tables.shape[1] * k_cache.shape[1], hq // hk
    blocks = tables.reshape(-1)
    keys = k_cache.index_select(0, blocks).view(B, Lc, hk, D).transpose(1, 2).to(q.dtype)  # [B, hk, Lc, D]
    values = v_cache.index_select(0, blocks).view(B, Lc, hk, D).transpose(1, 2).to(q.dtype)  # e4m3 read upcast
    queries = q[query_index].view(B, Q, hk, g, D).permute(0, 2, 3, 1, 4).reshape(B, hk, g * Q, D)
    bias = bias.expand(B, g, Q, Lc).reshape(B, 1, g * Q, Lc)  # row (j, t) = query head j, token t
    if sinks is not None:
        out = sdpa_with_sinks(queries, keys, values, bias, sinks, scale, attend)
    else:
        out = attend(queries, keys, values, bias, scale)  # [B, hk, gQ, D]
    out = out.view(B, hk, g, Q, D).permute(0, 3, 1, 2, 4).reshape(B * Q, hq, D)
    return out.index_select(0, query_rows)


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: torch.Tensor,
    bias: torch.Tensor,
    scale: float,
    sinks: torch.Tensor | None = None,
    attend: Callable = sdpa,
) -> torch.Tensor:
    """One new token per sequence. q [b, hq, D]; tables [b, c] blocks; bias [b, 1, 1, c * BS]; sinks [hq]
    fp32 or None -> [b, hq, D]. The g query heads of a KV head are that head's g query rows: no K/V
    repeat, no query copy."""
    b, hq, D = q.shape
    hk = k_cache.shape[-2]
    lc = tables.shape[1] * k_cache.shape[1]
    blocks = tables.reshape(-1)
    keys = k_cache.index_select(0, blocks).view(b, lc, hk, D).transpose(1, 2).to(q.dtype)  # [b, hk, lc, D]
    values = v_cache.index_select(0, blocks).view(b, lc, hk, D).transpose(1, 2).to(q.dtype)  # e4m3 read upcast
    if sinks is not None:
        out = sdpa_with_sinks(q.view(b, hk, hq // hk, D), keys, values, bias.expand(b, 1, hq // hk, lc), sinks, scale,
                              attend)
    else:
        out = attend(q.view(b, hk, hq // hk, D), keys, values, bias, scale)
    return out.reshape(b, hq, D)


def sdpa_with_sinks(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, sinks: torch.Tensor,
    scale: float, attend: Callable = sdpa,
) -> torch.Tensor:
    """`sdpa` with attention sinks. queries [B, hk, g * Q, D] (row j * Q + t: query head j of its KV head,
    token t; Q may be 0); keys, values [B, hk, L, D]; bias [B, 1, g * Q, L]; sinks [hk * g] fp32 ->
    [B, hk, g * Q, D].

    Each KV head h gets g more keys, one per query head j sharing it, in g more dims: the queries carry
    a one-hot of j there, key L + j carries sinks[h g + j] / scale in dim D + j (and zeros in the first
    D), so row (j, t) scores exactly its sink on key L + j; the bias hides keys L + j' (j' != j) from it;
    those keys' values are zero. The sink joins the softmax's denominator and adds nothing to the output,
    and the bias stays [B, 1, rows, L + g], shared by the KV heads (a per-head bias column would
    multiply its size by hk)."""
    B, hk, R, D = queries.shape
    L, g = keys.shape[2], sinks.shape[0] // hk
    rows_head = torch.eye(g, dtype=queries.dtype, device=queries.device).repeat_interleave(R // g, dim=0)  # [R, g]
    queries = torch.cat((queries, rows_head.expand(B, hk, R, g)), dim=-1)
    sink_keys = torch.zeros(hk, g, D + g, dtype=keys.dtype, device=keys.device)
    sink_keys[:, :, D:] = torch.diag_embed(sinks.view(hk, g).to(keys.dtype) / scale)
    keys = torch.cat((F.pad(keys, (0, g)), sink_keys.expand(B, hk, g, D + g)), dim=2)
    values = F.pad(values, (0, g, 0, g))  # zero values for the sink keys; D + g wide, as the keys, for SDPA
    hidden = torch.zeros(R, g, dtype=bias.dtype, device=bias.device).masked_fill(rows_head == 0, float("-inf"))
    bias = torch.cat((bias.expand(B, 1, R, L), hidden.expand(B, 1, R, g)), dim=-1)
    return attend(queries, keys, values, bias, scale)[..., :D]


def block_tables_and_bias(meta: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """meta.block_tables [B, C] and the padded view attn_bias [B, 1, Q, C * BS] (the tables cut to the
    bias's width)."""
    bias = meta.attn_bias
    return meta.block_tables[:, : bias.shape[-1] // meta.block_size], bias


def windowed(bias: torch.Tensor, meta: Any, window: int) -> torch.Tensor:
    """bias [B, 1, Q, Lc] -> the same with keys at positions <= p - window hidden from a query at p."""
    B, _, Q, Lc = bias.shape
    query_pos = meta.positions[meta.query_index]  # [B, Q]
    key_pos = torch.arange(Lc, device=bias.device)
    outside = key_pos[None, None, :] <= (query_pos[:, :, None] - window)  # [B, Q, Lc]
    outside &= meta.query_valid[:, :, None]  # padded query rows keep their key 0
    return bias.masked_fill(outside[:, None], float("-inf"))


def paged_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: Any,
    scale: float,
    sliding_window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-sequence, per-head softmax attention: the plain version `paged_attention` is tested against.
    Computed in fp32, or in fp64 for fp64 inputs (an fp32 reference would round them, by amounts that
    differ with the CPU's instruction set)."""
    hq, hk, D = q.shape[1], k_cache.shape[-2], k_cache.shape[-1]
    wide = torch.promote_types(q.dtype, torch.float32)  # fp32 at least; fp64 stays fp64
    k_flat, v_flat = k_cache.view(-1, hk, D), v_cache.view(-1, hk, D)
    out = torch.empty_like(q)
    for b in range(meta.num_seqs):
        lo, hi = int(meta.query_start[b]), int(meta.query_start[b + 1])
        ctx_len = int(meta.seq_lens[b])
        slots = meta.context_slots[b, :ctx_len]
        keys, values = k_flat[slots], v_flat[slots]  # [C, hk, D]
        for i in range(lo, hi):
            pos = int(meta.positions[i])
            first = max(0, pos - sliding_window + 1) if sliding_window else 0
            for h in range(hq):
                kv_h = h // (hq // hk)
                scores = (keys[first : pos + 1, kv_h].to(wide) @ q[i, h].to(wide)) * scale
                if sinks is not None:  # the sink's logit joins the softmax; its probability is dropped
                    probs = torch.cat((scores, sinks[h].to(wide).view(1))).softmax(-1)[:-1]
                else:
                    probs = scores.softmax(-1)
                out[i, h] = (probs @ values[first : pos + 1, kv_h].to(wide)).to(q.dtype)
    return out
