"""The symmetric heap in POSIX shared memory: one named segment that every rank of the expert-parallel
group maps (one node only).

Lifecycle (`ShmHeap.create`, a collective over the ep group):
  1. ep rank 0 creates `/dev/shm/moeserve-<pid>-<random>` (O_EXCL, mode 0600) of world x region bytes;
  2. it broadcasts the name on the ep group; every rank opens and maps it and writes its pid into
     its own region's header;
  3. one all_reduce says every rank has mapped it (or that one could not: every rank raises);
  4. every rank unlinks the name at once (whoever comes first wins; the rest find it gone).
From step 4 on the segment has no name: the kernel frees it when the last mapping goes, so nothing is
left in /dev/shm after a normal exit, an exception, or a `kill -9` of any rank. Before step 4 (a few
milliseconds at start-up) a failure of the set-up collective still unlinks it on every rank that
knows the name; only a `kill -9` of rank 0 between its create and its broadcast can leave a file.

Each rank's region starts with a 64-byte heap header [pid, process start time, asleep]: `dead_peers`
checks the first two against /proc (a pid that exited, is a zombie, or was reused by another
process); `asleep` is 1 while the rank sleeps on a futex (`sleep_on`).

Sleeping on a row of flags (one per source) takes one wake-up, not one per source: the sleeper sleeps
on the row's bell word (the word after the flags), and only a writer that finds every flag of the
row up (and the rank asleep) stores the row's value into the bell and makes the wake-up system call
(`notify`). Each side stores, fences, then loads: the writer its flag, then the peer's `asleep` and
the row; the sleeper `asleep` (after reading the bell), then the row. So either the sleeper sees every
flag up and does not sleep, or the last writer sees it asleep with every flag up and wakes it; the
bell's value then differs from the one the sleeper read, so a wake that lands before the sleep
starts is not lost. Values only grow on a row (a row's epochs have one parity), so no writer can
put back the value a sleeper read.
"""
from __future__ import annotations

import mmap
import os
import secrets
import threading

import torch
import torch.distributed as dist

from moeserve.dispatch import futex
from moeserve.dispatch.heap import ALIGN, HeapError, align, collective_device

SHM_DIR = "/dev/shm"
NAME_BYTES = 64
_HEADER = ALIGN  # bytes at the start of every rank's region kept by the heap itself
_ASLEEP = 2  # header word: 1 while the rank sleeps in sleep_on

# A locked read-modify-write (CPython's lock is a futex/semaphore built on lock-prefixed atomics):
# on x86-64 it orders every earlier store, non-temporal ones included, before every later store.
_FENCE_LOCK = threading.Lock()


def _start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), None when the process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


