"""Tensor-parallel linear layers. Weights are stored like nn.Linear: [out_features_local, in_features].

Shape legend: T tokens, I in features, O out features, tp tensor-parallel size.
Each layer loads its own shard from a `CheckpointReader` (models/checkpoint.py) so a rank reads only
the rows or columns it owns; FP8 block-scaled weights stay FP8 or are dequantized (`load_weight`).
Row-parallel layers return partial sums: the caller all-reduces
(`if ctx.tp_size > 1: dist.all_reduce(y, group=ctx.tp_group)`), so collectives stay visible.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import torch
from torch import nn

from moeserve.kernels.base import KernelWeight
from moeserve.kernels.reference.fp8 import Fp8Block, concat_rows
from moeserve.parallel_state import ParallelContext


class ShardReader(Protocol):
    """What layers need from a checkpoint reader (see models/checkpoint.py). A reader of an FP8
    checkpoint also has `fp8_keepable`, `fp8_block` and `read_fp8` (models/quant_fp8.py)."""

    def read(self, name: str, shard_dim: int | None = None, start: int = 0, end: int | None = None) -> torch.Tensor: ...

    def has(self, name: str) -> bool: ...


def divide(total: int, parts: int, what: str) -> int:
    if total % parts:
        raise ValueError(f"{what} = {total} is not divisible by the tensor-parallel size {parts}")
    return total // parts


def copy_param(param: torch.Tensor, value: torch.Tensor, name: str) -> None:
    if tuple(param.shape) != tuple(value.shape):
        raise ValueError(f"checkpoint tensor {name} has shape {tuple(value.shape)}, expected {tuple(param.shape)}")
    param.data.copy_(value)


def load_weight(layer: nn.Module, reader: ShardReader, parts: Sequence[tuple[str, int, int]], dim: int | None) -> None:
    """layer.weight from the checkpoint weights `parts`, each (module prefix, start, size): rows
    [start, start + size) of each, stacked in order (dim 0), columns [start, start + size) of the one
    part (dim 1), or the one whole tensor (dim None).

    FP8 block-scaled weights stay FP8 (kernels/reference/fp8.py) when the reader keeps them for the
    rank's kernels (`read_fp8`), the layer allows it (`keep_fp8`), and every part's shard is in block
    form (starts on a block boundary; all but the last hold whole row blocks). Otherwise `read` gives
    the values (an FP8 weight dequantized element by element), cast into the layer's dtype."""
    fp8 = _fp8_stack(layer, reader, parts, dim)
    if fp8 is not None:
        if fp8.shape != tuple(layer.weight.shape):
            raise ValueError(f"checkpoint tensor {parts[0][0]}.weight gives this rank {fp8.shape}, "
                             f"expected {tuple(layer.weight.shape)}")
        layer.weight = nn.Parameter(fp8.data, requires_grad=False)
        layer.weight_scale_inv = nn.Parameter(fp8.scale_inv, requires_grad=False)
        layer.weight_block = fp8.block
        return
    offset = 0
    for prefix, start, size in parts:
        name = f"{prefix}.weight"
        if dim is None:
            copy_param(layer.weight, reader.read(name), name)
        elif dim == 1:
            copy_param(layer.weight, reader.read(name, 1, start, start + size), name)
        else:
            copy_param(layer.weight[offset:offset + size], reader.read(name, 0, start, start + size), name)
            offset += size


def _fp8_stack(layer: nn.Module, reader: ShardReader, parts: Sequence[tuple[str, int, int]],
               dim: int | None) -> Fp8Block | None:
    """The parts as one FP8 block-form weight, or None when they are read as values instead."""
    keepable = getattr(reader, "fp8_keepable", None)
    if keepable is None or not getattr(layer, "keep_fp8", True):
        return None
    names = [(f"{prefix}.weight", start, size) for prefix, start, size in parts]
    if not all(keepable(name, dim, start) for name, start, _ in names):
        return None
    if dim == 0 and any(size % reader.fp8_block[0] for _, _, size in names[:-1]):
        return None  # a fused part that ends inside a row block: the stack would not be in block form
    return concat_rows([reader.read_fp8(name, dim, start, start + size) for name, start, size in names])


class ReplicatedLinear(nn.Module, KernelWeight):
    """Full weight on every rank (routers, tiny projections)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype), requires_grad=False) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, I] -> [T, O]."""
        return self.matmul(x, self.bias)

    def load(self, reader: ShardReader, prefix: str) -> None:
        self.unpack()
        load_weight(self, reader, [(prefix, 0, self.weight.shape[0])], None)
        if self.bias is not None:
            copy_param(self.bias, reader.read(f"{prefix}.bias"), f"{prefix}.bias")


