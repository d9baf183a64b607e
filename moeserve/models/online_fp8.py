"""`--quantization fp8`: a BF16 / FP16 / FP32 checkpoint's linear layers and routed experts quantized
while loading into FP8 (e4m3) with 128 x 128 block scales, the layout FP8 checkpoints ship (DeepSeek-V3's
`weight_scale_inv`, kernels/reference/fp8_quant.py), so the same kernels serve both; activations are
quantized per token and group of 128 at each call, inside the kernels (vLLM's flag, with DeepSeek's
block format where vLLM's online quantization takes one scale per tensor).

Kept in the checkpoint's dtype: the LM head (`lm_head`), routers (`gate`, `shared_expert_gate`: a few
columns, and the routing decision hangs on them) and layers that read their weight themselves
(`keep_fp8 = False`: MLA's kv_b_proj, whose halves are the absorbed W_uk / W_uv), and weights an FP8
checkpoint kept FP8 at load (they have their own scales). Each weight is moved
to the rank's device before it is quantized, one layer at a time, so a model whose BF16 weights do not
fit the card but whose FP8 weights do still loads (the rest of the model moves after).
"""

from __future__ import annotations

import torch
from torch import nn

from moeserve.kernels.base import KernelWeight
from moeserve.kernels.reference.fp8_quant import BLOCK, FP8_DTYPE, quantize_blocks
from moeserve.moe.experts import GroupedExperts

KEPT = ("lm_head", "gate", "shared_expert_gate")  # module names whose weights stay in the model's dtype


def _fp8_param(value: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(value, requires_grad=False)


def quantize_fp8(model: nn.Module, device: torch.device, block: tuple[int, int] = BLOCK) -> int:
    """Every eligible layer of `model` (see the module docstring) rewritten in the FP8 block layout on
    `device`: KernelWeight layers get a float8_e4m3fn `weight`, `weight_scale_inv` [ceil(O / bn), ceil(I /
    bk)] and `weight_block`; GroupedExperts get FP8 `w13` / `w2` with `w13_scale_inv` / `w2_scale_inv`.
    Returns how many layers were quantized. The kernel set must run such layers (fp8_block_weights)."""
    count = 0
    for name, module in model.named_modules():
        if isinstance(module, GroupedExperts):
            if module.w13.dtype == FP8_DTYPE:
                continue  # an FP8 checkpoint's experts, kept FP8 at load with their own scales
            for attr in ("w13", "w2"):
                data, scale = quantize_blocks(getattr(module, attr).data.to(device), block)
                setattr(module, attr, _fp8_param(data))
                setattr(module, f"{attr}_scale_inv", _fp8_param(scale))
            module.weight_block = block
            module.kernel_state = None
            count += 1
        elif isinstance(module, KernelWeight) and name.rsplit(".", 1)[-1] not in KEPT:
            if not getattr(module, "keep_fp8", True) or module.weight.dim() != 2 or module.weight.dtype == FP8_DTYPE:
                continue
            data, scale = quantize_blocks(module.weight.data.to(device), block)
            module.weight, module.weight_scale_inv = _fp8_param(data), _fp8_param(scale)
            module.weight_block = block
            module.unpack()
            count += 1
    return count