class ShmHeap:
    """Regions of `nbytes` per rank in one shared mapping. Writes through `region(peer)` land in the
    peer's memory; nothing here waits or orders anything beyond `fence`."""

    def __init__(self, mm: mmap.mmap, rank: int, world: int, nbytes: int, name: str):
        self._mm = mm
        self.rank, self.world, self.nbytes, self.name = rank, world, nbytes, name
        self._stride = _HEADER + nbytes
        self._all = torch.frombuffer(mm, dtype=torch.uint8)  # [world * stride]
        self._base = self._all.data_ptr()  # this process's address of the mapping (futex words)
        self._words = memoryview(mm).cast("q")  # int64 words of the whole mapping, for flags
        self._regions = [self._all[r * self._stride + _HEADER : (r + 1) * self._stride] for r in range(world)]

    @staticmethod
    def region_bytes(nbytes: int) -> int:
        return _HEADER + align(nbytes)

    @classmethod
    def create(cls, nbytes: int, rank: int, world: int, group) -> "ShmHeap":
        """Collective over `group` (every rank of the ep group calls it with the same nbytes)."""
        nbytes = align(nbytes)
        stride = _HEADER + nbytes
        name, error = "", ""
        fd = -1
        if rank == 0:
            name = f"moeserve-{os.getpid()}-{secrets.token_hex(6)}"
            try:
                fd = os.open(os.path.join(SHM_DIR, name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
                os.ftruncate(fd, world * stride)
            except OSError as e:
                error, name = f"rank 0 could not create {SHM_DIR}/{name}: {e}", ""
        try:
            name = _broadcast_name(name, group)
            mm = None
            if name:
                try:
                    if fd < 0:
                        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR)
                    mm = mmap.mmap(fd, world * stride)
                except OSError as e:
                    error = f"rank {rank} could not map {SHM_DIR}/{name}: {e}"
            if mm is not None:
                header = memoryview(mm).cast("q")
                base = rank * stride // 8
                header[base], header[base + 1] = os.getpid(), _start_time(os.getpid()) or 0
                header.release()
            ok = torch.tensor([int(mm is not None)], dtype=torch.int64, device=collective_device(group))
            dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=group)  # every rank has mapped it
        finally:
            if fd >= 0:
                os.close(fd)
            _unlink_quietly(name)
        if not int(ok):
            raise HeapError(error or f"some rank could not map the shared-memory heap {name or '(not created)'}; "
                            f"is {SHM_DIR} shared by every rank of the ep group (one node)?")
        return cls(mm, rank, world, nbytes, name)

    def region(self, rank: int) -> torch.Tensor:
        return self._regions[rank]

    def fanout(self, offset: int, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor | None:
        """[world, *shape] view of `dtype` elements starting at byte `offset` of every rank's region (the
        regions lie at a fixed stride in one mapping): index 0 is rank 0's memory, and so on."""
        size = dtype.itemsize
        start = _HEADER + offset
        if start % size or self._stride % size:
            return None
        inner = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            inner[i] = inner[i + 1] * shape[i + 1]
        return self._all.view(dtype).as_strided((self.world, *shape), (self._stride // size, *inner), start // size)

    def notify(self, rank: int, row: int, count: int, value: int) -> None:
        """Call after storing a flag into `rank`'s row of `count` flags at byte `row` (the bell is the
        word after them): wakes `rank` if it sleeps on the row and every flag now holds `value`. No
        system call unless it sleeps; the last writer to complete the row makes it."""
        self.fence()  # our flag store before our loads of its asleep word and its row
        base = rank * self._stride // 8
        if not self._words[base + _ASLEEP]:
            return
        first = (rank * self._stride + _HEADER + row) // 8
        if all(v == value for v in self._words[first : first + count]):
            self._words[first + count] = value
            futex.wake(self._base + (first + count) * 8)

    def sleep_on(self, row: int, count: int, value: int, timeout_s: float) -> None:
        """Sleeps until every one of the `count` flags at byte `row` of this rank's region holds `value`
        (a peer's notify), at most timeout_s; may return early. Only where `futex.available()`."""
        base = self.rank * self._stride // 8
        first = (self.rank * self._stride + _HEADER + row) // 8
        self._words[base + _ASLEEP] = 1
        try:
            bell = self._words[first + count]  # before the row: a wake after this read changes it
            self.fence()  # our asleep store before our loads of the row
            if any(v != value for v in self._words[first : first + count]):
                futex.wait(self._base + (first + count) * 8, bell, timeout_s)
        finally:
            self._words[base + _ASLEEP] = 0

    def native_words(self) -> tuple[int, int, int, int]:
        """How the C++ `signal` and `poll` (csrc/onesided.cpp) address this heap's words: this process's
        address of the mapping, bytes from one region to the next, header bytes before each region's
        layout, and the byte offset of the asleep word in a region."""
        return self._base, self._stride, _HEADER, 8 * _ASLEEP

    def load_words(self, offset: int, count: int) -> list[int]:
        base = (self.rank * self._stride + _HEADER + offset) // 8
        return self._words[base : base + count].tolist()

    def store_word(self, rank: int, offset: int, value: int) -> None:
        self._words[(rank * self._stride + _HEADER + offset) // 8] = value

    def fence(self) -> None:
        with _FENCE_LOCK:
            pass

    def dead_peers(self) -> list[int]:
        dead = []
        for r in range(self.world):
            base = r * self._stride // 8
            pid, started = self._words[base], self._words[base + 1]
            if r != self.rank and _start_time(pid) != started:
                dead.append(r)
        return dead

    def close(self) -> None:
        self._regions, self._all = [], None  # type: ignore[assignment]
        self._words.release()
        try:
            self._mm.close()
        except BufferError:  # a tensor view still alive (a handle kept by a caller): unmapped with it
            pass


def _broadcast_name(name: str, group) -> str:
    """ep rank 0's segment name (empty: it could not create one) on every rank of `group`."""
    buf = torch.zeros(NAME_BYTES, dtype=torch.uint8)
    raw = name.encode()
    assert len(raw) < NAME_BYTES
    buf[: len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    buf = buf.to(collective_device(group))  # GPU ranks: their ep group is NCCL
    dist.broadcast(buf, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    return bytes(buf.cpu().tolist()).rstrip(b"\0").decode()


def _unlink_quietly(name: str) -> None:
    if name:
        try:
            os.unlink(os.path.join(SHM_DIR, name))
        except FileNotFoundError:
            pass
