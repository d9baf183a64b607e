"""Paged attention (MHA/GQA) over the KV cache, and the attention block built on it.

One batched path serves prefill, chunked prefill, decode and mixed steps: new K/V are written at
`meta.slot_mapping`, each sequence's whole context is gathered with `meta.context_slots`, queries
are padded to [B, Q] with `meta.query_index`, and one `scaled_dot_product_attention` call with
`meta.attn_mask` covers every sequence of the step.

Shape legend: N new tokens, B sequences, Q max new tokens per sequence, L max context length,
hq / hk query / KV heads on this rank, D head dim, NB cache blocks, BS block size, H hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from moeserve.dense.attention_metadata import AttentionMetadata
from moeserve.dense.linear import QKVParallelLinear, RowParallelLinear, ShardReader
from moeserve.dense import paged_decode
from moeserve.dense.norm import RMSNorm, ShardedRMSNorm
from moeserve.dense.rotary import RotaryEmbedding, apply_rotary
from moeserve.parallel_state import ParallelContext


def write_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor
) -> None:
    """k_cache, v_cache [NB, BS, hk, D] (mutated); k, v [N, hk, D]; slots [N] int64 flat slot ids."""
    hk, D = k_cache.shape[-2:]
    k_cache.view(-1, hk, D)[slots] = k
    v_cache.view(-1, hk, D)[slots] = v


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    sliding_window: int | None = None,
    decode_kernel: bool = True,
) -> torch.Tensor:
    """q [N, hq, D]; caches [NB, BS, hk, D] already holding this step's K/V -> out [N, hq, D].

    sliding_window: a query at position p sees keys at positions > p - sliding_window (HF semantics).
    A decode step (one query per sequence) takes the C++ kernel of dense/paged_decode.py where it
    applies and `decode_kernel` allows; otherwise, and for every step with longer queries:
    Keys are gathered whole blocks at a time (one index_select per cache, C * BS = Lc keys per
    sequence) and masked with the additive `meta.attn_bias`: a float mask keeps SDPA off its slow
    boolean path, and gathering blocks instead of single slots copies 16 rows per index.
    GQA without repeating K/V: the g = hq / hk query heads sharing a KV head become g * Q query
    rows of that head, so SDPA sees hk heads and never expands the keys.
    """
    N, hq, D = q.shape
    if N == 0:
        return q.new_empty(0, hq, D)
    tables, bias = block_tables_and_bias(meta)
    B, C = tables.shape
    Q = bias.shape[2]  # the longest query of the step
    kernel = decode_kernel and paged_decode.applies(q, k_cache)
    if Q == 1 and B == N and kernel:
        return paged_decode.decode(q, k_cache, v_cache, tables, meta.positions, scale, sliding_window)
    if sliding_window:
        bias = windowed(bias, meta, sliding_window)
    bias = bias.to(q.dtype)
    if kernel and Q > 1:
        split = mixed_split(meta)
        if split is not None:
            return mixed_attention(q, k_cache, v_cache, meta, tables, bias, split, scale, sliding_window)
    if Q == 1 and B == N:  # decode: the query rows of a KV head are its g heads
        groups = meta.decode_groups or [(None, C)]
        if len(groups) == 1:
            return decode_attention(q, k_cache, v_cache, tables[:, :C], bias, scale)
        out = torch.empty_like(q)
        for index, c in groups:  # shorter contexts gather fewer blocks
            lc = c * k_cache.shape[1]
            out[index] = decode_attention(q[index], k_cache, v_cache, tables[index, :c], bias[index, ..., :lc], scale)
        return out
    return gathered_attention(q, k_cache, v_cache, tables, bias, meta.query_index, meta.query_valid, scale)


def gathered_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: torch.Tensor,
    bias: torch.Tensor,
    query_index: torch.Tensor,
    query_valid: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Each sequence's context gathered from the cache, one SDPA call for all. q [N, hq, D]; tables
    [B, C]; bias [B, 1, Q, C * BS]; query_index, query_valid [B, Q] -> [valid queries, hq, D] in the
    order of query_index[query_valid]."""
    (B, Q), (hq, D), hk = query_index.shape, q.shape[1:], k_cache.shape[-2]
    Lc, g = tables.shape[1] * k_cache.shape[1], hq // hk
    blocks = tables.reshape(-1)
    keys = k_cache.index_select(0, blocks).view(B, Lc, hk, D).transpose(1, 2)  # [B, hk, Lc, D]
    values = v_cache.index_select(0, blocks).view(B, Lc, hk, D).transpose(1, 2)
    queries = q[query_index].view(B, Q, hk, g, D).permute(0, 2, 3, 1, 4).reshape(B, hk, g * Q, D)
    bias = bias.expand(B, g, Q, Lc).reshape(B, 1, g * Q, Lc)  # row (j, t) = query head j, token t
    out = sdpa(queries, keys, values, bias, scale)  # [B, hk, gQ, D]
    out = out.view(B, hk, g, Q, D).permute(0, 3, 1, 2, 4).reshape(B, Q, hq, D)
    return out[query_valid]


def decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, tables: torch.Tensor, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """One new token per sequence. q [b, hq, D]; tables [b, c] blocks; bias [b, 1, 1, c * BS] -> [b, hq, D].
    The g query heads of a KV head are that head's g query rows: no K/V repeat, no query copy."""
    b, hq, D = q.shape
    hk = k_cache.shape[-2]
    lc = tables.shape[1] * k_cache.shape[1]
    blocks = tables.reshape(-1)
    keys = k_cache.index_select(0, blocks).view(b, lc, hk, D).transpose(1, 2)  # [b, hk, lc, D]
    values = v_cache.index_select(0, blocks).view(b, lc, hk, D).transpose(1, 2)
    out = sdpa(q.view(b, hk, hq // hk, D), keys, values, bias, scale)
    return out.reshape(b, hq, D)


def mixed_split(meta: AttentionMetadata) -> tuple[torch.Tensor, ...] | None:
    """A mixed step's sequences with one new token (`one`, and their `tokens`) and the others
    (`rest`, their queries `index` / `valid` cut to the longest of them), or None when no sequence
    has one new token. Worked out once per step, for every layer (meta.derived)."""
    if "mixed_split" not in meta.derived:
        single = meta.query_valid.sum(1) == 1  # [B]
        split = None
        if bool(single.any()):
            one, rest = single.nonzero().squeeze(1), (~single).nonzero().squeeze(1)
            valid = meta.query_valid[rest]
            Q = int(valid.sum(1).max()) if rest.numel() else 0  # the longest of these queries, not of the step's
            split = (one, meta.query_index[one, 0], rest, meta.query_index[rest, :Q], valid[:, :Q])
        meta.derived["mixed_split"] = split
    return meta.derived["mixed_split"]


def mixed_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    tables: torch.Tensor,
    bias: torch.Tensor,
    split: tuple[torch.Tensor, ...],
    scale: float,
    sliding_window: int | None,
) -> torch.Tensor:
    """A mixed step (`split` from mixed_split): the sequences with one new token through the decode
    kernel, the others (prefills, chunks) through the gather + SDPA path on just their rows and
    queries, so a decoding sequence's query is not padded to the longest prefill's. Each sequence
    gets the bits it would get in a step of its own kind."""
    one, tokens, rest, index, valid = split
    out = torch.empty_like(q)
    out[tokens] = paged_decode.decode(q[tokens], k_cache, v_cache, tables[one], meta.positions[tokens], scale,
                                      sliding_window)
    if rest.numel():
        Q = index.shape[1]
        prefills = gathered_attention(q, k_cache, v_cache, tables[rest], bias[rest, :, :Q], index, valid, scale)
        out[index[valid]] = prefills
    return out


# query rows per (sequence, KV head) for which torch's CPU flash attention gives other bits with one
# OpenMP thread than with several (seen on torch 2.13, AVX2; 2 and 4-16 rows do not differ)
THREAD_SENSITIVE_ROWS = (1, 3)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """scaled_dot_product_attention with q [b, h, R, D], an additive bias [b, 1, R or 1, L]. R of 1 or 3
    is padded with a zero query row (sliced off after), so the bits do not depend on the thread count
    (engine/step_threads.py switches it between steps); each row's result is its own either way."""
    rows = q.shape[-2]
    if rows not in THREAD_SENSITIVE_ROWS:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    q = F.pad(q, (0, 0, 0, 1))
    if bias.shape[-2] == rows:
        bias = F.pad(bias, (0, 0, 0, 1))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)[..., :rows, :]


