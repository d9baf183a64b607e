"""The fused MoE Triton kernels equal their torch references under TRITON_INTERPRET=1, over an
expert-major batch (`fused_experts`) and over the tokens with the row gather and the routing weights in
the kernels (`fused_moe`), and the references equal independent formulations."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.usefixtures("interpret")

from moeserve.kernels.triton.fused_moe import (  # noqa: E402
    ACTIVATION_IDS,
    Tiles,
    align,
    fused_experts,
    fused_experts_reference,
    fused_moe,
    fused_moe_reference,
)
from moeserve.kernels.triton.launch import tile_table  # noqa: E402

TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=2e-2, rtol=2e-2),  # the interpreter's fp32 -> bf16 store may land one ulp off
}


def make(counts: list[int], H: int, I: int, dtype: torch.dtype, seed: int = 0):
    """counts [S] rows per slot -> x [R, H], offsets [S] int32, w13 [S, 2I, H], w2 [S, H, I], outputs O(1)."""
    g = torch.Generator().manual_seed(seed)
    S, R = len(counts), sum(counts)
    x = torch.randn(R, H, generator=g).to(dtype)
    w13 = (torch.randn(S, 2 * I, H, generator=g) / H**0.5).to(dtype)
    w2 = (torch.randn(S, H, I, generator=g) / I**0.5).to(dtype)
    offsets = torch.tensor(counts, dtype=torch.int64).cumsum(0).to(torch.int32)
    return x, offsets, w13, w2


SMALL = Tiles(16, 16, 16, 4, 1)  # many tiles and K steps at test sizes


def check(counts, H, I, dtype, activation="silu", tiles=SMALL):
    x, offsets, w13, w2 = make(counts, H, I, dtype)
    out = fused_experts(x, offsets, w13, w2, activation, tiles)
    ref = fused_experts_reference(x, offsets, w13, w2, activation)
    assert out.dtype == dtype and out.shape == ref.shape
    torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_slots_with_zero_one_and_many_rows_at_odd_sizes(dtype):
    # H = 40, I = 24: neither is a multiple of the 16-wide blocks; 37 rows span three 16-row tiles
    check([0, 1, 37, 0, 5], H=40, I=24, dtype=dtype)


def test_bf16_is_upcast_on_load_under_the_interpreter():
    check([3, 0, 21], H=40, I=24, dtype=torch.bfloat16)


@pytest.mark.parametrize("activation", sorted(ACTIVATION_IDS))
def test_every_activation(activation):
    check([3, 0, 18], H=24, I=20, dtype=torch.float32, activation=activation)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpt_oss_biases_and_clamped_swiglu(dtype):
    """Biases added to both accumulators and the clamped SwiGLU (a limit that clamps some gates and ups),
    against the reference and, in fp32, the torch set's experts (moe/experts.py)."""
    from moeserve.kernels.reference.experts import experts_reference
    from moeserve.moe.experts import ClampedSwiGLU

    counts = [0, 1, 37, 0, 5]
    x, offsets, w13, w2 = make(counts, 40, 24, dtype)
    g = torch.Generator().manual_seed(7)
    b13, b2 = torch.randn(5, 48, generator=g).to(dtype), torch.randn(5, 40, generator=g).to(dtype)
    swiglu = (1.702, 0.6)
    out = fused_experts(x, offsets, w13, w2, "swigluoai", SMALL, b13, b2, swiglu)
    torch.testing.assert_close(out, fused_experts_reference(x, offsets, w13, w2, "swigluoai", b13, b2, swiglu),
                               **TOL[dtype])
    if dtype == torch.float32:
        glu = ClampedSwiGLU(*swiglu)
        want = experts_reference(x, torch.tensor(counts), w13, w2, None, lambda gu: glu(*gu.chunk(2, -1)), b13, b2)
        torch.testing.assert_close(out, want, **TOL[dtype])


