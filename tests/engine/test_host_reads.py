"""No host reads inside the layers during a decode step (docs/gpu_runtime.md).

On a GPU each host read (`.item()`, `.tolist()`, `int()` of a tensor, `nonzero`, boolean-mask
indexing, `bincount`, ...) makes the host wait for the device. `host_reads.HostReads` counts them on
CPU; here the whole model runs through the `triton` kernel set under TRITON_INTERPRET=1 (the set a GPU
runs), and every decode step must make none from models/, moe/, dense/, dispatch/ or kernels/, for
every architecture (MLA included), with the experts both in the fused Triton kernel and in the grouped
GEMM (the GPU default). The whole worker step makes at most one: the sampled ids read back.
"""
from __future__ import annotations

import random

import pytest
import torch

from host_reads import HostReads
from moeserve.dispatch.local import group_by_slot, sorted_by_slot
from tiny_models import ALL_ARCHITECTURES, make_any_checkpoint


def test_the_counter_sees_reads_and_where_they_come_from():
    ids = torch.tensor([[0, 2], [1, -1]])
    with HostReads() as reads:
        group_by_slot(ids, 3)  # -1 present: bincount and the row count read back
    assert len(reads.watched()) >= 2 and set(reads.by_package()) == {"dispatch"}
    with HostReads() as reads:
        sorted_by_slot(ids.clamp(min=0), 3)
    assert reads.reads == []
    t = torch.arange(4)
    with HostReads() as reads:  # made here, in tests/: counted, but not as any watched package's
        t.tolist(), int(t[1]), bool(t[2]), t[t > 1], t.nonzero(), torch.bincount(t), t.unique()
        t.repeat_interleave(t), t.repeat_interleave(t, output_size=6), t.masked_select(t > 0), t[1].item()
    ops = [op for op, _, _ in reads.reads]
    assert ops == ["tolist", "__int__", "__bool__", "__getitem__", "nonzero", "bincount", "unique",
                   "repeat_interleave", "masked_select", "item"]
    assert reads.watched() == []


def _run(arch: str, tmp_path, monkeypatch, fused_moe: str) -> tuple[list[HostReads], list[HostReads]]:
    """Greedy generation of three prompts through LLM(kernels="triton") -> the reads of each decode
    step's forward, and of each decode step's whole worker step (forward + sampling)."""
    pytest.importorskip("triton")
    from moeserve import LLM, SamplingParams

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("MOESERVE_TRITON_FUSED_MOE", fused_moe)
    torch.manual_seed(0)
    hf, path = make_any_checkpoint(arch, tmp_path)
    llm = LLM(model=str(path), block_size=4, max_num_batched_tokens=16, kernels="triton")
    worker = llm.engine.executor.worker
    forwards, steps = [], []
    execute_step, launch = worker.runner.execute_step, worker.launch

    def counted_forward(batch, *args, **kwargs):
        with HostReads() as reads:
            out = execute_step(batch, *args, **kwargs)
        if batch.seqs and all(s.num_tokens == 1 and s.start_pos > 0 for s in batch.seqs):
            forwards.append(reads)
        return out

    def counted_step(plan):  # launch, then the read back (later, with async scheduling): one step's reads
        reads = HostReads()
        with reads:
            pending = launch(plan)
        result = pending.result

        def counted_result():
            with reads:
                return result()

        pending.result = counted_result
        seqs = [s for g in plan.groups for s in g.seqs]
        if seqs and all(s.num_tokens == 1 and s.start_pos > 0 for s in seqs):
            steps.append(reads)
        return pending

    worker.runner.execute_step, worker.launch = counted_forward, counted_step
    rng = random.Random(0)
    prompts = [[rng.randrange(3, hf.config.vocab_size) for _ in range(n)] for n in (3, 6, 9)]
    try:
        llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    finally:
        llm.shutdown()
    return forwards, steps


@pytest.mark.slow  # the whole model under the Triton interpreter, ~10 s each
@pytest.mark.parametrize("arch", ALL_ARCHITECTURES)
def test_decode_steps_make_no_host_reads_in_the_layers(arch, tmp_path, monkeypatch):
    forwards, steps = _run(arch, tmp_path, monkeypatch, fused_moe="1")
    assert len(forwards) >= 3 and len(steps) == len(forwards)
    for reads in forwards:
        assert reads.watched() == [], f"host reads in a decode step of {arch}:\n{reads.describe()}"
    for reads in steps:  # forward and sampling: the sampled ids, once
        assert len(reads.reads) <= 1, reads.by_package()


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["mixtral", "deepseek_v3"])
def test_decode_steps_make_no_host_reads_with_grouped_gemm_experts(arch, tmp_path, monkeypatch):
    """The experts through the torch set's grouped GEMM, as a GPU runs them by default."""
    forwards, _ = _run(arch, tmp_path, monkeypatch, fused_moe="0")
    assert len(forwards) >= 3
    for reads in forwards:
        assert reads.watched() == [], f"host reads in a decode step of {arch}:\n{reads.describe()}"


def _dispatch_reads(rank: int, world: int) -> dict[str, list[int]]:
    """Host reads in dispatch/ of each of five calls (dispatch, expert output, combine) per backend."""
    import torch.distributed as dist

    from moeserve.dispatch import make_dispatcher, native
    from moeserve.parallel_state import ParallelContext

    ctx = ParallelContext(ep_size=world, ep_rank=rank, ep_group=dist.group.WORLD)
    gen = torch.Generator().manual_seed(rank)
    counts: dict[str, list[int]] = {}
    for name in ("a2a_ll", "shm") if native.load() else ("a2a_ll",):
        disp = make_dispatcher(name, 8, ctx)
        counts[name] = []
        for _ in range(5):
            hidden, ids, weights = torch.randn(5, 32, generator=gen), torch.randint(0, 8, (5, 2), generator=gen), torch.rand(5, 2)
            with HostReads() as reads:
                batch, handle = disp.dispatch(hidden, ids, weights, max_tokens=8, ids_valid=True)
                buffer = disp.expert_output(batch)
                disp.combine(batch.hidden if buffer is None else buffer.copy_(batch.hidden), handle)
            counts[name].append(len(reads.watched(("dispatch",))))
    return counts


@pytest.mark.slow  # spawns ranks
def test_expert_parallel_dispatch_makes_no_host_reads_once_set_up():
    """a2a_ll (fixed capacity, what CUDA graphs capture) and shm's C++ path: no host read per call for
    the MoE layer's ids, after the first call (which sets up shm's heap)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "dispatch"))
    from spawn_world import run_world

    for counts in run_world(_dispatch_reads, world=2, timeout_s=300):
        assert counts["a2a_ll"] == [0] * 5, counts
        if "shm" in counts:
            assert counts["shm"][1:] == [0] * 4, counts
