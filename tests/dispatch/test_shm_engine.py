"""The one-sided backends inside the engine (Python API): greedy tokens identical to one rank for every
layout, with a placement of replicas and online rebalancing, an idle attention group for 1000 decode
steps, and a `kill -9` of a rank during traffic (an error, no process and no /dev/shm segment left).
Ranks are real processes; every test has a timeout."""
from __future__ import annotations

import os
import random
import sys
import threading
import time
from pathlib import Path

import pytest
from tiny_models import make_any_checkpoint, make_checkpoint

from moeserve import LLM, SamplingParams
from moeserve.errors import EngineDeadError

sys.path.insert(0, str(Path(__file__).parents[1] / "placement_runtime"))
from runtime_plans import cycling_planner, random_plan  # noqa: E402

pytestmark = pytest.mark.slow  # spawns ranks, servers or builds: left out of the quick run

PARAMS = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    path = make_checkpoint("mixtral", tmp_path_factory.mktemp("mixtral"), max_position_embeddings=2048)[1]
    rng = random.Random(4)
    prompts = [[rng.randrange(3, 96) for _ in range(n)] for n in (2, 9, 17, 30)]
    return path, prompts, _generate(path, prompts)


def _generate(path, prompts, **kw):
    llm = LLM(model=str(path), block_size=4, max_num_batched_tokens=32, **kw)
    try:
        return [o.token_ids for o in llm.generate(prompts, PARAMS)]
    finally:
        llm.shutdown()


def _segments(pid: int) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"moeserve-{pid}-")]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("ep,tp", [(2, 1), (4, 2), (4, 4)])
def test_shm_gives_the_single_rank_greedy_tokens(mixtral, ep, tp):
    path, prompts, want = mixtral
    assert _generate(path, prompts, ep=ep, tp=tp, dispatch="shm") == want
    assert not _segments(os.getpid())


@pytest.mark.timeout(600)
@pytest.mark.parametrize("ep,tp", [(2, 1), (4, 2)])
def test_shm_placed_calls_give_the_single_rank_greedy_tokens(mixtral, monkeypatch, ep, tp):
    """Every call placed (counts first, rows straight to their ExpertBatch rows: docs/dispatch.md)."""
    monkeypatch.setenv("MOESERVE_SHM_PLACED_BYTES", "0")
    path, prompts, want = mixtral
    assert _generate(path, prompts, ep=ep, tp=tp, dispatch="shm") == want
    assert not _segments(os.getpid())


@pytest.mark.timeout(600)
@pytest.mark.parametrize("arch,ep,tp", [("deepseek_v3", 4, 2), ("qwen3_moe", 8, 2)])
def test_shm_gives_the_single_rank_greedy_tokens_on_other_architectures(tmp_path, arch, ep, tp):
    """Shared experts and grouped routing (DeepSeek-V3) on a 4 x 2 layout; one expert per rank on eight
    ranks (Qwen3-MoE)."""
    path = make_any_checkpoint(arch, tmp_path)[1]
    rng = random.Random(7)
    prompts = [[rng.randrange(3, 90) for _ in range(n)] for n in (1, 13, 31)]
    assert _generate(path, prompts, ep=ep, tp=tp, dispatch="shm") == _generate(path, prompts)
    assert not _segments(os.getpid())


@pytest.mark.timeout(600)
def test_emulated_nvshmem_gives_the_single_rank_greedy_tokens(mixtral, monkeypatch):
    """The Triton put/flag kernels under TRITON_INTERPRET=1 over the shared-memory heap, in every rank."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("MOESERVE_NVSHMEM_EMULATE", "1")
    path, prompts, want = mixtral
    assert _generate(path, prompts[:2], ep=2, tp=1, dispatch="nvshmem") == want[:2]


@pytest.mark.timeout(600)
def test_shm_with_replicas_and_online_rebalancing(tmp_path):
    _, path = make_checkpoint("qwen3_moe", tmp_path / "ckpt")
    rng = random.Random(6)
    prompts = [[rng.randrange(3, 96) for _ in range(n)] for n in (5, 12, 7)]
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    ref = LLM(model=str(path), block_size=4)
    try:
        want = [o.token_ids for o in ref.generate(prompts, params)]
    finally:
        ref.shutdown()
    start = random_plan(11, 2, 8, 12, 4)  # replicas, two of one expert on one rank
    start.save(str(tmp_path / "start.json"))
    llm = LLM(model=str(path), block_size=4, ep=4, dispatch="shm", placement=str(tmp_path / "start.json"),
              eplb_interval=2, record_trace_dir=str(tmp_path / "trace"), record_window_steps=10)
    try:
        llm.engine.placement.controller.planner = cycling_planner()  # a new placement every 2 steps
        assert [o.token_ids for o in llm.generate(prompts, params)] == want
        assert llm.engine.stats()["eplb_rebalances"] >= 5
    finally:
        llm.shutdown()


@pytest.mark.timeout(400)
def test_1000_decode_steps_with_one_idle_group(mixtral):
    path = mixtral[0]
    llm = LLM(model=str(path), ep=2, tp=1, dispatch="shm")  # two attention groups, one request
    try:
        out = llm.generate([[5, 6, 7]], SamplingParams(temperature=0.0, max_tokens=1000, ignore_eos=True))[0]
        assert len(out.token_ids) == 1000 and llm.engine.num_steps >= 1000
    finally:
        llm.shutdown()
    assert all(p.poll() is not None for p in llm.engine.executor._procs)


@pytest.mark.timeout(400)
def test_kill_9_during_traffic_is_an_error_and_leaves_nothing(mixtral):
    path = mixtral[0]
    llm = LLM(model=str(path), ep=4, tp=2, dispatch="shm")
    procs = llm.engine.executor._procs
    killer = threading.Timer(2.0, procs[1].kill)  # SIGKILL to rank 2 (another attention group)
    killer.start()
    started = time.monotonic()
    with pytest.raises(EngineDeadError, match="rank"):
        llm.generate([[5, 6, 7]] * 6, SamplingParams(temperature=0.0, max_tokens=2000, ignore_eos=True))
    assert time.monotonic() - started < 60
    llm.shutdown()
    assert all(p.poll() is not None for p in procs)
    assert not _segments(os.getpid())
