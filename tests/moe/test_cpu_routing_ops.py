"""The cpu set's C++ routing ops (kernels/cpu/small_ops.py) against the torch ops they replace: the router's
softmax + top-k (ties included: torch.topk's order), the local dispatcher's gather and combine, and the
fused MoE path of a layer against dispatch -> experts -> combine."""

from __future__ import annotations

import pytest
import torch

from moeserve.dispatch.base import weighted_sum_fixed_order
from moeserve.dispatch.local import LocalDispatcher, expert_batch, sorted_by_slot
from moeserve.kernels.base import KernelSet, bind_kernels
from moeserve.kernels.cpu import small_ops
from moeserve.kernels.cpu.kernel_set import CpuKernels
from moeserve.moe.experts import GroupedExperts
from moeserve.moe.router import SoftmaxTopKRouter

needs_kernel = pytest.mark.skipif(not small_ops.available(), reason="C++ CPU kernels not available here")


@needs_kernel
@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("T, E, k", [(8, 8, 2), (1, 8, 1), (5, 60, 4), (3, 64, 8), (7, 128, 8), (4, 3, 3), (0, 8, 2)])
def test_softmax_topk_matches_torch(renormalize, T, E, k):
    torch.manual_seed(T + E + k)
    logits = torch.randn(T, E) * 2
    ids, w = small_ops.softmax_topk(logits, k, renormalize)
    ref_ids, ref_w = KernelSet().softmax_topk(logits, k, renormalize)
    assert ids.dtype == torch.int64 and w.dtype == torch.float32
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(w, ref_w, rtol=1e-6, atol=1e-7)


@needs_kernel
@pytest.mark.parametrize("E, k", [(8, 2), (60, 4), (64, 8), (128, 8)])
def test_ties_break_as_torch_topk(E, k):
    # integer-valued logits: many equal probabilities, at the k-th place and inside the top k; and
    # all-equal rows, where torch.topk's order for E = 60 or 128 is not the index order
    torch.manual_seed(E)
    logits = torch.cat([torch.randint(0, 3, (16, E)).float(), torch.zeros(2, E), torch.full((1, E), 5.0)])
    logits[3, :k + 1] = 7.0
    ids, w = small_ops.softmax_topk(logits, k, True)
    ref_ids, ref_w = KernelSet().softmax_topk(logits, k, True)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(w, ref_w, rtol=1e-6, atol=1e-7)


@needs_kernel
def test_other_dtypes_and_nan():
    logits = torch.randn(6, 8).bfloat16()
    assert torch.equal(small_ops.softmax_topk(logits, 2, True)[0], KernelSet().softmax_topk(logits, 2, True)[0])
    logits = torch.randn(2, 8)
    logits[1, 3] = float("nan")
    ids, _ = small_ops.softmax_topk(logits, 2, False)
    assert torch.equal(ids, KernelSet().softmax_topk(logits, 2, False)[0])


@needs_kernel
@pytest.mark.parametrize("T, H, S, k", [(8, 256, 8, 2), (1, 5, 4, 1), (13, 33, 7, 3), (4, 16, 60, 4)])
def test_gather_and_combine_match_the_local_dispatcher(T, H, S, k):
    torch.manual_seed(T * H)
    hidden = torch.randn(T, H)
    slots = torch.stack([torch.randperm(S)[:k] for _ in range(T)])
    slots[0] = slots[0].sort().values  # some tokens in slot order, some not
    weights = torch.rand(T, k)
    rows, row_pos, counts = small_ops.gather(hidden, slots, S)
    ref_pos, ref_counts = sorted_by_slot(slots, S)
    assert torch.equal(row_pos, ref_pos) and torch.equal(counts, ref_counts)
    assert torch.equal(rows, expert_batch(hidden, ref_pos, ref_counts, k).hidden)
    expert_out = torch.randn(T * k, H)
    assert torch.equal(small_ops.combine(expert_out, row_pos, weights),
                       weighted_sum_fixed_order(expert_out, row_pos, weights, torch.float32))


@needs_kernel
def test_gather_refuses_a_slot_out_of_range():
    with pytest.raises(RuntimeError, match="not in"):
        small_ops.gather(torch.randn(2, 4), torch.tensor([[0, 1], [2, -1]]), 3)
    with pytest.raises(RuntimeError, match="permutation"):
        small_ops.combine(torch.randn(4, 4), torch.tensor([0, 1, 1, 3]), torch.rand(2, 2))


@needs_kernel
@pytest.mark.parametrize("T", [1, 8, 40])
def test_fused_moe_matches_dispatch_experts_combine(T):
    torch.manual_seed(T)
    S, H, I, k = 8, 64, 96, 2
    experts = GroupedExperts(S, H, I, torch.float32)
    experts.w13.data.normal_(std=0.1)
    experts.w2.data.normal_(std=0.1)
    kernels = CpuKernels()
    bind_kernels(experts, kernels)
    hidden = torch.randn(T, H)
    router = SoftmaxTopKRouter(k, True)
    bind_kernels(router, kernels)
    slots, weights = router(torch.randn(T, S))
    fused = experts.fused(hidden, slots, weights)
    dispatcher = LocalDispatcher(S)
    batch, handle = dispatcher.dispatch(hidden, slots, weights, ids_valid=True)
    ref = dispatcher.combine(experts(batch), handle)
    assert fused is not None and torch.equal(fused, ref)


@needs_kernel
def test_prefill_sizes_give_the_same_bits_on_one_thread_or_two():
    # gather, combine, the norm and rotary split their rows over intra-op threads at these sizes
    torch.manual_seed(3)
    T, H, S, k = 700, 256, 8, 2
    x, r, w = torch.randn(T, H), torch.randn(T, H), torch.randn(H)
    slots, weights = torch.stack([torch.randperm(S)[:k] for _ in range(T)]), torch.rand(T, k)
    q, cos, sin = torch.randn(T, 12, 32), torch.randn(T, 32), torch.randn(T, 32)

    def run():
        rows, row_pos, counts = small_ops.gather(x, slots, S)
        return [*small_ops.rms_norm(x, w, 1e-5, r), small_ops.rms_norm(x, w, 1e-5), small_ops.rotary(q, cos, sin),
                rows, row_pos, small_ops.combine(rows, row_pos, weights)]

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run()
        torch.set_num_threads(2)
        two = run()
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(one, two))
