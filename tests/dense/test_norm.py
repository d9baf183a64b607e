"""RMSNorm's fused fp32 path vs the HF-order reference."""

from __future__ import annotations

import pytest
import torch

from moeserve.dense.norm import RMSNorm
from moeserve.kernels.base import rms_norm_reference


@pytest.mark.parametrize("shape", [(1, 256), (64, 256), (37, 8, 32), (0, 16)])
def test_fp32_fused_norm_is_bit_equal_to_reference(shape):
    torch.manual_seed(0)
    norm = RMSNorm(shape[-1], 1e-5, torch.float32)
    norm.weight.data.normal_()
    x = torch.randn(shape) * 3
    assert torch.equal(norm(x), rms_norm_reference(x, norm.weight, 1e-5))


def test_bf16_keeps_reference_order():
    torch.manual_seed(0)
    norm = RMSNorm(64, 1e-6, torch.bfloat16)
    norm.weight.data.normal_()
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    assert torch.equal(norm(x), rms_norm_reference(x, norm.weight, 1e-6))
