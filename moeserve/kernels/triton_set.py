"""The `triton` kernel set: the Triton kernels of kernels/triton/ behind the seam (GPUs; on CPU only
under TRITON_INTERPRET=1, which is how CI runs the whole model through them).

    fused_moe        fused_moe.fused_moe where every slot is on this rank: gather, both GEMMs, activation
                     and routing weights in two launches; off on a GPU until measured ahead
                     (MOESERVE_TRITON_FUSED_MOE, docs/kernels.md)
    experts          fused_moe.fused_experts over a dispatcher's ExpertBatch; on a GPU by default the
                     torch set's cuBLAS grouped GEMM instead, which measured faster on an H100
    paged_attention  paged_attention.paged_decode for a decode step, paged_prefill.paged_prefill for any
                     other (chunked, mixed: FlashAttention-2 over the block tables, windows, sinks)
    mla_decode       mla_decode.mla_decode on the latent cache (64 heads a tile, split contexts, MTP)
    mla_prefill      mla_decode.mla_prefill: prefill over a cached prefix in the latent space, no masks
    mla_prefill_expanded  mla_prefill.mla_prefill_expanded: FlashAttention-2 over kv_b_proj's K/V (long prompts);
                     both off on a GPU until measured ahead (MOESERVE_TRITON_MLA_PREFILL)
    rms_norm         norm.rms_norm
    linear           fp8_linear.fp8_linear for FP8 block-scaled weights; others the torch set's (cuBLAS)
Rotary keeps the torch set's. The kernels take plain tensors; this
module turns the step's AttentionMetadata into them.

Shape legend: N new tokens, B sequences, hq / hk query / KV heads, D head dim, NB blocks, BS block size.
"""

from __future__ import annotations

from typing import Any

import torch

from moeserve import envs
from moeserve.config import ConfigError
from moeserve.kernels import triton as triton_kernels
from moeserve.kernels.base import KernelSet
from moeserve.kernels.reference.fp8_quant import FP8_DTYPE


