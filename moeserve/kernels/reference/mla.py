"""MLA attention on the latent cache with absorbed weights (DeepSeek-V2/V3), in plain torch: decode
(one or several query tokens per sequence) and prefill over a cached prefix.

Shape legend: b sequences, n query tokens, Q query tokens per sequence (padded), h local heads,
R kv_lora_rank, r qk_rope_head_dim, NB cache blocks, BS block size, C blocks per sequence,
L = C * BS gathered keys per sequence.
All heads share one key per token, [latent | rope key], and the value is the latent: attention is
MQA in the latent space (dense/mla.py folds W_uk into the query and applies W_uv after). Query token
t of a sequence with n_b new tokens sits at position seq_len - n_b + t and sees keys up to it. Every
mask is built on the device from seq_lens and query_start: nothing here reads a device value back.
"""

from __future__ import annotations

import torch

from moeserve.kernels.reference.fp8_quant import read_dtype


def _attend(q: torch.Tensor, cache: torch.Tensor, block_tables: torch.Tensor, q_pos: torch.Tensor,
            R: int, scale: float) -> torch.Tensor:  # fmt: skip
    """q [b, Q, h, R + r] at positions q_pos [b, Q] -> [b, Q, h, R] in q's dtype (the cache's, or the
    queries' over an e4m3 cache, read upcast). Scores and softmax in fp32 where the inputs are lower
    precision."""
    b, Q, h, _ = q.shape
    keys = cache[block_tables].reshape(b, -1, cache.shape[-1]).to(q.dtype)  # [b, L, R + r]
    scores = torch.bmm(q.reshape(b, Q * h, -1), keys.transpose(1, 2)) * scale  # [b, Q * h, L]
    hidden = torch.arange(keys.shape[1], device=cache.device)[None, None, :] > q_pos[:, :, None]  # [b, Q, L]
    scores = scores.view(b, Q, h, -1).masked_fill(hidden[:, :, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.bmm(probs.view(b, Q * h, -1), keys[..., :R]).view(b, Q, h, R)


def mla_decode(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """q_latent [b, h, R] or [b, Q, h, R] (q_nope @ W_uk; Q tokens a sequence at positions seq_lens - Q
    .. seq_lens - 1); q_rope [b, h, r] or [b, Q, h, r]; cache [NB, BS, R + r]; block_tables [b, C] int64
    (entries past a sequence's blocks are arbitrary); seq_lens [b] int64 -> out shaped as q_latent, in
    its dtype: the softmax-weighted sum of latents."""
    if q_latent.shape[0] == 0:
        return q_latent.new_empty(q_latent.shape)
    several = q_latent.dim() == 4
    ql, qr = (q_latent, q_rope) if several else (q_latent[:, None], q_rope[:, None])
    Q = ql.shape[1]
    q = torch.cat([ql, qr], dim=-1).to(read_dtype(cache, ql))  # [b, Q, h, R + r]
    q_pos = seq_lens.to(cache.device)[:, None] - Q + torch.arange(Q, device=cache.device)[None, :]
    out = _attend(q, cache, block_tables, q_pos, ql.shape[-1], scale).to(q_latent.dtype)
    return out if several else out[:, 0]


def mla_prefill(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    max_query_len: int,
) -> torch.Tensor:
    """q_latent [n, h, R]; q_rope [n, h, r]; query_start [b + 1] int64 (sequence i's queries are rows
    query_start[i] .. query_start[i + 1], the last of its seq_lens[i] positions); max_query_len: the
    longest of them (host int) -> [n, h, R] in q_latent's dtype. Queries are padded to [b, Q] on the
    device and put back in token order."""
    n, h, R = q_latent.shape
    if n == 0:
        return q_latent.new_empty(q_latent.shape)
    dev = cache.device
    starts, counts = query_start[:-1], query_start[1:] - query_start[:-1]  # [b]
    cols = torch.arange(max_query_len, device=dev)
    index = (starts[:, None] + cols[None, :]).clamp(max=n - 1)  # [b, Q] rows of the n queries (padding repeats)
    q = torch.cat([q_latent, q_rope], dim=-1).to(read_dtype(cache, q_latent))[index]  # [b, Q, h, R + r]
    q_pos = seq_lens[:, None] - counts[:, None] + cols[None, :]  # [b, Q]; padded rows look past the end
    out = _attend(q, cache, block_tables, q_pos.clamp(max=seq_lens[:, None] - 1), R, scale)
    seq = torch.searchsorted(query_start[1:], torch.arange(n, device=dev), right=True)  # [n]
    cells = seq * max_query_len + torch.arange(n, device=dev) - starts[seq]
    return out.view(-1, h, R).index_select(0, cells).to(q_latent.dtype)


def mla_prefill_expanded(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    k_nope: torch.Tensor,
    k_rope: torch.Tensor,
    v: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    max_query_len: int,
) -> torch.Tensor:
    """The expanded form (per-head keys and values from kv_b_proj): q_nope [n, h, dn], q_rope [n, h, r];
    k_nope [b, L, h, dn], k_rope [b, L, r] (shared by the heads), v [b, L, h, dv] (rows past seq_lens
    are padding: finite, never weighted); query_start [b + 1] as in `mla_prefill` -> [n, h, dv] in
    q_nope's dtype. Queries padded to [b, Q] on the device; scores in the inputs' dtype, softmax in fp32."""
    n, h, _ = q_nope.shape
    if n == 0:
        return q_nope.new_empty(0, h, v.shape[-1])
    dev, L = q_nope.device, k_nope.shape[1]
    starts, counts = query_start[:-1], query_start[1:] - query_start[:-1]
    cols = torch.arange(max_query_len, device=dev)
    index = (starts[:, None] + cols[None, :]).clamp(max=n - 1)  # [b, Q]
    qn, qr = q_nope[index].transpose(1, 2), q_rope[index].transpose(1, 2)  # [b, h, Q, dn], [b, h, Q, r]
    scores = torch.matmul(qn, k_nope.permute(0, 2, 3, 1)) + torch.matmul(qr, k_rope.transpose(1, 2)[:, None])
    q_pos = seq_lens[:, None] - counts[:, None] + cols[None, :]  # [b, Q]
    hidden = torch.arange(L, device=dev)[None, None, :] > q_pos.clamp(max=seq_lens[:, None] - 1)[:, :, None]
    scores = (scores * scale).masked_fill(hidden[:, None], float("-inf"))  # [b, h, Q, L]
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
    out = torch.matmul(probs, v.transpose(1, 2)).transpose(1, 2)  # [b, Q, h, dv]
    seq = torch.searchsorted(query_start[1:], torch.arange(n, device=dev), right=True)
    cells = seq * max_query_len + torch.arange(n, device=dev) - starts[seq]
    return out.reshape(-1, h, v.shape[-1]).index_select(0, cells).to(q_nope.dtype)