def test_one_token_and_default_blocks():
    check([0, 0, 1, 0], H=48, I=40, dtype=torch.float16, tiles=None)
    check([9, 30, 2], H=72, I=80, dtype=torch.float32, tiles=None)  # the shape's tiles: H, I not multiples
    check([70, 90], H=40, I=136, dtype=torch.float16, tiles=None)  # prefill tiles, 128 wide


def test_no_rows():
    x, offsets, w13, w2 = make([0, 0, 0], H=16, I=16, dtype=torch.float32)
    assert fused_experts(x, offsets, w13, w2).shape == (0, 16)


def test_strided_input_rows():
    x, offsets, w13, w2 = make([4, 6], H=32, I=16, dtype=torch.float32)
    wide = torch.zeros(x.shape[0], 2 * 32)
    wide[:, 5:37] = x  # a view whose rows are 64 apart
    out = fused_experts(wide[:, 5:37], offsets, w13, w2, tiles=SMALL)
    torch.testing.assert_close(out, fused_experts_reference(x, offsets, w13, w2), **TOL[torch.float32])


def test_tile_table_maps_tiles_to_slots_without_empty_slots():
    slot, row = tile_table(torch.tensor([0, 3, 3, 10, 11], dtype=torch.int32), 4, 11 // 4 + 5)
    assert slot.tolist() == [1, 3, 3, 4, -1, -1, -1]  # 11 // 4 + 5 = 7 tiles at most
    assert row.tolist()[:4] == [0, 3, 7, 10]


@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_reference_equals_per_row_weights(activation):
    """Independent formulation: each row gathers its slot's weights and runs a dense einsum."""
    counts = [2, 0, 5, 1]
    x, offsets, w13, w2 = make(counts, H=12, I=8, dtype=torch.float32)
    slot_of_row = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    gate_up = torch.einsum("rh,rnh->rn", x, w13[slot_of_row])
    gate, up = gate_up.chunk(2, dim=-1)
    act = torch.nn.functional.silu if activation == "silu" else torch.nn.functional.gelu
    expected = torch.einsum("ri,rhi->rh", act(gate) * up, w2[slot_of_row])
    torch.testing.assert_close(fused_experts_reference(x, offsets, w13, w2, activation), expected)


@pytest.mark.parametrize("switch, device, fused", [
    ("1", "cpu", True), ("0", "cpu", False), ("", "cpu", True), ("", "cuda", False), ("1", "cuda", True),
])  # fmt: skip
def test_the_switch_sends_the_experts_to_the_fused_kernel_or_the_torch_set(interpret, monkeypatch, switch, device,
                                                                           fused):
    """MOESERVE_TRITON_FUSED_MOE=0 keeps the Triton set's attention and norms but runs the experts as the
    torch set does (cuBLAS's grouped GEMM on a GPU); unset, that is the GPU's default, where it measured
    faster, and the fused kernel runs elsewhere (the interpreter on CPU)."""
    from types import SimpleNamespace

    from moeserve.dispatch import ExpertBatch
    from moeserve.kernels.base import KernelSet
    from moeserve.kernels.triton import fused_moe
    from moeserve.kernels.triton_set import TritonKernels

    monkeypatch.setenv("MOESERVE_TRITON_FUSED_MOE", switch)
    calls = []
    monkeypatch.setattr(KernelSet, "experts", lambda self, layer, batch: calls.append("torch") or batch.hidden)
    monkeypatch.setattr(fused_moe, "fused_experts", lambda *a, **k: calls.append("fused") or a[0])
    layer = SimpleNamespace(act_name="silu", use_grouped_mm=True, w13=torch.zeros(1, 2, 8), w2=torch.zeros(1, 8, 1))
    x = torch.randn(3, 8)
    batch = ExpertBatch(x, torch.tensor([3], dtype=torch.int32), torch.tensor([3]))
    assert TritonKernels(device).experts(layer, batch) is x
    assert calls == ["fused" if fused else "torch"]


def routing(T: int, k: int, S: int, dtype: torch.dtype, H: int, I: int, seed: int = 0, dropped: int = 0,
            unused: tuple[int, ...] = ()):  # fmt: skip
    """-> x [T, H], slots [T, k] (distinct per token, `unused` slots never chosen, `dropped` ids -1),
    weights [T, k] fp32, w13, w2."""
    g = torch.Generator().manual_seed(seed)
    allowed = torch.tensor([s for s in range(S) if s not in unused])
    slots = torch.stack([allowed[torch.randperm(len(allowed), generator=g)[:k]] for _ in range(T)]) if T else \
        torch.zeros(0, k, dtype=torch.int64)  # fmt: skip
    if dropped:
        slots.view(-1)[torch.randperm(T * k, generator=g)[:dropped]] = -1
    weights = torch.rand(T, k, generator=g)
    _, _, w13, w2 = make([1] * S, H, I, dtype, seed + 1)
    return torch.randn(T, H, generator=g).to(dtype), slots, weights, w13, w2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fused_moe_gathers_and_weights_in_the_kernels(dtype):
    # 21 tokens top-3 over 6 slots, slot 2 and 5 never chosen, 4 dropped ids; H = 40, I = 24 odd sizes
    x, slots, weights, w13, w2 = routing(21, 3, 6, dtype, H=40, I=24, dropped=4, unused=(2, 5))
    out = fused_moe(x, slots, weights, w13, w2, tiles=SMALL)
    torch.testing.assert_close(out, fused_moe_reference(x, slots, weights, w13, w2), **TOL[dtype])


def test_fused_moe_one_token_top_1_default_tiles_and_no_tokens():
    x, slots, weights, w13, w2 = routing(1, 1, 4, torch.float32, H=48, I=40)
    out = fused_moe(x, slots, weights, w13, w2, may_drop=False)
    torch.testing.assert_close(out, fused_moe_reference(x, slots, weights, w13, w2), **TOL[torch.float32])
    x, slots, weights, w13, w2 = routing(0, 2, 4, torch.float32, H=16, I=16)
    assert fused_moe(x, slots, weights, w13, w2).shape == (0, 16)


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_fused_moe_equals_the_dispatch_experts_combine_path(activation):
    """The serving path it replaces: local dispatch (sort, gather), the experts on the expert-major
    batch, combine (weights in fp32, summed over j in order) -- the same numbers in fp32."""
    from moeserve.dispatch.local import LocalDispatcher

    x, slots, weights, w13, w2 = routing(13, 4, 8, torch.float32, H=24, I=16, unused=(0,))
    dispatcher = LocalDispatcher(8)
    batch, handle = dispatcher.dispatch(x, slots, weights)
    rows = fused_experts_reference(batch.hidden, batch.offsets, w13, w2, activation)
    expected = dispatcher.combine(rows, handle)
    torch.testing.assert_close(fused_moe(x, slots, weights, w13, w2, activation, SMALL, may_drop=False), expected)


def test_align_orders_rows_by_slot_without_a_host_read():
    slots = torch.tensor([[2, 0], [-1, 2], [0, 3]])
    order, ends = align(slots, 4)
    assert order.tolist() == [1, 4, 0, 3, 5, 2]  # slot 0: (0,1) (2,0); slot 2: (0,0) (1,1); slot 3: (2,1); dropped
    assert ends.tolist() == [2, 2, 4, 5]


def test_fused_moe_with_gpt_oss_biases_and_clamped_swiglu():
    """gpt-oss's experts on the gather path: biases added to both accumulators before the activation and
    the routing weight, the clamped SwiGLU with its (alpha, limit)."""
    from moeserve.kernels.triton.fused_moe import Extras

    x, slots, weights, w13, w2 = routing(11, 2, 4, torch.float32, H=24, I=16, dropped=1)
    g = torch.Generator().manual_seed(7)
    extras = Extras(torch.randn(4, 32, generator=g), torch.randn(4, 24, generator=g), (1.702, 0.8))
    out = fused_moe(x, slots, weights, w13, w2, "swigluoai", SMALL, extras=extras)
    ref = fused_moe_reference(x, slots, weights, w13, w2, "swigluoai", extras)
    torch.testing.assert_close(out, ref, **TOL[torch.float32])
