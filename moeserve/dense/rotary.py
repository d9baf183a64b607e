"""Rotary position embeddings (GPT-NeoX "rotate half" layout, as in Hugging Face Llama-family models).

Shape legend: N tokens, h heads, D head dim (rotary dim = D here), P = D / 2 frequencies.
`inv_freq` is computed per rope type; YaRN lives in dense/yarn.py and plugs in the same way
(an inv_freq [P] and an attention scaling factor applied to cos/sin).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from moeserve.kernels.base import UsesKernels, apply_rotary_reference


def default_inv_freq(dim: int, theta: float) -> torch.Tensor:
    """[dim / 2] fp32, computed exactly as transformers does (fp32 arange, int64 -> float)."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def rope_parameters(hf_config: Any) -> dict:
    """The rope dict of a transformers >= 5 config, or the legacy rope_theta/rope_scaling fields."""
    params = getattr(hf_config, "rope_parameters", None)
    if params:
        return dict(params)
    scaling = dict(getattr(hf_config, "rope_scaling", None) or {})
    scaling.setdefault("rope_type", scaling.pop("type", "default"))
    scaling.setdefault("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    return scaling


def inv_freq_for(params: dict, dim: int, max_position_embeddings: int | None = None) -> tuple[torch.Tensor, float]:
    """(inv_freq [dim / 2] fp32, cos/sin scaling) for the rope types plain attention supports:
    default, linear and yarn (Qwen3-MoE's long-context setting; the formulas of dense/yarn.py, which
    DeepSeek's MLA uses too, with transformers' `_compute_yarn_parameters` defaults)."""
    rope_type = params.get("rope_type", "default")
    theta = float(params["rope_theta"])
    if rope_type == "default":
        return default_inv_freq(dim, theta), 1.0
    if rope_type == "linear":
        return default_inv_freq(dim, theta) / float(params["factor"]), 1.0
    if rope_type == "yarn":
        from moeserve.dense.yarn import inv_freq_and_attention_factor, rope_config_from_params

        if max_position_embeddings is None and not params.get("original_max_position_embeddings"):
            raise ValueError("yarn rope needs max_position_embeddings or original_max_position_embeddings")
        rope = rope_config_from_params(params, dim, max_position_embeddings or params["original_max_position_embeddings"])
        return inv_freq_and_attention_factor(rope)
    raise ValueError(f"rope_type {rope_type!r} is not supported here; supported: default, linear, yarn")


class RotaryEmbedding(nn.Module, UsesKernels):
    def __init__(self, inv_freq: torch.Tensor, scaling: float = 1.0):
        super().__init__()
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)
        self.scaling = scaling
        # equal keys give equal cos/sin, so the layers of one step can share them
        self.key = (self.inv_freq.numpy().tobytes(), scaling)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [N] int64 -> cos, sin [N, D] in `dtype` (frequencies computed in fp32)."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [N, P]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = self.kernels.elementwise(torch.cos, emb), self.kernels.elementwise(torch.sin, emb)
        return (cos * self.scaling).to(dtype), (sin * self.scaling).to(dtype)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [N]; q [N, hq, D]; k [N, hk, D] -> rotated q, k (same shapes and dtype)."""
        cos, sin = self.cos_sin(positions, q.dtype)
        return apply_rotary_reference(q, cos, sin), apply_rotary_reference(k, cos, sin)


