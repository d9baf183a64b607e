"""The cpu set's C++ RMSNorm with its residual add, and its rotary (kernels/cpu/small_ops.py), against the torch ops
they replace."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from moeserve.dense.norm import RMSNorm
from moeserve.kernels.base import KernelSet, apply_rotary_reference, bind_kernels
from moeserve.kernels.cpu import small_ops
from moeserve.kernels.cpu.kernel_set import CpuKernels

needs_kernel = pytest.mark.skipif(not small_ops.available(), reason="C++ CPU kernels not available here")
AVX512 = torch.backends.cpu.get_cpu_capability() == "AVX512"
PATHS = [256] + ([512] if AVX512 else [])


def _torch(x, weight, eps, residual=None):
    if residual is not None:
        h = x + residual
        return F.rms_norm(h, weight.shape, weight, eps), h
    return F.rms_norm(x, weight.shape, weight, eps)


@needs_kernel
@pytest.mark.parametrize("bits", PATHS)
@pytest.mark.parametrize("T, H", [(1, 256), (8, 256), (3, 7), (5, 16), (2, 17), (4, 1000), (0, 64)])
def test_matches_torch_with_and_without_residual(bits, T, H):
    torch.manual_seed(T * 1000 + H)
    x, r, w = torch.randn(T, H) * 3, torch.randn(T, H), torch.randn(H)
    out = torch.ops.moeserve.rms_norm(x, w, 1e-5, bits)
    torch.testing.assert_close(out, _torch(x, w, 1e-5), rtol=1e-5, atol=1e-6)
    out, h = torch.ops.moeserve.add_rms_norm(x, r, w, 1e-5, bits)
    ref_out, ref_h = _torch(x, w, 1e-5, r)
    assert torch.equal(h, ref_h)  # one fp32 add per element, as torch's
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)


@needs_kernel
@pytest.mark.skipif(not AVX512, reason="no AVX-512 here")
@pytest.mark.parametrize("H", [5, 16, 100, 256, 4096])
def test_avx2_and_avx512_paths_give_the_same_bits(H):
    torch.manual_seed(H)
    x, r, w = torch.randn(6, H), torch.randn(6, H), torch.randn(H)
    assert torch.equal(torch.ops.moeserve.rms_norm(x, w, 1e-6, 256), torch.ops.moeserve.rms_norm(x, w, 1e-6, 512))
    a, b = torch.ops.moeserve.add_rms_norm(x, r, w, 1e-6, 256), torch.ops.moeserve.add_rms_norm(x, r, w, 1e-6, 512)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@needs_kernel
def test_a_row_does_not_depend_on_the_others():
    torch.manual_seed(1)
    x, w = torch.randn(9, 256), torch.randn(256)
    full = torch.ops.moeserve.rms_norm(x, w, 1e-5)
    assert all(torch.equal(full[i], torch.ops.moeserve.rms_norm(x[i : i + 1], w, 1e-5)[0]) for i in range(9))


@needs_kernel
def test_strided_rows_and_bad_input():
    x, w = torch.randn(4, 512)[:, ::2], torch.randn(256)  # a view with stride 2 in H: copied first
    torch.testing.assert_close(torch.ops.moeserve.rms_norm(x, w, 1e-5), _torch(x.contiguous(), w, 1e-5))
    with pytest.raises(RuntimeError, match="fp32"):
        torch.ops.moeserve.rms_norm(x.double(), w.double(), 1e-5)
    with pytest.raises(RuntimeError, match="weight"):
        torch.ops.moeserve.rms_norm(torch.randn(4, 8), torch.randn(9), 1e-5)


@needs_kernel
def test_the_layer_through_the_cpu_set_matches_the_reference_set():
    torch.manual_seed(2)
    norm = RMSNorm(256, 1e-5, torch.float32)
    norm.weight.data.normal_()
    x, r = torch.randn(2, 3, 256), torch.randn(2, 3, 256)
    bind_kernels(norm, KernelSet())
    ref_plain, (ref_out, ref_h) = norm(x), norm(x, residual=r)
    bind_kernels(norm, CpuKernels())
    out, h = norm(x, residual=r)
    assert out.shape == x.shape and torch.equal(h, ref_h)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(norm(x), ref_plain, rtol=1e-5, atol=1e-6)


@needs_kernel
@pytest.mark.parametrize("N, h, D", [(8, 12, 32), (1, 1, 2), (3, 5, 6), (0, 4, 8), (4, 2, 128)])
def test_rotary_gives_the_bits_of_the_reference(N, h, D):
    torch.manual_seed(N + h + D)
    qkv = torch.randn(N, (h + 3) * D)
    x = qkv[:, : h * D].view(N, h, D)  # the q/k columns of a QKV output: rows strided
    angles = torch.randn(N, D)
    cos, sin = torch.cos(angles), torch.sin(angles)
    out = small_ops.rotary(x, cos, sin)
    assert out.is_contiguous() and torch.equal(out, apply_rotary_reference(x, cos, sin))


@needs_kernel
def test_the_attention_rotary_through_the_cpu_set():
    x, cos, sin = torch.randn(5, 3, 16), torch.randn(5, 16), torch.randn(5, 16)
    assert torch.equal(CpuKernels().rotary(x, cos, sin), KernelSet().rotary(x, cos, sin))
    bf = x.bfloat16()  # other dtypes stay on the reference
    assert torch.equal(CpuKernels().rotary(bf, cos.bfloat16(), sin.bfloat16()), KernelSet().rotary(bf, cos.bfloat16(), sin.bfloat16()))
    with pytest.raises(RuntimeError, match="even"):
        torch.ops.moeserve.rotary(torch.randn(2, 1, 3), torch.randn(2, 3), torch.randn(2, 3))
