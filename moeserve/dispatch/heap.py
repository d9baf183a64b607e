"""The symmetric heap: every rank of the expert-parallel group holds one region of the same size and
layout, and every rank can address every peer's region. Two implementations share this interface:
`shm_heap.ShmHeap` (POSIX shared memory on one node) and `nvshmem_heap.NvshmemHeap` (NVSHMEM's
symmetric memory through nvshmem4py).

The one-sided protocol (onesided.py) only needs these verbs:
    region(rank)        -> uint8 [nbytes] tensor over that rank's region (peer memory: writes land there)
    load_words(off, n)  -> n int64 words of this rank's own region, read from memory now (flags)
    store_word(rank, off, value)  one int64 store into a peer's region (a flag), after all earlier stores
    fence()             orders every earlier store of this process before every later one
    dead_peers()        ranks whose process is known to be gone (empty where that cannot be known)
    close()             unmaps; never frees memory a peer may still write
Optional (onesided.py uses it where present, else writes one destination at a time):
    fanout(offset, dtype, shape) -> [W, *shape] view of the same bytes of every rank's region, or None
    notify(rank, row, count, value)  after a flag store into that rank's row of `count` flags at byte
                        `row`: wakes the rank where it sleeps on the row and every flag holds value
    sleep_on(row, count, value, timeout_s)  sleeps until this rank's row holds value (flag_wait.py)
"""
from __future__ import annotations

from typing import Protocol

import torch

ALIGN = 64  # bytes: every block of a region starts on a cache line


def align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class SymmetricHeap(Protocol):
    rank: int
    world: int
    nbytes: int  # bytes per rank region

    def region(self, rank: int) -> torch.Tensor: ...

    def load_words(self, offset: int, count: int) -> list[int]: ...

    def store_word(self, rank: int, offset: int, value: int) -> None: ...

    def fence(self) -> None: ...

    def dead_peers(self) -> list[int]: ...

    def close(self) -> None: ...


def collective_device(group) -> torch.device:
    """Where the small tensors of a set-up collective on `group` must live: the current GPU on an
    NCCL group (GPU ranks), host memory on gloo."""
    import torch.distributed as dist

    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class HeapError(RuntimeError):
    """The heap could not be set up on every rank (raised on every rank alike)."""
