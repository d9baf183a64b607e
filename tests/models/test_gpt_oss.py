"""gpt-oss checkpoints as released: MXFP4 experts (blocks and scales) give the logits transformers gives
on the dequantized weights; every rank reads only its experts and its slices of them, in BF16 and in
MXFP4; other quantizations and malformed blocks are refused with the names."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from moeserve.config import CacheConfig, DeviceConfig, EngineConfig, ModelConfig
from moeserve.core.step_plan import GroupBatch
from moeserve.engine.model_runner import ModelRunner
from moeserve.models import mxfp4
from moeserve.models.checkpoint import CheckpointError, CheckpointReader, load_hf_config
from moeserve.models.gpt_oss import GptOssForCausalLM
from moeserve.parallel_state import SINGLE, ParallelContext
from test_model_parity import Seqs, hf_logits, rel_err
from tiny_models import make_hf_model, mxfp4_reference, save_checkpoint

TOKENS = {"a": [7, 3, 50, 21, 9, 11, 60, 2, 33, 17, 4], "b": [90, 12, 5, 5, 71]}


def test_mxfp4_round_trip_and_transformers_dequantization_agree():
    torch.manual_seed(0)
    w = torch.randn(3, 5, 64) * torch.logspace(-3, 2, 64)  # groups of very different magnitudes
    blocks, scales = mxfp4.quantize(w)
    assert blocks.shape == (3, 5, 2, 16) and blocks.dtype == torch.uint8 and scales.shape == (3, 5, 2)
    deq = mxfp4.dequantize(blocks, scales)
    assert torch.equal(mxfp4.dequantize(*mxfp4.quantize(deq)), deq)  # MXFP4 values are fixed points
    # e2m1 rounds to steps of at most 2 below 6, the group's largest value scaled to (3, 6]: an error of at
    # most a third of the group's largest magnitude
    groups = (deq - w).abs().view(3, 5, 2, 32) / w.abs().view(3, 5, 2, 32).amax(-1, keepdim=True)
    assert float(groups.max()) <= 1 / 3
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    theirs = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)  # [3, 64, 5]: transposed
    assert torch.equal(theirs.transpose(1, 2), deq)


def test_mxfp4_checkpoint_matches_transformers_on_its_dequantized_weights(tmp_path, caplog):
    path = save_checkpoint(make_hf_model("gpt_oss"), tmp_path, layout="mxfp4")
    names = CheckpointReader(path, progress=False).names()
    assert "model.layers.0.mlp.experts.down_proj_blocks" in names and "model.layers.0.mlp.experts.down_proj" not in names
    reference = mxfp4_reference(path)
    # the torch set (quick to start); the cpu set runs MXFP4 checkpoints in the slow engine tests
    cfg = EngineConfig(model=ModelConfig(model=str(path)), cache=CacheConfig(block_size=4, num_blocks=16),
                       device=DeviceConfig(kernels="torch"))
    with caplog.at_level(logging.WARNING, logger="moeserve.models.gpt_oss_experts"):
        runner = ModelRunner(cfg, SINGLE)
    assert "MXFP4 expert weights are dequantized" in caplog.text and "no MXFP4 kernel" in caplog.text
    seqs = Seqs()
    steps = [[("a", 0, 7), ("b", 0, 5)], [("a", 7, 11)]]
    for step in steps:
        logits = runner.execute(GroupBatch(0, [seqs.chunk(r, TOKENS[r], s, e) for r, s, e in step]))
        for row, (rid, _, e) in enumerate(step):
            assert rel_err(logits[row], hf_logits(reference, TOKENS[rid][:e])[-1]) <= 1e-4, (rid, e)


class RecordingReader(CheckpointReader):
    """Records every (name, index) read from disk."""

    def __init__(self, path):
        super().__init__(path, progress=False)
        self.reads: list[tuple[str, tuple]] = []

    def read(self, name, shard_dim=None, start=0, end=None):
        self.reads.append((name, (shard_dim, start, end)))
        return super().read(name, shard_dim, start, end)

    def read_index(self, name, index):
        self.reads.append((name, index))
        return super().read_index(name, index)


def _expert_reads(path, ctx: ParallelContext) -> dict[str, list[tuple]]:
    """Load layer 0..L of gpt-oss under `ctx` (no collectives run at load) -> layer 0's expert reads by
    tensor name suffix."""
    model = GptOssForCausalLM(load_hf_config(path), ctx, torch.float32)
    reader = RecordingReader(path)
    model.load_weights(reader)
    reads: dict[str, list[tuple]] = {}
    for name, index in reader.reads:
        if name.startswith("model.layers.0.mlp.experts."):
            reads.setdefault(name.rsplit(".", 1)[1], []).append(index)
    return reads


@pytest.mark.parametrize("layout", ["fused", "mxfp4"])
def test_each_rank_reads_only_its_experts_and_slices(tmp_path, layout):
    """8 experts, I = 96: --ep 2 rank 1 reads experts 4-7 whole; --tp 2 rank 1 reads every expert's gate/up
    rows 96-191 (its interleaved half, one run) and down columns 48-95 (MXFP4: the groups 1-2 holding
    them, a cut inside group 1); the down bias only on tp rank 0."""
    path = save_checkpoint(make_hf_model("gpt_oss"), tmp_path, layout=layout)
    mx = layout == "mxfp4"
    gate_up, down = ("gate_up_proj_blocks", "down_proj_blocks") if mx else ("gate_up_proj", "down_proj")
    ep = _expert_reads(path, ParallelContext(ep_size=2, ep_rank=1))
    assert sorted(index[0] for index in ep[gate_up]) == [4, 5, 6, 7]
    assert sorted(index[0] for index in ep["down_proj_bias"]) == [4, 5, 6, 7]
    tp = _expert_reads(path, ParallelContext(tp_size=2, tp_rank=1))
    assert sorted(index[0] for index in tp[gate_up]) == list(range(8))
    if mx:
        assert all(i[1:] == (slice(96, 192), slice(0, 2)) for i in tp[gate_up])  # all 64 columns: 2 groups
        assert all(i[1:] == (slice(None), slice(1, 3)) for i in tp[down])
        assert all(i[1:] == (slice(None), slice(1, 3)) for i in tp["down_proj_scales"])
    else:
        assert all(i[1:] == (slice(None), slice(96, 192)) for i in tp[gate_up])  # [E, H, 2I]: columns
        assert all(i[1:] == (slice(48, 96), slice(None)) for i in tp[down])
    assert all(i[1:] == (slice(96, 192),) for i in tp["gate_up_proj_bias"])
    assert "down_proj_bias" not in tp  # tp rank 1 holds zeros: the reduced sum adds rank 0's once
    tp0 = _expert_reads(path, ParallelContext(tp_size=2, tp_rank=0))
    assert len(tp0["down_proj_bias"]) == 8


def test_other_quantizations_and_malformed_blocks_are_refused(tmp_path):
    path = save_checkpoint(make_hf_model("gpt_oss"), tmp_path, layout="mxfp4")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"quantization_config": {"quant_method": "awq"}}))
    with pytest.raises(ValueError, match="quantized with 'awq' are not supported.*mxfp4"):
        GptOssForCausalLM(load_hf_config(path), SINGLE, torch.float32)
    (path / "config.json").write_text(json.dumps(config | {"intermediate_size": 64}))
    model = GptOssForCausalLM(load_hf_config(path), SINGLE, torch.float32)
    with pytest.raises(CheckpointError, match=r"gate_up_proj_blocks .* not MXFP4 of a \[128, 64\] weight"):
        model.load_weights(CheckpointReader(path, progress=False))


def test_mxfp4_is_loadable_for_gpt_oss_only():
    """The start-up check (models/quantization.py) lets gpt-oss's MXFP4 through to its loader and
    refuses it, in one line, for an architecture whose loader does not read MXFP4."""
    from types import SimpleNamespace

    from moeserve.errors import ConfigError
    from moeserve.models.quantization import check_quantization, checkpoint_quantization

    quant = {"quant_method": "mxfp4"}
    assert checkpoint_quantization(SimpleNamespace(architectures=["GptOssForCausalLM"], quantization_config=quant)) \
        is None
    with pytest.raises(ConfigError, match="'mxfp4' is loaded for GptOssForCausalLM only, not MixtralForCausalLM"):
        check_quantization(SimpleNamespace(architectures=["MixtralForCausalLM"], quantization_config=quant))
