"""Tensor-parallel layers loaded as simulated shards (no process group) recombine to the full layer,
and RMSNorm / rotary match transformers' own functions."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from moeserve.dense.linear import ColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from moeserve.dense.mlp import GatedMLP
from moeserve.dense.norm import RMSNorm, ShardedRMSNorm
from moeserve.dense.rotary import RotaryEmbedding, default_inv_freq
from moeserve.models.checkpoint import CheckpointReader
from moeserve.parallel_state import ParallelContext

H, NH, D = 32, 4, 8


@pytest.fixture
def ckpt(tmp_path):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    tensors = {
        "q.weight": r(NH * D, H),
        "q.bias": r(NH * D),
        "k.weight": r(2 * D, H),
        "k.bias": r(2 * D),
        "v.weight": r(2 * D, H),
        "v.bias": r(2 * D),
        "o.weight": r(H, NH * D),
        "o.bias": r(H),
        "mlp.gate_proj.weight": r(24, H),
        "mlp.up_proj.weight": r(24, H),
        "mlp.down_proj.weight": r(H, 24),
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return tmp_path, tensors


def reader(path):
    return CheckpointReader(path, progress=False)


@pytest.mark.parametrize("tp", [2, 4])
def test_qkv_shards_replicate_kv_heads_when_fewer_than_tp(ckpt, tp):
    path, t = ckpt
    x = torch.randn(5, H)
    q_full = x @ t["q.weight"].T + t["q.bias"]
    k_full = (x @ t["k.weight"].T + t["k.bias"]).view(5, 2, D)
    qs = []
    for rank in range(tp):
        layer = QKVParallelLinear(H, D, NH, 2, True, ParallelContext(tp_size=tp, tp_rank=rank), torch.float32)
        layer.load(reader(path), "q", "k", "v")
        q, k, v = layer(x)
        qs.append(q)
        kv_head = rank * 2 // tp if tp > 2 else rank
        assert torch.allclose(k.view(5, -1, D)[:, 0], k_full[:, kv_head], atol=1e-5)
    assert torch.allclose(torch.cat(qs, -1), q_full, atol=1e-5)


def test_row_parallel_partials_sum_with_bias_once(ckpt):
    path, t = ckpt
    x = torch.randn(5, NH * D)
    full = x @ t["o.weight"].T + t["o.bias"]
    parts = []
    for rank in range(2):
        layer = RowParallelLinear(NH * D, H, True, ParallelContext(tp_size=2, tp_rank=rank), torch.float32)
        layer.load(reader(path), "o")
        parts.append(layer(x.chunk(2, -1)[rank]))
    assert torch.allclose(parts[0] + parts[1], full, atol=1e-5)


def test_gated_mlp_shards_sum_to_full(ckpt):
    path, _ = ckpt
    x = torch.randn(6, H)
    full = GatedMLP(H, 24, "silu", ParallelContext(), torch.float32)
    full.load(reader(path), "mlp")
    parts = []
    for rank in range(2):
        mlp = GatedMLP(H, 24, "silu", ParallelContext(tp_size=2, tp_rank=rank), torch.float32)
        mlp.load(reader(path), "mlp")
        assert isinstance(mlp.gate_up, ColumnParallelLinear) and mlp.gate_up.weight.shape == (24, H)
        parts.append(mlp(x))
    assert torch.allclose(parts[0] + parts[1], full(x), atol=1e-5)


@pytest.mark.slow
def test_rmsnorm_and_rotary_match_transformers():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

    x = torch.randn(7, H)
    hf = LlamaRMSNorm(H, eps=1e-6)
    torch.nn.init.normal_(hf.weight)
    ours = RMSNorm(H, 1e-6, torch.float32)
    ours.weight.data.copy_(hf.weight.data)
    assert torch.equal(ours(x), hf(x))
    sharded = ShardedRMSNorm(H, 0, H, 1, 1e-6, ParallelContext(), torch.float32)
    sharded.weight.data.copy_(hf.weight.data)
    assert torch.equal(sharded(x), hf(x))

    pos = torch.tensor([0, 3, 4, 10, 11, 2, 1])
    rope = RotaryEmbedding(default_inv_freq(D, 10000.0))
    q, k = torch.randn(7, NH, D), torch.randn(7, 2, D)
    cos, sin = rope.cos_sin(pos, torch.float32)
    hq, hk = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos[None], sin[None])
    oq, ok = rope(pos, q, k)
    assert torch.allclose(oq, hq[0].transpose(0, 1), atol=1e-6)
    assert torch.allclose(ok, hk[0].transpose(0, 1), atol=1e-6)
