"""tp=2 on two gloo processes gives the same logits as tp=1, for every architecture, including an
uneven vocabulary split, a replicated KV head (OLMoE with one KV head) and an empty step."""
from __future__ import annotations

import os
import queue
import socket
import traceback

import pytest
import torch
import torch.multiprocessing as mp

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


def _rank_main(rank: int, port: int, paths: list[str], results) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        ctx = ParallelContext(tp_size=2, tp_rank=rank, tp_group=dist.group.WORLD)
        # numpy, not tensors: torch would share memory with a process that is about to exit
        results.put((rank, [[t.numpy() for t in run_steps(p, ctx)] for p in paths]))
        dist.destroy_process_group()
    except BaseException:
        results.put((rank, traceback.format_exc()))


def run_tp2(paths: list[str], timeout_s: float = 240) -> dict[int, list]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, port, paths, results), daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    out = {}
    try:
        while len(out) < 2:
            rank, value = results.get(timeout=timeout_s)  # queue.Empty = a hung or dead rank: the test fails
            if isinstance(value, str):
                pytest.fail(f"rank {rank} raised:\n{value}")
            out[rank] = value
    except queue.Empty:
        pytest.fail(f"tp=2 ranks did not finish in {timeout_s}s")
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return out


def test_tp2_logits_match_tp1(tmp_path):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    paths = []
    for arch, overrides in VARIANTS.items():
        paths.append(str(save_checkpoint(make_hf_model(arch, **overrides), tmp_path / arch)))
    tp2 = run_tp2(paths)
    for i, path in enumerate(paths):
        expected = run_steps(path, SINGLE)
        for step, ref in enumerate(expected):
            for rank in (0, 1):
                got = torch.from_numpy(tp2[rank][i][step])
                assert got.shape == ref.shape, (path, step)
                if ref.numel():
                    assert float((got - ref).abs().max() / ref.abs().max()) <= 1e-4, (path, step, rank)
