"""Runtime replica choice: own-rank preference, even split otherwise, torch path equals numpy."""
from __future__ import annotations

import numpy as np

from moeserve.placement.plan import PlacementPlan
from moeserve.placement.routing import ReplicaTable, choose_slots


def _plan():
    # 3 ranks x 2 slots: expert 0 on every rank, expert 1 on ranks 0 and 2
    return PlacementPlan.from_phy2log(np.array([[0, 1, 0, 2, 0, 1]]), 3, 3).validate()


def test_own_rank_replica_first_then_round_robin():
    plan = _plan()
    table = ReplicaTable.from_plan(plan, 0)
    topk = np.array([[0, 1], [0, 1], [2, -1], [1, 0], [1, 2]])
    src = np.array([1, 2, 0, 1, 1])
    slots = choose_slots(table, topk, src)
    rank = plan.slot_rank()
    assert (rank[slots[:2, 0]] == src[:2]).all()  # expert 0 is local everywhere
    assert slots[2, 1] == -1
    assert plan.phy2log[0][slots[slots >= 0]].tolist() == topk[topk >= 0].tolist()
    # rank 1 has no copy of expert 1: its three requests alternate over slots 1 and 5 in token order
    # (round-robin starts at replica src_rank mod replicas = 1)
    assert slots[[0, 3, 4], [1, 0, 0]].tolist() == [5, 1, 5]
    assert slots[1, 1] == 5  # rank 2 uses its own copy


def test_even_split_over_remote_replicas():
    plan = PlacementPlan.from_phy2log(np.array([[0, 0, 0, 1]]), 2, 4).validate()
    table = ReplicaTable.from_plan(plan, 0)
    topk = np.zeros((300, 1), np.int64)
    slots = choose_slots(table, topk, np.full(300, 3))  # rank 3 holds only expert 1
    np.testing.assert_array_equal(np.bincount(slots[:, 0], minlength=4), [100, 100, 100, 0])


def test_torch_matches_numpy():
    import torch

    from moeserve.placement import routing_torch

    rng = np.random.default_rng(0)
    phy2log = np.concatenate([np.arange(16), rng.integers(0, 16, 8)])[None]
    plan = PlacementPlan.from_phy2log(phy2log, 16, 4).validate()
    table = ReplicaTable.from_plan(plan, 0)
    topk = rng.integers(-1, 16, (64, 4))
    src = rng.integers(0, 4, 64)
    want = choose_slots(table, topk, src)
    got = routing_torch.choose_slots(routing_torch.TorchReplicaTable(table), torch.tensor(topk), torch.tensor(src))
    np.testing.assert_array_equal(got.numpy(), want)


def test_single_token_batches_from_different_ranks_use_different_replicas():
    plan = PlacementPlan.from_phy2log(np.array([[0, 1, 0, 2, 3, 4, 5, 6]]), 7, 4).validate()
    table = ReplicaTable.from_plan(plan, 0)  # expert 0 on ranks 0 and 1; ranks 2, 3 hold none
    picks = [int(choose_slots(table, np.array([[0]]), np.array([r]))[0, 0]) for r in (2, 3)]
    assert sorted(picks) == [0, 2]
