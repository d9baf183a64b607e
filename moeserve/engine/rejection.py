"""Verifying draft tokens against the target model's rows (speculative decoding's sampling rule).

Shape legend: B requests with drafts, K the most drafts of one request, R rows of the verify step
(request b owns k_b + 1 consecutive rows: row j scores the token after its j-th input), V vocabulary.

A request's drafts d_1..d_k are proposed deterministically (n-gram lookup, or the MTP layer's argmax),
so the draft distribution q is a point mass and the standard rule (Leviathan et al. 2023; Chen et al.
2023) reads: row j accepts d_{j+1} with probability min(1, p_j(d_{j+1}) / q(d_{j+1})) = p_j(d_{j+1});
at the first rejection the token is drawn from the residual norm(max(0, p_j - q)), which is p_j with
d_{j+1} removed; when every draft is accepted a bonus token is drawn from p_k. Each emitted token is
then distributed exactly as the target's own sample at that position. Greedy requests accept while the
draft equals the row's argmax and emit the argmax at the first miss: the tokens of decoding without
drafts. The token draw is the sampler's exponential race, argmax(p / E), E ~ Exp(1) (a draw from
p up to normalisation, so the residual needs no renormalising).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class DraftRows:
    """Where each request's drafts and rows lie in a verify step (host-built, moved once).

    index: [B, K + 1] int64, the step row of request b's j-th row (j <= k_b), past k_b its last row;
    drafts: [B, K] int64, draft j of request b, -1 past k_b; num_drafts: [B] int64."""

    index: torch.Tensor
    drafts: torch.Tensor
    num_drafts: torch.Tensor

    @classmethod
    def build(cls, drafts: list[list[int]], device: torch.device | None = None) -> DraftRows:
        K = max((len(d) for d in drafts), default=0)
        index, padded, start = [], [], 0
        for d in drafts:
            k = len(d)
            index.append([start + min(j, k) for j in range(K + 1)])
            padded.append(list(d) + [-1] * (K - k))
            start += k + 1
        i64 = dict(dtype=torch.int64, device=device)
        return cls(torch.tensor(index, **i64).view(len(drafts), K + 1), torch.tensor(padded, **i64).view(len(drafts), K),
                   torch.tensor([len(d) for d in drafts], **i64))

    @property
    def max_drafts(self) -> int:
        return int(self.drafts.shape[1])


def num_accepted(matches: torch.Tensor, num_drafts: torch.Tensor) -> torch.Tensor:
    """matches [B, K] bool (draft j passed its test) -> [B] int64, drafts accepted before the first
    miss; columns past a request's drafts count as misses."""
    K = matches.shape[1]
    valid = torch.arange(K, device=matches.device)[None, :] < num_drafts[:, None]
    return (matches & valid).to(torch.int64).cumprod(dim=1).sum(dim=1)


def verify_greedy(logits: torch.Tensor, rows: DraftRows) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [R, V] -> (accepted [B] int64, next token [B] int64): drafts equal to their row's
    argmax are accepted; the next token is the argmax of the row after the last accepted draft."""
    best = logits.argmax(dim=-1)[rows.index]  # [B, K + 1]
    accepted = num_accepted(best[:, :-1] == rows.drafts, rows.num_drafts)
    return accepted, best.gather(1, accepted[:, None])[:, 0]


def verify_random(probs: torch.Tensor, rows: DraftRows, uniforms: torch.Tensor,
                  exponentials: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """probs [R, V] fp32 (each row's sampling distribution: after temperature and top-k/top-p/min-p),
    uniforms [B, K] in [0, 1), exponentials [B, V] Exp(1) -> (accepted [B] int64, next token [B] int64).

    Draft j of request b is accepted when uniforms[b, j] < p_j(d_j); the next token is drawn from the
    first rejecting row with its draft removed, or from the last row when all were accepted."""
    B, K = rows.drafts.shape
    p_draft = probs[rows.index[:, :K]].gather(2, rows.drafts.clamp(min=0)[:, :, None])[:, :, 0]  # [B, K]
    accepted = num_accepted(uniforms < p_draft, rows.num_drafts)
    final = probs[rows.index.gather(1, accepted[:, None])[:, 0]]  # [B, V], a copy
    rejected = accepted < rows.num_drafts
    if K:
        drop = rows.drafts.gather(1, accepted.clamp(max=K - 1)[:, None]).clamp(min=0)  # [B, 1]
        final.scatter_(1, drop, torch.where(rejected[:, None], 0.0, final.gather(1, drop)))
    return accepted, final.div_(exponentials).argmax(dim=-1)
