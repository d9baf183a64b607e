"""Routers: router logits (or hidden states) -> logical expert ids and their weights.

Every router has the same call signature so `MoELayer` takes any of them:
    router(router_logits [T, E]) -> (topk_ids [T, k] int64 logical expert ids, topk_weights [T, k] fp32)
DeepSeek's sigmoid + bias + group-limited router (moe/deepseek_router.py) follows the same contract.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from moeserve.kernels.base import UsesKernels


class Router(Protocol):
    top_k: int

    def __call__(self, router_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class SoftmaxTopKRouter(nn.Module, UsesKernels):
    """Softmax over all experts in fp32, then top-k; `renormalize` rescales the k weights to sum to 1
    (Mixtral always; Qwen-MoE and OLMoE when config.norm_topk_prob). Runs through the bound kernel
    set's `softmax_topk` (the cpu set's is one C++ op with torch.topk's tie order)."""

    def __init__(self, top_k: int, renormalize: bool):
        super().__init__()
        self.top_k, self.renormalize = top_k, renormalize

    def forward(self, router_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """router_logits [T, E] any float dtype -> ids [T, k] int64, weights [T, k] fp32."""
        return self.kernels.softmax_topk(router_logits, self.top_k, self.renormalize)


class TopKSoftmaxRouter(nn.Module):
    """Top-k of the logits, then a softmax over those k (gpt-oss): the k weights sum to 1. The same
    experts as SoftmaxTopKRouter with renormalize; computed as transformers' GptOssTopKRouter does."""

    def __init__(self, top_k: int):
        super().__init__()
        self.top_k = top_k

    def forward(self, router_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """router_logits [T, E] any float dtype -> ids [T, k] int64, weights [T, k] fp32."""
        values, ids = torch.topk(router_logits.float(), self.top_k, dim=-1)
        return ids, torch.softmax(values, dim=-1)


def softmax_topk_reference(
    router_logits: torch.Tensor, top_k: int, renormalize: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row by row with a sort: the plain version `SoftmaxTopKRouter` is tested against."""
    ids, weights = [], []
    for row in router_logits.float():
        p = torch.exp(row - row.max())
        p = p / p.sum()
        order = torch.sort(p, descending=True, stable=True).indices[:top_k]
        w = p[order]
        ids.append(order)
        weights.append(w / w.sum() if renormalize else w)
    T = router_logits.shape[0]
    if T == 0:
        return torch.zeros(0, top_k, dtype=torch.int64, device=router_logits.device), torch.zeros(0, top_k, device=router_logits.device)
    return torch.stack(ids), torch.stack(weights)
