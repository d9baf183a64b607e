"""Per-step attention metadata for paged attention, built once from a GroupBatch and passed explicitly.

Shape legend: N new tokens in the step, B sequences, Q = max new tokens of one sequence,
L = max context length (cached + new) of one sequence, M = max blocks per sequence, C blocks that
cover L.
Tokens are laid out sequence by sequence, in `GroupBatch.seqs` order.

What every step carries is O(batch): token ids, positions and cache slots [N], query starts and
lengths [B + 1] / [B], the block tables [B, C] and the sampled rows. That is all a decode step reads
on a GPU (the Triton kernels walk the block tables; a CUDA graph replays over persistent copies of
exactly these tensors, engine/step_inputs.py). The padded views some paths need (the torch set's
gather + SDPA, MLA's padded prefill paths, the reference) are O(batch x context): they are built on
the host from `host` (the step's lengths and tables as numpy) the first time a path reads them, once
per step, and never for a step whose paths do not read them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from moeserve.core.step_plan import GroupBatch


@dataclass(frozen=True)
class HostBatch:
    """The step's shape on the host (numpy, never a device value): what the padded views derive from."""

    n_new: np.ndarray  # [B] int64 new tokens of each sequence
    starts: np.ndarray  # [B] int64 position of each sequence's first new token
    tables: np.ndarray  # [B, max(M, 1)] int64 block ids, padded with 0

    @property
    def seq_lens(self) -> np.ndarray:
        return self.starts + self.n_new


@dataclass
class PaddedViews:
    """The O(batch x context) views of a step (fields as documented on AttentionMetadata)."""

    context_slots: torch.Tensor  # [B, L] int64
    attn_mask: torch.Tensor  # [B, 1, Q, L] bool
    query_index: torch.Tensor  # [B, Q] int64
    query_valid: torch.Tensor  # [B, Q] bool
    query_rows: torch.Tensor  # [N] int64: b * Q + q of each new token (its cell of the [B, Q] views)
    attn_bias: torch.Tensor  # [B, 1, Q, C * block_size] fp32
    decode_groups: list[tuple[torch.Tensor, int]] | None


@dataclass
class AttentionMetadata:
    input_ids: torch.Tensor  # [N] int64
    positions: torch.Tensor  # [N] int64 absolute positions
    slot_mapping: torch.Tensor  # [N] int64 flat cache slot (block * block_size + offset) each new token writes
    query_start: torch.Tensor  # [B + 1] int64 cumulative new-token offsets
    seq_lens: torch.Tensor  # [B] int64 context length after this step (cached + new)
    # [B, C] int64 cache blocks holding each context, C >= ceil(L / block_size); entries past a
    # sequence's blocks are arbitrary (padded with block 0, or whatever a persistent buffer held)
    block_tables: torch.Tensor
    sample_index: torch.Tensor  # [S] int64 rows of N whose logits are sampled (seqs with sample=True; a verify's k + 1)
    block_size: int
    max_query_len: int  # Q, on the host
    max_seq_len: int  # L, on the host (an upper bound for a captured CUDA graph: max_model_len)
    # the step's lengths and tables on the host, from which the padded views are built; None where the
    # metadata stands for many steps (a CUDA graph's), which only decode paths that need no views read
    host: HostBatch | None = None
    # per-step tensors every layer derives the same way (rotary cos/sin, the padded views), computed
    # by the first layer that needs them
    derived: dict = field(default_factory=dict, repr=False)

    def to(self, device: torch.device) -> AttentionMetadata:
        """This metadata on `device` (itself on the CPU): each host tensor is pinned and copied without
        blocking the host, queued on the current stream ahead of the step's kernels."""
        if device.type == "cpu" or self.input_ids.device == device:
            return self
        tensors = {f.name: _move(getattr(self, f.name), device) for f in dataclasses.fields(self)
                   if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **tensors, derived={})

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_seqs(self) -> int:
        return int(self.seq_lens.shape[0])

    @property
    def is_decode(self) -> bool:
        """One new token per sequence (decode, or prompts of one token): the shape CUDA graphs capture."""
        return self.max_query_len <= 1 and self.num_tokens == self.num_seqs

    def from_host(self, array: np.ndarray) -> torch.Tensor:
        """A host int64 array as a tensor on this metadata's device (pinned, copied without blocking)."""
        t = torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))
        return t if self.input_ids.device.type == "cpu" else _move(t, self.input_ids.device)

    # ---- padded views (O(batch x context), built on first use) ----------------------------------------
    def padded(self) -> PaddedViews:
        if "padded" not in self.derived:
            if self.host is None:
                raise ValueError("this metadata has no host batch to build padded views from (a CUDA graph's "
                                 "decode metadata): the path that asked for them cannot run in a graph")
            views = padded_views(self.host, self.block_size, self.block_tables.shape[1])
            device = self.input_ids.device
            if device.type != "cpu":
                views = PaddedViews(**{f.name: _move(getattr(views, f.name), device) for f in dataclasses.fields(views)
                                       if f.name != "decode_groups"},
                                    decode_groups=[(_move(i, device), c) for i, c in views.decode_groups or []] or None)
            self.derived["padded"] = views
        return self.derived["padded"]

    @property
    def context_slots(self) -> torch.Tensor:
        """[B, L] int64 flat cache slots of each sequence's context, padded with 0."""
        return self.padded().context_slots

    @property
    def attn_mask(self) -> torch.Tensor:
        """[B, 1, Q, L] bool: True where query q of sequence b may attend to key l."""
        return self.padded().attn_mask

    @property
    def query_index(self) -> torch.Tensor:
        """[B, Q] int64 index into the N new tokens, padded with 0."""
        return self.padded().query_index

    @property
    def query_valid(self) -> torch.Tensor:
        """[B, Q] bool."""
        return self.padded().query_valid

    @property
    def attn_bias(self) -> torch.Tensor:
        """[B, 1, Q, C * block_size] fp32 additive mask over block-gathered keys: 0 visible, -inf hidden."""
        return self.padded().attn_bias

    @property
    def decode_groups(self) -> list[tuple[torch.Tensor, int]] | None:
        """Decode steps (Q == 1) only: sequences split by context length into [(seq_index [b] int64, C_b)];
        each group gathers and attends over its own C_b blocks instead of everyone padding to C."""
        return self.padded().decode_groups


