"""Rotary embeddings for DeepSeek's MLA: default and YaRN frequencies, the softmax mscale, and the
three pair layouts transformers uses for the rope part of the head.

YaRN (https://arxiv.org/abs/2309.00071) blends interpolated and extrapolated inverse frequencies
with a linear ramp over the rotary dimensions and multiplies cos/sin by an `attention_factor`.
DeepSeek additionally multiplies the softmax scale by `mscale(factor, mscale_all_dim) ** 2`. Both
follow transformers 5.23 (`_compute_yarn_parameters`, `yarn_apply_mscale`) formula for formula, so
logits match its forward in fp32.

Layouts (`RopeLayout`), all rotating pair i by angle pos * inv_freq[i]:
  "interleaved": pairs (x0, x1), (x2, x3), ...; the output is de-interleaved
      [rotated evens | rotated odds] (DeepSeek-V3 with `rope_interleave`, and DeepSeek-V2, whose
      complex-number form returns the same values interleaved: q.k is invariant to that permutation
      because q and k get the same one, and only q.k ever reads the rope part).
  "half": pairs (x_i, x_{i + d/2}), the GPT-NeoX `rotate_half` form (V3 with `rope_interleave=False`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

from torch import nn

from moeserve.kernels.base import UsesKernels

RopeLayout = Literal["interleaved", "half"]


@dataclass(frozen=True)
class RopeConfig:
    """What the rope of one model needs, read once from the HF config.

    rope_type: "default" or "yarn" (the only types DeepSeek checkpoints use).
    dim: rotary dims per head (DeepSeek: qk_rope_head_dim).
    """

    rope_type: str
    dim: int
    theta: float
    factor: float = 1.0
    original_max_position_embeddings: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True


SUPPORTED_ROPE_TYPES = ("default", "yarn")


def rope_config_from_hf(hf_config: Any, dim: int) -> RopeConfig:
    """Accepts both transformers 5 `rope_parameters` and the legacy `rope_scaling` + `rope_theta` fields."""
    params = dict(getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {})
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ValueError(
            f"rope type {rope_type!r} is not supported for DeepSeek; valid: {', '.join(SUPPORTED_ROPE_TYPES)}"
        )
    params.setdefault("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    return rope_config_from_params(params, dim, hf_config.max_position_embeddings)


def rope_config_from_params(params: dict, dim: int, max_position_embeddings: int) -> RopeConfig:
    """A RopeConfig from a rope dict (rope_type, rope_theta, YaRN's fields), with transformers' defaults:
    a missing `factor` is max_position_embeddings / original_max_position_embeddings, a missing
    original_max_position_embeddings is max_position_embeddings."""
    rope_type = params.get("rope_type", params.get("type", "default"))
    theta = float(params.get("rope_theta", 10000.0))
    if rope_type == "default":
        return RopeConfig("default", dim, theta)
    original = params.get("original_max_position_embeddings") or max_position_embeddings
    return RopeConfig(
        rope_type="yarn",
        dim=dim,
        theta=theta,
        factor=float(params["factor"]) if params.get("factor") is not None else max_position_embeddings / original,
        original_max_position_embeddings=int(original),
        beta_fast=float(params.get("beta_fast") or 32),
        beta_slow=float(params.get("beta_slow") or 1),
        mscale=params.get("mscale"),
        mscale_all_dim=params.get("mscale_all_dim"),
        attention_factor=params.get("attention_factor"),
        truncate=bool(params.get("truncate", True)),
    )


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def softmax_scale(rope: RopeConfig, qk_head_dim: int) -> float:
    """qk_head_dim ** -0.5, times mscale(factor, mscale_all_dim) ** 2 under YaRN when mscale_all_dim is set."""
    scale = qk_head_dim**-0.5
    if rope.rope_type != "default" and rope.mscale_all_dim:
        m = yarn_get_mscale(rope.factor, rope.mscale_all_dim)
        scale = scale * m * m
    return scale


def inv_freq_and_attention_factor(rope: RopeConfig) -> tuple[torch.Tensor, float]:
    """Returns inv_freq [dim // 2] fp32 and the factor cos/sin are multiplied by."""
    exponents = torch.arange(0, rope.dim, 2, dtype=torch.int64).float() / rope.dim
    if rope.rope_type == "default":
        return 1.0 / (rope.theta**exponents), 1.0
    pos_freqs = rope.theta**exponents
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (rope.factor * pos_freqs)
    low, high = _correction_range(rope)
    # 1 where the dimension keeps its original (extrapolated) frequency, 0 where it is interpolated
    keep = 1 - _linear_ramp(low, high, rope.dim // 2)
    inv_freq = interpolation * (1 - keep) + extrapolation * keep
    return inv_freq, _attention_factor(rope)


def _attention_factor(rope: RopeConfig) -> float:
    if rope.attention_factor is not None:
        return float(rope.attention_factor)
    if rope.mscale and rope.mscale_all_dim:
        return float(yarn_get_mscale(rope.factor, rope.mscale) / yarn_get_mscale(rope.factor, rope.mscale_all_dim))
    return yarn_get_mscale(rope.factor)


def _correction_range(rope: RopeConfig) -> tuple[float, float]:
    def dim_for(num_rotations: float) -> float:
        ctx = rope.original_max_position_embeddings
        return (rope.dim * math.log(ctx / (num_rotations * 2 * math.pi))) / (2 * math.log(rope.theta))

    low, high = dim_for(rope.beta_fast), dim_for(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, rope.dim - 1)


def _linear_ramp(low: float, high: float, n: int) -> torch.Tensor:
    if low == high:
        high += 0.001  # avoids a division by zero, as transformers does
    return torch.clamp((torch.arange(n, dtype=torch.float32) - low) / (high - low), 0, 1)


class MlaRotaryEmbedding(nn.Module, UsesKernels):
    """Holds inv_freq (a buffer: it moves with the model, so no step copies it to the device);
    `cos_sin(positions)` -> (cos, sin) [N, dim // 2] fp32, already times attention_factor."""

    def __init__(self, rope: RopeConfig, layout: RopeLayout):
        super().__init__()
        self.rope = rope
        self.layout = layout
        inv_freq, self.attention_factor = inv_freq_and_attention_factor(rope)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: [N] int64 absolute positions."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        cos, sin = self.kernels.elementwise(torch.cos, freqs), self.kernels.elementwise(torch.sin, freqs)
        return cos * self.attention_factor, sin * self.attention_factor

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x: [N, ..., dim] (any heads in between); cos/sin: [N, dim // 2]. Returns x's shape and dtype."""
        return apply_rope(x, cos, sin, self.layout)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: RopeLayout) -> torch.Tensor:
    """x [N, ..., d]; cos/sin [N, d // 2]. Rotation in fp32, result cast back to x.dtype."""
    # N tokens, d rotary dims
    shape = (cos.shape[0],) + (1,) * (x.dim() - 2) + (cos.shape[1],)
    c, s = cos.reshape(shape), sin.reshape(shape)
    xf = x.float()
    if layout == "interleaved":
        a, b = xf[..., 0::2], xf[..., 1::2]
    elif layout == "half":
        a, b = xf.chunk(2, dim=-1)
    else:
        raise ValueError(f"unknown rope layout {layout!r}; valid: interleaved, half")
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1).to(x.dtype)
