"""The packed expert loop split over threads (kernels/cpu/expert_threads.py): the same bits for any thread
count, every activation, the reference loop to fp32 rounding, and chunks that cover every busy slot."""

from __future__ import annotations

from typing import List

import pytest
import torch

from moeserve.kernels.cpu.blocked import ELEMENTWISE_GRAIN
from moeserve.dispatch.base import ExpertBatch
from moeserve.kernels.cpu import expert_threads, gemm
from moeserve.kernels.cpu.expert_threads import ACTIVATION_NAMES, FIXED_ROW_COST, chunk_cuts, run_packed
from moeserve.kernels.cpu.kernel_set import CpuKernels
from moeserve.kernels.cpu.split_chooser import SplitChooser
from moeserve.kernels.reference.experts import experts_reference
from moeserve.moe.experts import ACTIVATIONS, ClampedSwiGLU, GroupedExperts

needs_packing = pytest.mark.skipif(not gemm.packing_enabled(), reason="torch built without oneDNN packing")


def packed_experts(S: int, H: int, Il: int, act: str = "silu") -> GroupedExperts:
    experts = GroupedExperts(S, H, Il, torch.float32, act)
    experts.w13.data.normal_(0, 0.2)
    experts.w2.data.normal_(0, 0.2)
    experts.kernels = CpuKernels()  # expert_threads 1; tests raise it on `experts.kernels`
    assert experts.prepare()
    return experts


def test_the_scripted_loop_knows_every_activation_the_layer_accepts():
    assert set(ACTIVATION_NAMES) == set(ACTIVATIONS) | {ClampedSwiGLU.name}


@needs_packing
def test_gpt_oss_experts_biases_and_clamped_swiglu_at_any_thread_count():
    """Biases after each GEMM and the clamped SwiGLU (gpt-oss) in the packed loop: the same bits at any
    fork count and intra-op thread count (rows x Il above the elementwise grain), and the torch set's
    experts to fp32 rounding, through the panel kernel (few rows) and oneDNN (many)."""
    torch.manual_seed(4)
    S, H, Il = 4, 40, 24
    experts = GroupedExperts(S, H, Il, torch.float32, ClampedSwiGLU(1.702, 0.8), bias=True)
    for t in (experts.w13, experts.w2, experts.b13, experts.b2):
        t.data.normal_(0, 0.3)
    experts.kernels = CpuKernels()
    assert experts.prepare()
    from moeserve.kernels.base import REFERENCE

    for counts in ([2, 0, 3, 1], [700, 1, 0, 9]):
        c = torch.tensor(counts)
        batch = ExpertBatch(torch.randn(int(c.sum()), H) * 3, torch.cumsum(c, 0).to(torch.int32), c)
        outs = []
        try:
            for threads, forks in ((1, 1), (2, 2), (3, 1)):
                torch.set_num_threads(threads)
                experts.kernels.expert_threads = forks
                outs.append(experts(batch))
        finally:
            torch.set_num_threads(1)
        assert all(torch.equal(out, outs[0]) for out in outs[1:])
        want = REFERENCE.experts(experts, batch)
        assert float((outs[0] - want).abs().max() / want.abs().max()) < 1e-5


@pytest.mark.parametrize(
    "counts, threads",
    [([2, 0, 3, 1, 0, 0, 5, 1], 2), ([0, 0, 1, 0], 4), ([1, 1, 1, 1], 8), ([7, 7, 7], 3), ([0, 9, 0, 0, 9], 2),
     ([100, 1, 1, 1, 1], 2), ([1] * 64, 3), ([100, 0, 1, 1], 3), ([0, 0, 5, 0, 0, 5, 0], 2), ([3, 0, 0], 2)],
)
def test_chunks_are_contiguous_cover_every_slot_and_each_holds_work(counts, threads):
    cuts = chunk_cuts(counts, threads)
    busy = sum(1 for n in counts if n)
    assert cuts[0] == 0 and cuts[-1] == len(counts)
    assert cuts == sorted(cuts) and len(set(cuts)) == len(cuts)
    assert len(cuts) - 1 == min(threads, busy)
    for lo, hi in zip(cuts, cuts[1:]):
        assert any(counts[lo:hi]), f"chunk [{lo}, {hi}) of {counts} has no rows"


