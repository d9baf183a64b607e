"""DeepSeek under tensor parallelism (MLA heads split, TP experts) and expert parallelism (a2a), 2 gloo ranks.

Every rank builds its own ModelRunner from the same checkpoint; the logits must match transformers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
from spawn_world import run_world
from test_deepseek_model import Harness, _assert_close, _hf_logits, _make_checkpoint

pytestmark = pytest.mark.slow  # spawns ranks, servers or builds: left out of the quick run

PROMPTS = {"a": [5, 17, 33, 2, 90, 41, 7, 64, 12], "b": [3, 77, 15, 28, 50]}


def _steps(h: Harness, rids: list[str]) -> list[list[list[float]]]:
    """Prefill in two chunks, then 2 greedy decode steps per request -> logits per step, as plain lists
    (a tensor in the result queue is shared through a socket that vanishes when the rank exits)."""
    seqs = {r: list(PROMPTS[r]) for r in rids}
    out = []
    plans = [{r: (0, 4) for r in rids}, {r: (4, len(PROMPTS[r])) for r in rids}]
    for lo_hi in plans:
        logits = h.step([(r, seqs[r][lo:hi], lo) for r, (lo, hi) in lo_hi.items()])
        out.append(logits)
    for _ in range(2):
        for r, row in zip(rids, out[-1]):
            seqs[r].append(int(row.argmax()))
        out.append(h.step([(r, seqs[r][-1:], len(seqs[r]) - 1) for r in rids]))
    return [logits.tolist() for logits in out]


def _tp_rank(rank: int, world: int, path: str):
    import torch.distributed as dist

    from moeserve.parallel_state import ParallelContext

    ctx = ParallelContext(tp_size=world, tp_rank=rank, tp_group=dist.group.WORLD)
    return _steps(Harness(path, ctx=ctx), ["a", "b"])


def _ep_rank(rank: int, world: int, path: str):
    import torch.distributed as dist

    from moeserve.dispatch.a2a import A2ADispatcher
    from moeserve.models.checkpoint import load_hf_config
    from moeserve.parallel_state import ParallelContext

    ctx = ParallelContext(ep_size=world, ep_rank=rank, ep_group=dist.group.WORLD)
    num_experts = load_hf_config(path).n_routed_experts
    h = Harness(path, ctx=ctx, dispatcher=A2ADispatcher(num_experts, ctx))
    return _steps(h, ["a" if rank == 0 else "b"])  # one attention group per rank, each its own request


def _expected(hf, rids: list[str], results: list[list[list[float]]]) -> None:
    """Replays the greedy tokens each rank chose and checks every step against transformers."""
    results = [torch.tensor(step) for step in results]
    seqs = {r: list(PROMPTS[r]) for r in rids}
    ends = [[4] * len(rids), [len(PROMPTS[r]) for r in rids]]
    for step, logits in enumerate(results):
        for j, r in enumerate(rids):
            if step >= 2:
                seqs[r].append(int(results[step - 1][j].argmax()))
            end = ends[step][j] if step < 2 else len(seqs[r])
            want = _hf_logits(hf, seqs[r][:end])[-1]
            _assert_close(logits[j], want)
            assert int(logits[j].argmax()) == int(want.argmax())


def test_tensor_parallel_2(tmp_path):
    hf = _make_checkpoint("v3", tmp_path)
    results = run_world(_Bound(_tp_rank, str(tmp_path)), world=2, timeout_s=240)
    for rank_out in results:
        _expected(hf, ["a", "b"], rank_out)
    assert results[0] == results[1]  # tp ranks agree exactly


def test_expert_parallel_2(tmp_path):
    hf = _make_checkpoint("v2-groups", tmp_path)
    results = run_world(_Bound(_ep_rank, str(tmp_path)), world=2, timeout_s=240)
    _expected(hf, ["a"], results[0])
    _expected(hf, ["b"], results[1])


class _Bound:
    """A picklable fn(rank, world) with the checkpoint path bound (spawned ranks re-import this module)."""

    def __init__(self, fn, path: str):
        self.fn, self.path = fn, path

    def __call__(self, rank: int, world: int):
        return self.fn(rank, world, self.path)
