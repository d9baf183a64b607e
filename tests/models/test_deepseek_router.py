"""DeepSeek routing against a token-by-token reference and against transformers' own gate modules."""

from __future__ import annotations

import pytest
import torch

from moeserve.moe.deepseek_router import (
    DeepseekGate,
    DeepseekRouter,
    DeepseekRoutingConfig,
    deepseek_topk,
    deepseek_topk_reference,
)

CASES = [
    # (scoring, method, E, k, groups, topk_group, norm, scale)
    ("softmax", "greedy", 8, 2, 1, 1, False, 1.0),
    ("softmax", "greedy", 13, 3, 1, 1, False, 2.0),
    ("softmax", "group_limited_greedy", 12, 3, 4, 2, False, 1.5),
    ("softmax", "group_limited_greedy", 16, 4, 8, 3, False, 1.0),
    ("sigmoid", "noaux_tc", 8, 2, 1, 1, True, 2.5),
    ("sigmoid", "noaux_tc", 16, 4, 4, 2, True, 2.5),
    ("sigmoid", "noaux_tc", 24, 6, 8, 3, False, 1.0),
    ("sigmoid", "noaux_tc", 10, 3, 5, 4, True, 0.7),
]


def _sorted(ids: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    order = ids.argsort(dim=-1)
    return ids.gather(1, order), w.gather(1, order)


@pytest.mark.parametrize("case", CASES)
def test_matches_reference(case):
    scoring, method, E, k, G, TG, norm, scale = case
    cfg = DeepseekRoutingConfig(E, k, scoring, method, G, TG, norm, scale)
    gen = torch.Generator().manual_seed(E * 31 + k)
    logits = torch.randn(37, E, generator=gen) * 2  # continuous random values: no ties
    bias = torch.randn(E, generator=gen) * 0.3 if scoring == "sigmoid" else None
    ids, w = deepseek_topk(logits, cfg, bias)
    assert ids.dtype == torch.int64 and w.dtype == torch.float32 and ids.shape == (37, k)
    ref_ids, ref_w = deepseek_topk_reference(logits, cfg, bias)
    ids, w = _sorted(ids, w)
    ref_ids, ref_w = _sorted(ref_ids, ref_w)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(w, ref_w, rtol=1e-6, atol=1e-7)


def test_bias_selects_but_does_not_weigh():
    cfg = DeepseekRoutingConfig(4, 1, "sigmoid", "noaux_tc", 1, 1, False, 1.0)
    logits = torch.tensor([[2.0, 0.0, -1.0, -2.0]])
    bias = torch.tensor([0.0, 0.0, 0.0, 5.0])
    ids, w = deepseek_topk(logits, cfg, bias)
    assert ids.tolist() == [[3]]
    torch.testing.assert_close(w, torch.sigmoid(torch.tensor([[-2.0]])))


def test_group_limit_excludes_best_expert_of_weak_group():
    # group 0 = {0, 1}: one strong expert; group 1 = {2, 3}: two good ones win on the top-2 sum
    cfg = DeepseekRoutingConfig(4, 1, "sigmoid", "noaux_tc", 2, 1, False, 1.0)
    ids, _ = deepseek_topk(torch.tensor([[3.0, -6.0, 2.0, 2.0]]), cfg)
    assert ids.tolist() in ([[2]], [[3]])
    # V2 ranks groups by their max: the strong expert's group wins
    cfg2 = DeepseekRoutingConfig(4, 1, "softmax", "group_limited_greedy", 2, 1, False, 1.0)
    ids2, _ = deepseek_topk(torch.tensor([[3.0, -6.0, 2.0, 2.0]]), cfg2)
    assert ids2.tolist() == [[0]]


def test_zero_tokens():
    cfg = DeepseekRoutingConfig(8, 2, "sigmoid", "noaux_tc", 4, 2, True, 2.5)
    ids, w = deepseek_topk(torch.zeros(0, 8), cfg, torch.zeros(8))
    assert ids.shape == (0, 2) and w.shape == (0, 2)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="n_group"):
        DeepseekRoutingConfig(10, 2, "sigmoid", "noaux_tc", 4, 2)
    with pytest.raises(ValueError, match="valid: greedy"):
        DeepseekRoutingConfig(8, 2, "softmax", "nope")
    with pytest.raises(ValueError, match="exceeds"):
        DeepseekRoutingConfig(8, 5, "sigmoid", "noaux_tc", 4, 2)


@pytest.mark.parametrize("version", [2, 3])
def test_matches_transformers_gate(version):
    from transformers import DeepseekV2Config, DeepseekV3Config
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2TopkRouter
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    torch.manual_seed(version)
    common = dict(
        hidden_size=24,
        n_routed_experts=16,
        num_experts_per_tok=4,
        n_group=4,
        topk_group=2,
        routed_scaling_factor=1.7,
        num_attention_heads=4,
        num_key_value_heads=4,
    )
    if version == 2:
        hf_cfg = DeepseekV2Config(topk_method="group_limited_greedy", **common)
        hf_gate = DeepseekV2TopkRouter(hf_cfg)
    else:
        hf_cfg = DeepseekV3Config(norm_topk_prob=True, **common)
        hf_gate = DeepseekV3TopkRouter(hf_cfg)
        hf_gate.e_score_correction_bias.normal_(0, 0.2)
    hf_gate.weight.data.normal_(0, 0.3)
    gate, ours = DeepseekGate(16, 24, torch.float32), DeepseekRouter(DeepseekRoutingConfig.from_hf(hf_cfg, version))
    gate.weight.data.copy_(hf_gate.weight.data)
    if version == 3:
        ours.e_score_correction_bias.data.copy_(hf_gate.e_score_correction_bias)
    x = torch.randn(29, 24)
    _, hf_w, hf_ids = hf_gate(x)
    ids, w = ours(gate(x))
    ids, w = _sorted(ids, w)
    hf_ids, hf_w = _sorted(hf_ids, hf_w)
    assert torch.equal(ids, hf_ids)
    torch.testing.assert_close(w, hf_w, rtol=1e-6, atol=1e-7)