def block_tables_and_bias(meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
    """meta.block_tables [B, C] and meta.attn_bias [B, 1, Q, C * BS], derived from the slot-level
    fields when metadata was built without them."""
    if meta.block_tables is not None and meta.attn_bias is not None:
        return meta.block_tables, meta.attn_bias
    BS = meta.block_size
    B, Q, L = meta.attn_mask.shape[0], meta.attn_mask.shape[2], meta.context_slots.shape[1]
    C = -(-L // BS)
    tables = meta.context_slots[:, ::BS] // BS  # [B, C]: first slot of each block
    bias = torch.full((B, 1, Q, C * BS), float("-inf"))
    bias[..., :L].masked_fill_(meta.attn_mask, 0.0)
    return tables, bias


def windowed(bias: torch.Tensor, meta: AttentionMetadata, window: int) -> torch.Tensor:
    """bias [B, 1, Q, Lc] -> the same with keys at positions <= p - window hidden from a query at p."""
    B, _, Q, Lc = bias.shape
    query_pos = meta.positions[meta.query_index]  # [B, Q]
    key_pos = torch.arange(Lc)
    outside = key_pos[None, None, :] <= (query_pos[:, :, None] - window)  # [B, Q, Lc]
    outside &= meta.query_valid[:, :, None]  # padded query rows keep their key 0
    return bias.masked_fill(outside[:, None], float("-inf"))


def paged_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """Per-sequence, per-head softmax attention: the plain version `paged_attention` is tested against."""
    hq, hk, D = q.shape[1], k_cache.shape[-2], k_cache.shape[-1]
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
                scores = (keys[first : pos + 1, kv_h].float() @ q[i, h].float()) * scale
                out[i, h] = (scores.softmax(-1) @ values[first : pos + 1, kv_h].float()).to(q.dtype)
    return out


@dataclass(frozen=True)
class AttentionSpec:
    """What differs between the GQA attention blocks of Mixtral, Qwen2/3-MoE and OLMoE.

    qk_norm: None, "head" (RMSNorm over each head's D, Qwen3) or "full" (RMSNorm over all heads'
    concatenated projections, OLMoE). clip_qkv: clamp q, k, v to [-c, c] after the norms (OLMoE).
    """

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: str | None = None
    clip_qkv: float | None = None
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        if self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads = {self.num_heads} is not a multiple of num_key_value_heads = "
                f"{self.num_kv_heads}: every KV head must serve the same number of query heads")


class Attention(nn.Module):
    """QKV projection -> optional q/k norm -> rotary -> paged attention -> o_proj (+ all-reduce over tp)."""

    # decode steps through dense/paged_decode.py where it applies (a benchmark turns it off per model)
    decode_kernel = True

    def __init__(self, spec: AttentionSpec, rotary: RotaryEmbedding, ctx: ParallelContext, dtype: torch.dtype):
        super().__init__()
        self.spec, self.ctx, self.rotary = spec, ctx, rotary
        D = spec.head_dim
        self.qkv = QKVParallelLinear(spec.hidden_size, D, spec.num_heads, spec.num_kv_heads, spec.qkv_bias, ctx, dtype)
        self.o_proj = RowParallelLinear(spec.num_heads * D, spec.hidden_size, spec.o_bias, ctx, dtype)
        self.scale = D**-0.5
        self.q_norm = self.k_norm = None
        if spec.qk_norm == "head":
            self.q_norm = RMSNorm(D, spec.rms_norm_eps, dtype)
            self.k_norm = RMSNorm(D, spec.rms_norm_eps, dtype)
        elif spec.qk_norm == "full":
            qkv, eps = self.qkv, spec.rms_norm_eps
            self.q_norm = ShardedRMSNorm(spec.num_heads * D, qkv.q_head_start * D, qkv.q_size, 1, eps, ctx, dtype)
            self.k_norm = ShardedRMSNorm(
                spec.num_kv_heads * D, qkv.kv_head_start * D, qkv.kv_size, qkv.kv_replicas, eps, ctx, dtype
            )
        elif spec.qk_norm is not None:
            raise ValueError(f"qk_norm {spec.qk_norm!r} is not one of None, 'head', 'full'")

    def kv_cache_shape(self, num_blocks: int, block_size: int) -> list[tuple[int, ...]]:
        shape = (num_blocks, block_size, self.qkv.kv_heads, self.spec.head_dim)
        return [shape, shape]

    def forward(self, hidden: torch.Tensor, meta: AttentionMetadata, kv_cache: list[torch.Tensor]) -> torch.Tensor:
        """hidden [N, H]; kv_cache [k_cache, v_cache] each [NB, BS, hk, D] -> [N, H] (summed over tp)."""
        N, D = hidden.shape[0], self.spec.head_dim
        hq, hk = self.qkv.q_heads, self.qkv.kv_heads
        qkv = self.qkv.project(hidden)  # [N, (hq + 2 hk) D]
        cos, sin = self._cos_sin(meta, qkv.dtype)
        if self.spec.qk_norm is None and self.spec.clip_qkv is None:
            # q and k are adjacent columns: rotate them as one [N, hq + hk, D] tensor
            qk = apply_rotary(qkv[:, : (hq + hk) * D].view(N, hq + hk, D), cos, sin)
            q, k = qk[:, :hq], qk[:, hq:]
            v = qkv[:, (hq + hk) * D :].view(N, hk, D)
        else:
            q, k, v = self._normed_qkv(qkv)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        write_kv(kv_cache[0], kv_cache[1], k, v, meta.slot_mapping)
        attn = paged_attention(
            q.contiguous(), kv_cache[0], kv_cache[1], meta, self.scale, self.spec.sliding_window, self.decode_kernel
        )
        out = self.o_proj(attn.reshape(N, hq * D))
        if self.ctx.tp_size > 1:
            dist.all_reduce(out, group=self.ctx.tp_group)
        return out

    def _cos_sin(self, meta: AttentionMetadata, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [N, D] of this step's positions, computed once per step for all layers alike."""
        key = ("rotary", self.rotary.key, dtype)
        if key not in meta.derived:
            meta.derived[key] = self.rotary.cos_sin(meta.positions, dtype)
        return meta.derived[key]

    def _normed_qkv(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """qkv [N, (hq + 2 hk) D] -> q [N, hq, D], k, v [N, hk, D] after the q/k norms and clipping."""
        N, D = qkv.shape[0], self.spec.head_dim
        q, k, v = qkv.split([self.qkv.q_size, self.qkv.kv_size, self.qkv.kv_size], dim=-1)
        if self.spec.qk_norm == "full":
            q, k = self.q_norm(q), self.k_norm(k)
        if self.spec.clip_qkv is not None:
            c = self.spec.clip_qkv
            q, k, v = q.clamp(-c, c), k.clamp(-c, c), v.clamp(-c, c)
        hq, hk = self.qkv.q_heads, self.qkv.kv_heads
        q, k, v = q.reshape(N, hq, D), k.reshape(N, hk, D), v.reshape(N, hk, D)
        if self.spec.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v

    def load(self, reader: ShardReader, prefix: str) -> None:
        """prefix: e.g. 'model.layers.3.self_attn' (HF names q_proj/k_proj/v_proj/o_proj/q_norm/k_norm)."""
        self.qkv.load(reader, f"{prefix}.q_proj", f"{prefix}.k_proj", f"{prefix}.v_proj")
        self.o_proj.load(reader, f"{prefix}.o_proj")
        if self.q_norm is not None:
            self.q_norm.load(reader, f"{prefix}.q_norm.weight")
            self.k_norm.load(reader, f"{prefix}.k_norm.weight")