def test_chunks_balance_cost_not_slot_count():
    # one heavy slot then a few light ones: the first chunk stops right after the heavy slot
    assert chunk_cuts([200] + [1] * 4, 2) == [0, 1, 5]
    # a light slot still streams its weights: 16 light slots outweigh one of 200 rows
    assert chunk_cuts([200] + [1] * 16, 2) == [0, 3, 17]
    # equal slots: halves
    assert chunk_cuts([4] * 8, 2) == [0, 4, 8]
    # a heavy last slot gets a chunk of its own
    assert chunk_cuts([1, 1, 100], 2) == [0, 2, 3]
    # boundaries sit right after a non-empty slot: no chunk of empty slots only
    assert chunk_cuts([100, 0, 1, 1], 3) == [0, 1, 3, 4]
    assert FIXED_ROW_COST > 0


@needs_packing
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_any_thread_count_gives_the_same_bits_and_matches_the_reference(act):
    torch.manual_seed(1)
    S, H, Il = 8, 40, 24  # odd sizes: no alignment assumptions
    experts = packed_experts(S, H, Il, act)
    for counts in ([2, 0, 3, 1, 0, 0, 5, 1], [0, 0, 0, 4, 0, 0, 0, 0], [1] * 8, [30, 0, 0, 0, 0, 0, 0, 2]):
        x = torch.randn(sum(counts), H)
        outs = [run_packed(x, counts, experts.kernel_state.packed13, experts.kernel_state.packed2, Il, act, t) for t in (1, 2, 3, 8)]
        for out in outs[1:]:
            assert torch.equal(out, outs[0])
        ref = experts_reference(x, torch.tensor(counts), experts.w13, experts.w2, ACTIVATIONS[act])
        assert float((outs[0] - ref).abs().max() / ref.abs().max()) < 1e-5


@needs_packing
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_the_activation_gives_the_same_bits_at_any_intra_op_thread_count(act):
    """Rows x Il far above torch's elementwise grain, odd widths: the activation runs in row blocks
    below the grain, so OpenMP ranges never cut a row (kernels/cpu/step_threads.py relies on it)."""
    torch.manual_seed(2)
    S, H, Il = 2, 16, 100
    experts = packed_experts(S, H, Il, act)
    counts = [1001, 499]
    assert counts[0] * Il > ELEMENTWISE_GRAIN
    x = torch.randn(sum(counts), H) * 4
    try:
        outs = []
        for threads in (1, 2, 3, 5):
            torch.set_num_threads(threads)
            outs.append(run_packed(x, counts, experts.kernel_state.packed13, experts.kernel_state.packed2, Il, act))
    finally:
        torch.set_num_threads(1)
    for out in outs[1:]:
        assert torch.equal(out, outs[0])


def test_the_scripted_block_size_is_the_grain():
    import inspect

    assert f"max(1, {ELEMENTWISE_GRAIN - 1} // Il)" in inspect.getsource(expert_threads._slots)


@needs_packing
def test_grouped_experts_uses_its_threads_and_the_result_does_not_depend_on_them():
    torch.manual_seed(2)
    S, H, Il = 6, 32, 48
    experts = packed_experts(S, H, Il)
    counts = torch.tensor([3, 0, 17, 1, 0, 9])
    batch = ExpertBatch(torch.randn(int(counts.sum()), H), torch.cumsum(counts, 0).to(torch.int32), counts)
    experts.kernels.expert_threads = 1
    serial = experts(batch)
    experts.kernels.expert_threads = 2
    assert torch.equal(experts(batch), serial)


@needs_packing
def test_the_eager_fallback_gives_the_same_bits(monkeypatch):
    torch.manual_seed(3)
    experts = packed_experts(5, 24, 16)
    counts = [4, 0, 1, 6, 2]
    x = torch.randn(sum(counts), 24)
    scripted = run_packed(x, counts, experts.kernel_state.packed13, experts.kernel_state.packed2, 16, "silu", 2)
    monkeypatch.setattr(expert_threads._split_scripted, "compiled", expert_threads._split)  # plain Python
    assert torch.equal(run_packed(x, counts, experts.kernel_state.packed13, experts.kernel_state.packed2, 16, "silu", 2), scripted)


def drive(chooser: SplitChooser, rows: int, calls: int, serial_s: float, split_s: float) -> list[bool]:
    """Run `calls` calls through the chooser with fixed timings; -> which way each call went."""
    ways = []
    for _ in range(calls):
        split = chooser.split(rows)
        chooser.record(rows, split, split_s if split else serial_s)
        ways.append(split)
    return ways


