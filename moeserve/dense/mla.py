"""Multi-head latent attention (DeepSeek-V2/V3) over a paged cache of compressed latents.

Shape legend: N new tokens, B sequences, Q max new tokens per sequence, L max context per sequence,
h local heads (num_attention_heads / tp), R kv_lora_rank, r qk_rope_head_dim, dn qk_nope_head_dim,
dv v_head_dim, H hidden.

Per token the cache holds only `[latent (R) | rope key (r)]`: the kv_a_layernorm'd latent and the
rotated, head-shared rope key, one tensor per layer `[num_blocks, block_size, R + r]`. K and V are
never stored expanded. Attention runs one of two mathematically equal paths, picked per slice of
sequences by their FLOP count on the padded slice:
- "expand" (reference): kv_b_proj turns every context latent into per-head k_nope and v, then
  plain attention over dn + r dims. Cheaper for long prefills (Q close to L).
- "absorb": W_uk is folded into the query (q_nope @ W_uk -> latent space) and W_uv is applied
  after attention, so attention is MQA with one shared key [latent | rope] of R + r dims and value
  = latent, read straight from the cache. Cheaper for decode (Q = 1), where expanding would cost
  L x R x h(dn + dv) per token. See docs/deepseek.md for measured numbers. Decode sequences on
  this path attend through the rank's kernel set (`kernels.mla_decode`, reading the block tables in
  place); the others through `kernels.mla_prefill` over the block tables.
Decode sequences take the absorbed kernel path unless `path` is "expand": it costs fewer FLOPs from
two keys on, and it reads only the O(batch) metadata, so a decode step makes no host read and runs
inside a CUDA graph. So do the sequences of a speculative verify (k + 1 new tokens each, grouped by
k + 1): the decode kernel takes [b, Q, h, R] queries at each sequence's last Q positions. Slices come from the step's host lengths (`seq_slices`), never from a device value.
Heads are split over tp: q/kv_b are column-parallel by head, o_proj row-parallel (all-reduce here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from moeserve.dense.attention_metadata import AttentionMetadata
from moeserve.dense.linear import ColumnParallelLinear, ReplicatedLinear, RowParallelLinear, ShardReader, divide
from moeserve.dense.norm import RMSNorm
from moeserve.dense.yarn import MlaRotaryEmbedding
from moeserve.kernels.base import UsesKernels
from moeserve.kernels.reference.fp8_quant import as_cache, read_dtype
from moeserve.parallel_state import ParallelContext

MlaPath = Literal["auto", "expand", "absorb"]
MLA_PATHS = ("auto", "expand", "absorb")


@dataclass(frozen=True)
class MlaDims:
    hidden_size: int
    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    attention_bias: bool = False

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cache_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    @classmethod
    def from_hf(cls, c: Any) -> MlaDims:
        return cls(
            c.hidden_size,
            c.num_attention_heads,
            c.q_lora_rank,
            c.kv_lora_rank,
            c.qk_nope_head_dim,
            c.qk_rope_head_dim,
            c.v_head_dim,
            bool(getattr(c, "attention_bias", False)),
        )


# transformers builds the q / kv latent norms with its default eps, not the config's rms_norm_eps
LATENT_NORM_EPS = 1e-6


class MultiHeadLatentAttention(nn.Module, UsesKernels):
    def __init__(
        self,
        dims: MlaDims,
        rotary: MlaRotaryEmbedding,
        scale: float,
        ctx: ParallelContext,
        dtype: torch.dtype,
        path: MlaPath = "auto",
    ):
        super().__init__()
        if path not in MLA_PATHS:
            raise ValueError(f"unknown MLA path {path!r}; valid: {', '.join(MLA_PATHS)}")
        self.dims, self.rotary, self.scale, self.ctx, self.path = dims, rotary, scale, ctx, path
        d = dims
        self.h = divide(d.num_heads, ctx.tp_size, "num_attention_heads")
        q_out = [d.num_heads * d.qk_head_dim]
        if d.q_lora_rank is None:
            self.q_proj = ColumnParallelLinear(d.hidden_size, q_out, False, ctx, dtype)
        else:
            self.q_a_proj = ReplicatedLinear(d.hidden_size, d.q_lora_rank, d.attention_bias, dtype)
            self.q_a_layernorm = RMSNorm(d.q_lora_rank, LATENT_NORM_EPS, dtype)
            self.q_b_proj = ColumnParallelLinear(d.q_lora_rank, q_out, False, ctx, dtype)
        self.kv_a_proj_with_mqa = ReplicatedLinear(d.hidden_size, d.cache_dim, d.attention_bias, dtype)
        self.kv_a_layernorm = RMSNorm(d.kv_lora_rank, LATENT_NORM_EPS, dtype)
        self.kv_b_proj = ColumnParallelLinear(
            d.kv_lora_rank, [d.num_heads * (d.qk_nope_head_dim + d.v_head_dim)], False, ctx, dtype
        )
        # the absorbed path reads kv_b_proj's weight as W_uk / W_uv itself, so it is held dequantized
        # (as vLLM's MLA does) even where the kernels keep FP8 weights
        self.kv_b_proj.keep_fp8 = False
        self.o_proj = RowParallelLinear(d.num_heads * d.v_head_dim, d.hidden_size, d.attention_bias, ctx, dtype)

    def load(self, reader: ShardReader, prefix: str) -> None:
        """prefix: e.g. "model.layers.3.self_attn"."""
        if self.dims.q_lora_rank is None:
            self.q_proj.load(reader, [f"{prefix}.q_proj"])
        else:
            self.q_a_proj.load(reader, f"{prefix}.q_a_proj")
            self.q_a_layernorm.load(reader, f"{prefix}.q_a_layernorm.weight")
            self.q_b_proj.load(reader, [f"{prefix}.q_b_proj"])
        self.kv_a_proj_with_mqa.load(reader, f"{prefix}.kv_a_proj_with_mqa")
        self.kv_a_layernorm.load(reader, f"{prefix}.kv_a_layernorm.weight")
        self.kv_b_proj.load(reader, [f"{prefix}.kv_b_proj"])
        self.o_proj.load(reader, f"{prefix}.o_proj")

    def kv_cache_shape(self, num_blocks: int, block_size: int) -> list[tuple[int, ...]]:
        """One cache tensor per layer: latent + rope key per token, never expanded K/V."""
        return [(num_blocks, block_size, self.dims.cache_dim)]

    def kv_cache_heads(self) -> tuple[int, int, int]:
        """(first, count, total) as Attention's: the latent has no heads to split, and every tp rank
        computes and caches all of it (kv_a_proj_with_mqa is replicated), so one "head" on every rank."""
        return 0, 1, 1

    def forward(self, hidden: torch.Tensor, meta: AttentionMetadata, kv_cache: list[torch.Tensor]) -> torch.Tensor:
        """hidden [N, H]; kv_cache = [cache [num_blocks, block_size, R + r]], written at meta.slot_mapping. -> [N, H]."""
        (cache,) = kv_cache
        d = self.dims
        N = hidden.shape[0]
        q = self._query(hidden).view(N, self.h, d.qk_head_dim)
        q_nope, q_rope = q.split([d.qk_nope_head_dim, d.qk_rope_head_dim], dim=-1)
        latent, k_rope = self.kv_a_proj_with_mqa(hidden).split([d.kv_lora_rank, d.qk_rope_head_dim], dim=-1)
        cos, sin = self.rotary.cos_sin(meta.positions)
        q_rope = self.rotary.apply(q_rope, cos, sin)
        k_rope = self.rotary.apply(k_rope, cos, sin)
        flat = cache.view(-1, d.cache_dim)
        rows = as_cache(torch.cat([self.kv_a_layernorm(latent), k_rope], dim=-1), cache.dtype)
        if rows.element_size() == 1:  # e4m3 (--kv-cache-dtype fp8): index_copy_ has no FP8 kernel, bytes it has
            flat.view(torch.uint8).index_copy_(0, meta.slot_mapping, rows.view(torch.uint8))
        else:
            flat.index_copy_(0, meta.slot_mapping, rows)

        if meta.is_decode and self.path != "expand":  # from the O(batch) metadata alone: no host read, graph-safe
            out = self._decode_absorbed(q_nope, q_rope, cache, meta.block_tables, meta.seq_lens)
        else:
            out = hidden.new_zeros(N, self.h, d.v_head_dim)
            for part in seq_slices(meta):
                b, Q = part.query_index.shape
                # decodes, and verifies of Q tokens a sequence where the latent space is cheaper (long contexts)
                if part.decode and self.path != "expand" and (Q == 1 or self._use_absorb(part)):
                    tokens, rows = part.tokens, part.rows
                    qn, qr = q_nope[tokens], q_rope[tokens]
                    if Q > 1:  # [b * Q, h, .] -> [b, Q, h, .]: each sequence's tokens are consecutive
                        qn, qr = qn.view(b, Q, *qn.shape[1:]), qr.view(b, Q, *qr.shape[1:])
                    o = self._decode_absorbed(qn, qr, cache, meta.block_tables[rows], meta.seq_lens[rows])
                    out[tokens] = o.reshape(len(tokens), *o.shape[-2:])
                elif not self._use_absorb(part):
                    out[part.tokens] = self._attend_expanded(q_nope, q_rope, flat, meta, part)
                else:
                    out[part.tokens] = self._attend_absorbed(q_nope, q_rope, cache, meta, part)
        y = self.o_proj(out.reshape(N, self.h * d.v_head_dim))
        if self.ctx.tp_size > 1:
            dist.all_reduce(y, group=self.ctx.tp_group)
        return y

    def _query(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.dims.q_lora_rank is None:
            return self.q_proj(hidden)
        return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden)))

    def _use_absorb(self, part: SeqSlice) -> bool:
        if self.path != "auto":
            return self.path == "absorb"
        d = self.dims
        (B, Q), L = part.query_index.shape, part.context_slots.shape[1]
        # multiply-adds per head on the slice's padded shape
        kv_b = d.kv_lora_rank * (d.qk_nope_head_dim + d.v_head_dim)  # kv_b_proj (or W_uk + W_uv) on one row
        expand = B * L * kv_b + B * Q * L * (d.qk_head_dim + d.v_head_dim)
        absorb = B * Q * kv_b + B * Q * L * (2 * d.kv_lora_rank + d.qk_rope_head_dim)
        return absorb < expand

    def _w_kv_b(self) -> tuple[torch.Tensor, torch.Tensor]:
        """kv_b_proj weight split per local head: W_uk [h, dn, R], W_uv [h, dv, R]."""
        d = self.dims
        w = self.kv_b_proj.weight.view(self.h, d.qk_nope_head_dim + d.v_head_dim, d.kv_lora_rank)
        return w[:, : d.qk_nope_head_dim], w[:, d.qk_nope_head_dim :]

    def _attend_expanded(
        self, q_nope: torch.Tensor, q_rope: torch.Tensor, flat: torch.Tensor, meta: AttentionMetadata, part: SeqSlice
    ) -> torch.Tensor:
        """q_nope [N, h, dn], q_rope [N, h, r] (all the step's tokens), flat cache [S, R + r]
        -> [n, h, dv] for the slice's n tokens, in `part.tokens` order. kv_b_proj expands each context
        latent into per-head k_nope and v; attention runs through the kernel set, causal by position
        (`kernels.mla_prefill_expanded`), no mask."""
        d = self.dims
        ctx_rows = flat[part.context_slots].to(read_dtype(flat, q_nope))  # [B, L, R + r]
        B, L = ctx_rows.shape[:2]
        latent, k_rope = ctx_rows.split([d.kv_lora_rank, d.qk_rope_head_dim], dim=-1)
        kv = self.kv_b_proj(latent).view(B, L, self.h, d.qk_nope_head_dim + d.v_head_dim)
        k_nope, v = kv.split([d.qk_nope_head_dim, d.v_head_dim], dim=-1)
        tokens, rows = part.tokens, part.rows
        return self.kernels.mla_prefill_expanded(q_nope[tokens], q_rope[tokens], k_nope, k_rope, v,
                                                 _slice_starts(meta, rows), meta.seq_lens[rows], self.scale,
                                                 part.query_index.shape[1])  # fmt: skip

    def _decode_absorbed(
        self, q_nope: torch.Tensor, q_rope: torch.Tensor, cache: torch.Tensor, tables: torch.Tensor, seq_lens: torch.Tensor
    ) -> torch.Tensor:
        """The absorbed path for decode sequences (one new token each, or Q: a speculative verify, the
        last Q positions), attending through the kernel set on the paged cache [NB, BS, R + r]: q_nope
        [b, (Q,) h, dn], q_rope [b, (Q,) h, r]; tables [b, C] int64; seq_lens [b] int64 -> [b, (Q,) h, dv]."""
        w_uk, w_uv = self._w_kv_b()
        q_latent = torch.einsum("...hd,hdr->...hr", q_nope, w_uk)  # [b, (Q,) h, R]
        out_latent = self.kernels.mla_decode(q_latent, q_rope, cache, tables, seq_lens, self.scale)
        return torch.einsum("...hr,hvr->...hv", out_latent, w_uv)

    def _attend_absorbed(
        self, q_nope: torch.Tensor, q_rope: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, part: SeqSlice
    ) -> torch.Tensor:
        """Same contract as `_attend_expanded`; attention runs in the latent space (MQA, one kv head)
        through the kernel set, over the block tables: each query's causal limit is its position, no
        padded context and no mask (`kernels.mla_prefill`)."""
        w_uk, w_uv = self._w_kv_b()
        tokens, rows = part.tokens, part.rows
        q_latent = torch.einsum("nhd,hdr->nhr", q_nope[tokens], w_uk)  # [n, h, R]
        out_latent = self.kernels.mla_prefill(q_latent, q_rope[tokens], cache, meta.block_tables[rows],
                                              _slice_starts(meta, rows), meta.seq_lens[rows], self.scale,
                                              part.query_index.shape[1])  # fmt: skip
        return torch.einsum("nhr,hvr->nhv", out_latent, w_uv)


# sequences with at most this many new tokens (a decode; a speculative verify of up to 16 drafts) attend
# through the decode kernel, [b, Q, h, R] queries at their last Q positions
DECODE_QUERIES = 17


@dataclass
class SeqSlice:
    """A subset of the step's sequences, with its padded shape (b sequences, q new tokens, l context)
    for the path choice and the expanded form; every index comes from the host (AttentionMetadata.host),
    none from a device value."""

    query_index: torch.Tensor  # [b, q] int64 rows of the step's N tokens
    context_slots: torch.Tensor  # [b, l] int64
    rows: torch.Tensor  # [b] int64 the slice's sequences among the step's B
    tokens: torch.Tensor  # [n] int64 the step rows of the slice's real query tokens, in sequence order
    decode: bool  # the same few new tokens per sequence (a decode, or a verify): the decode kernel's shape


def seq_slices(meta: AttentionMetadata) -> list[SeqSlice]:
    """Decode sequences (one new token), sequences with the same few new tokens (a speculative verify
    of k drafts: k + 1, up to DECODE_QUERIES) and the rest, as separate slices: in one padded batch a
    single long prefill would pad every decode to its Q x L, and each slice picks its own path. The
    first two take the decode kernel, several query tokens a sequence for a verify."""
    host, views = meta.host, meta.padded()
    n_new, seq_lens = host.n_new, host.seq_lens
    starts = np.zeros_like(n_new)
    np.cumsum(n_new[:-1], out=starts[1:])
    parts = []
    groups = [np.flatnonzero(n_new == q) for q in np.unique(n_new[n_new <= DECODE_QUERIES])]
    for rows in groups + [np.flatnonzero(n_new > DECODE_QUERIES)]:
        if not rows.size:
            continue
        counts = n_new[rows]
        q, l = int(counts.max()), int(seq_lens[rows].max())
        first = np.cumsum(counts) - counts  # each sequence's first of the slice's n tokens
        tokens = np.repeat(starts[rows] - first, counts) + np.arange(int(counts.sum()))
        index = meta.from_host(rows)
        parts.append(SeqSlice(views.query_index[index, :q], views.context_slots[index, :l], index,
                              meta.from_host(tokens), q <= DECODE_QUERIES))
    return parts


def _slice_starts(meta: AttentionMetadata, rows: torch.Tensor) -> torch.Tensor:
    """[b + 1] int64 query starts of the sequences `rows` [b] within their own tokens (in sequence order),
    from the step's query_start on the device."""
    counts = meta.query_start[rows + 1] - meta.query_start[rows]
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)])
