"""The kernel seam: the hot operations of a forward pass, called through one `KernelSet`.

A rank picks its set once at start-up (kernels/registry.py, from --device and --kernels) and binds
it to the model (`bind_kernels`); each layer then calls `self.kernels.<op>(...)`. Layers and models
never branch on the device and never import a set: what differs between devices lives in a set.

`KernelSet` itself is the `torch` set: plain torch, runs on any device, the oracle the other sets
are tested against. A set for a device subclasses it and overrides the operations it speeds up
(kernels/cpu/kernel_set.py, kernels/triton_set.py); anything it does not override runs the
reference. Switches a set needs for the whole process (thread counts, fork switches, caches) live
inside that set.

Weights: a set may keep its own copy of a layer's weight (oneDNN-packed, panels, ...). It makes it
in `prepare_linear` / `prepare_experts` and the layer holds it as `kernel_state`, opaque to the
layer; a layer drops it whenever its weight is written (`load`, `set_slot`), and whoever wrote it
calls `prepare` again (the rank after loading, the rebalancer after moving experts).

FP8 block-scaled weights (kernels/reference/fp8.py): a set that runs them itself says so with
`fp8_block_weights = True`; the loader then keeps a layer's weight as float8_e4m3fn `weight` with a
`weight_scale_inv` [ceil(O / bn), ceil(I / bk)] and `weight_block` (bn, bk) (GroupedExperts: `w13`,
`w2` with `w13_scale_inv`, `w2_scale_inv`), and `linear` / `experts` receive such layers. A set that
does not (all of today's) never sees one: the loader dequantizes FP8 checkpoints for it and logs so.
The reference below computes FP8 layers by dequantizing per call, the oracle for FP8 kernels.

Shape legend: T rows, I in features, O out features, N new tokens, B sequences, hq / hk query / KV
heads, D head dim, NB cache blocks, BS block size, R rows dispatched to this rank's experts, S local
expert slots, H hidden.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from moeserve.kernels.reference import attention as reference_attention
from moeserve.kernels.reference import experts as reference_experts
from moeserve.kernels.reference import fp8 as reference_fp8
from moeserve.kernels.reference import mla as reference_mla


class KernelSet:
    """The plain-torch kernel set (`--kernels torch`). Stateless apart from `device`."""

    name = "torch"
    # runs FP8 block-scaled weights itself (kept FP8 in memory); False: FP8 checkpoints are dequantized at load
    fp8_block_weights = False

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.device})"

    def describe(self) -> str:
        """What runs the hot operations, in a few words (the start-up summary)."""
        return "plain torch, the reference"

    # ---- life cycle (a rank calls these in this order) ----------------------------------------

    @classmethod
    def tune_engine_process(cls, config: Any) -> Any:
        """Tune the engine process that will run this set, before anything starts threads; -> the
        EngineConfig to run (the cpu set pins it to cores: kernels/cpu/cpu_binding.py)."""
        return config

    @classmethod
    def build(cls) -> None:
        """Build what the set compiles ahead of time; a launcher calls it once before spawning ranks,
        so they do not all build at the same moment."""

    def prepare_model(self, model: nn.Module, settings: Any = None) -> None:
        """After loading: bind this set to every layer of `model` and let each prepare its weights.
        settings: the EngineConfig (sets that tune themselves read it; None in tests)."""
        bind_kernels(model, self)

    def start_steps(self, forwards: Any) -> None:
        """After the KV cache exists: `forwards()` returns callables that each run a forward of the
        model on the rank's cache (sets that check a way of running steps use them)."""

    def step(self, num_tokens: int) -> contextlib.AbstractContextManager:
        """The context one step of `num_tokens` tokens runs in."""
        return contextlib.nullcontext()

    def captures_decode(self, dtype: torch.dtype) -> bool:
        """Whether this set's decode path makes no host read in `dtype`, so a CUDA graph can capture it.
        Attention reads only the O(batch) metadata; the experts need the grouped GEMM (the per-slot loop
        reads the counts), which CUDA runs in bf16 only."""
        return self.device.type != "cuda" or dtype == torch.bfloat16

    # ---- weights ----------------------------------------------------------------------------------

    def prepare_linear(self, layer: KernelWeight) -> Any:
        """layer.weight [O, I] -> this set's copy for `linear`, or None (it reads layer.weight)."""
        return None

    def prepare_experts(self, layer: Any, slots: list[int] | None = None) -> Any:
        """layer: a GroupedExperts (w13 [S, 2Il, H], w2 [S, H, Il]); slots: None = all, else only
        these slots changed and layer.kernel_state holds the rest -> the new state, or None."""
        return None

    # ---- operations -------------------------------------------------------------------------------

    def linear(self, layer: KernelWeight, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x [T, I] -> x @ layer.weight.T + bias [T, O] (an FP8 weight dequantized to x's dtype)."""
        return F.linear(x, reference_fp8.layer_weight(layer, "weight", x.dtype), bias)

    def experts(self, layer: Any, batch: Any) -> torch.Tensor:
        """batch: an ExpertBatch (hidden [R, H] slot-major, offsets [S] int32, counts [S] int64) ->
        [R, H] = w2 @ (act(gate) * up) per row with its slot's weights (see GroupedExperts)."""
        x = batch.hidden
        # gpt-oss: the clamped SwiGLU in place of act(gate) * up, and biases after each GEMM
        extra = dict(glu=layer.gated if layer.glu is not None else None, b13=layer.b13, b2=layer.b2)
        if layer.w13.dtype == reference_fp8.FP8_DTYPE:
            w13, w2 = (reference_fp8.layer_weight(layer, name, x.dtype) for name in ("w13", "w2"))
            return reference_experts.experts_reference(x, batch.counts, w13, w2, self._act(layer), **extra)
        # grouped_mm takes fp32 on CPU only (CUDA's runs bf16). The loop wins on CPU past LOOP_ROWS_PER_SLOT
        # rows a slot; on a GPU one cuBLAS grouped GEMM beat the fused MoE at every size measured (16-2048
        # rows a slot, docs/kernels.md), and the loop costs a host sync and a few launches a slot
        grouped = layer.use_grouped_mm and (x.device.type == "cpu" or x.dtype == torch.bfloat16)
        few_rows = batch.num_rows <= reference_experts.LOOP_ROWS_PER_SLOT * layer.num_slots
        act = self._act(layer)
        if grouped and (few_rows or x.device.type == "cuda"):
            return reference_experts.experts_grouped(x, batch.offsets, layer.w13, layer.w2, act, **extra)
        return reference_experts.experts_reference(x, batch.counts, layer.w13, layer.w2, act, **extra)

    def _act(self, layer: Any) -> Any:
        """The layer's activation applied through `elementwise` (unused where its `gated` runs a glu)."""
        return functools.partial(self.elementwise, layer.act)

    def fused_moe(
        self, layer: Any, hidden: torch.Tensor, slots: torch.Tensor, topk_weights: torch.Tensor
    ) -> torch.Tensor | None:
        """The routed experts of tokens whose slots are all on this rank, gather and weighting included:
        hidden [T, H]; slots [T, k] int64 (layer's local slots, none -1); topk_weights [T, k] fp32 ->
        [T, H] = sum_j topk_weights[t, j] * expert(slots[t, j])(hidden[t]), or None: this set has no
        fused path, and the layer dispatches, runs `experts` and combines (the torch set's way)."""
        return None

    def paged_attention(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: Any,
        scale: float,
        sliding_window: int | None = None,
        sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """q [N, hq, D]; caches [NB, BS, hk, D] already holding this step's K/V; meta: the step's
        AttentionMetadata (prefill, chunked prefill over a cached prefix, decode, or a mix) -> [N, hq, D].
        sliding_window: a query at position p sees keys at positions > p - sliding_window.
        sinks: [hq] fp32 attention-sink logits (gpt-oss): one per query head, in the softmax's
        denominator only; None = none."""
        return reference_attention.paged_attention(q, k_cache, v_cache, meta, scale, sliding_window, sinks)

    def mla_decode(
        self,
        q_latent: torch.Tensor,
        q_rope: torch.Tensor,
        cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """MLA decode with absorbed weights: q_latent [B, h, R], q_rope [B, h, r], or [B, Q, h, R] / [B, Q,
        h, r] for Q tokens a sequence (MTP verify, at positions seq_lens - Q .. seq_lens - 1); cache [NB,
        BS, R + r]; block_tables [B, C] int64; seq_lens [B] int64 -> shaped as q_latent
        (kernels/reference/mla.py)."""
        return reference_mla.mla_decode(q_latent, q_rope, cache, block_tables, seq_lens, scale)

    def mla_prefill(
        self,
        q_latent: torch.Tensor,
        q_rope: torch.Tensor,
        cache: torch.Tensor,
        block_tables: torch.Tensor,
        query_start: torch.Tensor,
        seq_lens: torch.Tensor,
        scale: float,
        max_query_len: int,
    ) -> torch.Tensor:
        """MLA with absorbed weights for any mix of prefills over a cached prefix, decodes and verifies:
        q_latent [N, h, R], q_rope [N, h, r]; query_start [B + 1] int64 (sequence b's queries are rows
        query_start[b] .. query_start[b + 1], the last of its seq_lens[b] positions, causal); block_tables
        [B, C] int64; max_query_len: the longest query (host int) -> [N, h, R] (kernels/reference/mla.py)."""
        return reference_mla.mla_prefill(q_latent, q_rope, cache, block_tables, query_start, seq_lens, scale,
                                         max_query_len)

    def mla_prefill_expanded(
        self,
        q_nope: torch.Tensor,
        q_rope: torch.Tensor,
        k_nope: torch.Tensor,
        k_rope: torch.Tensor,
        v: torch.Tensor,
        query_start: torch.Tensor,
        seq_lens: torch.Tensor,
        scale: float,
        max_query_len: int,
    ) -> torch.Tensor:
        """MLA prefill in the expanded form (per-head K/V from kv_b_proj, for long prompts): q_nope [N, h, dn],
        q_rope [N, h, r]; k_nope [B, L, h, dn], k_rope [B, L, r] (shared by the heads), v [B, L, h, dv], each
        sequence's context padded to L (strided views allowed); query_start [B + 1] as in `mla_prefill`
        -> [N, h, dv] (kernels/reference/mla.py)."""
        return reference_mla.mla_prefill_expanded(q_nope, q_rope, k_nope, k_rope, v, query_start, seq_lens, scale,
                                                  max_query_len)

    def rms_norm(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """x [..., H], weight [H] -> [..., H] in x's dtype (HF: normalise in fp32, cast back, scale).
        With residual [..., H]: (rms_norm(x + residual), x + residual), the pre-norm block's add fused.
        fp32: torch's fused rms_norm, the same arithmetic in one op."""
        if residual is not None:
            h = x + residual
            return self.rms_norm(h, weight, eps), h
        if x.dtype == torch.float32 and weight.dtype == torch.float32:
            return F.rms_norm(x, weight.shape, weight, eps)
        return rms_norm_reference(x, weight, eps)

    def softmax_topk(self, router_logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """router_logits [T, E] any float dtype -> (ids [T, k] int64, weights [T, k] fp32): softmax in fp32, then
        torch.topk (its tie order), the k weights rescaled to sum to 1 when renormalize (moe/router.py)."""
        probs = torch.softmax(router_logits.float(), dim=-1)
        weights, ids = torch.topk(probs, top_k, dim=-1)
        if renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return ids, weights

    def elementwise(self, fn: Any, x: torch.Tensor) -> torch.Tensor:
        """fn(x) for an elementwise fn (activations, rotary cos/sin, sigmoid routers) at once. The cpu set
        runs it in row blocks whose bits do not depend on the thread count (kernels/cpu/blocked.py)."""
        return fn(x)

    def rotary(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [N, h, D]; cos, sin [N, D] -> x rotated (rotate-half layout, HF's apply_rotary_pos_emb)."""
        return apply_rotary_reference(x, cos, sin)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., H], weight [H] -> [..., H] in x's dtype."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def apply_rotary_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [N, h, D]; cos, sin [N, D] -> [N, h, D]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


REFERENCE = KernelSet()


class UsesKernels:
    """A layer whose hot operations run through `self.kernels`: the reference set until
    `bind_kernels` gives it the rank's set (layers built alone, in tests, run the reference)."""

    kernels: KernelSet = REFERENCE

    def prepare(self) -> bool:
        """Let the bound set take its copy of this layer's weights; True when it kept one."""
        return False


class KernelWeight(UsesKernels):
    """A layer with `weight` [O, I] whose product runs through `kernels.linear` (`matmul`)."""

    weight: torch.Tensor
    kernel_state: Any = None  # the bound set's copy of `weight` (prepare_linear); None = none

    def prepare(self) -> bool:
        self.kernel_state = self.kernels.prepare_linear(self)
        return self.kernel_state is not None

    def unpack(self) -> None:
        """Drop the set's copy of the weight (a `load` is about to write it)."""
        self.kernel_state = None

    def matmul(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x [T, I] -> x @ weight.T + bias [T, O]."""
        return self.kernels.linear(self, x, bias)


def bind_kernels(model: nn.Module, kernels: KernelSet) -> int:
    """Give every layer of `model` that uses kernels the set `kernels` and let it prepare its weights
    (after loading). Returns how many layers kept a prepared copy."""
    prepared = 0
    for module in model.modules():
        if isinstance(module, UsesKernels):
            module.kernels = kernels
            prepared += bool(module.prepare())
    return prepared
