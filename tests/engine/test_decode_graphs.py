"""Decode CUDA graphs (engine/cuda_graphs.py) and the persistent inputs they replay over
(engine/step_inputs.py).

On CPU the graph path runs with eager replays (MOESERVE_DECODE_GRAPHS_EAGER=1): the same persistent
buffers, the same padding to a batch-size bucket, the captured function called again at each replay.
That checks what padding could break: greedy tokens at every bucket size equal transformers'. The
GPU-marked tests capture real CUDA graphs: their tokens equal the eager path's, and a replay makes no
host sync.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from moeserve.core.step_plan import GroupBatch, ScheduledSeq
from moeserve.dense.attention_metadata import build_attention_metadata
from moeserve.engine.cuda_graphs import capture_sizes
from moeserve.engine.step_inputs import StepInputs
from tiny_models import make_any_checkpoint


def test_capture_sizes_follow_vllm_buckets():
    assert capture_sizes(1, 8192) == [1]
    assert capture_sizes(8, 8192) == [1, 2, 4, 8]
    assert capture_sizes(12, 8192) == [1, 2, 4, 8, 12]
    assert capture_sizes(40, 8192) == [1, 2, 4, 8, 16, 24, 32, 40]
    assert capture_sizes(256, 20) == [1, 2, 4, 8, 16, 20]  # no decode batch passes the token budget


def _batch() -> GroupBatch:
    return GroupBatch(0, [ScheduledSeq("a", [5], 6, [3, 1], True), ScheduledSeq("b", [7], 0, [2], True),
                          ScheduledSeq("c", [9], 16, [4, 0, 5, 6, 7], False)])


def test_step_inputs_match_the_host_metadata_and_pad_with_the_spare_block():
    BS, pad = 4, 9
    inputs = StepInputs(max_tokens=16, max_seqs=8, max_blocks=6, block_size=BS, device=torch.device("cpu"), pad_block=pad)
    batch = _batch()
    want = build_attention_metadata(batch, BS)
    got = inputs.prepare(batch)
    for name in ("input_ids", "positions", "slot_mapping", "query_start", "seq_lens", "sample_index", "block_tables"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert got.max_query_len == 1 and got.max_seq_len == 17 and got.is_decode
    padded = inputs.prepare(batch, pad_to=8, max_seq_len=24)
    assert padded.num_seqs == 8 and padded.num_tokens == 8 and padded.host is None and padded.max_seq_len == 24
    assert torch.equal(padded.input_ids[:3], want.input_ids) and padded.input_ids[3:].eq(0).all()
    assert torch.equal(padded.slot_mapping[:3], want.slot_mapping)
    assert padded.slot_mapping[3:].eq(pad * BS).all()  # padding rows write the spare block only
    assert padded.seq_lens[3:].eq(1).all() and padded.block_tables[3:, 0].eq(pad).all()
    assert torch.equal(padded.query_start, torch.arange(9))
    assert padded.block_tables.shape == (8, 6)  # the full width a graph was captured over
    assert torch.equal(padded.block_tables[:3, :5], want.block_tables)
    # a later, smaller eager step reuses the same buffers in place
    again = inputs.prepare(GroupBatch(0, [ScheduledSeq("d", [1, 2, 3], 0, [8], True)]))
    assert again.input_ids.data_ptr() == got.input_ids.data_ptr()
    assert again.positions.tolist() == [0, 1, 2] and again.slot_mapping.tolist() == [32, 33, 34]
    with pytest.raises(ValueError, match="does not fit"):
        inputs.prepare(GroupBatch(0, [ScheduledSeq("e", [1] * 17, 0, [0] * 5, True)]))


def _generate_staggered(arch: str, tmp_path, monkeypatch, kernels: str, graphs_eager: bool, **settings):
    """Eight prompts whose max_tokens are 1..8: decode batches of 7, 6, ..., 1 sequences (buckets 8,
    4, 2, 1, most of them padded). -> (our tokens, transformers' greedy tokens, replays per bucket)."""
    from moeserve import LLM, SamplingParams

    monkeypatch.setenv("MOESERVE_DECODE_GRAPHS_EAGER", "1" if graphs_eager else "0")
    torch.manual_seed(0)
    hf, path = make_any_checkpoint(arch, tmp_path)
    rng = random.Random(5)
    prompts = [[rng.randrange(3, hf.config.vocab_size) for _ in range(rng.randrange(2, 9))] for _ in range(8)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in range(1, 9)]
    want = []
    hf.generation_config.eos_token_id = None
    with torch.no_grad():
        for p, sp in zip(prompts, params):
            ids = torch.tensor([p])
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=sp.max_tokens,
                              do_sample=False, pad_token_id=0)
            want.append(out[0, len(p):].tolist())
    llm = LLM(model=str(path), block_size=4, max_num_seqs=8, max_num_batched_tokens=64, kernels=kernels, **settings)
    runner = llm.engine.executor.worker.runner
    replays: dict[int, int] = {}
    if graphs_eager:
        assert runner.graphs is not None and runner.graphs.sizes == [1, 2, 4, 8]
        for rows, graph in runner.graphs.graphs.items():
            def counted(graph=graph, rows=rows, replay=graph.replay):
                replays[rows] = replays.get(rows, 0) + 1
                replay()
            graph.replay = counted
    try:
        got = [o.token_ids for o in llm.generate(prompts, params)]
    finally:
        llm.shutdown()
    return got, want, replays


