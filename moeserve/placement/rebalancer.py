"""Online rebalancing, the numpy half: which expert weights move where, and rank 0's policy.

- `plan_transfers`: for one layer, the copies that turn the old slot contents into the new ones
  (a pure function of the two maps, so every rank computes the same schedule without talking).
- `PlacementController` (rank 0 only): marks the steps whose routing counts must reach rank 0
  (recorder windows, re-plan windows), feeds the summed counts to the recorder, re-plans every
  `eplb_interval` steps from the last `eplb_window` steps with `current=` the plan in force, and
  hands the new map to the next step's plan. It never touches weights: engine/rebalance.py does.
Shape legend: L MoE layers, E experts, P physical slots, G ranks.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from moeserve.placement.evaluate import score
from moeserve.placement.optimizer import PlacementSpec, optimize
from moeserve.placement.plan import PlacementPlan
from moeserve.placement.recorder import RoutingRecorder
from moeserve.config import PlacementRuntimeConfig


@dataclass(frozen=True)
class Transfer:
    """Fill global slot `dst` with the expert that global slot `src` holds under the old map."""

    dst: int
    src: int


def plan_transfers(old: list[int], new: list[int], num_ranks: int) -> list[Transfer]:
    """Copies that take slots from `old` [P] to `new` [P] logical experts, in slot order.

    A slot keeps its weights when its expert stays; else it copies from a slot of the same rank
    holding the expert (no traffic); else from another rank, the senders of one expert taken in turn
    so that one hot expert gaining many replicas does not load a single sender.
    """
    per_rank = len(old) // num_ranks
    holders: dict[int, list[int]] = {}
    for slot, expert in enumerate(old):
        holders.setdefault(expert, []).append(slot)
    sent: dict[int, int] = {}
    out = []
    for dst, expert in enumerate(new):
        if old[dst] == expert:
            continue
        if expert not in holders:
            raise ValueError(f"expert {expert} has no slot under the current placement to copy from")
        rank = dst // per_rank
        local = [s for s in holders[expert] if s // per_rank == rank]
        if local:
            out.append(Transfer(dst, local[0]))
            continue
        turn = sent.get(expert, 0)
        sent[expert] = turn + 1
        out.append(Transfer(dst, holders[expert][turn % len(holders[expert])]))
    return out


class SummedRecorder(RoutingRecorder):
    """A `RoutingRecorder` fed with counts already summed over ranks (no per-call bincount here)."""

    def add_counts(self, counts: np.ndarray) -> None:
        """counts: int [L, E] logical expert choices of some finished steps, all ranks together."""
        if not self.recording:
            return
        with self._lock:
            self._counts += counts.astype(np.int64, copy=False)

    @property
    def closes_after_next_step(self) -> bool:
        return self.recording and self._steps + 1 >= self.steps_per_window


Planner = Callable[[np.ndarray, PlacementPlan], PlacementPlan]


def optimizer_planner(num_nodes: int, num_groups: int) -> Planner:
    """The default re-planner: `optimize` on the window's loads [L, E], few moves against the plan in force."""

    def plan(loads: np.ndarray, current: PlacementPlan) -> PlacementPlan:
        spec = PlacementSpec(
            num_ranks=current.num_ranks,
            num_nodes=num_nodes if current.num_ranks % num_nodes == 0 else 1,
            num_redundant=current.num_slots - current.num_experts,
            num_groups=num_groups,
        )
        return optimize(loads.astype(np.float64), spec, current=current, layer_ids=current.layer_ids)

    return plan


