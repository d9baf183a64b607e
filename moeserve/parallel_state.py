"""Who this rank is in the tensor- and expert-parallel mesh. Plain data handed to every layer.

Layers read sizes and groups from here and issue collectives at their own call sites
(`if ctx.tp_size > 1: dist.all_reduce(x, group=ctx.tp_group)`); nothing here communicates.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParallelContext:
    """tp_*: this rank's attention (tensor-parallel) group. ep_*: the expert-parallel group (all ranks
    when ep > 1). With ep == 1 the experts are tensor-parallel inside the tp group instead."""

    tp_size: int = 1
    tp_rank: int = 0
    tp_group: Any = None  # torch.distributed.ProcessGroup or None when tp_size == 1
    ep_size: int = 1
    ep_rank: int = 0
    ep_group: Any = None  # torch.distributed.ProcessGroup or None when ep_size == 1
    # an ep group over several nodes (hosts), ranks node-major, node_size ranks each: this rank's node's
    # ranks (node_group) and the ranks with its index on every node (rail_group), for hierarchical
    # dispatch (dispatch/hierarchical.py); None on one node or with one rank per node
    node_size: int = 1
    node_group: Any = None
    rail_group: Any = None

    @property
    def world_size(self) -> int:
        return max(self.tp_size, self.ep_size)


SINGLE = ParallelContext()
