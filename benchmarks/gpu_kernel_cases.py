"""The kernel cases benchmarks/gpu_check.py times: each Triton kernel at DeepSeek-V3 / Mixtral-8x7B layer
shapes beside its honest torch counterpart, with the bytes and FLOPs its roofline counts.

Counterparts (docs/kernels.md): the experts against cuBLAS's grouped GEMM with the serving path's
gather, activation and routing-weight ops; attention against SDPA's flash backend on the same context,
unpaged (causal bottom-right for chunked prefill); MLA against the absorbed formulation in batched
GEMMs over dense latents, the fastest torch form at decode; RMSNorm against eager torch.

Shape legend: B sequences, L context, h heads, R kv_lora_rank, r rope dims, S expert slots, H hidden,
I expert intermediate size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

# Layer shapes (config.json of each checkpoint); `local_experts`: one rank's share of DeepSeek-V3's 256
# routed experts at --ep 8, all 8 of Mixtral's. `tiny`: the dry run's stand-in for both.
MODELS = {
    "DeepSeek-V3": dict(hidden=7168, inter=2048, local_experts=32, top_k=8, heads=128, kv_lora=512, rope=64,
                        fp8_out=4096,  # a dense linear's output width for the FP8 GEMM (K = hidden)
                        moe_rows=((16, "decode"), (64, "decode"), (1024, "prefill"))),  # fmt: skip
    "Mixtral-8x7B": dict(hidden=4096, inter=14336, local_experts=8, top_k=2, q_heads=32, kv_heads=8, head_dim=128,
                         moe_rows=((16, "decode"), (64, "decode"), (2048, "prefill")),
                         # gpt-oss-120b's attention (its sliding-window layers), timed beside Mixtral's
                         oss_q_heads=64, oss_kv_heads=8, oss_head_dim=64, oss_window=128),  # fmt: skip
}
TINY = dict(hidden=64, inter=48, local_experts=4, top_k=2, heads=16, fp8_out=96, kv_lora=32, rope=16, q_heads=4,
            kv_heads=2, head_dim=32,
            oss_q_heads=4, oss_kv_heads=2, oss_head_dim=16, oss_window=8,
            moe_rows=((2, "decode"), (4, "decode"), (24, "prefill")), context=48, batch=2, prefill=24,
            norm_rows=(2, 8))  # fmt: skip
FULL = dict(context=4096, batch=64, prefill=2048, norm_rows=(64, 4096))
# the targets: (roofline kind, share of it, speed-up over the torch counterpart); 0 = none
TARGETS = {
    "moe-decode": ("bandwidth", 0.70, 1.0),
    "moe-prefill": ("compute", 0.60, 1.0),
    "attn-decode-4k": ("bandwidth", 0.70, 0),
    "prefill-6k": ("compute", 0.50, 0.9),
    "mla-decode-4k": ("bandwidth", 0.60, 1.5),
    "fp8-moe-decode": ("bandwidth", 0, 1.6),  # against the same kernel in bf16
}


@dataclass
class Case:
    kernel: str
    model: str
    phase: str
    shape: str
    bytes: float
    flops: float
    triton: Callable[[], Any]
    torch: Callable[[], Any] | None
    torch_op: str
    target: str | None = None  # a TARGETS key
    # (default tiles, candidate tiles, the call with given tiles): what --tune times
    tune: tuple[Any, tuple, Callable[[Any], Any]] | None = None
    peak_factor: float = 1.0  # the compute peak against the card's dense bf16 one (FP8: 2)
    others: dict[str, Callable[[], Any] | None] = field(default_factory=dict)  # more counterparts, by label


def balanced_slots(T: int, k: int, S: int, dev):
    """[T, k] slots, distinct within a token, every slot chosen T * k / S times."""
    import torch

    return (torch.arange(T, device=dev)[:, None] * k + torch.arange(k, device=dev)[None, :]) % S


def serving_path_torch(x, slots, weights, w13, w2):
    """What the torch set serves today around cuBLAS's grouped GEMM, on the device without a host sync:
    rows sorted by slot (argsort), gathered, both grouped GEMMs with the activation between, each row
    weighted in fp32 and put back in (token, j) order, the sum over k in fp32 (local dispatch + experts +
    combine, with searchsorted for the counts where local dispatch reads them back)."""
    import torch
    import torch.nn.functional as F

    T, k = slots.shape
    S = w13.shape[0]
    flat = slots.reshape(-1)
    order = torch.argsort(flat, stable=True)
    offsets = torch.searchsorted(flat[order], torch.arange(1, S + 1, device=x.device)).to(torch.int32)
    rows = x[order // k]
    gate, up = F.grouped_mm(rows, w13.transpose(-2, -1), offs=offsets).chunk(2, dim=-1)
    out = F.grouped_mm(F.silu(gate) * up, w2.transpose(-2, -1), offs=offsets)
    weighted = torch.empty(T * k, x.shape[1], device=x.device, dtype=torch.float32)
    weighted[order] = out.float() * weights.reshape(-1)[order, None]
    return weighted.view(T, k, -1).sum(dim=1).to(x.dtype)


def moe_cases(model: str, d: dict, dev, dtype) -> list[Case]:
    """The fused MoE both ways: over an expert-major batch (`fused_experts`, what a dispatcher hands over)
    against cuBLAS's grouped GEMM alone, and on the serving path (`fused_moe`: tokens in, the gather and
    routing weights in its two launches) against the grouped GEMMs with the serving path's other ops."""
    import torch
    import torch.nn.functional as F

    from moeserve.kernels.triton.fused_moe import CANDIDATE_TILES, fused_experts, fused_moe, pick_tiles

    S, H, I, k = d["local_experts"], d["hidden"], d["inter"], d["top_k"]
    w13 = torch.randn(S, 2 * I, H, device=dev, dtype=dtype) * H**-0.5
    w2 = torch.randn(S, H, I, device=dev, dtype=dtype) * I**-0.5
    cases = []
    for per_slot, phase in d["moe_rows"]:
        R = S * per_slot
        x = torch.randn(R, H, device=dev, dtype=dtype)
        offsets = torch.full((S,), per_slot, device=dev).cumsum(0).to(torch.int32)

        def grouped(x=x, offsets=offsets):
            gate, up = F.grouped_mm(x, w13.transpose(-2, -1), offs=offsets).chunk(2, dim=-1)
            return F.grouped_mm(F.silu(gate) * up, w2.transpose(-2, -1), offs=offsets)

        cases.append(Case(
            "fused_experts", model, f"{phase}, {per_slot} rows/expert",
            f"R={R} S={S} H={H} I={I}", 2 * (3 * S * H * I + 2 * R * H + 2 * R * I), 2 * R * H * 3 * I,
            lambda x=x, offsets=offsets: fused_experts(x, offsets, w13, w2), grouped, "F.grouped_mm (cuBLAS)",
        ))  # fmt: skip
        T = R // k  # tokens whose k rows give per_slot rows to every slot
        tokens = torch.randn(T, H, device=dev, dtype=dtype)
        slots = balanced_slots(T, k, S, dev)
        weights = torch.rand(T, k, device=dev)

        def fused(tiles=None, x=tokens, slots=slots, weights=weights):
            return fused_moe(x, slots, weights, w13, w2, tiles=tiles, may_drop=False)

        tune = None if phase == "decode" and dev.type != "cuda" else (pick_tiles(R, w13, w2), CANDIDATE_TILES, fused)
        cases.append(Case(
            "fused_moe", model, f"{phase}, {per_slot} rows/expert", f"T={T} k={k} S={S} H={H} I={I}",
            2 * (3 * S * H * I + T * H + R * I + R * H + T * H), 2 * R * H * 3 * I, fused,
            lambda x=tokens, slots=slots, weights=weights: serving_path_torch(x, slots, weights, w13, w2),
            "grouped_mm + gather, act, weights, sum", f"moe-{phase}", tune,
        ))  # fmt: skip
    return cases


