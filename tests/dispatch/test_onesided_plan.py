"""The one-sided backend's vectorized math (onesided_plan.py) against its references, bit for bit:
plan_fanout vs a2a.plan_sends, expand_grid vs local.group_by_slot on the compacted rows, and
sum_in_j_order vs base.sum_in_position_order."""
from __future__ import annotations

import pytest
import torch

from moeserve.dispatch.a2a import plan_sends
from moeserve.dispatch.base import sum_in_position_order
from moeserve.dispatch.local import group_by_slot
from moeserve.dispatch.onesided_plan import expand_grid, plan_fanout, position_index, sum_in_j_order


def _shapes(seed: int):
    g = torch.Generator().manual_seed(seed)
    T, k, W, S = (int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in ((0, 20), (1, 4), (1, 5), (1, 4)))
    return g, T, k, W, S


@pytest.mark.parametrize("seed", range(40))
def test_plan_fanout_matches_plan_sends(seed: int) -> None:
    g, T, k, W, S = _shapes(seed)
    ids = torch.randint(-1, W * S, (T, k), generator=g).to(torch.int32 if seed % 2 else torch.int64)
    ref, got = plan_sends(ids, S, W), plan_fanout(ids, S, W, torch.int8)
    assert got.send_counts == ref.send_counts.tolist()
    for name in ("token_idx", "local_slots", "send_pos"):
        assert torch.equal(getattr(got, name), getattr(ref, name)), name
    assert torch.equal(got.dest, torch.repeat_interleave(torch.arange(W), ref.send_counts))
    assert torch.equal(got.row, torch.cat([torch.arange(n) for n in got.send_counts]) if T else got.row)


@pytest.mark.parametrize("seed", range(40))
def test_expand_grid_matches_group_by_slot_on_the_compacted_rows(seed: int) -> None:
    g, _, k, W, S = _shapes(seed)
    n = int(torch.randint(0, 6, (1,), generator=g))
    counts = [int(torch.randint(0, n + 1, (1,), generator=g)) for _ in range(W)]
    if n:
        counts[0] = n  # n is the largest count, as the dispatcher slices it
    grid = torch.randint(-1, S, (W, n, k), generator=g).to(torch.int8)
    before = grid.clone()
    row_pos, per_slot = expand_grid(grid, counts, S)
    assert torch.equal(grid, before)  # the heap's rows are read, never written
    ref_pos, ref_counts = group_by_slot(torch.cat([grid[s, : counts[s]] for s in range(W)]), S)
    assert torch.equal(per_slot, ref_counts)
    q, j = row_pos // k, row_pos % k  # grid row s * n + r -> compacted row offset[s] + r
    start = torch.tensor([sum(counts[:s]) for s in range(W)])
    assert torch.equal((start[q // max(n, 1)] + q % max(n, 1)) * k + j, ref_pos)


@pytest.mark.parametrize("seed", range(40))
def test_sum_in_j_order_matches_position_order(seed: int, monkeypatch) -> None:
    g, T, k, W, S = _shapes(seed)
    plan = plan_fanout(torch.randint(-1, W * S, (T, k), generator=g), S, W, torch.int8)
    terms = torch.randn(plan.send_pos.numel(), 6, generator=g)
    ref = sum_in_position_order(terms, plan.send_pos, T, k, torch.float32)
    rows = torch.cat([terms, torch.zeros(1, 6)])  # the zero row that absent positions name
    index = position_index(plan.send_pos, None, T, k, terms.shape[0])
    assert torch.equal(sum_in_j_order(rows, index), ref)
    strided = torch.empty(T, 12)[:, ::2]  # e.g. a fan-out view of peers' memory
    assert sum_in_j_order(rows, index, out=strided) is strided and torch.equal(strided, ref)
    monkeypatch.setattr("moeserve.dispatch.onesided_plan.DENSE_LIMIT", 0)  # the large-prefill branch
    assert torch.equal(sum_in_j_order(rows, index), ref)