@pytest.mark.parametrize("arch", ["mixtral", "deepseek_v3"])
def test_bucket_padding_never_changes_tokens(arch, tmp_path, monkeypatch):
    got, want, replays = _generate_staggered(arch, tmp_path, monkeypatch, "torch", graphs_eager=True)
    assert got == want
    assert set(replays) == {1, 2, 4, 8}, replays  # every bucket replayed, three of them padded


def test_graphs_with_the_host_a_step_ahead_give_the_same_tokens(tmp_path, monkeypatch):
    """As a GPU runs: decode graphs replayed with pending tokens filled into their input buffer."""
    got, want, replays = _generate_staggered("qwen2_moe", tmp_path, monkeypatch, "torch", graphs_eager=True,
                                             async_scheduling=True)
    assert got == want
    assert set(replays) == {1, 2, 4, 8}, replays


@pytest.mark.slow  # the whole model under the Triton interpreter
@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v2"])
def test_bucket_padding_never_changes_tokens_with_triton_kernels(arch, tmp_path, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    got, want, replays = _generate_staggered(arch, tmp_path, monkeypatch, "triton", graphs_eager=True)
    assert got == want
    assert set(replays) == {1, 2, 4, 8}, replays


def test_enforce_eager_captures_nothing(tmp_path, monkeypatch):
    from moeserve import LLM

    monkeypatch.setenv("MOESERVE_DECODE_GRAPHS_EAGER", "1")
    _, path = make_any_checkpoint("olmoe", tmp_path)
    llm = LLM(model=str(path), kernels="torch", enforce_eager=True)
    try:
        assert llm.engine.executor.worker.runner.graphs is None
    finally:
        llm.shutdown()


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ["mixtral", "deepseek_v3"])
def test_cuda_graphs_give_the_eager_tokens(arch, tmp_path, monkeypatch):
    """Captured graphs on the GPU give the tokens of --enforce-eager, at every bucket."""
    pytest.importorskip("triton")
    from moeserve import LLM, SamplingParams

    torch.manual_seed(0)
    hf, path = make_any_checkpoint(arch, tmp_path)
    rng = random.Random(5)
    prompts = [[rng.randrange(3, hf.config.vocab_size) for _ in range(rng.randrange(2, 9))] for _ in range(8)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in range(1, 9)]
    outs = {}
    for eager in (True, False):
        llm = LLM(model=str(path), device="cuda", dtype="float32", block_size=4, max_num_seqs=8, enforce_eager=eager)
        runner = llm.engine.executor.worker.runner
        assert (runner.graphs is None) == eager
        try:
            outs[eager] = [o.token_ids for o in llm.generate(prompts, params)]
        finally:
            llm.shutdown()
    assert outs[False] == outs[True]


@pytest.mark.gpu
def test_a_graph_replay_makes_no_host_sync(tmp_path):
    from moeserve import LLM

    _, path = make_any_checkpoint("mixtral", tmp_path)
    llm = LLM(model=str(path), device="cuda", block_size=4, max_num_seqs=8)
    try:
        graphs = llm.engine.executor.worker.runner.graphs
        assert graphs is not None and graphs.sizes == [1, 2, 4, 8]
        batch = GroupBatch(0, [ScheduledSeq(f"r{i}", [3 + i], 0, [i], True) for i in range(5)])
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            graphs.graphs[8].replay()
            logits = graphs.graphs[8].output.argmax(-1)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        graphs.run(batch, 5)
        assert logits.shape == (8,) and np.isfinite(graphs.graphs[8].output.float().cpu().numpy()).all()
    finally:
        llm.shutdown()


def test_routing_counts_leave_out_the_padding_rows(tmp_path, monkeypatch):
    """The placement recorder counts the routed tokens of a padded decode graph, not its padding rows:
    its trace equals the eager run's."""
    from moeserve import LLM, SamplingParams
    from moeserve.placement.importers import load_trace

    _, path = make_any_checkpoint("mixtral", tmp_path / "ckpt")
    rng = random.Random(9)
    prompts = [[rng.randrange(3, 96) for _ in range(rng.randrange(2, 9))] for _ in range(5)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in range(2, 7)]
    counts = {}
    for eager_graphs in (False, True):
        monkeypatch.setenv("MOESERVE_DECODE_GRAPHS_EAGER", "1" if eager_graphs else "0")
        llm = LLM(model=str(path), kernels="torch", block_size=4, max_num_seqs=8,
                  record_trace_dir=str(tmp_path / f"rec{eager_graphs}"), record_window_steps=1000)
        assert (llm.engine.executor.worker.runner.graphs is not None) == eager_graphs
        try:
            llm.generate(prompts, params)
            llm.engine.recorder_stop()
            counts[eager_graphs] = load_trace(llm.engine.recorder_dump(str(tmp_path / f"{eager_graphs}.npz"))).counts
        finally:
            llm.shutdown()
    assert np.array_equal(counts[True].sum(axis=0), counts[False].sum(axis=0))
