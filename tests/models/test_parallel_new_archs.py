"""gpt-oss, GLM-4.5 and MiniMax-M2 under parallel layouts give the single-rank logits (which equal
transformers', test_model_parity.py). One 2-rank gloo world (spawned once, slow) runs:
- tp=2 of each: attention heads and sinks split, GLM's and MiniMax's q/k norms over split heads (one
  KV head replicated on both ranks for MiniMax), experts split along I (gpt-oss from an MXFP4
  checkpoint: the down projection is cut inside a 32-column group, its bias added by rank 0 only);
- ep=2 over a2a of each (gpt-oss in BF16 and MXFP4), each rank serving its own requests.
The steps and helpers are test_parallel_parity.py's."""

from __future__ import annotations

import pytest
import torch

from gloo_ranks import run_ranks
from moeserve.parallel_state import SINGLE, ParallelContext
from test_parallel_parity import STEPS, _ep_rank, close, run_steps
from tiny_models import make_hf_model, save_checkpoint

pytestmark = pytest.mark.slow  # spawns ranks

# (architecture, checkpoint layout, config overrides)
TP_CASES = [("gpt_oss", "mxfp4", {}), ("glm4_moe", "per_expert", {}), ("minimax_m2", "per_expert",
                                                                       dict(num_key_value_heads=1))]
EP_CASES = [("gpt_oss", "fused", {}), ("gpt_oss", "mxfp4", {}), ("glm4_moe", "per_expert", {}),
            ("minimax_m2", "per_expert", {})]


def _world(rank: int, world: int, tp_dirs: list[str], ep_dirs: list[str]) -> dict:
    import torch.distributed as dist

    tp_ctx = ParallelContext(tp_size=world, tp_rank=rank, tp_group=dist.group.WORLD)
    return {"tp": [[t.numpy() for t in run_steps(d, tp_ctx, STEPS[0])] for d in tp_dirs],
            "ep": [_ep_rank(rank, world, d, [("a2a", False)], 1, None)[0] for d in ep_dirs]}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("new-archs")

    def save(cases, kind):
        return [str(save_checkpoint(make_hf_model(arch, **kw), root / f"{kind}-{arch}-{layout}", layout))
                for arch, layout, kw in cases]

    tp_dirs, ep_dirs = save(TP_CASES, "tp"), save(EP_CASES, "ep")
    return tp_dirs, ep_dirs, run_ranks(_world, 2, (tp_dirs, ep_dirs), timeout_s=500)


def test_tp2_matches_one_rank(world):
    tp_dirs, _, out = world
    for i, path in enumerate(tp_dirs):
        for step, ref in enumerate(run_steps(path, SINGLE, STEPS[0])):
            for rank in (0, 1):
                assert close(torch.from_numpy(out[rank]["tp"][i][step]), ref), (path, step, rank)


def test_ep2_matches_one_rank(world):
    _, ep_dirs, out = world
    for i, path in enumerate(ep_dirs):
        for rank in (0, 1):
            for step, (got, ref) in enumerate(zip(out[rank]["ep"][i], run_steps(path, SINGLE, STEPS[rank]),
                                                  strict=True)):
                assert close(torch.from_numpy(got), ref), (path, rank, step)