def _move(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t.pin_memory().to(device, non_blocking=True)


def host_batch(batch: GroupBatch) -> HostBatch:
    seqs = batch.seqs
    M = max((len(s.block_table) for s in seqs), default=0)
    tables = np.zeros((len(seqs), max(M, 1)), dtype=np.int64)
    for i, s in enumerate(seqs):
        tables[i, : len(s.block_table)] = s.block_table
    return HostBatch(
        n_new=np.array([len(s.token_ids) for s in seqs], dtype=np.int64),
        starts=np.array([s.start_pos for s in seqs], dtype=np.int64),
        tables=tables,
    )


def build_attention_metadata(batch: GroupBatch, block_size: int) -> AttentionMetadata:
    """The step's metadata on the CPU, O(batch): vectorised over tokens (numpy); the per-sequence
    Python work is a few list operations."""
    seqs = batch.seqs
    host = host_batch(batch)
    n_new, starts, tables = host.n_new, host.starts, host.tables
    B = len(seqs)
    N = int(n_new.sum())
    seq_lens = starts + n_new
    query_start = np.zeros(B + 1, dtype=np.int64)
    np.cumsum(n_new, out=query_start[1:])
    seq_of_token = np.repeat(np.arange(B), n_new)
    positions = np.arange(N, dtype=np.int64) - query_start[seq_of_token] + starts[seq_of_token]
    slot_mapping = tables[seq_of_token, positions // block_size] * block_size + positions % block_size
    L = int(seq_lens.max()) if B else 0
    C = max(-(-L // block_size), 1)
    block_tables = tables[:, :C] if tables.shape[1] >= C else np.pad(tables, ((0, 0), (0, C - tables.shape[1])))
    # a verify (speculative decoding) samples its newest token's row and each draft's
    sample_index = np.array([r for i, s in enumerate(seqs) for r in range(query_start[i + 1] - s.num_sampled_rows,
                                                                          query_start[i + 1])], dtype=np.int64)
    ids = np.fromiter((t for s in seqs for t in s.token_ids), dtype=np.int64, count=N)
    t = torch.from_numpy
    return AttentionMetadata(
        input_ids=t(ids),
        positions=t(positions),
        slot_mapping=t(slot_mapping),
        query_start=t(query_start),
        seq_lens=t(seq_lens),
        block_tables=t(np.ascontiguousarray(block_tables)),
        sample_index=t(sample_index),
        block_size=block_size,
        max_query_len=int(n_new.max()) if B else 0,
        max_seq_len=L,
        host=host,
    )


def empty_metadata(block_size: int, device: torch.device | None = None) -> AttentionMetadata:
    """Zero tokens, zero sequences."""
    i64 = dict(dtype=torch.int64, device=device)
    empty = np.zeros(0, dtype=np.int64)
    return AttentionMetadata(
        input_ids=torch.zeros(0, **i64),
        positions=torch.zeros(0, **i64),
        slot_mapping=torch.zeros(0, **i64),
        query_start=torch.zeros(1, **i64),
        seq_lens=torch.zeros(0, **i64),
        block_tables=torch.zeros(0, 1, **i64),
        sample_index=torch.zeros(0, **i64),
        block_size=block_size,
        max_query_len=0,
        max_seq_len=0,
        host=HostBatch(empty, empty, np.zeros((0, 1), dtype=np.int64)),
    )


def padded_views(host: HostBatch, block_size: int, width: int) -> PaddedViews:
    """The padded views of a step (numpy on the host, returned as CPU tensors); width: the block
    tables' C (the bias covers width * block_size keys)."""
    n_new, starts = host.n_new, host.starts
    B = n_new.shape[0]
    seq_lens = host.seq_lens
    Q = int(n_new.max()) if B else 0
    L = int(seq_lens.max()) if B else 0
    tables = host.tables
    query_start = np.zeros(B + 1, dtype=np.int64)
    np.cumsum(n_new, out=query_start[1:])

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

    decode_groups = None
    if Q == 1 and B > 1:
        blocks_per_seq = -(-seq_lens // block_size)
        decode_groups = [(torch.from_numpy(idx), c) for idx, c in split_by_blocks(blocks_per_seq)]
    t = torch.from_numpy
    return PaddedViews(
        context_slots=t(context_slots),
        attn_mask=t(attn_mask[:, None]),
        query_index=t(query_index),
        query_valid=t(query_valid),
        query_rows=t(np.flatnonzero(query_valid).astype(np.int64)),
        attn_bias=t(attention_bias(attn_mask, max(width, -(-L // block_size)) * block_size)),
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
