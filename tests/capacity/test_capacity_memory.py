"""The fit calculator on hand-worked cases: KV bytes per token (MLA and GQA), weights, tokens that fit."""
from __future__ import annotations

import json
import math

import pytest

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.memory import (kv_bytes_per_token, layers_to_offload, memory_report, routed_expert_bytes,
                                      weight_bytes)
from moeserve.capacity.model_spec import from_hf_config, load_model

FP8 = 1 + 4 / 16384


def test_mla_kv_bytes_per_token_is_the_latent_plus_rope_key():
    m = load_model("deepseek-v3")
    # (kv_lora_rank 512 + qk_rope_head_dim 64) values x 61 layers x 2 bytes (bf16)
    assert kv_bytes_per_token(m, Layout(), Precision(kv="bf16")) == 576 * 61 * 2 == 70_272
    # every TP rank of a group keeps the whole latent: TP does not shrink it
    assert kv_bytes_per_token(m, Layout(tp=8), Precision(kv="bf16")) == 70_272


def test_gqa_kv_bytes_per_token_split_by_kv_head():
    m = load_model("mixtral-8x7b")
    # K and V x 8 KV heads x head_dim 128 x 32 layers x 2 bytes
    assert kv_bytes_per_token(m, Layout(), Precision(kv="bf16")) == 2 * 8 * 128 * 32 * 2 == 131_072
    assert kv_bytes_per_token(m, Layout(tp=2), Precision(kv="bf16")) == 65_536
    # past 8 ranks a rank still holds one whole KV head
    assert kv_bytes_per_token(m, Layout(tp=16), Precision(kv="bf16")) == 2 * 1 * 128 * 32 * 2


def test_parameter_counts_match_the_published_sizes():
    ds, mx, qw = load_model("deepseek-v3"), load_model("mixtral-8x7b"), load_model("qwen3-235b-a22b")
    assert ds.total_params == pytest.approx(671e9, rel=0.002) and ds.active_params == pytest.approx(37e9, rel=0.02)
    assert mx.total_params == pytest.approx(46.7e9, rel=0.002) and mx.active_params == pytest.approx(12.9e9, rel=0.02)
    assert qw.total_params == pytest.approx(235e9, rel=0.002) and qw.active_params == pytest.approx(22e9, rel=0.03)
    assert ds.num_dense_layers == 3 and ds.num_moe_layers == 58 and ds.shared_intermediate == 2048


