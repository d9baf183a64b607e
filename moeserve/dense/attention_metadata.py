"""Per-step attention metadata for paged attention, built once from a GroupBatch and passed explicitly.

Shape legend: N new tokens in the step, B sequences, Q = max new tokens of one sequence,
L = max context length (cached + new) of one sequence, M = max blocks per sequence.
Tokens are laid out sequence by sequence, in `GroupBatch.seqs` order.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from moeserve.core.step_plan import GroupBatch


@dataclass
class AttentionMetadata:
    input_ids: torch.Tensor  # [N] int64
    positions: torch.Tensor  # [N] int64 absolute positions
    slot_mapping: torch.Tensor  # [N] int64 flat cache slot (block * block_size + offset) each new token writes
    query_start: torch.Tensor  # [B + 1] int64 cumulative new-token offsets
    seq_lens: torch.Tensor  # [B] int64 context length after this step (cached + new)
    context_slots: torch.Tensor  # [B, L] int64 flat cache slots of each sequence's context, padded with 0
    attn_mask: torch.Tensor  # [B, 1, Q, L] bool: True where query q of sequence b may attend to key l
    query_index: torch.Tensor  # [B, Q] int64 index into the N new tokens, padded with 0
    query_valid: torch.Tensor  # [B, Q] bool
    sample_index: torch.Tensor  # [S] int64 rows of N whose logits are sampled (seqs with sample=True)
    block_size: int
    # [B, C] int64 cache blocks holding each context, C = ceil(L / block_size), padded with block 0
    block_tables: torch.Tensor | None = None
    # [B, 1, Q, C * block_size] fp32 additive mask over block-gathered keys: 0 visible, -inf hidden
    attn_bias: torch.Tensor | None = None
    # decode steps (Q == 1) only: sequences split by context length into [(seq_index [b] int64, C_b)];
    # each group gathers and attends over its own C_b blocks instead of everyone padding to C
    decode_groups: list[tuple[torch.Tensor, int]] | None = None
    # per-step tensors every layer derives the same way (rotary cos/sin), computed by the first layer
    derived: dict = field(default_factory=dict, repr=False)

    def to(self, device: torch.device) -> AttentionMetadata:
        """This metadata on `device` (itself on the CPU): each host tensor is pinned and copied without
        blocking the host, queued on the current stream ahead of the step's kernels."""
        if device.type == "cpu":
            return self

        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.pin_memory().to(device, non_blocking=True)

        tensors = {f.name: move(getattr(self, f.name)) for f in dataclasses.fields(self)
                   if isinstance(getattr(self, f.name), torch.Tensor)}
        groups = [(move(index), c) for index, c in self.decode_groups] if self.decode_groups else self.decode_groups
        return dataclasses.replace(self, **tensors, decode_groups=groups, derived={})

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_seqs(self) -> int:
        return int(self.seq_lens.shape[0])


