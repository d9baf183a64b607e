"""The oneDNN-packed GEMM of the CPU kernel set (kernels/cpu/gemm.py) equals F.linear to fp32 rounding for every layer that uses
it, falls back where it does not apply, and never serves a stale snapshot after a weight write."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from moeserve.kernels.base import bind_kernels
from moeserve.kernels.cpu import gemm
from moeserve.kernels.cpu.kernel_set import CpuKernels
from moeserve.dense.embedding import ParallelLMHead
from moeserve.dense.linear import ColumnParallelLinear, QKVParallelLinear, ReplicatedLinear, RowParallelLinear
from moeserve.dispatch.base import ExpertBatch
from moeserve.kernels.reference.experts import experts_reference
from moeserve.moe.experts import GroupedExperts
from moeserve.parallel_state import ParallelContext

needs_packing = pytest.mark.skipif(not gemm.packing_enabled(), reason="torch built without oneDNN packing")


def on_cpu_set(layer, threads: int = 1) -> bool:
    """Bind the CPU kernel set to `layer` (as a rank does after loading) and let it pack."""
    layer.kernels = CpuKernels(expert_threads=threads)
    return layer.prepare()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


@needs_packing
@pytest.mark.parametrize("rows", [0, 1, 5, 16, 63, 300])
@pytest.mark.parametrize("shape", [(256, 1024), (97, 13), (200, 300)])
def test_packed_linear_equals_f_linear(rows, shape):
    torch.manual_seed(rows)
    I, O = shape
    w, b, x = torch.randn(O, I) * 0.05, torch.randn(O), torch.randn(rows, I)
    packed = gemm.pack_weight(w)
    assert packed is not None
    for bias in (None, b):
        out = gemm.linear(x, w, bias, packed)
        ref = F.linear(x, w, bias)
        assert out.shape == ref.shape and out.dtype == torch.float32
        if rows:
            assert rel_err(out, ref) < 1e-5


def test_packing_applies_to_fp32_cpu_only(monkeypatch):
    assert gemm.pack_weight(torch.randn(8, 4, dtype=torch.bfloat16)) is None
    assert gemm.pack_weight(torch.randn(8, 4, dtype=torch.float64)) is None
    monkeypatch.setenv("MOESERVE_PACKED_GEMM", "0")
    assert gemm.pack_weight(torch.randn(8, 4)) is None
    x, w = torch.randn(3, 4, dtype=torch.bfloat16), torch.randn(8, 4, dtype=torch.bfloat16)
    assert torch.equal(gemm.linear(x, w, None, None), F.linear(x, w))


@needs_packing
def test_every_linear_layer_packs_and_load_drops_the_snapshot():
    torch.manual_seed(0)
    ctx = ParallelContext()
    layers = [
        ReplicatedLinear(48, 40, True, torch.float32),
        ColumnParallelLinear(48, [24, 24], False, ctx, torch.float32),
        QKVParallelLinear(48, 8, 4, 2, True, ctx, torch.float32),
        RowParallelLinear(48, 40, True, ctx, torch.float32),
        ParallelLMHead(100, 48, ctx, torch.float32),
    ]
    x = torch.randn(7, 48)
    def run(layer):
        return layer.project(x) if isinstance(layer, QKVParallelLinear) else layer(x)

    for layer in layers:
        layer.weight.data.normal_(0, 0.1)
        plain = run(layer)
        assert on_cpu_set(layer) and layer.kernel_state.packed is not None
        assert rel_err(run(layer), plain) < 1e-5
    assert bind_kernels(torch.nn.ModuleList(layers), CpuKernels()) == len(layers)

    class Reader:
        def read(self, name, shard_dim=None, start=0, end=None):
            return torch.ones(40, 48) if name.endswith("weight") else torch.zeros(40)

        def has(self, name):
            return True

    head = layers[0]
    head.load(Reader(), "x")  # a reload must not keep serving the old weights
    assert head.kernel_state is None
    assert torch.allclose(head(x), F.linear(x, torch.ones(40, 48), head.bias))


@needs_packing
def test_packed_experts_equal_the_loop_and_set_slot_drops_the_snapshot():
    torch.manual_seed(0)
    S, H, Il = 6, 32, 40
    experts = GroupedExperts(S, H, Il, torch.float32)
    experts.w13.data.normal_(0, 0.1)
    experts.w2.data.normal_(0, 0.1)
    counts = torch.tensor([3, 0, 17, 1, 0, 9])
    batch = ExpertBatch(torch.randn(int(counts.sum()), H), torch.cumsum(counts, 0).to(torch.int32), counts)
    ref = experts_reference(batch.hidden, counts, experts.w13, experts.w2, F.silu)
    assert on_cpu_set(experts) and experts.kernel_state.packed13 is not None
    assert rel_err(experts(batch), ref) < 1e-5
    empty = ExpertBatch(torch.zeros(0, H), torch.zeros(S, dtype=torch.int32), torch.zeros(S, dtype=torch.int64))
    assert experts(empty).shape == (0, H)

    new = [torch.randn(Il, H) * 0.1, torch.randn(Il, H) * 0.1, torch.randn(H, Il) * 0.1]
    experts.set_slot(2, *new)
    assert experts.kernel_state is None  # the snapshot of slot 2 is stale: dropped
    ref2 = experts_reference(batch.hidden, counts, experts.w13, experts.w2, F.silu)
    assert rel_err(experts(batch), ref2) < 1e-5
    experts.prepare()
    assert rel_err(experts(batch), ref2) < 1e-5


@needs_packing
def test_warm_up_runs_each_distinct_packed_shape_at_each_row_count():
    layers = torch.nn.ModuleList([ReplicatedLinear(16, 8, False, torch.float32) for _ in range(3)])
    layers.append(ReplicatedLinear(8, 16, False, torch.float32))
    experts = GroupedExperts(2, 16, 12, torch.float32)
    layers.append(experts)
    for layer in layers:
        on_cpu_set(layer)
    # shapes: [8, 16] (three layers, one shape), [16, 8], experts' [24, 16] and [16, 12]
    assert gemm.warm_up(layers, max_rows=5) == 4 * 5
    assert gemm.warm_up(layers, max_rows=0) == 0
    # a weight with a limit (the LM head: only the sampled rows) stops early; a spent budget stops all
    assert gemm.warm_up(layers, max_rows=5, limits={id(layers[3].kernel_state.packed): 2}) == 3 * 5 + 2
    assert gemm.warm_up(layers, max_rows=5, budget_s=-1.0) == 0
