"""Column-split packed linears (kernels/cpu/split_linear.py): the same bits as the unsplit GEMM whichever
way a call goes, no split where it cannot match or pay, and never a stale split after a weight write."""

from __future__ import annotations

import pytest
import torch

from moeserve.dense.linear import ReplicatedLinear
from moeserve.kernels.cpu import gemm, split_linear
from moeserve.kernels.cpu.kernel_set import CpuKernels
from moeserve.kernels.cpu.linear import enable_split
from moeserve.kernels.cpu.split_chooser import SplitChooser
from moeserve.kernels.cpu.split_linear import MIN_BLOCK, SplitLinear

needs_packing = pytest.mark.skipif(not gemm.packing_enabled(), reason="torch built without oneDNN packing")


def packed_layer(I: int, O: int, bias: bool) -> ReplicatedLinear:
    layer = ReplicatedLinear(I, O, bias, torch.float32)
    layer.weight.data.normal_(0, 0.1)
    if bias:
        layer.bias.data.normal_(0, 0.1)
    layer.kernels = CpuKernels()
    assert layer.prepare()
    return layer


def split_over(layer: ReplicatedLinear, threads: int) -> bool:
    """What the CPU set does to each packed linear after loading (CpuKernels.prepare_model)."""
    return enable_split(layer.kernel_state, layer.weight, layer.bias, threads)


@needs_packing
@pytest.mark.parametrize("I,O,threads", [(256, 4096, 2), (256, 512, 2), (300, 1000, 3), (64, 777, 4)])
@pytest.mark.parametrize("bias", [False, True])
def test_blocks_give_the_same_bits_as_the_whole_weight(I, O, threads, bias):
    torch.manual_seed(O)
    layer = packed_layer(I, O, bias)
    split = SplitLinear.create(layer.weight, layer.bias, layer.kernel_state.packed, threads)
    assert split is not None and len(split.packed) == min(threads, O // MIN_BLOCK)
    for rows in (1, 2, 17, 63, 64):
        x = torch.randn(rows, I)
        assert torch.equal(split.run(x, layer.bias), gemm.linear(x, layer.weight, layer.bias, layer.kernel_state.packed))


@needs_packing
def test_no_split_where_it_cannot_pay_or_match(monkeypatch):
    layer = packed_layer(64, 2 * MIN_BLOCK - 1, False)
    assert SplitLinear.create(layer.weight, None, layer.kernel_state.packed, 4) is None  # too few columns for 2 blocks
    layer = packed_layer(64, 512, False)
    assert SplitLinear.create(layer.weight, None, layer.kernel_state.packed, 1) is None  # one thread
    # a host where the blocks round differently keeps the layer whole
    real = gemm.linear
    monkeypatch.setattr(split_linear.gemm, "linear", lambda *a: real(*a) + 1e-7)
    assert SplitLinear.create(layer.weight, None, layer.kernel_state.packed, 2) is None
    assert not split_over(layer, 2) and layer.kernel_state.split is None


@needs_packing
def test_a_split_layer_answers_the_same_bits_whichever_way_each_call_goes():
    torch.manual_seed(5)
    layer = packed_layer(96, 640, True)
    x = torch.randn(24, 96)  # above panel_gemm.small_rows(): fewer rows take the panels, never the split
    whole = layer(x)
    assert split_over(layer, 2)
    outs = [layer(x) for _ in range(2 * SplitChooser.PROBES + 4)]
    calls, serial, split = layer.kernel_state.split.chooser.stats[(24).bit_length()]
    assert serial > 0 and split > 0  # both ways were timed
    assert all(torch.equal(out, whole) for out in outs)
    assert layer(torch.zeros(0, 96)).shape == (0, 640)
    big = torch.randn(split_linear.MAX_ROWS + 1, 96)  # prefill sizes run whole: never split unchecked
    assert torch.equal(layer(big), gemm.linear(big, layer.weight, layer.bias, layer.kernel_state.packed))
    assert (split_linear.MAX_ROWS + 1).bit_length() not in layer.kernel_state.split.chooser.stats


@needs_packing
def test_packing_again_or_loading_drops_the_split():
    layer = packed_layer(64, 512, False)
    assert split_over(layer, 2)
    layer.weight.data.normal_(0, 0.1)
    layer.prepare()  # a new snapshot: the blocks of the old weight go
    assert layer.kernel_state.split is None

    class Reader:
        def read(self, name, shard_dim=None, start=0, end=None):
            return torch.ones(512, 64)

    assert split_over(layer, 2)
    layer.load(Reader(), "x")
    assert layer.kernel_state is None
    x = torch.randn(3, 64)
    assert torch.equal(layer(x), x @ torch.ones(512, 64).T)  # not the stale blocks
