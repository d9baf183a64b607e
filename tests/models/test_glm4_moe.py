"""GLM-4.5 checkpoints as released carry a multi-token-prediction layer past num_hidden_layers
(`num_nextn_predict_layers: 1`): it loads cleanly, unread, and the model still matches transformers
(which ignores it too); a tensor the model does not know inside its own layers is still an error."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from moeserve.config import CacheConfig, DeviceConfig, EngineConfig, ModelConfig
from moeserve.core.step_plan import GroupBatch
from moeserve.engine.model_runner import ModelRunner
from moeserve.models.checkpoint import CheckpointError
from moeserve.parallel_state import SINGLE
from test_model_parity import Seqs, hf_logits, rel_err
from tiny_models import make_hf_model, save_checkpoint

# the MTP module of GLM-4.5's release (model.layers.46 of 46 decoder layers), at tiny sizes
MTP_TENSORS = {
    "eh_proj.weight": (64, 128), "enorm.weight": (64,), "hnorm.weight": (64,), "embed_tokens.weight": (96, 64),
    "shared_head.norm.weight": (64,), "shared_head.head.weight": (96, 64), "input_layernorm.weight": (64,),
    "self_attn.q_proj.weight": (64, 64), "self_attn.q_proj.bias": (64,), "mlp.gate.weight": (8, 64),
    "mlp.gate.e_score_correction_bias": (8,), "mlp.experts.0.gate_proj.weight": (48, 64),
    "mlp.shared_experts.down_proj.weight": (64, 48),
}


def _runner(path) -> ModelRunner:
    cfg = EngineConfig(model=ModelConfig(model=str(path)), cache=CacheConfig(block_size=4, num_blocks=8),
                       device=DeviceConfig(kernels="torch"))
    return ModelRunner(cfg, SINGLE)


def test_the_mtp_layer_of_a_release_is_skipped(tmp_path):
    model = make_hf_model("glm4_moe")
    path = save_checkpoint(model, tmp_path)
    layers = model.config.num_hidden_layers
    save_file({f"model.layers.{layers}.{name}": torch.randn(shape) for name, shape in MTP_TENSORS.items()},
              str(path / "mtp.safetensors"))
    index = {"metadata": {}, "weight_map": {name: "model.safetensors" for name in _names(path / "model.safetensors")}}
    index["weight_map"] |= {f"model.layers.{layers}.{name}": "mtp.safetensors" for name in MTP_TENSORS}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"num_nextn_predict_layers": 1}))
    toks = [7, 3, 50, 21, 9, 11, 60]
    logits = _runner(path).execute(GroupBatch(0, [Seqs().chunk("x", toks, 0, len(toks))]))
    assert rel_err(logits[0], hf_logits(model, toks)[-1]) <= 1e-4
    # inside the model's own layers an unknown tensor is still an error
    save_file({"model.layers.1.self_attn.sinks": torch.zeros(4)}, str(path / "stray.safetensors"))
    index["weight_map"]["model.layers.1.self_attn.sinks"] = "stray.safetensors"
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="does not use: model.layers.1.self_attn.sinks"):
        _runner(path)


def _names(file) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(file), framework="pt") as f:
        return list(f.keys())