def paged_cache(B: int, L: int, BS: int, hk: int, D: int, dev, dtype):
    import torch

    NB = B * L // BS
    k_cache, v_cache = torch.randn(2, NB, BS, hk, D, device=dev, dtype=dtype)
    tables = torch.randperm(NB, device=dev).to(torch.int32).view(B, L // BS)  # scattered blocks
    return k_cache, v_cache, tables, torch.full((B,), L, device=dev)


def flash_sdpa(q, k, v, scale: float, causal_rows: int | None = None) -> Callable[[], Any]:
    """SDPA on dense q [B, hq, n, D], k / v [B, hk, L, D] with the flash backend where it runs (GQA by
    enable_gqa, or K/V expanded to hq heads beforehand), causal bottom-right when causal_rows is given
    (the last n of L positions: chunked prefill); the default backend elsewhere (the CPU dry run)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    mask = causal_lower_right(causal_rows, k.shape[2]) if causal_rows else None
    G = q.shape[1] // k.shape[1]
    wide_k, wide_v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    tries = [(dict(enable_gqa=True), k, v), ({}, wide_k, wide_v)]
    for backend in ([SDPBackend.FLASH_ATTENTION] if q.is_cuda else []) + [None]:
        for extra, keys, values in tries:
            def call(keys=keys, values=values, extra=extra, backend=backend):
                if backend is None:
                    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale, **extra)
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale, **extra)
            try:
                call()
                return call
            except RuntimeError:
                continue
    raise RuntimeError("no SDPA backend ran the baseline")


def attention_cases(model: str, d: dict, dev, dtype) -> list[Case]:
    import torch

    from moeserve.kernels.triton.paged_attention import paged_decode
    from moeserve.kernels.triton.paged_prefill import CANDIDATE_TILES, DEFAULT_TILES, paged_prefill

    hq, hk, D, L, BS = d["q_heads"], d["kv_heads"], d["head_dim"], d["context"], 16
    scale, cases = D**-0.5, []
    for B in (1, d["batch"]):
        k_cache, v_cache, tables, lens = paged_cache(B, L, BS, hk, D, dev, dtype)
        q = torch.randn(B, hq, D, device=dev, dtype=dtype)
        keys, values = torch.randn(2, B, hk, L, D, device=dev, dtype=dtype)  # the same context, dense
        cases.append(Case(
            "paged_decode", model, f"decode, context {L}", f"B={B} hq={hq} hk={hk} D={D}",
            2 * (2 * B * L * hk * D + 2 * B * hq * D), 4 * B * hq * L * D,
            lambda q=q, k=k_cache, v=v_cache, t=tables, n=lens: paged_decode(q, k, v, t, n, scale),
            flash_sdpa(q[:, :, None], keys, values, scale), "SDPA flash, dense K/V",
            "attn-decode-4k" if L == 4096 and B > 1 else None,
        ))  # fmt: skip
    n, prefix = d["prefill"], d["prefill"] * 3  # a chunk of n new tokens after 3n cached
    k_cache, v_cache, tables, lens = paged_cache(1, n + prefix, BS, hk, D, dev, dtype)
    q = torch.randn(n, hq, D, device=dev, dtype=dtype)
    keys, values = torch.randn(2, 1, hk, n + prefix, D, device=dev, dtype=dtype)
    starts = torch.tensor([0, n], device=dev)
    seen = n * prefix + n * (n + 1) // 2

    def prefill(tiles=None):
        return paged_prefill(q, k_cache, v_cache, tables, starts, lens, scale, tiles=tiles)

    cases.append(Case(
        "paged_prefill", model, f"chunked prefill, {n} after {prefix}", f"N={n} hq={hq} hk={hk} D={D}",
        2 * (2 * n * hq * D + 2 * (n + prefix) * hk * D), 4 * hq * D * seen,
        prefill, flash_sdpa(q.transpose(0, 1)[None], keys, values, scale, causal_rows=n),
        "SDPA flash, is_causal (bottom-right)", "prefill-6k" if n == 2048 else None,
        (DEFAULT_TILES, CANDIDATE_TILES, prefill),
    ))  # fmt: skip
    return cases


def window_sink_cases(model: str, d: dict, dev, dtype) -> list[Case]:
    """gpt-oss's sliding-window layers (window 128, a sink logit per head) at its attention shape (64 query
    / 8 KV heads of 64 dims): a chunk of n after 3n cached. SDPA has no sinks and no window of its own:
    its counterpart is the same window as an additive mask (no sinks), on the same context unpaged."""
    import torch

    from moeserve.kernels.triton.paged_prefill import paged_prefill

    hq, hk, D, W, BS, n = d["oss_q_heads"], d["oss_kv_heads"], d["oss_head_dim"], d["oss_window"], 16, d["prefill"]
    L, scale = 4 * n, D**-0.5
    k_cache, v_cache, tables, lens = paged_cache(1, L, BS, hk, D, dev, dtype)
    q = torch.randn(n, hq, D, device=dev, dtype=dtype)
    sinks = torch.randn(hq, device=dev)
    keys, values = torch.randn(2, 1, hk, L, D, device=dev, dtype=dtype)
    q_pos, k_pos = torch.arange(L - n, L, device=dev)[:, None], torch.arange(L, device=dev)[None, :]
    bias = torch.zeros(n, L, device=dev, dtype=dtype).masked_fill_((k_pos > q_pos) | (k_pos <= q_pos - W), float("-inf"))
    qt, wide_k, wide_v = q.transpose(0, 1)[None], keys.repeat_interleave(hq // hk, 1), values.repeat_interleave(hq // hk, 1)
    seen = n * W
    return [Case(
        "paged_prefill", model, f"chunked prefill, {n} after {L - n}, window {W}, sinks", f"N={n} hq={hq} hk={hk} D={D}",
        2 * (2 * n * hq * D + 2 * (n + W) * hk * D), 4 * hq * D * seen,
        lambda: paged_prefill(q, k_cache, v_cache, tables, torch.tensor([0, n], device=dev), lens, scale, W, sinks),
        lambda: torch.nn.functional.scaled_dot_product_attention(qt, wide_k, wide_v, attn_mask=bias, scale=scale),
        "SDPA, window as a mask (no sinks)",
    )]  # fmt: skip


def mla_absorbed_torch(q_latent, q_rope, dense, scale: float) -> Callable[[], Any]:
    """dense/mla.py's absorbed path over dense latents: q [B, Q, h, R + r] against dense [B, L, R + r] as
    two batched GEMMs (the (token, head) pairs are the rows of one product) and an fp32 softmax, causal
    among the Q tokens (bottom-right)."""
    import torch

    B, Q, h, R = q_latent.shape
    L = dense.shape[1]
    q = torch.cat([q_latent, q_rope], dim=-1).reshape(B, Q * h, -1)
    hidden = torch.arange(L, device=dense.device)[None, :] > torch.arange(L - Q, L, device=dense.device)[:, None]
    bias = torch.zeros(Q, L, device=dense.device, dtype=dense.dtype).masked_fill_(hidden, float("-inf"))
    bias = bias.repeat_interleave(h, 0)  # [Q * h, L]: row t * h + head

    def call():
        scores = torch.baddbmm(bias, q, dense.transpose(1, 2), alpha=scale) if Q > 1 else \
            torch.bmm(q, dense.transpose(1, 2)) * scale
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(dense.dtype)
        return torch.bmm(probs, dense[..., :R])

    return call


def mla_cases(model: str, d: dict, dev, dtype) -> list[Case]:
    import torch

    from moeserve.kernels.triton.mla_decode import CANDIDATE_TILES, DEFAULT_TILES, mla_decode

    h, R, r, L, BS = d["heads"], d["kv_lora"], d["rope"], d["context"], 16
    scale, cases = (128 + r) ** -0.5, []
    # (sequences, local heads, query tokens a sequence): one sequence; a batch with data-parallel attention
    # (128 heads a rank, the target); --tp 8 (16 heads); MTP verify (2 tokens a sequence)
    for B, heads, Q in ((1, h, 1), (d["batch"], h, 1), (d["batch"], h // 8, 1), (d["batch"], h, 2)):
        NB = B * L // BS
        cache = torch.randn(NB, BS, R + r, device=dev, dtype=dtype)
        tables = torch.randperm(NB, device=dev).view(B, L // BS)
        lens = torch.full((B,), L, device=dev)
        q_latent = torch.randn(B, Q, heads, R, device=dev, dtype=dtype)
        q_rope = torch.randn(B, Q, heads, r, device=dev, dtype=dtype)
        dense = torch.randn(B, L, R + r, device=dev, dtype=dtype)
        ql, qr = (q_latent, q_rope) if Q > 1 else (q_latent[:, 0], q_rope[:, 0])

        def triton_call(tiles=None, ql=ql, qr=qr, c=cache, t=tables, n=lens):
            return mla_decode(ql, qr, c, t, n, scale, tiles=tiles)

        main = B > 1 and heads == h and Q == 1
        phase = f"decode, context {L}" + (f", {Q} tokens (MTP)" if Q > 1 else "")
        cases.append(Case(
            "mla_decode", model, phase, f"B={B} h={heads} R={R} r={r}",
            2 * (B * L * (R + r) + 2 * B * Q * heads * R), 2 * B * Q * heads * L * (2 * R + r),
            triton_call, mla_absorbed_torch(q_latent, q_rope, dense, scale), "torch bmm, dense latents",
            "mla-decode-4k" if main and L == 4096 else None,
            (DEFAULT_TILES, CANDIDATE_TILES, lambda tiles, call=triton_call: call(tiles)) if main else None,
        ))  # fmt: skip
    return cases


def mla_prefill_cases(model: str, d: dict, dev, dtype) -> list[Case]:
    """A chunk of n new tokens after 3n cached (chunked prefill), both forms: the latent-space kernel at
    --tp 8's 16 heads (its torch form materialises [n * h, L] scores), the expanded kernel at 128 heads
    against SDPA on the same K/V made dense and concatenated beforehand."""
    import torch

    from moeserve.kernels.triton.mla_decode import mla_prefill
    from moeserve.kernels.triton.mla_prefill import CANDIDATE_TILES, DEFAULT_TILES, mla_prefill_expanded

    h, R, r, BS, n = d["heads"], d["kv_lora"], d["rope"], 16, d["prefill"]
    dn, dv, L = R // 4, R // 4, 4 * n  # DeepSeek-V3: 128, 128 for R = 512
    scale = (dn + r) ** -0.5
    seen = n * (L - n) + n * (n + 1) // 2  # (query, key) pairs under the causal mask
    starts, lens = torch.tensor([0, n], device=dev), torch.tensor([L], device=dev)
    cases = []
    heads = h // 8
    cache = torch.randn(L // BS, BS, R + r, device=dev, dtype=dtype)
    tables = torch.randperm(L // BS, device=dev).view(1, -1)
    q_latent = torch.randn(n, heads, R, device=dev, dtype=dtype)
    q_rope = torch.randn(n, heads, r, device=dev, dtype=dtype)
    dense = torch.randn(1, L, R + r, device=dev, dtype=dtype)
    cases.append(Case(
        "mla_prefill", model, f"chunked prefill, {n} after {L - n}, latent form", f"N={n} h={heads} R={R} r={r}",
        2 * (L * (R + r) + 2 * n * heads * R), 2 * heads * seen * (2 * R + r),
        lambda: mla_prefill(q_latent, q_rope, cache, tables, starts, lens, scale),
        mla_absorbed_torch(q_latent[None], q_rope[None], dense, scale), "torch bmm, dense latents",
    ))  # fmt: skip
    kv = torch.randn(1, L, h, dn + dv, device=dev, dtype=dtype)  # kv_b_proj's output
    k_nope, v = kv.split([dn, dv], dim=-1)
    k_rope = torch.randn(1, L, r, device=dev, dtype=dtype)
    q_nope, q_pe = torch.randn(n, h, dn, device=dev, dtype=dtype), torch.randn(n, h, r, device=dev, dtype=dtype)
    q = torch.cat([q_nope, q_pe], dim=-1).transpose(0, 1)[None]  # [1, h, n, dn + r]
    k = torch.cat([k_nope, k_rope[:, :, None].expand(1, L, h, r)], dim=-1).transpose(1, 2).contiguous()
    v_dense = v.transpose(1, 2).contiguous()

    def expanded(tiles=None):
        return mla_prefill_expanded(q_nope, q_pe, k_nope, k_rope, v, starts, lens, scale, tiles=tiles)

    cases.append(Case(
        "mla_prefill_expanded", model, f"chunked prefill, {n} after {L - n}, expanded", f"N={n} h={h} dn={dn} r={r}",
        2 * (n * h * (dn + r) + L * h * (dn + dv) + L * r + n * h * dv), 2 * h * seen * (dn + r + dv),
        expanded, flash_sdpa(q, k, v_dense, scale, causal_rows=n), "SDPA, dense K/V (bottom-right causal)",
        None, (DEFAULT_TILES, CANDIDATE_TILES, expanded),
    ))  # fmt: skip
    return cases


def scaled_mm_baseline(x, w, dev) -> tuple[Any, str]:
    """torch's own FP8 GEMM on the same shapes, activation quantization included (the serving path's
    extra op): torch._scaled_mm with DeepSeek's scales (1 x 128 activation groups, 128 x 128 weight
    blocks) where this torch and card take them (either scale layout), else with one scale per row and
    per column. -> (call, label), or (None, why) where no form runs (the CPU's takes rowwise scales, so
    the dry run exercises that one)."""
    import torch

    from moeserve.kernels.reference.fp8_quant import quantize_blocks, quantize_groups, to_fp8

    if not hasattr(torch, "_scaled_mm"):
        return None, "torch._scaled_mm (missing from this torch)"
    data, scale_inv = quantize_blocks(w)
    wt = data.t()  # [K, N] column-major, what _scaled_mm takes as its second operand

    def blockwise(b_scale):
        def call():
            q, s = quantize_groups(x)
            return torch._scaled_mm(q, wt, s, b_scale, out_dtype=x.dtype)
        return call

    w_rows = w.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-10) / 448.0  # [N, 1]
    w_rowwise = to_fp8(w.float() / w_rows).t()

    def rowwise():
        s = x.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-10) / 448.0  # [M, 1]
        return torch._scaled_mm(to_fp8(x.float() / s), w_rowwise, s, w_rows.t(), out_dtype=x.dtype)

    for call, label in ((blockwise(scale_inv.t()), "torch._scaled_mm 1x128 / 128x128 + act quant"),
                        (blockwise(scale_inv), "torch._scaled_mm 1x128 / 128x128 + act quant"),
                        (rowwise, "torch._scaled_mm rowwise + act quant")):  # fmt: skip
        try:
            call()
            return call, label
        except (RuntimeError, TypeError, ValueError):
            continue
    return None, "torch._scaled_mm (no scaling it takes here)"


def scaled_grouped_mm_path(x, slots, weights, w13, w2) -> Any:
    """The serving path around torch._scaled_grouped_mm (rowwise FP8: one scale per row of the
    activations and per column of each expert's weight): rows sorted and gathered, quantized, both
    grouped GEMMs with the activation between, weighted, summed over k. None where it does not run."""
    import torch
    import torch.nn.functional as F

    from moeserve.kernels.reference.fp8_quant import to_fp8

    if not hasattr(torch, "_scaled_grouped_mm"):
        return None

    def per_column(w):  # [S, N, K] -> fp8 [S, K, N] (column-major per expert) and scales [S, N]
        scale = w.float().abs().amax(dim=2).clamp(min=1e-10) / 448.0
        return to_fp8(w.float() / scale[..., None]).transpose(1, 2), scale

    (q13, s13), (q2, s2) = per_column(w13), per_column(w2)
    T, k = slots.shape
    S = w13.shape[0]

    def rowwise(a):
        scale = a.float().abs().amax(dim=1).clamp(min=1e-10) / 448.0
        return to_fp8(a.float() / scale[:, None]), scale

    def call():
        flat = slots.reshape(-1)
        order = torch.argsort(flat, stable=True)
        offs = torch.searchsorted(flat[order], torch.arange(1, S + 1, device=x.device)).to(torch.int32)
        a, sa = rowwise(x[order // k])
        gate, up = torch._scaled_grouped_mm(a, q13, sa, s13, offs=offs, out_dtype=x.dtype).chunk(2, dim=-1)
        h, sh = rowwise(F.silu(gate) * up)
        out = torch._scaled_grouped_mm(h, q2, sh, s2, offs=offs, out_dtype=x.dtype)
        weighted = torch.empty(T * k, x.shape[1], device=x.device, dtype=torch.float32)
        weighted[order] = out.float() * weights.reshape(-1)[order, None]
        return weighted.view(T, k, -1).sum(dim=1).to(x.dtype)

    try:
        call()
        return call
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return None


def fp8_cases(model: str, d: dict, dev, dtype) -> list[Case]:
    """FP8 block-scaled weights (DeepSeek-V3's format): a dense linear against torch._scaled_mm and the
    fused MoE against itself in bf16 (the issue's bar at decode sizes: 1.6x, for half the bytes). The
    compute roofline is FP8's, twice bf16's."""
    import torch

    from moeserve.kernels.reference.fp8_quant import quantize_blocks
    from moeserve.kernels.triton.fp8_linear import fp8_linear
    from moeserve.kernels.triton.fused_moe import Fp8Weights, fused_moe

    H, N, cases = d["hidden"], d["fp8_out"], []
    w = torch.randn(N, H, device=dev, dtype=torch.float32) * H**-0.5
    data, scale_inv = quantize_blocks(w)
    for T, phase in zip(d["norm_rows"], ("decode", "prefill")):
        x = torch.randn(T, H, device=dev, dtype=dtype)
        baseline, label = scaled_mm_baseline(x, w.to(dtype), dev)
        cases.append(Case(
            "fp8_linear", model, phase, f"T={T} K={H} N={N}", N * H + 2 * T * H + 2 * T * N + 4 * N * H / 16384,
            2 * T * N * H, lambda x=x: fp8_linear(x, data, scale_inv, (128, 128)), baseline, label, peak_factor=2.0,
        ))  # fmt: skip
    S, I, k = d["local_experts"], d["inter"], d["top_k"]
    w13, w2 = torch.randn(S, 2 * I, H, device=dev) * H**-0.5, torch.randn(S, H, I, device=dev) * I**-0.5
    (q13, s13), (q2, s2) = quantize_blocks(w13), quantize_blocks(w2)
    fp8, b13, b2 = Fp8Weights(s13, s2, (128, 128)), w13.to(dtype), w2.to(dtype)
    for per_slot, phase in d["moe_rows"][::2]:  # the smallest decode batch and the prefill one
        T = S * per_slot // k
        x, slots = torch.randn(T, H, device=dev, dtype=dtype), balanced_slots(T, k, S, dev)
        weights = torch.rand(T, k, device=dev)
        cases.append(Case(
            "fused_moe fp8", model, f"{phase}, {per_slot} rows/expert", f"T={T} k={k} S={S} H={H} I={I}",
            3 * S * H * I + 4 * T * H + 4 * T * k * (I + H), 2 * T * k * H * 3 * I,
            lambda x=x, slots=slots, weights=weights: fused_moe(x, slots, weights, q13, q2, may_drop=False, fp8=fp8),
            lambda x=x, slots=slots, weights=weights: fused_moe(x, slots, weights, b13, b2, may_drop=False),
            "fused_moe bf16 (Triton)", "fp8-moe-decode" if phase == "decode" else None, peak_factor=2.0,
            others={"torch._scaled_grouped_mm rowwise + gather, act, weights, sum":
                    scaled_grouped_mm_path(x, slots, weights, w13.to(dtype), w2.to(dtype))},
        ))  # fmt: skip
    return cases


def norm_cases(model: str, d: dict, dev, dtype) -> list[Case]:
    import torch

    from moeserve.kernels.triton.norm import rms_norm, rms_norm_reference

    H, cases = d["hidden"], []
    for T, phase in zip(d["norm_rows"], ("decode", "prefill")):
        x, res = torch.randn(2, T, H, device=dev, dtype=dtype)
        w = torch.randn(H, device=dev, dtype=dtype)
        cases.append(Case(
            "rms_norm+residual", model, phase, f"T={T} H={H}", 2 * 4 * T * H, 5 * T * H,
            lambda x=x, r=res, w=w: rms_norm(x, w, 1e-6, r), lambda x=x, r=res, w=w: rms_norm_reference(x, w, 1e-6, r),
            "eager torch",
        ))  # fmt: skip
    return cases


# which builders run for which model
BUILDERS = {
    "DeepSeek-V3": (moe_cases, mla_cases, mla_prefill_cases, norm_cases, fp8_cases),
    "Mixtral-8x7B": (moe_cases, attention_cases, window_sink_cases),
}
