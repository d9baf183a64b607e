"""Single-process tests: the local oracle against a per-token loop, wire packing, send planning,
the registry and auto's choice rule."""
from __future__ import annotations

import pytest
import torch

from moeserve.dispatch import LocalDispatcher, dispatcher_names, make_dispatcher
from moeserve.dispatch.a2a import plan_sends
from moeserve.dispatch.base import check_routing, routing_error, sum_in_position_order
from moeserve.dispatch.registry import AutoDispatcher
from moeserve.dispatch.wire import Column, pack_rows, unpack_rows
from moeserve.parallel_state import ParallelContext


def _loop_moe(hidden, ids, weights, scale):
    """Per-token reference: out[t] = sum_j w[t, j] * scale[ids[t, j]] * hidden[t] in fp32, j order."""
    out = torch.zeros(hidden.shape, dtype=torch.float32)
    for t in range(hidden.shape[0]):
        for j in range(ids.shape[1]):
            if ids[t, j] >= 0:
                out[t] += weights[t, j].float() * (hidden[t].float() * scale[ids[t, j]])
    return out


@pytest.mark.parametrize("T", [0, 1, 13])
def test_local_matches_loop(T: int) -> None:
    g = torch.Generator().manual_seed(T)
    E, k, H = 5, 3, 8
    hidden = torch.randn(T, H, generator=g)
    ids = torch.randint(-1, E, (T, k), generator=g)
    weights = torch.rand(T, k, generator=g)
    scale = torch.rand(E, generator=g) + 0.5
    disp = LocalDispatcher(E)
    batch, handle = disp.dispatch(hidden, ids, weights)
    assert torch.equal(batch.counts, torch.bincount(ids[ids >= 0], minlength=E))
    assert batch.offsets.dtype == torch.int32 and int(batch.offsets[-1]) == batch.num_rows
    slots = torch.repeat_interleave(torch.arange(E), batch.counts)
    out = disp.combine(batch.hidden * scale[slots, None], handle)
    torch.testing.assert_close(out, _loop_moe(hidden, ids, weights, scale), rtol=1e-6, atol=1e-6)


def test_routing_errors() -> None:
    assert routing_error(torch.tensor([[0, -1]]), 2) is None
    assert "[-1, 2)" in routing_error(torch.tensor([[0, 2]]), 2)
    assert "[-1, 2)" in routing_error(torch.tensor([[-2, 0]]), 2)
    assert "integers" in routing_error(torch.tensor([[0.0]]), 2)
    with pytest.raises(ValueError):
        check_routing(torch.tensor([[5]]), 2)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_wire_roundtrip_is_bitwise(n: int) -> None:
    # an odd-width int8 column first leaves the later columns at unaligned byte offsets
    parts = [
        torch.randint(-1, 9, (n, 3), dtype=torch.int8),
        torch.randn(n, 4).to(torch.bfloat16),
        torch.randint(-1, 9, (n, 2), dtype=torch.int32),
        torch.rand(n, 2),
    ]
    cols = [Column(p.dtype, p.shape[1]) for p in parts]
    packed = pack_rows(parts)
    assert packed.dtype == torch.uint8 and packed.shape == (n, 3 + 8 + 8 + 8)
    for got, want in zip(unpack_rows(packed, cols), parts):
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_plan_sends_one_row_per_token_and_rank() -> None:
    # 2 ranks x 2 slots: token 0 -> slots 0, 1 (rank 0 twice), token 1 -> slots 3, -1, token 2 -> 2, 0
    ids = torch.tensor([[0, 1], [3, -1], [2, 0]])
    plan = plan_sends(ids, slots_per_rank=2, world=2)
    assert plan.send_counts.tolist() == [2, 2]
    assert plan.token_idx.tolist() == [0, 2, 1, 2]  # rank-major, tokens ascending
    assert plan.local_slots.tolist() == [[0, 1], [-1, 0], [1, -1], [0, -1]]
    assert plan.send_pos.tolist() == [0 * 2 + 0, 2 * 2 + 1, 1 * 2 + 0, 2 * 2 + 0]


def test_sum_in_position_order_follows_positions() -> None:
    rows = torch.tensor([[1.0], [1e8], [-1e8]])
    # token 0 positions: 0 -> 1e8, 1 -> -1e8, 2 -> 1.0; (1e8 - 1e8) + 1 = 1 exactly, other orders lose the 1
    out = sum_in_position_order(rows, torch.tensor([2, 0, 1]), num_tokens=1, top_k=3, out_dtype=torch.float32)
    assert out.item() == 1.0


def test_registry_names_and_errors() -> None:
    assert dispatcher_names() == ["local", "a2a", "a2a_ll", "agrs", "shm", "nvshmem", "hier", "auto"]
    with pytest.raises(ValueError, match="local, a2a, a2a_ll, agrs, shm, nvshmem, hier, auto"):
        make_dispatcher("nccl-magic", 4, ParallelContext())
    assert isinstance(make_dispatcher("auto", 4, ParallelContext()), LocalDispatcher)
    with pytest.raises(ValueError, match="ep_size > 1"):
        make_dispatcher("a2a", 4, ParallelContext())
    for one_sided in ("shm", "nvshmem", "hier"):
        with pytest.raises(ValueError, match="ep_size > 1"):
            make_dispatcher(one_sided, 4, ParallelContext())
    with pytest.raises(ValueError, match="'hier' needs an ep group over several nodes"):
        make_dispatcher("hier", 4, ParallelContext(ep_size=2))
    with pytest.raises(ValueError, match="ep_size is 2"):
        make_dispatcher("local", 4, ParallelContext(ep_size=2))
    with pytest.raises(ValueError, match="split evenly"):
        make_dispatcher("a2a", 5, ParallelContext(ep_size=2))


def test_auto_rule_uses_only_global_values() -> None:
    """auto's rule across hosts (one_sided=False: on one host it builds shm, test_dispatch_multirank)."""
    auto = make_dispatcher("auto", 16, ParallelContext(ep_size=2), tiny_tokens=8, one_sided=False)
    assert isinstance(auto, AutoDispatcher)
    assert auto.choose(top_k=2, max_tokens=8) is auto.agrs  # tiny step on two ranks
    assert auto.choose(top_k=2, max_tokens=9) is auto.a2a
    assert auto.choose(top_k=2, max_tokens=None) is auto.a2a  # no global bound: never guess
    assert auto.choose(top_k=8, max_tokens=1000) is auto.a2a  # ep <= top_k no longer implies agrs
    wide = make_dispatcher("auto", 16, ParallelContext(ep_size=4), one_sided=False)
    assert wide.choose(top_k=2, max_tokens=1) is wide.a2a  # a2a measured faster at every size on 4 ranks
    opened = make_dispatcher("auto", 16, ParallelContext(ep_size=4), agrs_max_ranks=4, one_sided=False)
    assert opened.choose(top_k=2, max_tokens=1) is opened.agrs


@pytest.mark.parametrize("n", [0, 4])
def test_pack_rows_gathers_by_index(n: int) -> None:
    hidden, weights = torch.randn(3, 5).to(torch.bfloat16), torch.rand(3, 2)
    slots = torch.randint(-1, 4, (n, 2), dtype=torch.int8)
    rows = torch.randint(0, 3, (n,))
    packed = pack_rows([hidden, slots, weights], index=[rows, None, rows])
    got = unpack_rows(packed, [Column(torch.bfloat16, 5), Column(torch.int8, 2), Column(torch.float32, 2)])
    for g, want in zip(got, [hidden[rows], slots, weights[rows]]):
        assert torch.equal(g, want)
