"""MLA decode on the latent cache with absorbed weights (DeepSeek-V2/V3), in plain torch.

Shape legend: b sequences (one new token each), h local heads, R kv_lora_rank, r qk_rope_head_dim,
NB cache blocks, BS block size, C blocks per sequence.
All heads share one key per token, [latent | rope key], and the value is the latent: attention is
MQA in the latent space (dense/mla.py folds W_uk into the query and applies W_uv after).
"""

from __future__ import annotations

import torch


def mla_decode(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """q_latent [b, h, R] (q_nope @ W_uk); q_rope [b, h, r]; cache [NB, BS, R + r]; block_tables
    [b, C] int64 (entries past a sequence's blocks are arbitrary); seq_lens [b] int64, the query at
    position seq_lens - 1 -> out [b, h, R] in q_latent's dtype: the softmax-weighted sum of latents.
    Scores and softmax in fp32 where the inputs are lower precision, as the padded path does."""
    b, h, R = q_latent.shape
    if b == 0:
        return q_latent.new_empty(0, h, R)
    keys = cache[block_tables].reshape(b, -1, cache.shape[-1])  # [b, C * BS, R + r]
    q = torch.cat([q_latent, q_rope], dim=-1).to(cache.dtype)  # [b, h, R + r]
    scores = torch.bmm(q, keys.transpose(1, 2)) * scale  # [b, h, C * BS]
    hidden = torch.arange(keys.shape[1], device=cache.device)[None, :] >= seq_lens[:, None].to(cache.device)
    scores = scores.masked_fill(hidden[:, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(cache.dtype)
    return torch.bmm(probs, keys[..., :R]).to(q_latent.dtype)  # [b, h, R]
