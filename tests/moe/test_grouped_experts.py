"""Grouped-GEMM experts vs the per-slot loop, tp-sharded experts vs unsharded, and the MoE layer
(with LocalDispatcher, shared expert, replicas) vs a plain dense-einsum reference."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from moeserve.dense.linear import ReplicatedLinear
from moeserve.dispatch.base import ExpertBatch
from moeserve.dispatch.local import LocalDispatcher
from moeserve.models.checkpoint import CheckpointReader
from moeserve.models.expert_loading import load_experts
from moeserve.kernels.reference.experts import experts_grouped, experts_reference, grouped_mm_supported
from moeserve.moe.experts import GroupedExperts
from moeserve.moe.layer import MoELayer
from moeserve.moe.router import SoftmaxTopKRouter
from moeserve.parallel_state import ParallelContext

E, H, I, K = 8, 32, 24, 2


def random_batch(counts: list[int], hidden: int, dtype=torch.float32) -> ExpertBatch:
    c = torch.tensor(counts, dtype=torch.int64)
    x = torch.randn(int(c.sum()), hidden, dtype=dtype)
    return ExpertBatch(hidden=x, offsets=torch.cumsum(c, 0).to(torch.int32), counts=c)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 2e-2)])
def test_grouped_mm_equals_loop(dtype, tol):
    torch.manual_seed(0)
    assert grouped_mm_supported(H, I, dtype)
    batch = random_batch([3, 0, 5, 1, 0, 7, 2, 4], H, dtype)
    w13 = torch.randn(E, 2 * I, H, dtype=dtype) * 0.1
    w2 = torch.randn(E, H, I, dtype=dtype) * 0.1
    act = torch.nn.functional.silu
    ref = experts_reference(batch.hidden, batch.counts, w13, w2, act).float()
    fast = experts_grouped(batch.hidden, batch.offsets, w13, w2, act).float()
    assert (fast - ref).abs().max() <= tol * ref.abs().max()


def test_unaligned_shapes_fall_back_to_loop_and_empty_batch():
    assert not grouped_mm_supported(30, 24, torch.float32)
    experts = GroupedExperts(4, 30, 24, torch.float32)
    assert not experts.use_grouped_mm
    torch.nn.init.normal_(experts.w13, std=0.1)
    torch.nn.init.normal_(experts.w2, std=0.1)
    batch = random_batch([2, 0, 3, 1], 30)
    ref = experts_reference(batch.hidden, batch.counts, experts.w13, experts.w2, experts.act)
    assert torch.equal(experts(batch), ref)
    empty = random_batch([0, 0, 0, 0], 30)
    assert experts(empty).shape == (0, 30)


def test_large_batches_take_the_loop(monkeypatch):
    """Above LOOP_ROWS_PER_SLOT rows per slot on average the loop runs (bit-equal to the reference);
    at or below it grouped_mm does (equal to rounding)."""
    import moeserve.kernels.reference.experts as experts_module

    torch.manual_seed(0)
    experts = GroupedExperts(E, H, I, torch.float32)
    assert experts.use_grouped_mm
    torch.nn.init.normal_(experts.w13, std=0.1)
    torch.nn.init.normal_(experts.w2, std=0.1)
    batch = random_batch([3, 0, 5, 1, 0, 7, 2, 4], H)  # 22 rows, 2.75 per slot
    ref = experts_reference(batch.hidden, batch.counts, experts.w13, experts.w2, experts.act)
    monkeypatch.setattr(experts_module, "LOOP_ROWS_PER_SLOT", 2)
    assert torch.equal(experts(batch), ref)
    monkeypatch.setattr(experts_module, "LOOP_ROWS_PER_SLOT", 3)
    grouped = experts_grouped(batch.hidden, batch.offsets, experts.w13, experts.w2, experts.act)
    assert torch.equal(experts(batch), grouped)


def write_expert_checkpoint(path, gen) -> dict[str, torch.Tensor]:
    tensors = {}
    for e in range(E):
        tensors[f"m.experts.{e}.gate_proj.weight"] = torch.randn(I, H, generator=gen) * 0.1
        tensors[f"m.experts.{e}.up_proj.weight"] = torch.randn(I, H, generator=gen) * 0.1
        tensors[f"m.experts.{e}.down_proj.weight"] = torch.randn(H, I, generator=gen) * 0.1
    save_file(tensors, str(path / "model.safetensors"))
    return tensors


def make_moe(ctx: ParallelContext, **kw) -> MoELayer:
    return MoELayer(
        ReplicatedLinear(H, E, False, torch.float32), SoftmaxTopKRouter(K, True), E, H, I, ctx, torch.float32, **kw
    )


def test_tp_sharded_experts_sum_to_unsharded(tmp_path):
    gen = torch.Generator().manual_seed(3)
    write_expert_checkpoint(tmp_path, gen)
    batch = random_batch([2, 1, 0, 4, 3, 0, 1, 5], H)
    outs = []
    for tp, rank in [(1, 0), (2, 0), (2, 1), (4, 0), (4, 1), (4, 2), (4, 3)]:
        moe = make_moe(ParallelContext(tp_size=tp, tp_rank=rank))
        reader = CheckpointReader(tmp_path, progress=False)
        load_experts(reader, moe, "m")
        reader.finish()
        assert moe.experts.w13.shape == (E, 2 * I // tp, H)
        outs.append(moe.experts(batch))
    full = outs[0]
    assert torch.allclose(outs[1] + outs[2], full, atol=1e-6)
    assert torch.allclose(sum(outs[3:]), full, atol=1e-6)


def test_expert_parallel_rank_holds_its_slots(tmp_path):
    tensors = write_expert_checkpoint(tmp_path, torch.Generator().manual_seed(4))
    moe = make_moe(ParallelContext(ep_size=4, ep_rank=2))
    reader = CheckpointReader(tmp_path, progress=False)
    load_experts(reader, moe, "m")
    reader.finish()  # other ranks' experts are claimed, so no "unused tensor" error
    assert moe.local_slot_experts() == [4, 5]
    assert torch.equal(moe.experts.w2[1], tensors["m.experts.5.down_proj.weight"])


def moe_reference(x, gate_w, w13, w2, shared=None):
    """gpt-fast style: T tokens, E experts, k top-k, H hidden, I intermediate."""
    probs = torch.softmax(x @ gate_w.T, dim=-1)  # [T, E]
    w, ids = probs.topk(K, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    gate, up = torch.einsum("th,tkih->tki", x, w13[ids]).chunk(2, dim=-1)  # [T, k, I]
    y = torch.einsum("tki,tkhi->tkh", torch.nn.functional.silu(gate) * up, w2[ids])  # [T, k, H]
    out = torch.einsum("tkh,tk->th", y, w)
    return out if shared is None else out + shared(x)


def filled_moe(ctx=ParallelContext(), **kw) -> MoELayer:
    torch.manual_seed(5)
    moe = make_moe(ctx, **kw)
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return moe


@pytest.mark.parametrize("num_tokens", [0, 1, 13])
def test_moe_layer_matches_reference(num_tokens):
    moe = filled_moe()
    x = torch.randn(num_tokens, H)
    out = moe(x, LocalDispatcher(E))
    ref = moe_reference(x, moe.gate.weight, moe.experts.w13, moe.experts.w2)
    assert out.shape == (num_tokens, H)
    assert torch.allclose(out, ref, atol=1e-5)


def test_moe_layer_shared_expert_with_sigmoid_gate():
    from moeserve.dense.mlp import GatedMLP

    ctx = ParallelContext()
    moe = filled_moe(
        ctx,
        shared_expert=GatedMLP(H, 16, "silu", ctx, torch.float32),
        shared_expert_gate=ReplicatedLinear(H, 1, False, torch.float32),
    )
    x = torch.randn(9, H)
    shared = lambda t: torch.sigmoid(moe.shared_expert_gate(t)) * moe.shared_expert(t)  # noqa: E731
    ref = moe_reference(x, moe.gate.weight, moe.experts.w13, moe.experts.w2, shared)
    assert torch.allclose(moe(x, LocalDispatcher(E)), ref, atol=1e-5)


def test_replicated_slots_give_identical_output():
    moe = filled_moe()
    x = torch.randn(11, H)
    expected = moe(x, LocalDispatcher(E))
    w13, w2 = moe.experts.w13.clone(), moe.experts.w2.clone()
    # 12 slots: experts 0..7, then replicas of 3, 3, 6, 0; tokens alternate between copies
    phy2log = list(range(E)) + [3, 3, 6, 0]
    replica = {3: [3, 8, 9], 6: [6, 10], 0: [0, 11]}

    def slot_map(ids: torch.Tensor) -> torch.Tensor:
        out = ids.clone()
        for t in range(ids.shape[0]):
            for j in range(ids.shape[1]):
                choices = replica.get(int(ids[t, j]), [int(ids[t, j])])
                out[t, j] = choices[t % len(choices)]
        return out

    moe.set_placement(phy2log, slot_map)
    for slot, e in enumerate(phy2log):
        moe.experts.w13.data[slot] = w13[e]
        moe.experts.w2.data[slot] = w2[e]
    assert torch.allclose(moe(x, LocalDispatcher(len(phy2log))), expected, atol=1e-6)


class _OfferingDispatcher(LocalDispatcher):
    """local, but offering a buffer of its own for the expert output, as shm's C++ path does."""

    def __init__(self, num_slots: int):
        super().__init__(num_slots)
        self.offered: list[torch.Tensor] = []
        self.combined: list[torch.Tensor] = []

    def expert_output(self, batch):
        self.offered.append(torch.full((batch.num_rows, batch.hidden.shape[1]), float("nan")))
        return self.offered[-1]

    def combine(self, expert_out, handle):
        self.combined.append(expert_out)
        return super().combine(expert_out, handle)


