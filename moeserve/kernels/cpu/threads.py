"""How many threads the CPU set runs with: torch's intra-op pool, the expert / column-split
threads, and the per-step choice between them (kernels/cpu/step_threads.py). Read once, when a rank
makes its CPU set (kernels/cpu/kernel_set.py).
"""

from __future__ import annotations

import os

import torch
from torch import nn

from moeserve import envs
from moeserve.kernels.cpu.blocked import ELEMENTWISE_GRAIN
from moeserve.kernels.cpu.gemm import distinct_packed
from moeserve.kernels.cpu.step_threads import MAX_WIDE_TOKENS, StepThreads
from moeserve.parallel_state import ParallelContext


def intra_op_threads(hidden_size: int, current: int, configured: int | None = None) -> int:
    """Threads for torch's intra-op pool: `configured` (--num-threads) if set, else MOESERVE_NUM_THREADS,
    else at most one per 1024 hidden.

    A step of a small model is hundreds of ops of tens of microseconds each; every op forks and
    joins the OpenMP pool, and when the cores are shared (other ranks, other processes) a join
    waits for a descheduled thread. tiny-mixtral (hidden 256) ran 5-10x faster with 1 thread than
    with 2 on a loaded 2-core machine (docs/performance.md). Never raises `current` (rank workers
    already split the cores between the ranks of a node). On a quiet machine more threads do pay:
    tiny-mixtral offline ran ~25% faster with 2 threads on 2 idle cores, at twice the CPU time.
    """
    if configured is not None:  # --num-threads
        return configured
    forced = envs.NUM_THREADS.get()
    if forced is not None:
        return max(1, forced)
    return max(1, min(current, hidden_size // 1024))


def cores_per_rank(ranks_per_node: int, reserved: int = 0) -> int:
    """This rank's share of the cores this process may run on (its CPU affinity), after `reserved`
    (--reserved-cores) are left to other processes of the node."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, max(1, cores - reserved) // max(1, ranks_per_node))


def expert_threads(share: int, intra_op: int, configured: int | None = None) -> int:
    """At most how many threads the packed expert loop splits a layer's experts over
    (kernels/cpu/expert_threads.py): `configured` (--expert-threads) if set, else MOESERVE_EXPERT_THREADS,
    else the rank's core `share` divided by its intra-op threads (each forked chunk runs its GEMMs
    with that many OpenMP threads). Unlike a second OpenMP thread, a second expert thread pays at
    decode sizes on small models; when the cores are busy it can lose, which the layer's
    SplitChooser measures and falls back from (docs/performance.md)."""
    if configured is not None:
        return configured
    forced = envs.EXPERT_THREADS.get()
    if forced is not None:
        return forced
    return max(1, share // max(1, intra_op))


def step_threads(
    share: int, configured: int | None, ctx: ParallelContext, model: nn.Module, max_tokens: int = MAX_WIDE_TOKENS
) -> StepThreads | None:
    """A per-step chooser between the intra-op threads set now (with the expert forks) and all of the
    rank's `share` of cores (kernels/cpu/step_threads.py), or None: the count is pinned (--num-threads,
    MOESERVE_NUM_THREADS), already uses the share, the engine has several ranks, the model has no
    fp32 packed GEMMs (the only kind the start-up check sweeps), or an expert's intermediate row is
    above the one-thread threshold (its activation blocks by rows, kernels/cpu/blocked.py)."""
    narrow = torch.get_num_threads()
    if configured is not None or envs.NUM_THREADS.get() is not None or ctx.world_size > 1 or share <= narrow:
        return None
    if not distinct_packed(model) or any(
        hasattr(m, "w13") and m.intermediate >= ELEMENTWISE_GRAIN for m in model.modules()  # GroupedExperts
    ):
        return None
    return StepThreads(narrow, share, min(max_tokens, MAX_WIDE_TOKENS))
