"""No parallel layout changes the logits. One 2-rank gloo world (spawned once) runs:
- tp=2 for every architecture (uneven vocab split, a replicated KV head on OLMoE, an empty step);
- ep=2 with a placement plan holding replicas, over a2a, agrs (with and without the step's
  max_tokens) and auto, each rank serving its own requests and one rank idle in a step.
Plus, in-process, replicas on a single rank, and (slow, 4 ranks) ep=4 x tp=2 where the tp ranks
split their group's tokens before dispatch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gloo_ranks import run_ranks
from moeserve.config import CacheConfig, EngineConfig, ModelConfig, ParallelConfig
from moeserve.core.step_plan import GroupBatch, ScheduledSeq
from moeserve.engine.model_runner import ModelRunner
from moeserve.parallel_state import SINGLE, ParallelContext
from moeserve.placement.plan import PlacementPlan
from tiny_models import make_hf_model, save_checkpoint

TP_VARIANTS = {
    "mixtral": dict(vocab_size=95),  # 48 + 47 rows: the last vocab shard is short
    "qwen2_moe": {},
    "qwen3_moe": {},
    "olmoe": dict(num_key_value_heads=1),  # one KV head replicated on both ranks
}
# Steps of attention group 0 and group 1 (tp runs use group 0's on both ranks).
STEPS = {
    0: [
        [ScheduledSeq("a", [5, 17, 3, 88, 41, 9, 2], 0, [1, 2], True), ScheduledSeq("d", [7, 7, 1, 60], 0, [3], False)],
        [],
        [ScheduledSeq("a", [12], 7, [1, 2], True), ScheduledSeq("d", [30, 2, 45], 4, [3, 4], True)],
    ],
    1: [
        [ScheduledSeq("b", [7, 7, 1], 0, [1], True), ScheduledSeq("c", [4, 4], 0, [2], True)],
        [ScheduledSeq("b", [9], 3, [1], True)],
        [ScheduledSeq("b", [30], 4, [1, 5], True)],
    ],
}
# StepPlan.max_group_tokens of each step: the largest group's token count, the same on every rank
MAX_TOKENS = [max(sum(s.num_tokens for s in STEPS[g][i]) for g in STEPS) for i in range(3)]
EP_DISPATCHES = [("a2a", False), ("agrs", False), ("agrs", True), ("auto", True)]


def run_steps(model_dir: str, ctx: ParallelContext, steps, parallel=None, plan=None, with_max: bool = False) -> list:
    cfg = EngineConfig(
        model=ModelConfig(model=model_dir),
        cache=CacheConfig(block_size=4, num_blocks=8),
        parallel=parallel or ParallelConfig(),
        placement=plan,
    )
    runner = ModelRunner(cfg, ctx)
    return [runner.execute(GroupBatch(0, list(s)), MAX_TOKENS[i] if with_max else None) for i, s in enumerate(steps)]


def close(got: torch.Tensor, ref: torch.Tensor) -> bool:
    return got.shape == ref.shape and (ref.numel() == 0 or float((got - ref).abs().max() / ref.abs().max()) <= 1e-4)


def write_plan(path, phy2log_row: list[int], ranks: int, experts: int = 8) -> str:
    """The same slots in both MoE layers of qwen2_moe, reversed in the second."""
    PlacementPlan.from_phy2log(np.array([phy2log_row, phy2log_row[::-1]]), experts, ranks).validate().save(str(path))
    return str(path)


def _ep_rank(rank: int, world: int, model_dir: str, dispatches, tp: int, plan: str | None) -> list:
    """dispatches: (backend, pass max_tokens?) pairs, each on a fresh runner; group = rank // tp."""
    import torch.distributed as dist

    groups = [dist.new_group(list(range(g * tp, (g + 1) * tp))) for g in range(world // tp)]
    tp_group = groups[rank // tp] if tp > 1 else None
    ctx = ParallelContext(tp, rank % tp, tp_group, ep_size=world, ep_rank=rank, ep_group=dist.group.WORLD)
    steps = STEPS[rank // tp % 2]
    out = []
    for dispatch, with_max in dispatches:
        parallel = ParallelConfig(tp=tp, ep=world, dispatch=dispatch)
        out.append([t.numpy() for t in run_steps(model_dir, ctx, steps, parallel, plan, with_max)])
    return out


def _world2(rank: int, world: int, tp_dirs: list[str], ep_dir: str, plan: str, odd: tuple[str, str]) -> dict:
    import torch.distributed as dist

    tp_ctx = ParallelContext(tp_size=world, tp_rank=rank, tp_group=dist.group.WORLD)
    tp = [[t.numpy() for t in run_steps(d, tp_ctx, STEPS[0])] for d in tp_dirs]
    return {"tp": tp, "ep": _ep_rank(rank, world, ep_dir, EP_DISPATCHES, 1, plan),
            "odd": _ep_rank(rank, world, odd[0], [("a2a", False)], 1, odd[1])}


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory) -> str:
    return str(save_checkpoint(make_hf_model("qwen2_moe"), tmp_path_factory.mktemp("qwen2_moe")))


@pytest.fixture(scope="module")
def world2(tmp_path_factory, qwen2_dir):
    root = tmp_path_factory.mktemp("world2")
    tp_dirs = [str(save_checkpoint(make_hf_model(a, **kw), root / a)) for a, kw in TP_VARIANTS.items()]
    # 10 slots, 5 per rank: experts 3 and 0 have a replica on the other rank
    plan = write_plan(root / "plan.json", [0, 1, 2, 3, 7, 4, 5, 6, 3, 0], 2)
    # 5 experts do not split over 2 ranks; with a replica of expert 2 the plan's 6 slots do
    odd_dir = str(save_checkpoint(make_hf_model("qwen2_moe", num_experts=5), root / "qwen2_moe_5"))
    odd = (odd_dir, write_plan(root / "odd.json", [0, 1, 2, 3, 4, 2], 2, experts=5))
    return tp_dirs, run_ranks(_world2, 2, (tp_dirs, qwen2_dir, plan, odd)), odd_dir


@pytest.mark.slow
def test_tp2_logits_match_tp1(world2):
    tp_dirs, out, _ = world2
    for i, path in enumerate(tp_dirs):
        for step, ref in enumerate(run_steps(path, SINGLE, STEPS[0])):
            for rank in (0, 1):
                assert close(torch.from_numpy(out[rank]["tp"][i][step]), ref), (path, step, rank)


def test_ep2_with_replicas_matches_single_rank(world2, qwen2_dir):
    _, out, _ = world2
    for rank in (0, 1):
        expected = run_steps(qwen2_dir, SINGLE, STEPS[rank])
        for d, dispatch in enumerate(EP_DISPATCHES):
            for got, ref in zip(out[rank]["ep"][d], expected, strict=True):
                assert close(torch.from_numpy(got), ref), (dispatch, rank)


def test_experts_that_do_not_split_over_ep_are_served_through_a_plans_replicas(world2):
    """`moeserve place` planned 6 experts + 2 replicas for --ep 4, and serving
    refused it (the experts, not the plan's slots, had to split over --ep)."""
    _, out, odd_dir = world2
    for rank in (0, 1):
        expected = run_steps(odd_dir, SINGLE, STEPS[rank])
        for got, ref in zip(out[rank]["odd"][0], expected, strict=True):
            assert close(torch.from_numpy(got), ref), rank


def test_single_rank_placement_with_replicas(qwen2_dir, tmp_path):
    plan = write_plan(tmp_path / "plan.json", list(range(8)) + [3, 5, 3, 0], 1)
    steps = STEPS[0] + STEPS[1]
    ref = run_steps(qwen2_dir, SINGLE, steps)
    got = run_steps(qwen2_dir, SINGLE, steps, plan=plan)
    assert all(close(g, r) for g, r in zip(got, ref, strict=True))


@pytest.mark.slow
def test_ep4_tp2_matches_single_rank(qwen2_dir):
    out = run_ranks(_ep_rank, 4, (qwen2_dir, [("a2a", False), ("agrs", True)], 2, None), timeout_s=500)
    for rank in range(4):
        expected = run_steps(qwen2_dir, SINGLE, STEPS[rank // 2 % 2])
        for per_dispatch in out[rank]:
            for got, ref in zip(per_dispatch, expected, strict=True):
                assert close(torch.from_numpy(got), ref), rank