class PlacementController:
    """Rank 0's placement runtime. Per executed step: `annotate(plan)` before it runs, then
    `after_step(plan, counts, moved)` with the summed counts when the plan asked for them."""

    def __init__(self, config: PlacementRuntimeConfig, current: PlacementPlan, meta: dict, num_nodes: int = 1) -> None:
        self.config = config
        self.current = current
        self.recorder = SummedRecorder(current.num_layers, current.num_experts, config.record_trace_dir,
                                       config.record_window_steps, meta=meta)
        self.recorder.placement = current.phy2log
        if config.record_trace_dir is not None:
            self.recorder.start()
        self.planner: Planner = optimizer_planner(num_nodes, config.eplb_num_groups)
        self.steps = 0  # executed steps
        self._since_collect = 0
        self._chunks: deque[tuple[int, np.ndarray]] = deque()  # (last step, counts [L, E]) per collection
        self._pending: PlacementPlan | None = None
        self.num_rebalances = 0
        self.last_plan_s = 0.0
        self.last_move: dict = {}
        self.bytes_moved_total = 0
        self.window_balancedness: np.ndarray | None = None  # float [L], last re-plan window under the plan in force

    # -- the step ---------------------------------------------------------------------------------
    def annotate(self, plan) -> None:
        """Ship a pending placement with this step; ask for counts if a consumer needs them after it."""
        if self._pending is not None:
            plan.rebalance = {"phy2log": self._pending.phy2log.tolist()}
        plan.collect_routing = self._collect_due(self.steps + 1)

    def after_step(self, plan, counts: np.ndarray | None, moved: dict | None) -> None:
        """counts: int [L, E] summed over ranks when plan.collect_routing; moved: the rank-0 move report."""
        self.steps += 1
        self._since_collect += 1
        if plan.rebalance is not None:
            self._switched(moved or {})
        if counts is not None:
            self.take_counts(counts)
        self.recorder.step()
        if self.config.eplb_interval and self.steps % self.config.eplb_interval == 0:
            self._replan()

    def take_counts(self, counts: np.ndarray) -> None:
        """Counts of the steps since the previous collection (also from control steps)."""
        self.recorder.add_counts(counts)
        self._chunks.append((self.steps, counts))
        self._since_collect = 0
        keep = max(self.config.window, 1)
        while self._chunks and self._chunks[0][0] <= self.steps - keep:
            self._chunks.popleft()

    def _collect_due(self, step: int) -> bool:
        if self.recorder.closes_after_next_step:
            return True
        interval, window = self.config.eplb_interval, self.config.window
        return bool(interval) and (step % interval == 0 or (step + window) % interval == 0)

    # -- re-planning ------------------------------------------------------------------------------
    def window_counts(self) -> np.ndarray:
        """int [L, E] routing counts of the last `eplb_window` steps (all ranks)."""
        since = self.steps - self.config.window
        out = np.zeros((self.current.num_layers, self.current.num_experts), np.int64)
        for last, counts in self._chunks:
            if last > since:
                out += counts
        return out

    def _replan(self) -> None:
        loads = self.window_counts()
        if not loads.any():
            return
        start = time.perf_counter()
        self.window_balancedness = score(self.current, loads.astype(np.float64)).balancedness
        new = self.planner(loads, self.current).validate()
        self.last_plan_s = time.perf_counter() - start
        if not np.array_equal(new.phy2log, self.current.phy2log):
            self._pending = new

    def _switched(self, moved: dict) -> None:
        self.current, self._pending = self._pending, None
        self.recorder.placement = self.current.phy2log
        self.num_rebalances += 1
        self.last_move = moved
        self.bytes_moved_total += int(moved.get("bytes", 0))

    def stats(self) -> dict:
        """Flat numbers for Prometheus gauges (names are the keys)."""
        b = self.window_balancedness
        return {
            "eplb_rebalances": self.num_rebalances,
            "eplb_last_plan_s": self.last_plan_s,
            "eplb_last_move_s": float(self.last_move.get("seconds", 0.0)),
            "eplb_last_bytes_moved": int(self.last_move.get("bytes", 0)),
            "eplb_last_experts_moved": int(self.last_move.get("slots", 0)),
            "eplb_bytes_moved_total": self.bytes_moved_total,
            "eplb_balancedness_mean": float(b.mean()) if b is not None else None,
            "eplb_balancedness_min": float(b.min()) if b is not None else None,
            "eplb_layer_balancedness": b.tolist() if b is not None else None,
            "recording": self.recorder.recording,
        }
