"""The second pass of split-context (flash-decoding) attention, shared by paged and MLA decode.

Shape legend: B sequences, h query heads, P splits of the context, D value width.
Each split of a sequence's context wrote its unnormalised output acc [B, h, P, D] fp32 and its running
max m (log2 domain) and sum l [B, h, P, 2] fp32; an empty split wrote m = -1e30, l = 0, acc = 0. The
combined output is sum_p 2^(m_p - M) acc_p / sum_p 2^(m_p - M) l_p with M = max_p m_p.
"""

from __future__ import annotations

import torch
import triton.language as tl

from moeserve.kernels.triton.launch import MAX, SUM, Kernel, pow2

EMPTY = tl.constexpr(-1.0e30)  # the running max of a split that saw no key (finite: exp2(EMPTY - EMPTY) = 1, not NaN)


def _combine_kernel(
    acc_ptr, ml_ptr, out_ptr,
    D, sa_b, sa_h, sa_p, sm_b, sm_h, sm_p, so_b, so_h, P,
    BLOCK_P: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    h = tl.program_id(1)
    p = tl.arange(0, BLOCK_P)
    p_ok = p < P
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    ml = ml_ptr + b * sm_b + h * sm_h + p * sm_p
    m = tl.load(ml, mask=p_ok, other=EMPTY)
    l = tl.load(ml + 1, mask=p_ok, other=0.0)
    acc = tl.load(acc_ptr + b * sa_b + h * sa_h + p[:, None] * sa_p + d[None, :],
                  mask=p_ok[:, None] & d_ok[None, :], other=0.0)  # fmt: skip
    w = tl.exp2(m - tl.reduce(m, 0, MAX))  # [BLOCK_P]
    total = tl.reduce(w * l, 0, SUM)
    total = tl.where(total > 0.0, total, 1.0)  # a sequence with no key (seq_len 0) gives zeros
    out = tl.reduce(w[:, None] * acc, 0, SUM) / total
    tl.store(out_ptr + b * so_b + h * so_h + d, out.to(out_ptr.dtype.element_ty), mask=d_ok)


# P and the strides that follow it are not specialized: a compiled kernel per power of two of P (BLOCK_P)
combine_kernel = Kernel(_combine_kernel, do_not_specialize=("P", "sa_b", "sa_h", "sm_b", "sm_h"))


def combine(acc: torch.Tensor, ml: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """acc [B, h, P, D] fp32; ml [B, h, P, 2] fp32 -> out [B, h, D] (written, returned)."""
    B, h, P, D = acc.shape
    combine_kernel[(B, h)](
        acc, ml, out, D, acc.stride(0), acc.stride(1), acc.stride(2), ml.stride(0), ml.stride(1), ml.stride(2),
        out.stride(0), out.stride(1), P, BLOCK_P=pow2(P), BLOCK_D=pow2(D),
    )  # fmt: skip
    return out


def num_splits(
    programs: int, max_tokens: int, split: int | None = None, min_tokens: int = 256, target: int = 264
) -> int:
    """How many parts to split each context into, from host shapes only (no sync): enough programs
    to fill the device (`target`, ~2 per SM of an H100) without parts under `min_tokens` keys.
    programs: (sequence, head group) programs of one split; max_tokens: the longest context the
    block tables allow. split: a caller's choice, taken as is."""
    if split is not None:
        return max(1, split)
    by_work = -(-target // max(programs, 1))
    by_length = -(-max_tokens // min_tokens)
    return max(1, min(by_work, by_length, 64))
