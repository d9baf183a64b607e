"""The symmetric heap on NVSHMEM (nvshmem4py, the `nvshmem` extra): one symmetric byte tensor per rank
on its GPU, and a peer tensor for every other rank of the ep group (NVLink peer memory), into which
put_kernels.py's Triton kernels store rows and flags.

Written against nvshmem4py's documented Python API (nvshmem.core: get_unique_id, init with a unique
id, my_pe; nvshmem.core.interop.torch: bytetensor, get_peer_tensor, free_tensor), checked on an H100
by benchmarks/gpu_dispatch_check.py (nvshmem4py-cu13 0.4.1). CI has no GPU and runs the same kernels
over `ShmHeap` instead (MOESERVE_NVSHMEM_EMULATE=1). Peer tensors cover ranks whose GPUs share NVLink (one node, or an
NVL72 domain); ranks reached only over InfiniBand would need nvshmem's device-side put calls
(`nvshmem_putmem_signal_nbi` from Triton through extern bitcode), which this module does not do.
Flags are polled from the host (a device-to-host read of W words per poll).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from moeserve.dispatch.heap import HeapError, align

MISSING = "--dispatch nvshmem needs nvshmem4py: pip install 'moeserve[nvshmem]'"


def _nvshmem():
    try:
        import nvshmem.core as core
        import nvshmem.core.interop.torch as interop
    except ImportError as e:
        raise HeapError(f"{MISSING} ({e})") from None
    return core, interop


_INITIALIZED = False


class NvshmemHeap:
    def __init__(self, local: torch.Tensor, peers: list[torch.Tensor], rank: int, world: int, nbytes: int):
        self.rank, self.world, self.nbytes = rank, world, nbytes
        self._local, self._peers = local, peers

    @classmethod
    def create(cls, nbytes: int, rank: int, world: int, group) -> "NvshmemHeap":
        """Collective over `group`: initializes NVSHMEM once per process (a unique id broadcast on the
        group), then allocates the symmetric tensor (itself a collective on every PE)."""
        global _INITIALIZED
        core, interop = _nvshmem()
        if not _INITIALIZED:
            try:
                from cuda.core import Device
            except ImportError:  # cuda-core before 0.4 kept it under .experimental
                from cuda.core.experimental import Device

            uid = core.get_unique_id(empty=rank != 0)
            raw = torch.from_numpy(uid._data.view("uint8")).clone()
            dist.broadcast(raw, src=dist.get_global_rank(group, 0), group=group)
            uid._data.view("uint8")[:] = raw.numpy()
            device = Device(torch.cuda.current_device())
            device.set_current()
            core.init(device=device, uid=uid, rank=rank, nranks=world, initializer_method="uid")
            _INITIALIZED = True
        nbytes = align(nbytes)
        local = interop.bytetensor((nbytes,))
        local.zero_()
        torch.cuda.synchronize()
        dist.barrier(group=group)  # every rank's flags are zero before any peer writes
        peers = [local if r == rank else interop.get_peer_tensor(local, r) for r in range(world)]
        return cls(local, peers, rank, world, nbytes)

    def region(self, rank: int) -> torch.Tensor:
        return self._peers[rank]

    def load_words(self, offset: int, count: int) -> list[int]:
        return self._local[offset : offset + 8 * count].view(torch.int64).tolist()

    def store_word(self, rank: int, offset: int, value: int) -> None:
        self._peers[rank][offset : offset + 8].view(torch.int64).fill_(value)

    def fence(self) -> None:
        torch.cuda.current_stream().synchronize()

    def dead_peers(self) -> list[int]:
        return []  # peers on other hosts: the step timeout (and the engine's watchdog) find them

    def close(self) -> None:
        _, interop = _nvshmem()
        self._peers = []
        interop.free_tensor(self._local)
