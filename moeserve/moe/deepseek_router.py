"""DeepSeek routing: V2 softmax top-k (greedy or group-limited) and V3 sigmoid scores with a
selection-only correction bias and group-limited top-k.

Both return `(topk_ids [T, k] int64, topk_weights [T, k] fp32)` with logical expert ids, the same
contract as the softmax router in `moe/router.py`; the placement map turns them into physical slots.

Semantics follow transformers 5.23 (`DeepseekV2TopkRouter`, `DeepseekV3TopkRouter`):
- V2: scores = softmax(logits). "greedy" takes the top-k scores. "group_limited_greedy" ranks
  groups by their max score, keeps the best `topk_group` groups and zeroes the rest before top-k.
  Weights = chosen scores * routed_scaling_factor. transformers ignores `norm_topk_prob` for V2
  (DeepSeek's released V2 checkpoints all set it False); we do the same and say so at load time.
- V3: scores = sigmoid(logits); the choice uses scores + e_score_correction_bias; a group's rank
  is the sum of its two best biased scores; experts of dropped groups are -inf. Weights come from
  the unbiased scores, optionally normalised to sum 1 (+1e-20), then times routed_scaling_factor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from moeserve.kernels.base import UsesKernels

SCORING_FUNCS = ("softmax", "sigmoid")
TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")


@dataclass(frozen=True)
class DeepseekRoutingConfig:
    """num_groups == 1 means no group limit. topk_method "noaux_tc" is V3's (sigmoid + bias + groups)."""

    num_experts: int
    top_k: int
    scoring_func: str = "softmax"
    topk_method: str = "greedy"
    num_groups: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = False
    routed_scaling_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.scoring_func not in SCORING_FUNCS:
            raise ValueError(f"scoring_func {self.scoring_func!r}; valid: {', '.join(SCORING_FUNCS)}")
        if self.topk_method not in TOPK_METHODS:
            raise ValueError(f"topk_method {self.topk_method!r}; valid: {', '.join(TOPK_METHODS)}")
        if self.num_experts % self.num_groups:
            raise ValueError(f"n_routed_experts {self.num_experts} is not a multiple of n_group {self.num_groups}")
        if not 1 <= self.topk_group <= self.num_groups:
            raise ValueError(f"topk_group {self.topk_group} must lie in [1, n_group={self.num_groups}]")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"num_experts_per_tok {self.top_k} must lie in [1, {self.num_experts}]")
        reachable = self.topk_group * self.num_experts // self.num_groups
        if self.topk_method != "greedy" and self.top_k > reachable:
            raise ValueError(
                f"num_experts_per_tok {self.top_k} exceeds the {reachable} experts in topk_group={self.topk_group} groups"
            )

    @classmethod
    def from_hf(cls, hf_config: Any, version: int) -> DeepseekRoutingConfig:
        """version 2: softmax (greedy / group_limited_greedy); version 3: sigmoid + bias + groups."""
        grouped = version == 3 or hf_config.topk_method == "group_limited_greedy"
        return cls(
            num_experts=hf_config.n_routed_experts,
            top_k=hf_config.num_experts_per_tok,
            scoring_func="sigmoid" if version == 3 else "softmax",
            topk_method="noaux_tc" if version == 3 else hf_config.topk_method,
            num_groups=(hf_config.n_group or 1) if grouped else 1,
            topk_group=(hf_config.topk_group or 1) if grouped else 1,
            norm_topk_prob=bool(hf_config.norm_topk_prob) if version == 3 else False,
            routed_scaling_factor=float(hf_config.routed_scaling_factor),
        )


