"""PlacementPlan invariants on random loads and shapes, JSON round trip, and validate() failures."""
from __future__ import annotations

import numpy as np
import pytest

from moeserve.placement.optimizer import PlacementSpec, optimize
from moeserve.placement.plan import PlacementPlan, PlanError


def _random_case(rng: np.random.Generator):
    ranks = int(rng.choice([1, 2, 4, 8]))
    nodes = int(rng.choice([n for n in (1, 2, 4) if ranks % n == 0]))
    experts = ranks * int(rng.integers(1, 5))
    redundant = ranks * int(rng.integers(0, 3))
    layers = int(rng.integers(1, 4))
    scenarios = int(rng.integers(1, 4))
    loads = rng.pareto(1.0, (scenarios, layers, experts)) * rng.integers(0, 2, (scenarios, layers, experts))
    return loads, PlacementSpec(ranks, nodes, redundant)


def test_random_plans_keep_every_invariant():
    rng = np.random.default_rng(0)
    for _ in range(40):
        loads, spec = _random_case(rng)
        plan = optimize(loads, spec).validate()
        s, l, e = loads.shape
        assert plan.phy2log.shape == (l, e + spec.num_redundant)
        assert (plan.replicas >= 1).all() and (plan.replicas.sum(axis=1) == plan.num_slots).all()
        if e * spec.num_ranks < plan.num_slots:
            continue  # more slots than (expert, rank) pairs: some replicas must share a rank
        for layer in range(l):  # replicas of one expert sit on distinct ranks
            rank = plan.slot_rank()
            pairs = {(int(plan.phy2log[layer, p]), int(rank[p])) for p in range(plan.num_slots)}
            assert len(pairs) == plan.num_slots


def test_log2phy_inverts_phy2log():
    plan = PlacementPlan.from_phy2log(np.array([[2, 0, 1, 0, 3, 0]]), 4, 3)
    plan.validate()
    assert plan.replicas.tolist() == [[3, 1, 1, 1]]
    assert plan.log2phy[0, 0].tolist() == [1, 3, 5] and plan.log2phy[0, 2].tolist() == [0, -1, -1]
    assert plan.slot_rank().tolist() == [0, 0, 1, 1, 2, 2]


def test_json_round_trip(tmp_path):
    plan = optimize(np.random.default_rng(3).random((2, 16)), PlacementSpec(4, 2, 4))
    plan = PlacementPlan.from_phy2log(plan.phy2log, 16, 4, 2, layer_ids=[3, 4])
    path = str(tmp_path / "plan.json")
    plan.save(path)
    back = PlacementPlan.load(path)
    np.testing.assert_array_equal(back.phy2log, plan.phy2log)
    np.testing.assert_array_equal(back.log2phy, plan.log2phy)
    assert (back.num_ranks, back.num_nodes, back.layer_ids) == (4, 2, (3, 4))


@pytest.mark.parametrize(
    "phy2log, ranks, nodes, message",
    [
        ([[0, 1, 1, 1]], 2, 1, "expert 2 has no slot"),
        ([[0, 1, 2, 3, 0]], 2, 1, "do not split evenly over 2 ranks"),
        ([[0, 1, 2, 3]], 4, 3, "do not split evenly over 3 nodes"),
        ([[0, 1, 2, 7]], 2, 1, "not in"),
    ],
)
def test_validate_names_the_broken_invariant(phy2log, ranks, nodes, message):
    with pytest.raises(PlanError, match=message):
        PlacementPlan.from_phy2log(np.array(phy2log), 4, ranks, nodes).validate()


def test_validate_catches_inconsistent_maps():
    plan = PlacementPlan.from_phy2log(np.array([[0, 1, 2, 3]]), 4, 2)
    broken = PlacementPlan(plan.phy2log, plan.log2phy[:, [1, 0, 2, 3]], plan.replicas, 2)
    with pytest.raises(PlanError, match="inverse"):
        broken.validate()


@pytest.mark.parametrize("text,message", [
    ("{not json", "is not valid JSON"),
    ("[1, 2, 3]", "must be a JSON object"),
    ("{}", "lacks the field"),
])
def test_a_bad_plan_file_is_named_in_a_clear_error(tmp_path, text, message):
    path = tmp_path / "plan.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        PlacementPlan.load(str(path))
    assert str(path) in str(info.value) and "Traceback" not in str(info.value)
