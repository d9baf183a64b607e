"""The RMSNorm Triton kernel (with and without the residual add) equals its torch reference under
TRITON_INTERPRET=1, and the reference equals transformers' LlamaRMSNorm."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.usefixtures("interpret")

from moeserve.kernels.triton.norm import rms_norm, rms_norm_reference  # noqa: E402

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=1e-3, rtol=1e-3)}


def inputs(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, residual = torch.randn(2, *shape, generator=g).to(dtype)
    weight = (1 + 0.1 * torch.randn(shape[-1], generator=g)).to(dtype)
    return x, residual, weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(1, 40), (3, 5, 96)], ids=["one-token-odd-H", "batched"])
def test_rms_norm_with_and_without_residual(dtype, shape):
    x, residual, weight = inputs(shape, dtype)
    out = rms_norm(x, weight, 1e-6)
    torch.testing.assert_close(out, rms_norm_reference(x, weight, 1e-6), **TOL[dtype])
    out, new_residual = rms_norm(x, weight, 1e-6, residual)
    ref, ref_residual = rms_norm_reference(x, weight, 1e-6, residual)
    torch.testing.assert_close(out, ref, **TOL[dtype])
    assert torch.equal(new_residual, ref_residual)  # the add rounds to x's dtype once either way


def test_rms_norm_promotes_as_torch_and_takes_no_rows():
    x, _, weight = inputs((2, 24), torch.float16)
    out = rms_norm(x, weight.float(), 1e-5)  # fp16 activations, fp32 weight: fp32 out, as weight * x
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, rms_norm_reference(x, weight.float(), 1e-5))
    assert rms_norm(x[:0], weight, 1e-5).shape == (0, 24)


def test_reference_matches_transformers():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    x, _, weight = inputs((4, 32), torch.float16)
    hf = LlamaRMSNorm(32, eps=1e-6).to(torch.float16)
    hf.weight.data.copy_(weight)
    assert torch.equal(rms_norm_reference(x, weight, 1e-6), hf(x))
