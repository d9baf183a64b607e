"""The placement optimizer: one pure function from routing loads to a `PlacementPlan`.

Shape legend: S load scenarios (input traces or windows), L MoE layers, E experts, P slots,
G ranks, N nodes, K expert groups.

Per layer:
  1. normalize each scenario to mean load 1 per expert, so every input counts equally;
  2. replicate: each redundant slot goes to the expert with the highest robust load per replica
     (robust = an upper quantile over the scenarios, not their mean: the hot expert of any one
     workload gets its replicas);
  3. pack slots onto ranks minimizing the worst rank's worst-scenario load (plus a variance hedge
     for drift the scenarios did not show), greedy then pairwise swaps (packing.py);
  4. optionally: keep expert groups near their home node (locality.py), put experts that serve
     the same tokens on one rank (coactivation.py), and reuse the current plan's slots (moves.py).
No I/O, no globals: the same inputs always give the same plan.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeserve.placement import coactivation, incremental, locality, moves, packing
from moeserve.placement.file_limits import MAX_SLOTS
from moeserve.placement.plan import PlacementPlan


@dataclass(frozen=True)
class PlacementSpec:
    num_ranks: int
    num_nodes: int = 1
    num_redundant: int = 0
    num_groups: int = 1  # expert groups of group-limited routing (DeepSeek: 8)
    home_share: float | None = None  # None: global; else floor on each group's load served on its home node
    replicate_quantile: float = 1.0  # robust load used to hand out replicas (1 = max over scenarios)
    hedge: float = 0.0  # weight of a drift hedge, in standard deviations of a rank's load (LOO: 0 scores best)
    max_swaps: int = 400  # per layer
    coactivation_slack: float = 0.02  # peak-load increase allowed to co-locate co-activated experts
    extrapolate: float = 0.5  # also plan for each scenario pushed this far beyond the scenarios' mean
    keep_tolerance: float = 0.002  # keep a current layer whose balancedness is within this of the new one

    def validate(self, num_experts: int) -> None:
        slots = num_experts + self.num_redundant
        if self.num_groups < 1:
            raise ValueError(f"expert groups must be >= 1, got {self.num_groups}")
        if slots > MAX_SLOTS:
            raise ValueError(f"{num_experts} experts + {self.num_redundant} redundant slots = {slots} slots per layer, "
                             f"more than {MAX_SLOTS}")
        if self.num_ranks < 1 or self.num_nodes < 1 or self.num_ranks % self.num_nodes:
            raise ValueError(f"{self.num_ranks} ranks do not split evenly over {self.num_nodes} nodes")
        if self.num_redundant < 0 or slots % self.num_ranks:
            raise ValueError(
                f"{num_experts} experts + {self.num_redundant} redundant slots = {slots} slots do not split evenly "
                f"over {self.num_ranks} ranks: pick --redundant so that experts + redundant is a multiple of --ep"
            )
        if num_experts % self.num_groups:
            raise ValueError(f"{num_experts} experts do not split into {self.num_groups} groups")
        if self.home_share is not None:
            if not 0.0 <= self.home_share <= 1.0:
                raise ValueError(f"home share floor must be in [0, 1], got {self.home_share}")
            if self.num_groups % self.num_nodes or slots % self.num_nodes or num_experts // self.num_nodes > slots // self.num_nodes:
                raise ValueError(
                    f"group locality needs the {self.num_groups} groups and {slots} slots to split evenly over "
                    f"{self.num_nodes} nodes"
                )


def normalize(loads: np.ndarray) -> np.ndarray:
    """Scenarios [S, L, E] scaled so each layer of each scenario has mean load 1 per expert."""
    loads = np.asarray(loads, dtype=np.float64)
    if loads.ndim == 2:
        loads = loads[None]
    total = loads.sum(axis=2, keepdims=True)
    return np.where(total > 0, loads * loads.shape[2] / np.where(total > 0, total, 1), 1.0)


def widen(x: np.ndarray, alpha: float) -> np.ndarray:
    """Scenarios [S, L, E] plus each one moved alpha further from their mean (clipped at 0): drift
    tends to continue in the direction workloads already differ in (longer prompts, longer outputs)."""
    if alpha <= 0 or len(x) < 2:
        return x
    mean = x.mean(axis=0, keepdims=True)
    return np.concatenate([x, np.maximum(mean + (1 + alpha) * (x - mean), 0.0)])


def replicate(robust: np.ndarray, num_slots: int, max_replicas: int) -> np.ndarray:
    """Replica counts [B, E] from robust loads [B, E]: each extra slot to argmax load/replicas (capped)."""
    reps = np.ones(robust.shape, np.int64)
    robust, rows = np.maximum(robust, 1e-9), np.arange(len(robust))
    for _ in range(num_slots - robust.shape[1]):
        score = np.where(reps < max_replicas, robust / reps, -np.inf)
        reps[rows, np.argmax(score, axis=1)] += 1
    return reps


def robust_load(x: np.ndarray, spec: PlacementSpec) -> np.ndarray:
    """Load [..., E] that replication plans for, from scenarios x [S, ..., E]."""
    return np.quantile(x, spec.replicate_quantile, axis=0) if len(x) > 1 else x[0]


def make_items(x: np.ndarray, reps: np.ndarray, spec: PlacementSpec) -> packing.Items:
    """Slot items [B, P] from scenarios x [S, B, E] and replica counts [B, E] (every row sums to P)."""
    b, e = reps.shape
    expert = np.stack([np.repeat(np.arange(e), reps[i]) for i in range(b)])  # [B, P]
    rows = np.arange(b)[:, None]
    per_replica = x / reps[None]  # [S, B, E]
    weight = np.moveaxis(per_replica[:, rows, expert], 0, -1)  # [B, P, S]
    var = np.zeros(expert.shape)
    if len(x) > 1 and spec.hedge:
        var = (x.std(axis=0) / reps)[rows, expert] ** 2
    return packing.Items(expert, weight, var)


def slots_from_ranks(expert: np.ndarray, rank_of: np.ndarray) -> np.ndarray:
    """phy2log rows [B, P]: slots of rank 0 first, experts ascending within a rank."""
    order = np.lexsort((expert, rank_of), axis=-1)
    return np.take_along_axis(expert, order, axis=-1)


def pack(items: packing.Items, num_ranks: int, spec: PlacementSpec) -> np.ndarray:
    """Rank of each item [B, n]: min-max greedy, then swap refinement."""
    rank_of = packing.greedy(items, num_ranks, spec.hedge)
    return packing.refine(items, rank_of, num_ranks, spec.hedge, spec.max_swaps)


def place_global(x: np.ndarray, spec: PlacementSpec) -> np.ndarray:
    """phy2log [L, P] from scenarios x [S, L, E], any slot on any rank."""
    reps = replicate(robust_load(x, spec), x.shape[2] + spec.num_redundant, spec.num_ranks)
    items = make_items(x, reps, spec)
    return slots_from_ranks(items.expert, pack(items, spec.num_ranks, spec))


def place_local(x: np.ndarray, spec: PlacementSpec) -> np.ndarray:
    """phy2log [L, P] keeping each expert group's load (mostly) on its home node."""
    s, num_layers, e = x.shape
    n, rpn = spec.num_nodes, spec.num_ranks // spec.num_nodes
    per_layer = [_node_items(x[:, l], spec) for l in range(num_layers)]  # (items [1, P], node_of [P])
    # slots of layer l, node j become problem l * N + j: every node has P / N slots, so one batch
    order = [np.argsort(node_of, kind="stable").reshape(n, -1) for _, node_of in per_layer]  # [N, P/N] each
    sub = packing.Items(*(
        np.concatenate([getattr(items, f)[0][o] for (items, _), o in zip(per_layer, order)])
        for f in ("expert", "weight", "var")
    ))  # [L*N, P/N]
    rank_in_node = pack(sub, rpn, spec)
    rank_of = rank_in_node + (np.arange(num_layers * n) % n)[:, None] * rpn
    return slots_from_ranks(sub.expert.reshape(num_layers, -1), rank_of.reshape(num_layers, -1))