@pytest.mark.parametrize("num_tokens", [0, 13])
def test_experts_write_into_the_buffer_the_dispatcher_offers(num_tokens):
    moe = filled_moe()
    x = torch.randn(num_tokens, H)
    dispatcher = _OfferingDispatcher(E)
    out = moe(x, dispatcher)
    assert len(dispatcher.offered) == 1 and dispatcher.combined[0] is dispatcher.offered[0]
    assert not bool(dispatcher.offered[0].isnan().any())  # every row written
    assert torch.equal(out, moe(x, LocalDispatcher(E)))  # and the same output as without a buffer


def test_an_output_of_another_dtype_is_not_cast_into_the_buffer():
    moe = filled_moe()
    x = torch.randn(5, H)
    batch, _ = LocalDispatcher(E).dispatch(x, *moe.router(moe.gate(x)))
    buffer = torch.zeros(batch.num_rows, H, dtype=torch.bfloat16)
    y = moe.experts(batch, out=buffer)
    assert y is not buffer and y.dtype == torch.float32 and not bool(buffer.any())
    assert torch.equal(y, moe.experts(batch))


def test_biases_and_the_clamped_swiglu_match_gpt_oss_experts():
    """gpt-oss's experts (transformers' GptOssExperts: gate/up interleaved, biases, clamped SwiGLU) equal
    the grouped GEMMs and the per-slot loop over the same weights, de-interleaved into w13 / b13."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    from moeserve.kernels.base import REFERENCE
    from moeserve.moe.experts import ClampedSwiGLU

    torch.manual_seed(5)
    E, H, I, T = 4, 32, 16, 9
    hf = GptOssExperts(GptOssConfig(hidden_size=H, intermediate_size=I, num_local_experts=E, swiglu_limit=0.7))
    for p in hf.parameters():
        p.data.normal_(0, 0.4)
    x, ids = torch.randn(T, H), torch.randint(0, E, (T, 1))
    want = hf(x, ids, torch.ones(T, 1))
    experts = GroupedExperts(E, H, I, torch.float32, ClampedSwiGLU(hf.alpha, hf.limit), bias=True)
    for e in range(E):
        w, b = hf.gate_up_proj.data[e].t(), hf.gate_up_proj_bias.data[e]  # [2I, H] interleaved
        experts.set_slot(e, w[0::2], w[1::2], hf.down_proj.data[e].t(), (b[0::2], b[1::2], hf.down_proj_bias.data[e]))
    order = torch.argsort(ids[:, 0], stable=True)
    counts = torch.bincount(ids[:, 0], minlength=E)
    batch = ExpertBatch(x[order], torch.cumsum(counts, 0).to(torch.int32), counts)
    for use_grouped in (True, False):
        experts.use_grouped_mm = use_grouped
        got = torch.empty_like(x)
        got[order] = REFERENCE.experts(experts, batch)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