def test_mixtral_tp2_bf16_fit_by_hand():
    m = load_model("mixtral-8x7b")
    attention = 4096 * 128 * (2 * 32 + 2 * 8)  # q, o: 32 heads; k, v: 8 heads; of 128
    experts = 8 * 3 * 4096 * 14336
    router = 4096 * 8
    by_hand = 32 * (attention + experts) / 2 * 2 + 32 * router * 2 + 2 * 32000 * 4096 * 2 / 2
    prec = Precision(weights="bf16", kv="bf16")
    assert weight_bytes(m, Layout(tp=2), prec) == pytest.approx(by_hand)
    r = memory_report(m, Layout(tp=2), prec, 80, tokens_per_step=1, kv_tokens_needed=1000)
    assert r.kv_tokens == int((0.9 * 80e9 - by_hand - r.activations) // 65_536)
    assert r.fits and r.kv_needed == 1000 * 65_536
    one_gpu = memory_report(m, Layout(), prec, 80, tokens_per_step=1, kv_tokens_needed=1)
    assert not one_gpu.fits and one_gpu.kv_tokens == 0  # 93 GB of weights on an 80 GB GPU


def test_experts_shard_over_ep_with_replicas():
    m = load_model("deepseek-v3")
    prec = Precision(weights="fp8")
    base = weight_bytes(m, Layout(ep=32), prec)
    # 32 redundant slots over 32 ranks: one more expert per rank per MoE layer
    extra = weight_bytes(m, Layout(ep=32, redundant=32), prec) - base
    assert extra == pytest.approx(58 * 3 * 7168 * 2048 * prec.weight_bytes)
    # ep 8 keeps 32 experts per rank: 4x the routed weights of ep 32 (no replicas)
    routed32 = 58 * 8 * 3 * 7168 * 2048 * prec.weight_bytes
    assert weight_bytes(m, Layout(ep=8), prec) - base == pytest.approx(3 * routed32)


def test_fp4_and_fp8_weights_take_their_bytes():
    m = load_model("deepseek-v3")
    fp8 = weight_bytes(m, Layout(ep=8), Precision(weights="fp8"))
    fp4 = weight_bytes(m, Layout(ep=8), Precision(weights="fp4"))
    assert fp4 / fp8 == pytest.approx(0.5625, rel=0.03)  # 4 bits + one fp8 scale per 16 values


def test_layout_mistakes_are_clear():
    with pytest.raises(ValueError, match="not a multiple"):
        Layout(tp=4, ep=6).validate(256)
    with pytest.raises(ValueError, match="split evenly"):
        Layout(ep=32, redundant=5).validate(256)


def test_architectures_read_from_config_json(tmp_path):
    qwen2 = {"model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16,
             "num_key_value_heads": 16, "vocab_size": 151936, "num_experts": 60, "num_experts_per_tok": 4,
             "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "intermediate_size": 5632,
             "decoder_sparse_step": 1, "mlp_only_layers": []}
    (tmp_path / "config.json").write_text(json.dumps(qwen2))
    m = load_model(str(tmp_path))
    assert m.shared_intermediate == 5632 and m.num_moe_layers == 24 and m.head_dim == 128
    assert m.total_params == pytest.approx(14.3e9, rel=0.02)  # Qwen1.5-MoE-A2.7B: 14.3B
    olmoe = {"model_type": "olmoe", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
             "vocab_size": 50304, "num_experts": 64, "num_experts_per_tok": 8, "intermediate_size": 1024}
    assert from_hf_config(olmoe).total_params == pytest.approx(6.9e9, rel=0.02)  # OLMoE-1B-7B: 6.9B
    with pytest.raises(ValueError, match="cannot read model_type"):
        from_hf_config({**olmoe, "model_type": "llama"})
    with pytest.raises(ValueError, match="shipped"):
        load_model(str(tmp_path / "nope"))


def test_each_module_takes_its_own_format():
    m = load_model("deepseek-v3")
    lay = Layout(ep=8)
    fp8 = weight_bytes(m, lay, Precision(weights="fp8"))
    mixed = weight_bytes(m, lay, Precision(weights="fp8", moe="fp4", dense="bf16", attn="bf16"))
    routed = 58 * 32 * m.expert_params  # 32 experts per rank, 58 MoE layers
    dense = 3 * m.dense_mlp_params + 58 * m.shared_params  # dense MLPs and shared experts
    attention = 61 * m.attention_params
    by_hand = routed * ((0.5 + 1 / 16) - FP8) + (dense + attention) * (2 - FP8)
    assert mixed - fp8 == pytest.approx(by_hand)
    # --weights sets every module left unset; dispatch follows the experts (FP8 with per-128 scales for fp8, NVFP4
    # for fp4: W4A4 experts quantise before the tokens move), combine the activations
    p = Precision(weights="fp4", attn="bf16")
    assert (p.attn_weights, p.moe_weights, p.dense_weights, p.dispatch_format, p.combine_format) == ("bf16", "fp4", "fp4", "fp4", "bf16")
    assert p.dispatch_bytes == 0.5 + 1 / 16 and Precision(weights="fp8").dispatch_bytes == 1 + 4 / 128
    assert Precision(weights="fp8", moe="fp4", dispatch="fp8").dispatch_format == "fp8"  # an explicit format wins
    assert Precision(weights="bf16").dispatch_format == "bf16" and Precision(dispatch="fp4").dispatch_bytes == 0.5 + 1 / 16


def test_the_mtp_layer_takes_its_own_format():
    """An MTP layer in bf16 beside fp4 experts (nvidia/DeepSeek-R1-FP4, --mtp-weights bf16) is counted in bf16:
    the difference from an fp4 MTP layer is its attention, routed experts and shared expert at 2 - 0.5625 bytes."""
    m = load_model("deepseek-v3")
    lay = Layout(ep=8)
    fp4 = Precision(weights="fp4")
    bf16_mtp = Precision(weights="fp4", mtp="bf16")
    assert weight_bytes(m, lay, bf16_mtp) == weight_bytes(m, lay, fp4)  # no MTP layer counted without mtp=True
    layer = m.attention_params + 32 * m.expert_params + m.shared_params  # 32 experts per rank at ep 8
    diff = weight_bytes(m, lay, bf16_mtp, mtp=True) - weight_bytes(m, lay, fp4, mtp=True)
    assert diff == pytest.approx(layer * (2 - (0.5 + 1 / 16)))


def test_the_mtp_input_projection_is_replicated_in_the_activation_format():
    """eh_proj (2H x H) is a plain replicated linear in BF16 (DeepSeek's checkpoints, vLLM's deepseek_mtp.py):
    every rank of a TP group holds all of it, whatever the weights' format."""
    m = load_model("deepseek-v3")
    eh = 2 * m.hidden ** 2 * 2
    for tp in (1, 8):
        lay, prec = Layout(tp=tp, ep=8), Precision(weights="fp8")
        mtp = weight_bytes(m, lay, prec, mtp=True) - weight_bytes(m, lay, prec)
        layer = m.attention_params_per_rank(tp) * FP8 + 32 * m.expert_params * FP8 + m.shared_params * FP8 / tp
        assert mtp == pytest.approx(layer + m.router_params * 2 + eh), tp


def test_moe_tp_and_offload_move_the_expert_weights():
    m = load_model("deepseek-v3")
    prec = Precision(weights="fp8")
    # TP 8 attention, experts TP 4 x EP 2: each rank holds 128 experts at a quarter of their width
    split = weight_bytes(m, Layout(tp=8, ep=2, moe_tp=4), prec) - weight_bytes(m, Layout(tp=8, ep=8), prec)
    assert split == pytest.approx(58 * (128 / 4 - 32) * m.expert_params * FP8) == 0
    # offloaded (all MoE layers): the routed experts live in host memory, two layers' worth on the GPU
    lay = Layout(ep=2)
    routed_layer = 128 * m.expert_params * FP8
    assert weight_bytes(m, lay, prec) - weight_bytes(m, lay, prec, offload_layers=58) == pytest.approx((58 - 2) * routed_layer)
    r = memory_report(m, lay, prec, 186, tokens_per_step=16384, kv_tokens_needed=1, offload=True, host_gb=240)
    assert 2 < r.offloaded_layers < 58 and r.host_budget == pytest.approx(0.9 * 240e9)  # the fewest that fit
    assert r.host_weights == pytest.approx(r.offloaded_layers * routed_layer)
    assert r.fits is (r.total <= r.budget and r.host_weights <= r.host_budget)
    assert not memory_report(m, lay, prec, 186, tokens_per_step=16384, kv_tokens_needed=1, offload=True, host_gb=1).fits


def test_offload_moves_only_the_layers_that_do_not_fit():
    """--offload-weights keeps as many MoE layers resident as fit: the excess over the budget, in whole
    layers, plus the two layers of buffers the streamed ones pass through; none when all fits."""
    m = load_model("deepseek-v3")
    prec, lay = Precision(weights="fp8", moe="fp4"), Layout(ep=2)
    routed_layer = 128 * m.expert_params * (0.5 + 1 / 16)
    assert routed_expert_bytes(m, lay, prec) == pytest.approx(routed_layer)
    assert layers_to_offload(m, lay, prec, 0) == 0 and layers_to_offload(m, lay, prec, -5e9) == 0
    assert layers_to_offload(m, lay, prec, 1e6) == 3  # a megabyte too many: one layer freed, through two buffers
    assert layers_to_offload(m, lay, prec, 10 * routed_layer) == 12
    assert layers_to_offload(m, lay, prec, 1e15) == 58  # never more than every MoE layer
    # 12 layers streamed: the GPU holds 46 resident + 2 buffers, the host the 12
    assert weight_bytes(m, lay, prec) - weight_bytes(m, lay, prec, offload_layers=12) == pytest.approx(
        10 * routed_layer)
    # by hand on a GB200 (186 GB at 0.9): the excess over the budget sets the layers
    kw = dict(tokens_per_step=16384, kv_tokens_needed=4096, host_gb=240)
    plain = memory_report(m, lay, prec, 186, **kw)
    excess = plain.total - plain.budget
    assert excess > 0 and not plain.fits
    r = memory_report(m, lay, prec, 186, offload=True, **kw)
    layers = math.ceil(excess / routed_layer) + 2
    assert r.offloaded_layers == layers and r.host_weights == pytest.approx(layers * routed_layer) and r.fits
    assert r.as_dict()["offloaded_moe_layers"] == layers
    roomy = memory_report(m, lay, prec, 1000, offload=True, **kw)  # everything fits: nothing offloaded
    assert roomy.offloaded_layers == 0 and roomy.host_weights == 0 and "offloaded_moe_layers" not in roomy.as_dict()
