"""The attention block (MHA/GQA) over the paged KV cache.

One call serves prefill, chunked prefill, decode and mixed steps: new K/V are written at
`meta.slot_mapping`, then the rank's kernel set attends (`kernels.paged_attention`, kernels/base.py).

Shape legend: N new tokens, B sequences, Q max new tokens per sequence, L max context length,
hq / hk query / KV heads on this rank, D head dim, NB cache blocks, BS block size, H hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from moeserve.dense.attention_metadata import AttentionMetadata
from moeserve.dense.linear import QKVParallelLinear, RowParallelLinear, ShardReader, copy_param
from moeserve.dense.norm import RMSNorm, ShardedRMSNorm
from moeserve.dense.rotary import RotaryEmbedding
from moeserve.kernels.base import UsesKernels
from moeserve.kernels.reference.fp8_quant import as_cache
from moeserve.parallel_state import ParallelContext


def write_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor
) -> None:
    """k_cache, v_cache [NB, BS, hk, D] (mutated; e4m3 with --kv-cache-dtype fp8); k, v [N, hk, D]; slots [N]
    int64 flat slot ids."""
    hk, D = k_cache.shape[-2:]
    k_cache.view(-1, hk, D)[slots] = as_cache(k, k_cache.dtype)
    v_cache.view(-1, hk, D)[slots] = as_cache(v, v_cache.dtype)


@dataclass(frozen=True)
class AttentionSpec:
    """What differs between the GQA attention blocks of Mixtral, Qwen2/3-MoE, OLMoE, gpt-oss, GLM-4.5
    and MiniMax-M2.

    qk_norm: None, "head" (RMSNorm over each head's D, Qwen3, GLM-4.5) or "full" (RMSNorm over all
    heads' concatenated projections, OLMoE, MiniMax-M2). clip_qkv: clamp q, k, v to [-c, c] after the
    norms (OLMoE). rotary_dim: rotate only the first rotary_dim of each head's D (partial rotary,
    GLM-4.5, MiniMax-M2); None = all of D. sinks: one learned attention-sink logit per query head
    (checkpoint `self_attn.sinks` [heads], gpt-oss).
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
    rotary_dim: int | None = None
    sinks: bool = False

    def __post_init__(self) -> None:
        if self.rotary_dim is not None and not (0 < self.rotary_dim <= self.head_dim and self.rotary_dim % 2 == 0):
            raise ValueError(f"rotary dimension {self.rotary_dim} must be even and within the head dim {self.head_dim}")
        if self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads = {self.num_heads} is not a multiple of num_key_value_heads = "
                f"{self.num_kv_heads}: every KV head must serve the same number of query heads")


class Attention(nn.Module, UsesKernels):
    """QKV projection -> optional q/k norm -> rotary -> paged attention -> o_proj (+ all-reduce over tp)."""

    def __init__(self, spec: AttentionSpec, rotary: RotaryEmbedding, ctx: ParallelContext, dtype: torch.dtype):
        super().__init__()
        self.spec, self.ctx, self.rotary = spec, ctx, rotary
        D = spec.head_dim
        self.qkv = QKVParallelLinear(spec.hidden_size, D, spec.num_heads, spec.num_kv_heads, spec.qkv_bias, ctx, dtype)
        self.o_proj = RowParallelLinear(spec.num_heads * D, spec.hidden_size, spec.o_bias, ctx, dtype)
        self.scale = D**-0.5
        self.rotary_dim = spec.rotary_dim or D
        # [hq local] fp32, this rank's query heads' sink logits (kept fp32: they enter the softmax as is)
        self.sinks = (nn.Parameter(torch.zeros(self.qkv.q_heads, dtype=torch.float32), requires_grad=False)
                      if spec.sinks else None)
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

    def kv_cache_heads(self) -> tuple[int, int, int]:
        """(first, count, total): the model's KV heads this rank's cache holds (a prefill/decode split
        with another --tp reads exactly these, kv_transfer/head_slices.py)."""
        return self.qkv.kv_head_start, self.qkv.kv_heads, self.spec.num_kv_heads

    def forward(self, hidden: torch.Tensor, meta: AttentionMetadata, kv_cache: list[torch.Tensor]) -> torch.Tensor:
        """hidden [N, H]; kv_cache [k_cache, v_cache] each [NB, BS, hk, D] -> [N, H] (summed over tp)."""
        N, D = hidden.shape[0], self.spec.head_dim
        hq, hk = self.qkv.q_heads, self.qkv.kv_heads
        qkv = self.qkv.project(hidden)  # [N, (hq + 2 hk) D]
        cos, sin = self._cos_sin(meta, qkv.dtype)
        if self.spec.qk_norm is None and self.spec.clip_qkv is None:
            # q and k are adjacent columns: rotate them as one [N, hq + hk, D] tensor
            qk = self._rotate(qkv[:, : (hq + hk) * D].view(N, hq + hk, D), cos, sin)
            q, k = qk[:, :hq], qk[:, hq:]
            v = qkv[:, (hq + hk) * D :].view(N, hk, D)
        else:
            q, k, v = self._normed_qkv(qkv)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        write_kv(kv_cache[0], kv_cache[1], k, v, meta.slot_mapping)
        attn = self.kernels.paged_attention(
            q.contiguous(), kv_cache[0], kv_cache[1], meta, self.scale, self.spec.sliding_window, self.sinks
        )
        out = self.o_proj(attn.reshape(N, hq * D))
        if self.ctx.tp_size > 1:
            dist.all_reduce(out, group=self.ctx.tp_group)
        return out

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [N, h, D]; cos, sin [N, rotary_dim] -> x with its first rotary_dim dims of each head rotated."""
        rd = self.rotary_dim
        if rd == x.shape[-1]:
            return self.kernels.rotary(x, cos, sin)
        return torch.cat((self.kernels.rotary(x[..., :rd], cos, sin), x[..., rd:]), dim=-1)

    def _cos_sin(self, meta: AttentionMetadata, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [N, rotary_dim] of this step's positions, computed once per step for all layers alike."""
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
        if self.sinks is not None:
            start = self.qkv.q_head_start
            name = f"{prefix}.sinks"
            copy_param(self.sinks, reader.read(name, 0, start, start + self.qkv.q_heads).float(), name)