class TritonKernels(KernelSet):
    name = "triton"
    fp8_block_weights = True  # fp8_linear and the fused MoE's FP8 path (unmeasured on a GPU)

    def __init__(self, device: torch.device | str = "cuda"):
        super().__init__(device)
        if not triton_kernels.available():
            raise ConfigError("--kernels triton needs the triton package and a CUDA GPU (or TRITON_INTERPRET=1 "
                              "to run its kernels on CPU, slowly)")
        from moeserve.kernels.triton import (
            fp8_linear,
            fused_moe,
            mla_decode,
            mla_prefill,
            norm,
            paged_attention,
            paged_prefill,
        )

        self._moe, self._mla, self._norm, self._attention = fused_moe, mla_decode, norm, paged_attention
        self._mla_prefill, self._prefill, self._fp8 = mla_prefill, paged_prefill, fp8_linear
        fused = envs.TRITON_FUSED_MOE.get()  # unset: cuBLAS's grouped GEMM on a GPU (docs/kernels.md)
        self._fused_moe = fused if fused is not None else self.device.type != "cuda"
        mla = envs.TRITON_MLA_PREFILL.get()  # unset: the torch set's MLA prefill on a GPU until measured
        self._mla_prefill_kernels = mla if mla is not None else self.device.type != "cuda"

    def linear(self, layer: Any, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x [T, I] -> [T, O]: FP8 block-scaled weights on the FP8 tensor cores (fp8_linear.py, the rows
        quantized per token and group of 128 on load); others as the torch set (cuBLAS)."""
        if layer.weight.dtype != FP8_DTYPE or not _fp8_kernels_take(layer.weight_block):
            return super().linear(layer, x, bias)  # (FP8 in blocks the kernels cannot step: dequantized per call)
        return self._fp8.fp8_linear(x.contiguous(), layer.weight, layer.weight_scale_inv, layer.weight_block, bias)

    def describe(self) -> str:
        experts = "the fused MoE kernels" if self._fused_moe else "cuBLAS's grouped GEMM (FP8 experts: the fused kernels)"
        mla = "Triton" if self._mla_prefill_kernels else "torch"
        return (f"Triton paged attention, MLA decode, FP8 GEMMs and RMSNorm; MLA prefill in {mla}; experts on "
                f"{experts}")

    def experts(self, layer: Any, batch: Any) -> torch.Tensor:
        """batch.hidden [R, H] slot-major, batch.offsets [S] int32 -> [R, H]. FP8 experts always take the
        fused kernels (nothing else here runs their block scales), and so do experts the grouped GEMM
        cannot run (fp32 or fp16 on a GPU): the torch set's per-slot loop would read the counts back."""
        fp8 = _fp8_experts(layer)
        x = batch.hidden
        grouped = layer.use_grouped_mm and (x.device.type == "cpu" or x.dtype == torch.bfloat16)
        if fp8 is None and ((not self._fused_moe and grouped) or layer.act_name not in self._moe.ACTIVATION_IDS
                            or layer.w13.dtype == FP8_DTYPE):  # fmt: skip
            return super().experts(layer, batch)
        extras = _extras(layer)  # gpt-oss: biases and the clamped SwiGLU
        return self._moe.fused_experts(batch.hidden, batch.offsets, layer.w13, layer.w2, layer.act_name,
                                       b13=extras.b13, b2=extras.b2, swiglu=extras.swiglu, fp8=fp8)  # fmt: skip

    def fused_moe(self, layer: Any, hidden: torch.Tensor, slots: torch.Tensor, topk_weights: torch.Tensor):
        """hidden [T, H]; slots, topk_weights [T, k] -> [T, H]: one gate/up and one down launch, the row
        gather and the routing weights inside them (fused_moe.fused_moe); None where the fused MoE is off
        (on a GPU until gpu_check shows it ahead: MOESERVE_TRITON_FUSED_MOE) or does not apply."""
        fp8 = _fp8_experts(layer)
        if fp8 is None and (not self._fused_moe or layer.act_name not in self._moe.ACTIVATION_IDS
                            or layer.w13.dtype == FP8_DTYPE):  # fmt: skip
            return None
        return self._moe.fused_moe(hidden, slots, topk_weights, layer.w13, layer.w2, layer.act_name, may_drop=False,
                                   fp8=fp8, extras=_extras(layer))  # fmt: skip

    def captures_decode(self, dtype: torch.dtype) -> bool:
        return True  # fused experts where the grouped GEMM cannot run

    def paged_attention(self, q, k_cache, v_cache, meta, scale, sliding_window=None, sinks=None) -> torch.Tensor:
        """q [N, hq, D]; caches [NB, BS, hk, D] holding this step's K/V; sinks [hq] fp32 or None -> [N, hq, D].
        A decode step (one new token per sequence) splits long contexts (paged_decode); any other step,
        chunked prefill and decode rows together, is one FlashAttention-2 launch (paged_prefill)."""
        N, B = q.shape[0], meta.num_seqs
        if N == 0:
            return q.new_empty(q.shape)
        tables, seq_lens = meta.block_tables, meta.seq_lens
        if N == B:  # one new token per sequence: a decode step
            return self._attention.paged_decode(q, k_cache, v_cache, tables, seq_lens, scale, sliding_window,
                                                sinks=sinks)  # fmt: skip
        return self._prefill.paged_prefill(q, k_cache, v_cache, tables, meta.query_start, seq_lens, scale,
                                           sliding_window, sinks)  # fmt: skip

    def mla_decode(self, q_latent, q_rope, cache, block_tables, seq_lens, scale) -> torch.Tensor:
        """q_latent [B, (Q,) h, R], q_rope [B, (Q,) h, r]; cache [NB, BS, R + r] -> shaped as q_latent."""
        if q_latent.shape[0] == 0:
            return q_latent.new_empty(q_latent.shape)
        return self._mla.mla_decode(
            q_latent.contiguous(), q_rope.contiguous(), cache, block_tables, seq_lens, scale
        )

    def mla_prefill(self, q_latent, q_rope, cache, block_tables, query_start, seq_lens, scale,
                    max_query_len) -> torch.Tensor:  # fmt: skip
        """q_latent [N, h, R], q_rope [N, h, r]; query_start [B + 1] -> [N, h, R], no mask built (the torch
        set's where MOESERVE_TRITON_MLA_PREFILL is off)."""
        if not self._mla_prefill_kernels:
            return super().mla_prefill(q_latent, q_rope, cache, block_tables, query_start, seq_lens, scale,
                                       max_query_len)  # fmt: skip
        return self._mla.mla_prefill(q_latent.contiguous(), q_rope.contiguous(), cache, block_tables, query_start,
                                     seq_lens, scale)  # fmt: skip

    def mla_prefill_expanded(self, q_nope, q_rope, k_nope, k_rope, v, query_start, seq_lens, scale,
                             max_query_len) -> torch.Tensor:  # fmt: skip
        """q_nope [N, h, dn], q_rope [N, h, r]; k_nope [B, L, h, dn], k_rope [B, L, r], v [B, L, h, dv]
        -> [N, h, dv] (the torch set's where MOESERVE_TRITON_MLA_PREFILL is off)."""
        if not self._mla_prefill_kernels:
            return super().mla_prefill_expanded(q_nope, q_rope, k_nope, k_rope, v, query_start, seq_lens, scale,
                                                max_query_len)  # fmt: skip
        return self._mla_prefill.mla_prefill_expanded(q_nope, q_rope, k_nope, k_rope, v, query_start, seq_lens, scale)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
        """x [..., H] -> [..., H], or with residual (norm(x + residual), x + residual) in one kernel."""
        return self._norm.rms_norm(x.contiguous(), weight, eps, None if residual is None else residual.contiguous())


def _extras(layer: Any) -> Any:
    """The layer's expert biases and clamped-SwiGLU constants as fused_moe.Extras (gpt-oss; none elsewhere)."""
    from moeserve.kernels.triton.fused_moe import NO_EXTRAS, Extras

    glu = getattr(layer, "glu", None)
    if getattr(layer, "b13", None) is None and glu is None:
        return NO_EXTRAS
    return Extras(layer.b13, layer.b2, (glu.alpha, glu.limit) if glu is not None else (0.0, 0.0))


def _fp8_kernels_take(block: tuple[int, int]) -> bool:
    """The FP8 kernels step K one scale block at a time: a power of two of at least 16 columns (128 in
    every release; the tests' tiny checkpoints use smaller ones, which the torch set's path runs)."""
    return block[1] >= 16 and block[1] & (block[1] - 1) == 0


def _fp8_experts(layer: Any) -> Any:
    """The layer's FP8 block scales as fused_moe.Fp8Weights, or None when its experts are not FP8 or
    their blocks are not ones the kernels take."""
    if layer.w13.dtype != FP8_DTYPE or not _fp8_kernels_take(layer.weight_block):
        return None
    from moeserve.kernels.triton.fused_moe import Fp8Weights

    return Fp8Weights(layer.w13_scale_inv, layer.w2_scale_inv, tuple(layer.weight_block))