def _node_items(x: np.ndarray, spec: PlacementSpec) -> tuple[packing.Items, np.ndarray]:
    """One layer's slot items [1, P] and the node of each [P]: groups on home nodes, replicated per
    node, then (home_share < 1) slots swapped between nodes within each group's away budget."""
    s, e = x.shape
    k, n = spec.num_groups, spec.num_nodes
    group_size, slots_per_node = e // k, (e + spec.num_redundant) // n
    home = locality.home_nodes(x.reshape(s, k, group_size).sum(axis=2), n)  # [K]
    node_of_expert = home[np.arange(e) // group_size]
    robust = robust_load(x, spec)
    reps = np.zeros(e, np.int64)
    for node in range(n):
        mine = node_of_expert == node
        reps[mine] = replicate(robust[mine][None], slots_per_node, spec.num_ranks // n)[0]
    items = make_items(x[:, None], reps[None], spec)
    node_of = node_of_expert[items.expert[0]]
    if spec.home_share < 1.0:
        group = items.expert[0] // group_size
        mean_w = items.weight[0].mean(axis=1)
        budget = (1.0 - spec.home_share) * np.bincount(group, weights=mean_w, minlength=k)
        home_budget = locality.HomeBudget(group, home, mean_w, budget, node_of)
        node_of = packing.refine(items, node_of[None], n, spec.hedge, spec.max_swaps, distinct=False, budget=home_budget)[0]
    return items, node_of


def row_balancedness(x: np.ndarray, row: np.ndarray, num_ranks: int) -> float:
    """Worst-scenario mean/max rank load of phy2log row [P] under scenarios x [S, E]."""
    peak = coactivation.peak_load(x, row, np.arange(len(row)) // (len(row) // num_ranks), num_ranks)
    return float(x.sum(axis=1).max() / num_ranks / peak) if peak > 0 else 1.0


def finish_layer(x: np.ndarray, row: np.ndarray, spec: PlacementSpec, pairs, current) -> np.ndarray:
    """Co-locate co-activated experts, then prefer the current row, an incremental edit of it, or the
    fresh row relabelled to reuse it, in that order, whichever is within keep_tolerance."""
    num_ranks = spec.num_ranks
    if pairs is not None and spec.coactivation_slack > 0 and pairs.any() and x.shape[1] <= coactivation.MAX_EXPERTS:
        rank_of = np.arange(len(row)) // (len(row) // num_ranks)
        row = coactivation.improve(x, row, rank_of, pairs, num_ranks, spec.coactivation_slack)
    if current is None:
        return row
    floor = row_balancedness(x, row, num_ranks) - spec.keep_tolerance
    if row_balancedness(x, current, num_ranks) >= floor:
        return current.copy()
    if spec.home_share is None and pairs is None:
        edited = _edit_current(x, current, spec, floor)
        if row_balancedness(x, edited, num_ranks) >= floor:
            return edited
    return moves.align(row, current, num_ranks, spec.num_nodes, x.shape[1])


def _edit_current(x: np.ndarray, current: np.ndarray, spec: PlacementSpec, floor: float) -> np.ndarray:
    """current row [P] changed by few slots until balancedness >= floor (global placement)."""
    reps = replicate(robust_load(x[:, None], spec), len(current), spec.num_ranks)[0]
    seeded = incremental.seed_from_current(current, reps, (x.mean(axis=0) / reps), spec.num_ranks)
    items = packing.Items(seeded[None], (x / reps).T[seeded][None], np.zeros((1, len(seeded))))
    target = np.array([x.sum(axis=1).max() / spec.num_ranks / max(floor, 1e-9)])
    return incremental.refine_from(items, seeded[None], spec.num_ranks, spec.hedge, spec.max_swaps, target)[0]


def optimize(
    loads: np.ndarray,
    spec: PlacementSpec,
    pairs: np.ndarray | None = None,
    current: PlacementPlan | None = None,
    layer_ids=None,
) -> PlacementPlan:
    """The plan for loads [L, E] or scenarios [S, L, E] (each scenario normalized per layer first).

    pairs: optional co-activation counts [L, E, E] (tokens that used both experts), from per-token traces.
    current: the plan in force; a layer it still balances (within keep_tolerance) is kept, else edited
    with few slot changes, else the fresh layer is relabelled to reuse its slots.
    """
    x = normalize(loads)  # [S, L, E]
    spec.validate(x.shape[2])
    num_layers, num_experts = x.shape[1:]
    if current is not None and current.phy2log.shape != (num_layers, num_experts + spec.num_redundant):
        raise ValueError(
            f"--current plan has shape {current.phy2log.shape}, the new plan {(num_layers, num_experts + spec.num_redundant)}"
        )
    wide = widen(x, spec.extrapolate)
    placed = place_global(wide, spec) if spec.home_share is None else place_local(wide, spec)  # [L, P]
    rows = [
        finish_layer(x[:, l], placed[l], spec, None if pairs is None else pairs[l], None if current is None else current.phy2log[l])
        for l in range(num_layers)
    ]
    return PlacementPlan.from_phy2log(np.stack(rows), num_experts, spec.num_ranks, spec.num_nodes, layer_ids)