def deepseek_topk(
    router_logits: torch.Tensor, cfg: DeepseekRoutingConfig, correction_bias: torch.Tensor | None = None,
    elementwise: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """router_logits: [T, E] fp32. correction_bias: [E] fp32 (sigmoid scoring only; None = zeros).
    elementwise: how the sigmoid is applied (the rank's kernel set's `elementwise`; None: at once).

    Returns topk_ids [T, k] int64 and topk_weights [T, k] fp32.
    """
    # T tokens, E experts, G groups, k top-k
    logits = router_logits.float()
    if cfg.scoring_func == "softmax":
        scores = logits.softmax(dim=-1)
        choice, fill = scores, 0.0
    else:
        scores = torch.sigmoid(logits) if elementwise is None else elementwise(torch.sigmoid, logits)
        choice = scores if correction_bias is None else scores + correction_bias.float()
        fill = float("-inf")
    if cfg.topk_method != "greedy":
        choice = _mask_to_best_groups(choice, cfg, fill)
    topk_ids = torch.topk(choice, k=cfg.top_k, dim=-1).indices
    weights = scores.gather(1, topk_ids)
    if cfg.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return topk_ids, weights * cfg.routed_scaling_factor


def _mask_to_best_groups(choice: torch.Tensor, cfg: DeepseekRoutingConfig, fill: float) -> torch.Tensor:
    """choice [T, E] -> [T, E] with experts outside each token's best `topk_group` groups set to `fill`."""
    T, E = choice.shape
    grouped = choice.view(T, cfg.num_groups, E // cfg.num_groups)
    if cfg.scoring_func == "sigmoid":
        group_scores = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(dim=-1)
    else:
        group_scores = grouped.amax(dim=-1)
    best = torch.topk(group_scores, k=cfg.topk_group, dim=-1).indices  # [T, topk_group]
    keep = torch.zeros(T, cfg.num_groups, dtype=torch.bool, device=choice.device)
    keep.scatter_(1, best, True)
    return grouped.masked_fill(~keep[:, :, None], fill).view(T, E)


def _reference_allowed_experts(biased: list[float], cfg: DeepseekRoutingConfig) -> list[int]:
    """Experts of one token's best `topk_group` groups (all experts for greedy); biased: [E] scores."""
    if cfg.topk_method == "greedy":
        return list(range(cfg.num_experts))
    per_group = cfg.num_experts // cfg.num_groups
    members = [list(range(g * per_group, (g + 1) * per_group)) for g in range(cfg.num_groups)]

    def group_score(g: int) -> float:
        best = sorted((biased[e] for e in members[g]), reverse=True)
        return sum(best[:2]) if cfg.scoring_func == "sigmoid" else best[0]

    groups = sorted(range(cfg.num_groups), key=group_score, reverse=True)[: cfg.topk_group]
    return [e for g in groups for e in members[g]]


def deepseek_topk_reference(
    router_logits: torch.Tensor, cfg: DeepseekRoutingConfig, correction_bias: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-by-token, group-by-group Python loop of the same rule (the test oracle). Same shapes."""
    ids_out, w_out = [], []
    use_bias = correction_bias is not None and cfg.scoring_func == "sigmoid"
    for row in router_logits.float():
        scores = row.softmax(-1) if cfg.scoring_func == "softmax" else row.sigmoid()
        biased = [float(v) for v in (scores + correction_bias.float() if use_bias else scores)]
        allowed = _reference_allowed_experts(biased, cfg)
        chosen = sorted(allowed, key=lambda e: biased[e], reverse=True)[: cfg.top_k]
        w = torch.stack([scores[e] for e in chosen])
        if cfg.norm_topk_prob:
            w = w / (w.sum() + 1e-20)
        ids_out.append(torch.tensor(chosen, dtype=torch.int64))
        w_out.append(w * cfg.routed_scaling_factor)
    return torch.stack(ids_out), torch.stack(w_out)


class DeepseekGate(nn.Module):
    """hidden -> router logits, replicated on every rank (E x H is small next to the experts).

    weight: [E, H] (checkpoint `mlp.gate.weight`). Logits are computed in fp32 as transformers does,
    whatever the model dtype.
    """

    def __init__(self, num_experts: int, hidden_size: int, dtype: torch.dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size, dtype=dtype), requires_grad=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [T, H] -> logits [T, E] fp32."""
        return F.linear(hidden.float(), self.weight.float())

    def load(self, reader: Any, name: str) -> None:
        """name: e.g. "model.layers.3.mlp.gate.weight" ([E, H])."""
        _copy(self.weight, reader.read(name), name)


class DeepseekRouter(nn.Module, UsesKernels):
    """The router contract of moe/router.py: logits [T, E] -> (topk_ids [T, k] int64, topk_weights [T, k] fp32).

    e_score_correction_bias: [E] fp32, sigmoid scoring only (checkpoint `mlp.gate.e_score_correction_bias`).
    """

    def __init__(self, cfg: DeepseekRoutingConfig):
        super().__init__()
        self.cfg = cfg
        has_bias = cfg.scoring_func == "sigmoid"
        self.e_score_correction_bias = (
            nn.Parameter(torch.zeros(cfg.num_experts, dtype=torch.float32), requires_grad=False) if has_bias else None
        )

    @property
    def top_k(self) -> int:
        return self.cfg.top_k

    def forward(self, router_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """router_logits [T, E] -> (topk_ids [T, k] int64, topk_weights [T, k] fp32)."""
        return deepseek_topk(router_logits, self.cfg, self.e_score_correction_bias, self.kernels.elementwise)

    def load(self, reader: Any, name: str) -> None:
        """name: e.g. "model.layers.3.mlp.gate.e_score_correction_bias" ([E]); read only with sigmoid scoring."""
        if self.e_score_correction_bias is not None:
            _copy(self.e_score_correction_bias, reader.read(name).float(), name)


def _copy(param: torch.Tensor, value: torch.Tensor, name: str) -> None:
    if tuple(param.shape) != tuple(value.shape):
        raise ValueError(f"checkpoint tensor {name} has shape {tuple(value.shape)}, expected {tuple(param.shape)}")
    param.data.copy_(value)
