"""The start-up summary's rows from what rank 0 knows (engine/startup_summary.py); the whole block on
a real `--ep 4 --tp 2` server is tests/server/test_server_startup_summary.py."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from moeserve.config import CacheConfig, EngineConfig, ModelConfig, ParallelConfig, SchedulerConfig
from moeserve.engine.startup_summary import checkpoint_format, summary_rows


def _engine(blocks: int, groups: int, max_model_len: int, max_num_seqs: int, **parallel) -> SimpleNamespace:
    config = EngineConfig(model=ModelConfig(model="/ckpt/m"), cache=CacheConfig(block_size=16),
                          scheduler=SchedulerConfig(max_num_seqs=max_num_seqs), parallel=ParallelConfig(**parallel))
    executor = SimpleNamespace(num_groups=groups, num_blocks=blocks)  # no rank-0 worker: the rows it can give
    return SimpleNamespace(config=config, executor=executor, model_name="m", max_model_len=max_model_len)


@pytest.mark.parametrize("blocks, seats, fit, bound", [(100, 64, 10, False), (1000, 8, 16, True)])
def test_the_kv_row_counts_whole_sequences_of_max_model_len_per_group(blocks, seats, fit, bound):
    # 300 tokens take 19 blocks of 16: 100 blocks hold 5 such sequences per group, 1000 hold 52 (8 seats)
    rows = dict(summary_rows(_engine(blocks, 2, 300, seats, tp=2, ep=4)))
    assert rows["KV cache"].startswith(f"{blocks:,} blocks of 16 tokens in each of 2 attention groups")
    assert f"; {fit} sequences of 300 tokens (max_model_len) at once" in rows["KV cache"]
    assert ("--max-num-seqs bounds it" in rows["KV cache"]) is bound
    assert rows["layout"] == "tp 2, ep 4: 4 ranks, 2 attention groups of 2, experts over all 4; 1 node"


def test_layouts_and_placement_in_words():
    assert dict(summary_rows(_engine(8, 1, 16, 4)))["layout"] == "tp 1, ep 1: one rank, 1 node"
    rows = dict(summary_rows(_engine(8, 1, 16, 4, tp=4)))
    assert rows["layout"] == "tp 4, ep 1: 4 ranks, 1 attention group; every expert split 4 ways; 1 node"
    engine = _engine(8, 1, 16, 4)
    engine.config = dataclasses.replace(engine.config, placement="plan.json")
    assert dict(summary_rows(engine))["placement"] == "plan.json"


def test_the_checkpoint_format_names_its_dtype_or_quantization():
    assert checkpoint_format(SimpleNamespace(dtype="bfloat16")) == "bfloat16 safetensors"
    fp8 = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    assert checkpoint_format(SimpleNamespace(quantization_config=fp8)) == "fp8 safetensors (block scales 128x128)"