def build_attention_metadata(batch: GroupBatch, block_size: int) -> AttentionMetadata:
    """Vectorised over tokens (numpy); the per-sequence Python work is a few list operations."""
    seqs = batch.seqs
    n_new = np.array([len(s.token_ids) for s in seqs], dtype=np.int64)
    starts = np.array([s.start_pos for s in seqs], dtype=np.int64)
    B = len(seqs)
    N = int(n_new.sum())
    seq_lens = starts + n_new
    Q = int(n_new.max()) if B else 0
    L = int(seq_lens.max()) if B else 0
    M = max((len(s.block_table) for s in seqs), default=0)

    tables = np.zeros((B, max(M, 1)), dtype=np.int64)
    for i, s in enumerate(seqs):
        tables[i, : len(s.block_table)] = s.block_table

    query_start = np.zeros(B + 1, dtype=np.int64)
    np.cumsum(n_new, out=query_start[1:])
    seq_of_token = np.repeat(np.arange(B), n_new)
    positions = np.arange(N, dtype=np.int64) - query_start[seq_of_token] + starts[seq_of_token]
    slot_mapping = tables[seq_of_token, positions // block_size] * block_size + positions % block_size

    pos_l = np.arange(L, dtype=np.int64)
    context_slots = tables[:, np.minimum(pos_l // block_size, tables.shape[1] - 1)] * block_size + pos_l % block_size
    context_valid = pos_l[None, :] < seq_lens[:, None]
    context_slots = np.where(context_valid, context_slots, 0)

    q_off = np.arange(Q, dtype=np.int64)
    query_valid = q_off[None, :] < n_new[:, None]
    query_index = np.where(query_valid, query_start[:B, None] + q_off[None, :], 0)
    query_pos = starts[:, None] + q_off[None, :]  # [B, Q]
    attn_mask = (pos_l[None, None, :] <= query_pos[:, :, None]) & context_valid[:, None, :]
    attn_mask &= query_valid[:, :, None]
    # padded query rows attend to key 0 so softmax stays finite; their outputs are discarded
    if L:
        attn_mask[:, :, 0] |= ~query_valid

    C = -(-L // block_size)
    block_tables = tables[:, :C] if M >= C else np.pad(tables, ((0, 0), (0, C - M)))
    attn_bias = attention_bias(attn_mask, C * block_size)
    decode_groups = None
    if Q == 1 and B > 1:
        blocks_per_seq = -(-seq_lens // block_size)
        decode_groups = [(torch.from_numpy(idx), c) for idx, c in split_by_blocks(blocks_per_seq)]

    sample_index = np.array([query_start[i + 1] - 1 for i, s in enumerate(seqs) if s.sample], dtype=np.int64)
    ids = np.fromiter((t for s in seqs for t in s.token_ids), dtype=np.int64, count=N)
    t = torch.from_numpy
    return AttentionMetadata(
        input_ids=t(ids),
        positions=t(positions),
        slot_mapping=t(slot_mapping),
        query_start=t(query_start),
        seq_lens=t(seq_lens),
        context_slots=t(context_slots),
        attn_mask=t(attn_mask[:, None]),
        query_index=t(query_index),
        query_valid=t(query_valid),
        sample_index=t(sample_index),
        block_size=block_size,
        block_tables=t(np.ascontiguousarray(block_tables)),
        attn_bias=t(attn_bias),
        decode_groups=decode_groups,
    )


def split_by_blocks(blocks_per_seq: np.ndarray, min_saving: float = 0.25) -> list[tuple[np.ndarray, int]]:
    """blocks_per_seq [B] -> [(sequence indices, blocks to gather)], one group or two.

    Two groups (at the split that gathers the fewest blocks) only when they gather at least
    `min_saving` fewer blocks than one group padded to the longest context: a second group costs
    a few more ops per layer, which a small saving does not repay.
    """
    B, C = len(blocks_per_seq), int(blocks_per_seq.max())
    best_cost, best_split = B * C, None
    for split in np.unique(blocks_per_seq)[:-1]:
        short = int((blocks_per_seq <= split).sum())
        cost = short * int(split) + (B - short) * C
        if cost < best_cost:
            best_cost, best_split = cost, int(split)
    if best_split is None or best_cost > (1 - min_saving) * B * C:
        return [(np.arange(B), C)]
    short = blocks_per_seq <= best_split
    return [(np.flatnonzero(short), best_split), (np.flatnonzero(~short), C)]


def attention_bias(attn_mask: np.ndarray, width: int) -> np.ndarray:
    """attn_mask [B, Q, L] bool -> [B, 1, Q, width] fp32, 0 where visible, -inf elsewhere (width >= L)."""
    B, Q, L = attn_mask.shape
    bias = np.full((B, 1, Q, width), -np.inf, dtype=np.float32)
    bias[:, 0, :, :L][attn_mask] = 0.0
    return bias
