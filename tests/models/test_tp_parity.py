"""tp=2 on two gloo processes gives the same logits as tp=1, for every architecture, including an
uneven vocabulary split, a replicated KV head (OLMoE with one KV head) and an empty step."""

from __future__ import annotations

import torch

from gloo_ranks import run_ranks
from moeserve.config import CacheConfig, EngineConfig, ModelConfig
from moeserve.core.step_plan import GroupBatch, ScheduledSeq
from moeserve.engine.model_runner import ModelRunner
from moeserve.parallel_state import SINGLE, ParallelContext
from tiny_models import make_hf_model, save_checkpoint

VARIANTS = {
    "mixtral": dict(vocab_size=95),  # 48 + 47 rows: the last vocab shard is short
    "qwen2_moe": {},
    "qwen3_moe": {},
    "olmoe": dict(num_key_value_heads=1),  # one KV head replicated on both ranks
}
STEPS = [
    [ScheduledSeq("a", [5, 17, 3, 88, 41, 9, 2], 0, [1, 2], True), ScheduledSeq("b", [7, 7, 1, 60], 0, [3], False)],
    [],
    [ScheduledSeq("a", [12], 7, [1, 2], True), ScheduledSeq("b", [30, 2, 45], 4, [3, 4], True)],
]


def run_steps(path: str, ctx: ParallelContext) -> list[torch.Tensor]:
    cfg = EngineConfig(model=ModelConfig(model=path), cache=CacheConfig(block_size=4, num_blocks=8))
    runner = ModelRunner(cfg, ctx)
    return [runner.execute(GroupBatch(0, list(step))) for step in STEPS]


def _tp_rank(rank: int, world: int, paths: list[str]) -> list:
    import torch.distributed as dist

    ctx = ParallelContext(tp_size=world, tp_rank=rank, tp_group=dist.group.WORLD)
    return [[t.numpy() for t in run_steps(p, ctx)] for p in paths]


def test_tp2_logits_match_tp1(tmp_path):
    paths = [str(save_checkpoint(make_hf_model(arch, **kw), tmp_path / arch)) for arch, kw in VARIANTS.items()]
    tp2 = run_ranks(_tp_rank, 2, (paths,))
    for i, path in enumerate(paths):
        for step, ref in enumerate(run_steps(path, SINGLE)):
            for rank in (0, 1):
                got = torch.from_numpy(tp2[rank][i][step])
                assert got.shape == ref.shape, (path, step)
                if ref.numel():
                    assert float((got - ref).abs().max() / ref.abs().max()) <= 1e-4, (path, step, rank)
