"""One rank's side of the placement runtime: routing counts where the router runs, and expert moves.

Counts: every MoE layer's `on_route` adds the step's logical top-k ids [T, k] into a device tensor
[L, E] with one index_add_ (no host sync); when a step's plan says `collect_routing`, the ranks sum
their counts onto rank 0 with one reduce on the expert-parallel group, and reset. With ep == 1 the
tp ranks of the (single) group route the same tokens, so only tp rank 0 counts and nothing is
reduced.

Moves: a step whose plan carries `rebalance` switches every rank to the new phy2log before its
forward. Per layer, every rank computes the same transfer schedule (placement/rebalancer.py), posts
its sends (from the live weights) and receives (into staging buffers) with point-to-point ops on the
ep group, waits for all of them, and only then writes the staging buffers into the experts' weights
(`slot_tensors`: w13 / w2, and their scale blocks when FP8) and calls `MoELayer.remap`: a forward
never sees a half-copied expert, and a slot that both sends its old expert and receives a new one
sends the old weights.
Shape legend: L MoE layers, E experts, P physical slots, S slots on this rank, T tokens, k top-k.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist

from moeserve.moe.layer import MoELayer
from moeserve.parallel_state import ParallelContext
from moeserve.placement.plan import PlacementPlan
from moeserve.placement.rebalancer import Transfer, plan_transfers
from moeserve.placement.routing_torch import slot_map_for


class RankPlacement:
    """Mutates the MoE layers' weights, maps and `on_route` hooks of this rank's model."""

    def __init__(self, layers: list[MoELayer], ctx: ParallelContext, token_valid: torch.Tensor | None = None) -> None:
        """token_valid: [max tokens] int64, 1 for a step's real tokens and 0 for the padding rows of a
        CUDA-graph bucket (engine/step_inputs.py), or None: every token counts."""
        self.layers, self.ctx = layers, ctx
        self.token_valid = token_valid
        self.num_ranks = ctx.ep_size
        self.num_experts = layers[0].num_experts if layers else 0
        device = layers[0].experts.w13.device if layers else torch.device("cpu")
        self.counts = torch.zeros(len(layers), self.num_experts, dtype=torch.int64, device=device)  # [L, E]
        self.counting = ctx.ep_size > 1 or ctx.tp_rank == 0
        self._ones = torch.ones(1024, dtype=torch.int64, device=device)  # index_add_ source, grown on demand
        if self.counting:
            for index, moe in enumerate(layers):
                moe.on_route = self._counter(index)
        self.collected: np.ndarray | None = None  # rank 0: int [L, E] summed at the last collection
        self.last_move: dict | None = None

    def _counter(self, index: int):
        row = self.counts[index]

        def count(topk_ids: torch.Tensor, first_row: int = 0) -> None:
            # one kernel, no host sync (bincount sizes its output from the data: a sync on GPUs).
            # The routers emit top-k ids, never -1: a capacity router that drops would need a mask here.
            ids = topk_ids.reshape(-1)
            if self.token_valid is None:
                row.index_add_(0, ids, self._ones_for(ids.numel()))
            else:  # padding rows of a decode graph add zeros
                T, k = topk_ids.shape
                valid = self.token_valid[first_row : first_row + T]
                row.index_add_(0, ids, valid[:, None].expand(T, k).reshape(-1))

        return count

    def _ones_for(self, n: int) -> torch.Tensor:
        if self._ones.numel() < n:
            self._ones = torch.ones(max(n, 2 * self._ones.numel()), dtype=torch.int64, device=self.counts.device)
        return self._ones[:n]

    def phy2log(self) -> np.ndarray:
        """int [L, P]: the placement in force."""
        return np.array([moe.phy2log for moe in self.layers], dtype=np.int64)

    # -- counts -----------------------------------------------------------------------------------
    def collect(self) -> None:
        """Every rank calls this in the same step: counts since the last collection reach rank 0."""
        if self.ctx.ep_size > 1:
            dist.reduce(self.counts, dst=0, group=self.ctx.ep_group)
        if self.ctx.ep_rank == 0 and self.ctx.tp_rank == 0:
            self.collected = self.counts.cpu().numpy().copy()
        self.counts.zero_()

    def take_collected(self) -> np.ndarray | None:
        out, self.collected = self.collected, None
        return out

    # -- moves ------------------------------------------------------------------------------------
    def apply(self, rebalance: dict) -> None:
        """Switch every layer to rebalance["phy2log"] [L][P]; every rank calls this in the same step."""
        start = time.perf_counter()
        new = np.asarray(rebalance["phy2log"], dtype=np.int64)
        plan = PlacementPlan.from_phy2log(new, self.num_experts, self.num_ranks).validate()
        moved_bytes = moved_slots = 0
        for index, moe in enumerate(self.layers):
            row = new[index].tolist()
            if row == moe.phy2log:
                continue
            transfers = plan_transfers(moe.phy2log, row, self.num_ranks)
            moved_bytes += self._move_layer(moe, transfers)
            moved_slots += len(transfers)
            moe.remap(row, slot_map_for(plan, index, self.ctx.ep_rank, self.counts.device))
        self.last_move = {"seconds": time.perf_counter() - start, "bytes": moved_bytes, "slots": moved_slots}

    def _move_layer(self, moe: MoELayer, transfers: list[Transfer]) -> int:
        """Runs this rank's share of one layer's transfers; returns the bytes crossing ranks (all ranks)."""
        # w13 [S, 2Il, H], w2 [S, H, Il] (their scale blocks when FP8, their biases for gpt-oss), one expert as
        # one byte row
        tensors = moe.experts.slot_tensors()
        per_rank, me, first = moe.slots_per_rank, self.ctx.ep_rank, moe.first_slot
        sizes = [t[0].numel() * t.element_size() for t in tensors]
        expert_bytes = sum(sizes)
        ops, staged, remote_bytes = [], [], 0

        def rank_of(slot: int) -> int:
            return slot // per_rank if self.num_ranks > 1 else 0

        def flat(local: int) -> torch.Tensor:
            return torch.cat([t[local].reshape(-1).view(torch.uint8) for t in tensors])

        for tag, t in enumerate(transfers):
            src_rank, dst_rank = rank_of(t.src), rank_of(t.dst)
            if src_rank != dst_rank:
                remote_bytes += expert_bytes
            if src_rank == me and dst_rank != me:
                row = flat(t.src - first)
                staged.append((None, row))  # keep the send buffer alive until the wait
                ops.append(dist.P2POp(dist.isend, row, dst_rank, self.ctx.ep_group, tag))
            elif dst_rank == me:
                if src_rank == me:
                    row = flat(t.src - first)
                else:
                    row = torch.empty(expert_bytes, dtype=torch.uint8, device=tensors[0].device)
                    ops.append(dist.P2POp(dist.irecv, row, src_rank, self.ctx.ep_group, tag))
                staged.append((t.dst - first, row))
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        for local, row in staged:  # every transfer of the layer is complete: now overwrite
            if local is not None:
                for tensor, part in zip(tensors, row.split(sizes)):
                    tensor[local].copy_(part.view(tensor.dtype).view_as(tensor[local]))
        written = [local for local, _ in staged if local is not None]
        if written:
            moe.experts.prepare(written)  # the kernel set's copy is a snapshot: retake the written slots
        return remote_bytes


class EnginePlacement:
    """Rank 0's handle on the placement runtime, for EngineCore: the controller (policy, recorder)
    plus rank 0's `RankPlacement`, which holds the world-summed counts after a collection.
    Not thread-safe: call it from the engine loop, between steps."""

    def __init__(self, controller, rank0: RankPlacement, executor) -> None:
        self.controller, self.rank0, self.executor = controller, rank0, executor

    def before(self, plan) -> None:
        self.controller.annotate(plan)

    def after(self, plan) -> None:
        counts = self.rank0.take_collected() if plan.collect_routing else None
        moved = self.rank0.last_move if plan.rebalance is not None else None
        self.controller.after_step(plan, counts, moved)

    def flush(self) -> None:
        """A control step (no forward on any rank) that brings the counts not yet collected to rank 0."""
        from moeserve.core.step_plan import GroupBatch, StepPlan

        groups = [GroupBatch(g) for g in range(self.executor.num_groups)]
        self.executor.execute(StepPlan(step=-1, groups=groups, collect_routing=True))
        counts = self.rank0.take_collected()
        if counts is not None:
            self.controller.take_counts(counts)

    def start(self) -> None:
        self.flush()  # counts from before the start belong to no window
        self.controller.recorder.start()

    def stop(self) -> None:
        self.flush()  # the partial window gets every step that ran
        self.controller.recorder.stop()

    def dump(self, path: str | None = None) -> str:
        return self.controller.recorder.dump(path)

    def stats(self) -> dict:
        return self.controller.stats()

    @property
    def per_step(self) -> bool:
        """Whether annotate and after_step must alternate step by step (a recording or EPLB is on): the
        engine then reads each step back before scheduling the next (no async scheduling meanwhile)."""
        return self.controller.recorder.recording or bool(self.controller.config.eplb_interval)


def engine_placement(config, executor, model_name: str) -> EnginePlacement | None:
    """The placement runtime of an engine whose executor runs rank 0's worker here; None without
    MoE layers or without such a worker (e.g. a test double)."""
    from moeserve.placement.rebalancer import PlacementController

    worker = getattr(executor, "worker", None)
    rank0 = getattr(worker, "placement", None)
    if rank0 is None or not rank0.layers:
        return None
    model = worker.runner.model
    first = rank0.layers[0]
    current = PlacementPlan.from_phy2log(rank0.phy2log(), rank0.num_experts, rank0.num_ranks,
                                         layer_ids=list(model.moe_layers()))
    meta = dict(model=model_name, layer_ids=list(model.moe_layers()), top_k=getattr(first.router, "top_k", None),
                num_groups=getattr(first.router, "num_groups", None), phase="mixed")
    controller = PlacementController(config.placement_runtime, current, meta, config.parallel.nodes)
    return EnginePlacement(controller, rank0, executor)