def test_the_chooser_settles_on_the_faster_way_and_keeps_probing_the_other():
    P, probes = SplitChooser.PERIOD, SplitChooser.PROBES
    chooser = SplitChooser()
    ways = drive(chooser, 16, 3 * P, serial_s=2.0, split_s=1.0)
    assert ways[:probes] == [False] * probes and ways[probes : 2 * probes] == [True] * probes
    assert all(ways[2 * probes : P])  # split is faster: used between probes
    assert ways[P : P + probes] == [False] * probes  # ...and serial is probed again every period

    ways = drive(chooser, 16, 3 * P, serial_s=1.0, split_s=3.0)  # the machine got busy: split now loses
    assert sum(ways) <= 3 * probes + 2  # back to serial within a probe or two
    assert not any(ways[-P + 2 * probes :])


def test_the_chooser_decides_per_size_bucket():
    chooser = SplitChooser()
    small = drive(chooser, 3, 2 * SplitChooser.PERIOD, serial_s=1.0, split_s=2.0)
    big = drive(chooser, 300, 2 * SplitChooser.PERIOD, serial_s=2.0, split_s=1.0)
    tail = slice(-SplitChooser.PERIOD + 2 * SplitChooser.PROBES, None)
    assert not any(small[tail]) and all(big[tail])


@needs_packing
def test_grouped_experts_time_both_ways_only_when_given_threads():
    torch.manual_seed(4)
    experts = packed_experts(4, 16, 8)
    counts = torch.tensor([2, 1, 0, 3])
    batch = ExpertBatch(torch.randn(6, 16), torch.cumsum(counts, 0).to(torch.int32), counts)
    ref = experts(batch)
    assert experts.kernel_state.chooser.stats == {}  # threads == 1: nothing to choose
    experts.kernels.expert_threads = 2
    for _ in range(2 * SplitChooser.PROBES + 1):
        assert torch.equal(experts(batch), ref)
    calls, serial, split = experts.kernel_state.chooser.stats[(6).bit_length()]
    assert calls == 2 * SplitChooser.PROBES + 1 and serial > 0 and split > 0


def _occupy(w: torch.Tensor, n: int) -> torch.Tensor:
    y = w
    for _ in range(n):
        y = torch.tanh(y @ w)
    return y


@torch.jit.script
def _occupy_pool(w: torch.Tensor, n: int, k: int) -> List[torch.jit.Future[torch.Tensor]]:
    """k forks of a long loop onto the inter-op pool (a fork from eager Python would run in place)."""
    return [torch.jit.fork(_occupy, w, n) for _ in range(k)]


@pytest.mark.slow
@needs_packing
def test_a_chunk_whose_thread_is_busy_is_run_by_the_caller_instead_of_waited_for():
    """Every inter-op thread busy (as a lent helper is while its core runs the front end): the forked
    chunks are taken back by the calling thread, the call returns before the pool frees up, and the
    bits are those of the serial loop. Both forked loops: the experts and the column-split linears."""
    from moeserve.kernels.cpu.split_linear import SplitLinear

    experts = packed_experts(8, 64, 32)
    x = torch.randn(40, 64)
    counts = [5] * 8
    serial = run_packed(x, counts, experts.kernel_state.packed13, experts.kernel_state.packed2, 32, "silu", threads=1)
    weight = torch.randn(512, 64)
    split = SplitLinear.create(weight, None, gemm.pack_weight(weight), 4)
    assert split is not None
    rows = torch.randn(8, 64)
    whole = gemm.linear(rows, weight, None, gemm.pack_weight(weight))
    w = torch.randn(256, 256) / 16
    busy = _occupy_pool(w, 4000, torch.get_num_interop_threads())
    got = run_packed(x, counts, experts.kernel_state.packed13, experts.kernel_state.packed2, 32, "silu", threads=4)
    got_split = split.run(rows, None)
    still_busy = not any(f.done() for f in busy)
    for f in busy:
        f.wait()  # (torch.jit.wait from eager Python blocks for good on a pending future)
    assert still_busy  # no forked chunk was waited for: every pool thread was still on its long loop
    assert torch.equal(got, serial) and torch.equal(got_split, whole)
