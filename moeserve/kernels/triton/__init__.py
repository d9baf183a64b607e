"""Triton kernels for GPUs (the `triton` kernel set calls them), each next to its plain-torch reference.

    fused_moe.fused_experts          grouped gate/up GEMM with the activation fused, grouped down GEMM
    paged_attention.paged_decode     one query per sequence over the paged KV cache (split over the context)
    paged_attention.paged_prefill    causal prefill over a cached prefix (chunked prefill)
    mla_decode.mla_decode            DeepSeek MLA decode on the latent cache with absorbed weights
    norm.rms_norm                    RMSNorm, optionally fused with the residual add

This package imports without triton and without CUDA; its modules need triton. On a CPU the kernels run
under TRITON_INTERPRET=1 (how CI checks them), read when a kernel is launched, not when it is imported
(launch.py). docs/kernels.md has each kernel's layout, algorithm and roofline.
"""

from __future__ import annotations

import importlib.util


def available() -> bool:
    """True when triton is importable and kernels can run: a CUDA device, or TRITON_INTERPRET=1."""
    if importlib.util.find_spec("triton") is None:
        return False
    from moeserve.kernels.triton.launch import interpreting

    if interpreting():
        return True
    import torch

    return torch.cuda.is_available()
