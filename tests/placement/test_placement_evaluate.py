"""Evaluator numbers on hand-computed cases, and the fewest-GPU cover against brute force."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from moeserve.placement.evaluate import experts_moved, home_share, min_cover, score
from moeserve.placement.plan import PlacementPlan
from moeserve.placement.trace import TokenSample


def _tokens(topk, rank=None):
    topk = np.asarray(topk, np.int32)
    rank = np.full(len(topk), -1, np.int32) if rank is None else np.asarray(rank, np.int32)
    return TokenSample(np.zeros(len(topk), np.int32), topk, rank, np.arange(len(topk)))


def test_hand_computed_balancedness_and_fan_out():
    loads = np.array([[4.0, 2.0, 1.0, 1.0]])
    plain = PlacementPlan.from_phy2log(np.array([[0, 1, 2, 3]]), 4, num_ranks=2, num_nodes=2)
    tokens = _tokens([[0, 1], [2, 3], [1, 3]])
    s = score(plain, loads, tokens)
    assert s.balancedness[0] == pytest.approx(4 / 6)  # rank loads 6 and 2
    assert s.node_balancedness[0] == pytest.approx(4 / 6)
    assert s.gpus_per_token == pytest.approx(4 / 3) and s.nodes_per_token == pytest.approx(4 / 3)
    # expert 0 on both ranks (2 + 2), expert 1 on both (1 + 1): ranks 2+1+1 and 2+1+1
    replicated = PlacementPlan.from_phy2log(np.array([[0, 1, 2, 0, 1, 3]]), 4, num_ranks=2, num_nodes=1)
    s = score(replicated, loads, tokens)
    assert s.balancedness[0] == pytest.approx(1.0)
    assert s.gpus_per_token == pytest.approx(4 / 3)  # (2, 3) still spans both ranks
    assert score(plain, loads, _tokens([[0, 3]])).gpus_per_token == 2
    assert score(replicated, loads, _tokens([[0, 3]])).gpus_per_token == 1  # rank 1 holds 0 and 3
    assert s.summary()["balancedness_min"] == pytest.approx(1.0)


def test_home_share_and_moves():
    loads = np.array([[3.0, 1.0, 2.0, 2.0]])
    plan = PlacementPlan.from_phy2log(np.array([[0, 2, 1, 3]]), 4, num_ranks=2, num_nodes=2)
    # groups {0,1} and {2,3}: group 0 has 3 on node 0 and 1 on node 1
    np.testing.assert_allclose(home_share(plan, loads, 2), [[0.75, 0.5]])
    other = PlacementPlan.from_phy2log(np.array([[0, 2, 3, 1]]), 4, 2, 2)
    assert experts_moved(plan, plan) == 0 and experts_moved(other, plan) == 2


def _brute_cover(has, experts):
    units = range(has.shape[1])
    for size in range(1, len(experts) + 1):
        for combo in itertools.combinations(units, size):
            if all(has[e, list(combo)].any() for e in experts):
                return size
    raise AssertionError


def test_min_cover_exact_for_top2_and_near_for_top4():
    rng = np.random.default_rng(0)
    for k in (2, 4):
        has = rng.random((8, 4)) < 0.4
        has[np.arange(8), rng.integers(0, 4, 8)] = True
        topk = np.stack([rng.choice(8, k, replace=False) for _ in range(200)])
        got = min_cover(has, topk)
        best = np.array([_brute_cover(has, t) for t in topk])
        assert (got >= best).all()
        if k == 2:
            np.testing.assert_array_equal(got, best)
        else:
            assert got.mean() <= best.mean() * 1.1
    assert min_cover(has, np.array([[-1, -1]])).tolist() == [0]
