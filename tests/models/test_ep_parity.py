"""Expert parallelism and placement do not change the logits: replicas on one rank, ep=2 over gloo
with the a2a and agrs dispatchers (each rank serving its own requests, one rank idle in a step),
and (slow) ep=4 x tp=2, where tp ranks split their group's tokens before dispatch."""

from __future__ import annotations

import os

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

# qwen2_moe: 2 MoE layers + 1 dense layer, shared expert; 8 experts
STEPS = {
    0: [[ScheduledSeq("a", [5, 17, 3, 88, 41, 9, 2], 0, [1, 2], True)], [ScheduledSeq("a", [12], 7, [1, 2], True)], []],
    1: [
        [ScheduledSeq("b", [7, 7, 1], 0, [1], True), ScheduledSeq("c", [4, 4], 0, [2], True)],
        [],
        [ScheduledSeq("b", [30], 3, [1], True)],
    ],
}


def write_plan(path, phy2log_row: list[int], ranks: int) -> str:
    plan = PlacementPlan.from_phy2log(np.array([phy2log_row, phy2log_row[::-1]]), 8, ranks).validate()
    plan.save(str(path))
    return str(path)


# StepPlan.max_group_tokens of each step: the largest group's token count, the same on every rank
MAX_TOKENS = [max(sum(s.num_tokens for s in STEPS[r][i]) for r in STEPS) for i in range(3)]


def run_steps(
    model_dir: str, ctx: ParallelContext, steps, parallel=ParallelConfig(), plan=None, with_max: bool = False
) -> list[torch.Tensor]:
    cfg = EngineConfig(
        model=ModelConfig(model=model_dir),
        cache=CacheConfig(block_size=4, num_blocks=8),
        parallel=parallel,
        placement=plan,
    )
    runner = ModelRunner(cfg, ctx)
    return [
        runner.execute(GroupBatch(0, list(step)), MAX_TOKENS[i] if with_max else None) for i, step in enumerate(steps)
    ]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_checkpoint(make_hf_model("qwen2_moe"), tmp_path_factory.mktemp("qwen2_moe")))


def close(got: torch.Tensor, ref: torch.Tensor) -> bool:
    return got.shape == ref.shape and (ref.numel() == 0 or float((got - ref).abs().max() / ref.abs().max()) <= 1e-4)


def test_single_rank_placement_with_replicas(model_dir, tmp_path):
    plan = write_plan(tmp_path / "plan.json", list(range(8)) + [3, 5, 3, 0], 1)
    steps = STEPS[0] + STEPS[1]
    ref = run_steps(model_dir, SINGLE, steps)
    got = run_steps(model_dir, SINGLE, steps, plan=plan)
    assert all(close(g, r) for g, r in zip(got, ref))


def _ep_rank(
    rank: int, world: int, model_dir: str, dispatches: list[tuple[str, bool]], tp: int, plan: str | None
) -> list:
    """dispatches: (backend, pass StepPlan.max_group_tokens?) pairs, each run on a fresh runner."""
    import torch.distributed as dist

    groups = [dist.new_group(list(range(g * tp, (g + 1) * tp))) for g in range(world // tp)]
    ctx = ParallelContext(
        tp_size=tp,
        tp_rank=rank % tp,
        tp_group=groups[rank // tp] if tp > 1 else None,
        ep_size=world,
        ep_rank=rank,
        ep_group=dist.group.WORLD,
    )
    out = []
    for dispatch, with_max in dispatches:
        parallel = ParallelConfig(tp=tp, ep=world, dispatch=dispatch)
        steps = STEPS[rank // tp % 2]
        out.append([t.numpy() for t in run_steps(model_dir, ctx, steps, parallel, plan, with_max)])
    return out


def test_ep2_matches_single_rank(model_dir, tmp_path):
    # 10 slots, 5 per rank: experts 3 and 0 have a replica on the other rank
    plan = write_plan(tmp_path / "plan.json", [0, 1, 2, 3, 7, 4, 5, 6, 3, 0], 2)
    dispatches = [("a2a", False), ("agrs", False), ("agrs", True), ("auto", True)]
    out = run_ranks(_ep_rank, 2, (model_dir, dispatches, 1, plan))
    for rank in (0, 1):
        expected = run_steps(model_dir, SINGLE, STEPS[rank])
        for d, dispatch in enumerate(dispatches):
            for got, ref in zip(out[rank][d], expected):
                assert close(torch.from_numpy(got), ref), (dispatch, rank)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MOESERVE_SLOW") != "1", reason="4 processes; set MOESERVE_SLOW=1")
def test_ep4_tp2_matches_single_rank(model_dir):
    out = run_ranks(_ep_rank, 4, (model_dir, [("a2a", False), ("agrs", True)], 2, None), timeout_s=500)
    for rank in range(4):
        expected = run_steps(model_dir, SINGLE, STEPS[rank // 2 % 2])
        for per_dispatch in out[rank]:
            for got, ref in zip(per_dispatch, expected):
                assert close(torch.from_numpy(got), ref), rank
