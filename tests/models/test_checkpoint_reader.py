"""Checkpoint reader: sliced reads, sharded index, clear errors for missing and unknown tensors;
tied embeddings, sliding window and bfloat16 through the runner."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from moeserve.config import CacheConfig, EngineConfig, ModelConfig
from moeserve.core.step_plan import GroupBatch, ScheduledSeq
from moeserve.engine.model_runner import ModelRunner
from moeserve.models.checkpoint import CheckpointError, CheckpointReader
from moeserve.parallel_state import SINGLE
from tiny_models import make_hf_model, save_checkpoint


def test_sliced_reads_from_sharded_index(tmp_path):
    a, b = torch.arange(24.0).view(4, 6), torch.arange(5.0)
    save_file({"a": a}, str(tmp_path / "s1.safetensors"))
    save_file({"b": b}, str(tmp_path / "s2.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})
    )
    r = CheckpointReader(tmp_path, progress=False)
    assert r.shape("a") == (4, 6)
    assert torch.equal(r.read("a", 1, 2, 4), a[:, 2:4])
    assert torch.equal(r.read_index("a", (1, slice(0, 3))), a[1, :3])
    with pytest.raises(CheckpointError, match="has tensors this model does not use: b"):
        r.finish()


def test_missing_tensor_error_names_it_and_suggests(tmp_path):
    save_file({"model.layers.0.mlp.gate.weight": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    r = CheckpointReader(tmp_path, progress=False)
    with pytest.raises(CheckpointError, match=r"no tensor 'model.layers.0.mlp.gates.weight'.*mlp.gate.weight"):
        r.read("model.layers.0.mlp.gates.weight")


def run(path, tokens, dtype="float32"):
    cfg = EngineConfig(model=ModelConfig(model=str(path), dtype=dtype), cache=CacheConfig(block_size=4, num_blocks=16))
    runner = ModelRunner(cfg, SINGLE)
    return runner, runner.execute(
        GroupBatch(0, [ScheduledSeq("x", tokens, 0, list(range(1, 1 + -(-len(tokens) // 4))), True)])
    )


def hf_last(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0, -1].float()


def test_extra_tensor_in_checkpoint_is_an_error(tmp_path):
    model = make_hf_model("olmoe")
    path = save_checkpoint(model, tmp_path)
    state = load_file(str(path / "model.safetensors"))
    state["model.layers.0.mlp.surprise.weight"] = torch.zeros(3)
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="surprise"):
        run(path, [1, 2, 3])


def test_tied_embeddings_sliding_window_and_runner_properties(tmp_path):
    model = make_hf_model("mixtral", tie_word_embeddings=True, sliding_window=5, max_position_embeddings=128)
    path = save_checkpoint(model, tmp_path)
    tokens = [5, 9, 1, 33, 2, 70, 8, 8, 19, 4, 60]
    runner, logits = run(path, tokens)
    # 16 blocks of 4 tokens hold 64 tokens of one sequence: max_model_len is capped there
    assert runner.max_model_len == 64 and runner.num_blocks == 16 and runner.block_size == 4
    # from memory: 2 layers x (K + V) x 4 slots x 2 KV heads x 16 dims x 4 bytes = 2 KiB a block
    sized = ModelRunner(
        EngineConfig(
            model=ModelConfig(model=str(path)), cache=CacheConfig(block_size=4, num_blocks=None, kv_cache_memory_mb=1)
        ),
        SINGLE,
    )
    assert sized.num_blocks == 512 and sized.kv_caches[1][0].shape == (512, 4, 2, 16)
    assert sized.max_model_len == 128  # the checkpoint's max_position_embeddings, which the cache now holds
    ref = hf_last(model, tokens)
    assert float((logits[0] - ref).abs().max() / ref.abs().max()) <= 1e-4


def test_bfloat16_runs_close_to_fp32(tmp_path):
    model = make_hf_model("qwen3_moe")
    path = save_checkpoint(model, tmp_path)
    tokens = [3, 14, 15, 92, 65, 35]
    runner, logits = run(path, tokens, dtype="bfloat16")
    assert runner.kv_caches[0][0].dtype == torch.bfloat16 and logits.dtype == torch.float32
    ref = hf_last(model, tokens)
    assert float((logits[0] - ref).abs().max() / ref.abs().max()) <= 5e-2
    assert int(logits[0].argmax()) == int(ref.argmax())


def test_a_kv_cache_larger_than_host_memory_is_one_error_naming_the_flags(tmp_path, monkeypatch):
    path = save_checkpoint(make_hf_model("olmoe"), tmp_path)
    # 2 KiB a block (as above): 2**20 blocks are 2 GiB, more than the 1 GiB this "host" has left
    monkeypatch.setattr("moeserve.engine.model_runner.host_memory_available", lambda: 2**30)
    for cache in (CacheConfig(block_size=4, num_blocks=2**20), CacheConfig(block_size=4, kv_cache_memory_mb=2048)):
        with pytest.raises(MemoryError, match=r"KV cache of \d+ blocks takes \d+ bytes.*--kv-cache-memory-mb"):
            ModelRunner(EngineConfig(model=ModelConfig(model=str(path)), cache=cache), SINGLE)


def test_host_memory_available_reads_meminfo(tmp_path):
    from moeserve.engine.host_memory import host_memory_available

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   2000 kB\n")
    assert host_memory_available(str(meminfo)) == 2000 * 1024
    meminfo.write_text("MemTotal:       24000000 kB\n")
    assert host_memory_available(str(meminfo)) is None
    assert host_memory_available(str(tmp_path / "absent")) is None
