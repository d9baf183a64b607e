"""Speculative decoding with the GPU runtime's pieces: async scheduling is turned off (the next step's
drafts depend on this step's tokens), decode graphs keep plain decode steps while verify steps of
k + 1 tokens a sequence run eagerly over the same persistent inputs. On CPU the graph path runs with
eager replays (MOESERVE_DECODE_GRAPHS_EAGER=1), as tests/engine/test_decode_graphs.py does."""
from __future__ import annotations

import logging

import pytest
import torch

from moeserve.config import EngineConfig, SchedulerConfig
from moeserve.core.step_plan import GroupBatch, ScheduledSeq
from moeserve.engine.engine_core import resolve_async_scheduling
from moeserve.engine.step_inputs import StepInputs
from moeserve.speculative_config import SpeculativeConfig
from tiny_models import hf_greedy, make_any_checkpoint

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}


@pytest.mark.parametrize("asked", [None, True])
def test_async_scheduling_is_off_with_a_speculative_config(asked, caplog):
    config = EngineConfig(scheduler=SchedulerConfig(async_scheduling=asked), speculative=SpeculativeConfig("ngram", 3))
    with caplog.at_level(logging.INFO, logger="moeserve.engine.engine_core"):
        out = resolve_async_scheduling(config)
    assert out.scheduler.async_scheduling is False
    assert "async scheduling is off with --speculative-config" in caplog.text
    plain = resolve_async_scheduling(EngineConfig(scheduler=SchedulerConfig(async_scheduling=True)))
    assert plain.scheduler.async_scheduling is True  # without drafts it stays as asked


def test_the_scheduler_refuses_drafts_with_the_host_a_step_ahead():
    from moeserve.config import CacheConfig
    from moeserve.core.scheduler import Scheduler
    from moeserve.core.spec_scheduling import SpecScheduling

    spec = SpecScheduling(SpeculativeConfig("ngram", 3), 3, 64)
    with pytest.raises(ValueError, match="async scheduling must be off"):
        Scheduler(SchedulerConfig(async_scheduling=True), CacheConfig(block_size=4), 1, 16, 64, spec=spec)


def test_step_inputs_sample_every_row_of_a_verify():
    """A verify samples k + 1 rows a sequence: more sampled rows than sequences fit the buffers."""
    inputs = StepInputs(max_tokens=16, max_seqs=2, max_blocks=4, block_size=4, device=torch.device("cpu"), pad_block=9)
    batch = GroupBatch(0, [ScheduledSeq("a", [5, 6, 7, 8], 6, [0, 1, 2], True, num_drafts=3),
                           ScheduledSeq("b", [3, 4, 5], 2, [3, 4], True, num_drafts=2)])
    meta = inputs.prepare(batch)
    assert meta.sample_index.tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert meta.positions.tolist() == [6, 7, 8, 9, 2, 3, 4]


def test_ngram_drafts_with_decode_graphs_give_transformers_tokens(tmp_path, monkeypatch):
    """Repetitive prompts with n-gram drafts on the graph path (eager replays): verify steps run
    eagerly over the persistent inputs, plain decode steps replay their bucket's graph, and greedy
    tokens equal transformers'."""
    from moeserve import LLM, SamplingParams

    monkeypatch.setenv("MOESERVE_DECODE_GRAPHS_EAGER", "1")
    torch.manual_seed(0)
    hf, path = make_any_checkpoint("mixtral", tmp_path)
    prompts = [[5, 6, 7, 8] * 3 + [5, 6], [9, 10, 11] * 4, [12, 13, 14, 15, 16], [20, 21] * 5 + [20]]
    want = hf_greedy(hf, prompts, 16)
    llm = LLM(model=str(path), block_size=4, max_num_seqs=8, max_num_batched_tokens=64, kernels="torch",
              speculative_config=NGRAM, async_scheduling=True)
    runner = llm.engine.executor.worker.runner
    assert llm.engine.async_scheduling is False and runner.graphs is not None
    replays = {"n": 0}
    for graph in runner.graphs.graphs.values():
        def counted(replay=graph.replay):
            replays["n"] += 1
            replay()
        graph.replay = counted
    try:
        got = [o.token_ids for o in llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True))]
        stats = llm.engine.stats()
    finally:
        llm.shutdown()
    assert got == want
    assert stats["spec_decode_num_drafts"] > 0 and stats["spec_decode_num_accepted_tokens"] > 0
    assert replays["n"] > 0  # steps without drafts still replay a graph