class ColumnParallelLinear(nn.Module, KernelWeight):
    """Output features split over tp ranks; each rank returns its slice [T, O / tp] (no collective).

    `out_splits` lists the sizes of logically separate outputs fused into one matmul (e.g. gate and
    up); each is sharded on its own, so rank r holds [gate_r, up_r] and `load` takes one checkpoint
    name per split.
    """

    def __init__(
        self, in_features: int, out_splits: Sequence[int], bias: bool, ctx: ParallelContext, dtype: torch.dtype
    ):
        super().__init__()
        self.tp_size, self.tp_rank = ctx.tp_size, ctx.tp_rank
        self.local_splits = [divide(o, ctx.tp_size, "output features") for o in out_splits]
        out_local = sum(self.local_splits)
        self.weight = nn.Parameter(torch.empty(out_local, in_features, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(out_local, dtype=dtype), requires_grad=False) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, I] -> [T, O / tp]."""
        return self.matmul(x, self.bias)

    def load(self, reader: ShardReader, prefixes: Sequence[str]) -> None:
        self.unpack()
        assert len(prefixes) == len(self.local_splits)
        parts = [(prefix, self.tp_rank * size, size) for prefix, size in zip(prefixes, self.local_splits)]
        load_weight(self, reader, parts, 0)
        if self.bias is not None:
            _load_bias_rows(self.bias, reader, parts)


class QKVParallelLinear(nn.Module, KernelWeight):
    """Fused q/k/v projection with heads split over tp ranks.

    Query heads are split evenly. KV heads are split when num_kv_heads >= tp; otherwise each KV head
    is replicated on tp / num_kv_heads ranks and rank r holds KV head r * num_kv_heads // tp.
    Output per rank: [T, (q_heads_local + 2 * kv_heads_local) * head_dim].
    """

    def __init__(
        self,
        hidden: int,
        head_dim: int,
        num_heads: int,
        num_kv_heads: int,
        bias: bool,
        ctx: ParallelContext,
        dtype: torch.dtype,
    ):
        super().__init__()
        tp, rank = ctx.tp_size, ctx.tp_rank
        self.head_dim = head_dim
        self.q_heads = divide(num_heads, tp, "num_attention_heads")
        if num_kv_heads >= tp:
            self.kv_heads = divide(num_kv_heads, tp, "num_key_value_heads")
            self.kv_head_start = rank * self.kv_heads
        else:
            if tp % num_kv_heads:
                raise ValueError(f"tensor-parallel size {tp} is not a multiple of num_key_value_heads {num_kv_heads}")
            self.kv_heads = 1
            self.kv_head_start = rank * num_kv_heads // tp
        self.kv_replicas = max(1, tp // num_kv_heads)
        self.q_head_start = rank * self.q_heads
        out_local = (self.q_heads + 2 * self.kv_heads) * head_dim
        self.weight = nn.Parameter(torch.empty(out_local, hidden, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(out_local, dtype=dtype), requires_grad=False) if bias else None

    @property
    def q_size(self) -> int:
        return self.q_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.kv_heads * self.head_dim

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, I] -> [T, (q_heads_local + 2 * kv_heads_local) * D]: q, k, v columns side by side."""
        return self.matmul(x, self.bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [T, I] -> q [T, q_heads_local * D], k and v [T, kv_heads_local * D]."""
        qkv = self.project(x)
        return qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)

    def load(self, reader: ShardReader, q_prefix: str, k_prefix: str, v_prefix: str) -> None:
        self.unpack()
        D = self.head_dim
        parts = [
            (q_prefix, self.q_head_start * D, self.q_size),
            (k_prefix, self.kv_head_start * D, self.kv_size),
            (v_prefix, self.kv_head_start * D, self.kv_size),
        ]
        load_weight(self, reader, parts, 0)
        if self.bias is not None:
            _load_bias_rows(self.bias, reader, parts)


class RowParallelLinear(nn.Module, KernelWeight):
    """Input features split over tp ranks; returns a partial sum [T, O] that the caller all-reduces.

    The bias (if any) is added on tp rank 0 only, so the all-reduced sum adds it once.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool, ctx: ParallelContext, dtype: torch.dtype):
        super().__init__()
        self.tp_size, self.tp_rank = ctx.tp_size, ctx.tp_rank
        self.in_local = divide(in_features, ctx.tp_size, "input features")
        self.weight = nn.Parameter(torch.empty(out_features, self.in_local, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype), requires_grad=False) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, I / tp] -> partial [T, O]."""
        bias = self.bias if self.tp_rank == 0 else None
        return self.matmul(x, bias)

    def load(self, reader: ShardReader, prefix: str) -> None:
        self.unpack()
        load_weight(self, reader, [(prefix, self.tp_rank * self.in_local, self.in_local)], 1)
        if self.bias is not None:
            copy_param(self.bias, reader.read(f"{prefix}.bias"), f"{prefix}.bias")


def _load_bias_rows(bias: torch.Tensor, reader: ShardReader, parts: Sequence[tuple[str, int, int]]) -> None:
    offset = 0
    for prefix, start, size in parts:
        copy_param(bias[offset:offset + size], reader.read(f"{prefix}.bias", 0, start, start + size), prefix)
        offset += size
