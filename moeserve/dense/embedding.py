"""Vocab-parallel token embedding and LM head.

The vocabulary is split into tp contiguous shards of ceil(V / tp) rows (the last may be short; it
is zero-padded). Shape legend: N tokens, V vocab, Vl = ceil(V / tp) rows per rank, H hidden.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from moeserve.dense.linear import ShardReader, copy_param
from moeserve.kernels.base import KernelWeight
from moeserve.parallel_state import ParallelContext


class _VocabShard(nn.Module):
    def __init__(self, vocab_size: int, hidden: int, ctx: ParallelContext, dtype: torch.dtype):
        super().__init__()
        self.ctx = ctx
        self.vocab_size = vocab_size
        self.rows = -(-vocab_size // ctx.tp_size)
        self.start = ctx.tp_rank * self.rows
        self.end = min(self.start + self.rows, vocab_size)
        self.weight = nn.Parameter(torch.zeros(self.rows, hidden, dtype=dtype), requires_grad=False)

    def load(self, reader: ShardReader, name: str) -> None:
        n = self.end - self.start
        copy_param(self.weight[:n], reader.read(name, 0, self.start, self.end), name)


class VocabParallelEmbedding(_VocabShard):
    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [N] int64 -> [N, H]; each rank embeds its own ids, the rest are summed in."""
        if self.ctx.tp_size == 1:
            return F.embedding(input_ids, self.weight)
        mine = (input_ids >= self.start) & (input_ids < self.end)
        local = torch.where(mine, input_ids - self.start, 0)
        out = F.embedding(local, self.weight) * mine.unsqueeze(-1).to(self.weight.dtype)
        dist.all_reduce(out, group=self.ctx.tp_group)
        return out


class ParallelLMHead(_VocabShard, KernelWeight):
    def load(self, reader: ShardReader, name: str) -> None:
        self.unpack()  # the kernel set's copy is a snapshot of the old weight
        super().load(reader, name)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [S, H] -> logits [S, V] fp32, the full vocabulary on every tp rank."""
        local = self.matmul(hidden, None).float()  # [S, Vl]
        if self.ctx.tp_size == 1:
            return local[:, : self.vocab_size]
        parts = [torch.empty_like(local) for _ in range(self.ctx.tp_size)]
        dist.all_gather(parts, local.contiguous(), group=self.ctx.tp_group)
        return torch.cat(parts, dim=-1)[:, : self.vocab_size]
