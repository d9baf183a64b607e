"""The built-in model's training twin (scripts/builtin_training_model.py) computes transformers'
MixtralForCausalLM: same parameter names and shapes, same logits, so its weights ship as a Mixtral
checkpoint, and a training step reaches every parameter."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from builtin_training_model import Shape, TrainingMixtral  # noqa: E402

SHAPE = Shape(vocab_size=97, hidden_size=32, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, num_local_experts=6, num_experts_per_tok=2, rope_theta=10000.0,
              rms_norm_eps=1e-5)


def _hf(shape: Shape):
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
                        intermediate_size=shape.intermediate_size, num_hidden_layers=shape.num_hidden_layers,
                        num_attention_heads=shape.num_attention_heads, num_key_value_heads=shape.num_key_value_heads,
                        head_dim=shape.head_dim, num_local_experts=shape.num_local_experts,
                        num_experts_per_tok=shape.num_experts_per_tok, rms_norm_eps=shape.rms_norm_eps,
                        rope_parameters={"rope_type": "default", "rope_theta": shape.rope_theta},
                        tie_word_embeddings=False)
    return MixtralForCausalLM(cfg).float().eval()


def test_training_model_equals_transformers_mixtral():
    torch.manual_seed(0)
    ours = TrainingMixtral(SHAPE, init_std=0.2).eval()
    with torch.no_grad():
        for name, p in ours.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)  # not all ones: a swapped norm would show
    hf = _hf(SHAPE)
    missing, unexpected = hf.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected and all("rotary" in m for m in missing)
    ids = torch.randint(3, SHAPE.vocab_size, (2, 19))
    with torch.no_grad():
        logits, aux, routes = ours(ids)
        expected = hf(ids).logits
    assert torch.allclose(logits, expected, rtol=1e-4, atol=1e-5 * expected.abs().max().item())
    assert len(routes) == SHAPE.num_hidden_layers and routes[0].shape == (2 * 19, 2)
    assert 0 < aux.item() < SHAPE.num_local_experts  # E * sum(share * mean prob), 1 for uniform routing


def test_a_training_step_moves_every_parameter():
    torch.manual_seed(1)
    model = TrainingMixtral(SHAPE)
    ids = torch.randint(3, SHAPE.vocab_size, (4, 16))
    logits, aux, _ = model(ids[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, SHAPE.vocab_size), ids[:, 1:].reshape(-1))
    (loss + 0.01 * aux).backward()
    no_grad = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert no_grad == [] or all("experts" in n for n in no_grad), no_grad  # an expert no token chose may stay
