"""Optimizer behaviour: beats contiguous and EPLB-style packing on skewed loads, keeps the current plan
when loads did not change, honours group locality floors, and uses co-activation."""
from __future__ import annotations

import numpy as np
import pytest

from moeserve.placement.baselines import eplb_global
from moeserve.placement.evaluate import experts_moved, home_share, score
from moeserve.placement.optimizer import PlacementSpec, optimize
from moeserve.placement.plan import PlacementPlan
from moeserve.placement.trace import TokenSample


def _skewed(rng, layers=4, experts=64):
    return rng.zipf(1.5, (layers, experts)).astype(float) + rng.random((layers, experts))


def test_beats_contiguous_and_eplb_on_skewed_loads():
    rng = np.random.default_rng(0)
    loads = _skewed(rng)
    ours = score(optimize(loads, PlacementSpec(8, 2, 8)), loads).balancedness
    plain = score(PlacementPlan.contiguous(4, 64, 8, 2), loads).balancedness
    eplb = score(eplb_global(loads, 8, 2, 8), loads).balancedness
    assert (ours > plain).all()
    # per layer it can lose where two hot experts have more replicas than there are ranks (EPLB then
    # stacks two replicas on one rank, we keep replicas apart), but not on average
    assert ours.mean() > eplb.mean()


def test_scenarios_hedge_against_drift():
    """A plan from several workloads stays balanced on each of them better than one from their sum."""
    rng = np.random.default_rng(1)
    base = rng.lognormal(0.0, 1.0, (2, 64))
    scenarios = base * rng.lognormal(0.0, 0.5, (4, 2, 64))  # four workloads drifting around one skew
    scenarios /= scenarios.sum(axis=2, keepdims=True)
    robust = optimize(scenarios, PlacementSpec(8, 1, 8))
    summed = eplb_global(scenarios.sum(axis=0), 8, 1, 8)
    worst = lambda plan: min(score(plan, s).balancedness.min() for s in scenarios)  # noqa: E731
    assert worst(robust) > worst(summed) + 0.1


def test_current_plan_with_same_loads_moves_nothing():
    rng = np.random.default_rng(2)
    loads = _skewed(rng)
    spec = PlacementSpec(8, 2, 8)
    current = optimize(loads, spec)
    again = optimize(loads, spec, current=current)
    assert experts_moved(again, current) == 0
    # a small change in load keeps most slots
    nudged = optimize(loads * rng.uniform(0.97, 1.03, loads.shape), spec, current=current)
    assert experts_moved(nudged, current) < 0.25 * current.phy2log.size
    # relabelling never changes balance
    fresh = optimize(loads * 3.0 + _skewed(rng), spec)
    aligned = optimize(loads * 3.0 + _skewed(rng), spec, current=fresh)
    assert experts_moved(aligned, fresh) <= experts_moved(fresh, current)


@pytest.mark.parametrize("floor", [1.0, 0.7])
def test_group_locality_floor(floor):
    rng = np.random.default_rng(3)
    loads = _skewed(rng, 3, 64)
    spec = PlacementSpec(8, 4, 8, num_groups=8, home_share=floor)
    plan = optimize(loads, spec).validate()
    assert home_share(plan, loads, 8).min() >= floor - 1e-9
    if floor == 1.0:
        group_nodes = [{int(n) for n in plan.slot_node()[plan.phy2log[l] // 8 == g]} for l in range(3) for g in range(8)]
        assert all(len(nodes) == 1 for nodes in group_nodes)


def test_lower_floor_balances_nodes_better():
    rng = np.random.default_rng(4)
    loads = _skewed(rng, 3, 64)
    node = [score(optimize(loads, PlacementSpec(8, 4, 8, 8, f)), loads).node_balancedness.mean() for f in (1.0, 0.5)]
    assert node[1] > node[0]


def test_coactivation_reduces_fan_out():
    rng = np.random.default_rng(5)
    # experts pair up (0,1), (2,3), ...: tokens mostly use a pair
    first = rng.integers(0, 4, 2000) * 2
    topk = np.stack([first, np.where(rng.random(2000) < 0.8, first + 1, rng.integers(0, 8, 2000))], axis=1)
    topk[topk[:, 0] == topk[:, 1], 1] = (topk[topk[:, 0] == topk[:, 1], 1] + 1) % 8
    tokens = TokenSample(np.zeros(2000, np.int32), topk.astype(np.int32), np.full(2000, -1, np.int32), np.arange(2000))
    loads = np.bincount(topk.ravel(), minlength=8)[None].astype(float)
    spec = PlacementSpec(4, 1, 4)
    plain = score(optimize(loads, spec), loads, tokens)
    co = score(optimize(loads, spec, pairs=tokens.coactivation(1, 8)), loads, tokens)
    assert co.gpus_per_token < plain.gpus_per_token
    assert co.balancedness[0] >= plain.balancedness[0] / (1 + spec.coactivation_slack) - 1e-9


def test_rejects_shapes_that_do_not_fit():
    with pytest.raises(ValueError, match="multiple of --ep"):
        optimize(np.ones((1, 10)), PlacementSpec(4, 1, 1))
