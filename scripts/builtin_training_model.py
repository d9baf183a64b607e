"""The built-in model's training-time twin: Mixtral's math in plain torch, fast enough to train on a CPU.

transformers' MixtralForCausalLM loops over experts with one_hot masks and `torch.where` per expert, which
dominates a CPU training step. This module computes the same function (RMSNorm, rotary GQA attention,
softmax top-k router with renormalised weights, SwiGLU experts) with one sort of the routed rows per
layer. Its parameter names and shapes are exactly MixtralForCausalLM's in-memory ones, so
`hf_model.load_state_dict(model.state_dict())` moves the weights over; the training script checks that
both give the same logits before it saves anything.

Shape legend: B batch, S sequence, T = B*S tokens, H hidden, E experts, k top-k, I expert intermediate,
Q query heads, K kv heads, D head dim, V vocab.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Shape:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_local_experts: int
    num_experts_per_tok: int
    rope_theta: float
    rms_norm_eps: float


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, heads, S, D]; cos/sin: [S, D] (transformers' rotate_half convention)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.s = s
        self.q_proj = nn.Linear(s.hidden_size, s.num_attention_heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.num_attention_heads * s.head_dim, s.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        s = self.s
        q = self.q_proj(x).view(B, S, s.num_attention_heads, s.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, S, s.num_key_value_heads, s.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, S, s.num_key_value_heads, s.head_dim).transpose(1, 2)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # [B, Q, S, D]
        return self.o_proj(out.transpose(1, 2).reshape(B, S, -1))


class Router(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(s.num_local_experts, s.hidden_size))


class Experts(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        E, H, I = s.num_local_experts, s.hidden_size, s.intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(E, 2 * I, H))
        self.down_proj = nn.Parameter(torch.empty(E, H, I))


class MoE(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.s = s
        self.gate = Router(s)
        self.experts = Experts(s)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: [T, H] -> (out [T, H], router probs [T, E] fp32, top-k ids [T, k])."""
        T, H = x.shape
        k, E = self.s.num_experts_per_tok, self.s.num_local_experts
        probs = F.softmax(F.linear(x, self.gate.weight).float(), dim=-1)
        top_w, top_i = torch.topk(probs, k, dim=-1)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        flat = top_i.reshape(-1)  # [T*k]
        order = torch.argsort(flat, stable=True)
        rows = order // k  # token of each routed row, expert-major
        counts = torch.bincount(flat, minlength=E).tolist()
        xs = x[rows].split(counts)
        outs = []
        for e in range(E):
            if counts[e] == 0:
                continue
            gate, up = F.linear(xs[e], self.experts.gate_up_proj[e]).chunk(2, dim=-1)
            outs.append(F.linear(F.silu(gate) * up, self.experts.down_proj[e]))
        y = torch.cat(outs) * top_w.reshape(-1)[order, None].to(x.dtype)
        return torch.zeros_like(x).index_add(0, rows, y), probs, top_i


class Layer(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.s = s
        self.self_attn = Attention(s)
        self.mlp = MoE(s)
        self.input_layernorm = nn.Module()
        self.input_layernorm.weight = nn.Parameter(torch.ones(s.hidden_size))
        self.post_attention_layernorm = nn.Module()
        self.post_attention_layernorm.weight = nn.Parameter(torch.ones(s.hidden_size))

    def forward(self, x, cos, sin):
        eps = self.s.rms_norm_eps
        x = x + self.self_attn(rms_norm(x, self.input_layernorm.weight, eps), cos, sin)
        B, S, H = x.shape
        moe_out, probs, top_i = self.mlp(rms_norm(x, self.post_attention_layernorm.weight, eps).reshape(-1, H))
        return x + moe_out.view(B, S, H), probs, top_i


class Backbone(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)
        self.layers = nn.ModuleList(Layer(s) for _ in range(s.num_hidden_layers))
        self.norm = nn.Module()
        self.norm.weight = nn.Parameter(torch.ones(s.hidden_size))


class TrainingMixtral(nn.Module):
    """forward(ids [B, S] int64) -> (logits [B, S, V], aux [] fp32 load-balancing loss, top-k ids per layer)."""

    def __init__(self, s: Shape, init_std: float = 0.02):
        super().__init__()
        self.s = s
        self.model = Backbone(s)
        self.lm_head = nn.Linear(s.hidden_size, s.vocab_size, bias=False)
        for name, p in self.named_parameters():
            if not name.endswith("norm.weight"):
                nn.init.normal_(p, std=init_std)

    def rope(self, S: int) -> tuple[torch.Tensor, torch.Tensor]:
        D = self.s.head_dim
        inv_freq = 1.0 / (self.s.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
        freqs = torch.outer(torch.arange(S, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def forward(self, ids: torch.Tensor):
        cos, sin = self.rope(ids.shape[1])
        x = self.model.embed_tokens(ids)
        aux = torch.zeros((), dtype=torch.float32)
        routes = []
        E, k = self.s.num_local_experts, self.s.num_experts_per_tok
        for layer in self.model.layers:
            x, probs, top_i = layer(x, cos, sin)
            # Switch-style balance term: E * sum_e (share of routed rows to e) * (mean router prob of e)
            share = torch.bincount(top_i.reshape(-1), minlength=E).float() / top_i.numel()
            aux = aux + E * (share * probs.mean(0)).sum()
            routes.append(top_i)
        x = rms_norm(x, self.model.norm.weight, self.s.rms_norm_eps)
        return self.lm_head(x), aux / len(self.model.layers), routes
