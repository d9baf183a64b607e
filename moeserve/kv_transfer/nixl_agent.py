"""NIXL, as moeserve uses it: register this rank's KV cache, read remote blocks into local ones.

Mechanism only. `KvAgent` knows tensors, byte ranges and remote agents; it never knows requests,
never decides which blocks to read and never frees a block (the scheduler does, core/kv_pins.py).

A cache is described to a peer as plain JSON (cache_layout.CacheLayout); which byte ranges a read
moves is cache_layout.pull_rows; this module only registers memory and moves the rows it is given.

NIXL 1.5 ships as `nixl-cu12` (module `nixl_cu12`, UCX bundled) and `nixl` (module `nixl`, a wrapper
that also pulls the CUDA 13 build); either import works.
"""
from __future__ import annotations

import base64
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from moeserve.kv_transfer.cache_layout import CacheLayout, LayoutMismatch
from moeserve.kv_transfer.head_slices import HeadRange
from moeserve.netif import interface_of

log = logging.getLogger("moeserve.kv_transfer")

MISSING = "--kv-transfer nixl needs NIXL: pip install 'moeserve[pd]' (nixl-cu12 1.5, UCX bundled)"


# The UCX backend's progress thread waits this long (microseconds) in poll() on the worker's event
# file descriptors between rounds. NIXL's Python wrapper sets 0, and with 0 the thread never sleeps:
# every agent (one per rank, on both sides) kept a core busy while the server sat idle. The thread
# cannot simply be turned off: the side a READ targets must progress its worker for the read to
# complete. With a delay it wakes on the worker's events, and when idle it costs about 1% of a core.
PROGRESS_DELAY_US = 1000
_CREATE_LOCK = threading.Lock()


def import_nixl():
    """The `nixl_agent` class and its config class, or ImportError with the install line."""
    try:
        from nixl_cu12 import nixl_agent, nixl_agent_config
    except ImportError:
        try:
            from nixl._api import nixl_agent, nixl_agent_config
        except ImportError:
            raise ImportError(MISSING) from None
    return nixl_agent, nixl_agent_config


def bind_ucx(host: str) -> str:
    """Confine UCX's network transports to the interface holding `host` (the address this server's
    peers reach it at), plus any RDMA ports, unless the operator set UCX_NET_DEVICES: by default UCX
    listens on every interface's address, the machine's external one included. Shared memory
    transports are not network devices and stay on. Returns the device list in force."""
    if "UCX_NET_DEVICES" not in os.environ:
        rdma = sorted(f"{dev.name}:{port.name}" for dev in Path("/sys/class/infiniband").glob("*")
                      for port in (dev / "ports").glob("*"))
        os.environ["UCX_NET_DEVICES"] = ",".join([interface_of(host), *rdma])
    return os.environ["UCX_NET_DEVICES"]


def new_agent(name: str):
    """A NIXL agent with the UCX backend whose progress thread sleeps between rounds (PROGRESS_DELAY_US).

    The wrapper builds its own nixlAgentConfig and hard-codes its delay, so the binding's agent
    constructor is wrapped for the duration of the call to set the delay first (under a lock; the
    wrapper's module is restored before this returns)."""
    nixl_agent, nixl_agent_config = import_nixl()
    api = sys.modules[nixl_agent.__module__]
    bind = getattr(api, "nixlBind", None)
    with _CREATE_LOCK:
        if bind is None or not hasattr(bind, "nixlAgent"):  # another wrapper layout: its default
            return nixl_agent(name, nixl_agent_config(backends=["UCX"]))
        real = bind.nixlAgent

        def with_delay(agent_name, config):
            config.pthrDelay = PROGRESS_DELAY_US
            return real(agent_name, config)

        bind.nixlAgent = with_delay
        try:
            return nixl_agent(name, nixl_agent_config(backends=["UCX"]))
        finally:
            bind.nixlAgent = real


class TransferError(RuntimeError):
    """A READ failed or timed out (the owner died, or its blocks are gone)."""


class ReadInFlight(TransferError):
    """A READ failed or timed out while NIXL still reported it running: it may still write into its
    destination, until KvAgent.settle names `token`. The destination must not be reused before then."""

    def __init__(self, message: str, token: int):
        super().__init__(message)
        self.token = token


class KvAgent:
    """One NIXL agent per rank over its KV cache tensors (each [num_blocks, block_size, ...],
    contiguous, CPU), every rank of a multi-rank engine its own.

    Mutates: the local cache tensors, only through `read` into the ranges it is given."""

    def __init__(self, caches: list[torch.Tensor], block_size: int, heads: HeadRange = HeadRange(0, 1, 1),
                 group: int = 0, tp_rank: int = 0, name: str | None = None, bind_host: str = "127.0.0.1"):
        """bind_host: the address this rank's peers reach it at; UCX listens on its interface only."""
        assert caches and all(t.is_contiguous() for t in caches)
        self.name = name or f"moeserve-{uuid.uuid4().hex[:12]}"
        bind_ucx(bind_host)
        self.agent = new_agent(self.name)
        self.caches = caches
        self._reg = self.agent.register_memory(caches)
        self.layout = CacheLayout(
            agent_name=self.name,
            agent_metadata=base64.b64encode(self.agent.get_agent_metadata()).decode(),
            base_addrs=[t.data_ptr() for t in caches],
            head_bytes=[t[0, 0].numel() * t.element_size() // heads.count for t in caches],
            num_blocks=caches[0].shape[0],
            block_size=block_size,
            dtype=str(caches[0].dtype).removeprefix("torch."),
            group=group,
            tp_rank=tp_rank,
            head_start=heads.start,
            num_heads=heads.count,
            total_heads=heads.total,
            host=bind_host,
        )
        self._init_state()

    def _init_state(self) -> None:
        # every reader thread of the rank (rank_agent.py: one per prefill engine) calls NIXL through this
        # lock, one call at a time; none holds it while it waits for a READ to progress
        self._lock = threading.Lock()
        self._peers: set[str] = set()  # agent names whose metadata NIXL holds
        # reader -> (buffer, its registration): each reader's own, for reads whose head ranges differ (staging.py)
        self._staging: dict[str, tuple[torch.Tensor, object]] = {}
        # token -> (handle, (staging buffer, its registration) it abandoned or None, peer): ReadInFlight
        self._lingering: dict[int, tuple[object, tuple | None, str]] = {}
        self._next_token = 0

    def add_peer(self, layout: CacheLayout) -> None:
        """Load a remote agent's metadata once (the handshake with that rank); later reads name it."""
        with self._lock:
            if layout.agent_name in self._peers:
                return
            try:
                self.layout.check_pairs_with(layout)
            except LayoutMismatch as e:
                raise TransferError(str(e)) from None
            try:
                self.agent.add_remote_agent(base64.b64decode(layout.agent_metadata))
            except Exception as e:  # a peer's metadata NIXL cannot load fails the pulls from it, as a dead peer's
                raise TransferError(f"could not load the NIXL metadata of {layout.agent_name}: {e}") from None
            self._peers.add(layout.agent_name)

    def staging(self, nbytes: int, reader: str = "") -> torch.Tensor:
        """`reader`'s registered uint8 buffer of at least nbytes (grown, never shrunk; its contents are
        the caller's until its next call). Each reader thread has its own: they read side by side."""
        with self._lock:
            buf = self._staging.get(reader)
            if buf is None or buf[0].numel() < nbytes:
                if buf is not None:
                    self.agent.deregister_memory(buf[1])
                tensor = torch.empty(nbytes, dtype=torch.uint8)
                buf = self._staging[reader] = (tensor, self.agent.register_memory([tensor]))
            return buf[0]

    def drop_staging(self, reader: str) -> None:
        """`reader` reads no more (its thread ended): deregister and drop its buffer."""
        with self._lock:
            buf = self._staging.pop(reader, None)
            if buf is not None:
                self.agent.deregister_memory(buf[1])

    def has_peer(self, agent_name: str) -> bool:
        return agent_name in self._peers

    def read(self, agent_name: str, local_rows: np.ndarray, remote_rows: np.ndarray, timeout_s: float) -> int:
        """One-sided READ of the peer's byte ranges `remote_rows` into ours `local_rows` (each [N, 2]
        int64 (address, bytes), paired row by row); blocks until done. Returns the bytes read; raises
        TransferError, or ReadInFlight when it failed while NIXL still reported it running."""
        assert local_rows.shape == remote_rows.shape and agent_name in self._peers
        if not len(local_rows):
            return 0
        local, remote = _descs(local_rows), _descs(remote_rows)
        try:
            with self._lock:
                handle = self.agent.initialize_xfer(
                    "READ", self.agent.get_xfer_descs(local, "DRAM"), self.agent.get_xfer_descs(remote, "DRAM"),
                    agent_name)
        except Exception as e:  # nixl raises its own error types from the binding
            raise TransferError(f"could not start the KV read from {agent_name}: {e}") from None
        try:
            with self._lock:
                state = self.agent.transfer(handle)
            deadline = time.monotonic() + timeout_s
            while state == "PROC":
                if time.monotonic() > deadline:
                    raise TransferError(f"the KV read from {agent_name} took more than {timeout_s} s")
                time.sleep(0.0002)  # without the lock: another reader's READ progresses meanwhile
                with self._lock:
                    state = self.agent.check_xfer_state(handle)
            if state != "DONE":
                raise TransferError(f"the KV read from {agent_name} failed ({state})")
        except Exception as e:
            error = e if isinstance(e, TransferError) else TransferError(f"the KV read from {agent_name} failed: {e}")
            with self._lock:
                if self._ended(handle):
                    raise error from None
                raise self._linger(handle, agent_name, local_rows, error) from None
        with self._lock:
            self._release(handle)
        return int(local_rows[:, 1].sum())

    # ---- reads that failed while still running --------------------------------------------------
    # Such a READ is never released before NIXL reports it over: releasing a running transfer asks
    # NIXL to cancel it, and that is no guarantee. NIXL 1.5 refuses (and keeps the handle) when it
    # cannot cancel; over UCX's TCP transport it even accepts, and the whole READ still lands once the
    # peer's progress resumes (a stopped prefill process continued: tests/kv_transfer/nixl_stall.py).
    # The helpers below run under self._lock.
    def _release(self, handle) -> None:
        try:
            self.agent.release_xfer_handle(handle)
        except Exception:
            pass  # a handle of an ended transfer that refuses release: nothing of it can land any more

    def _ended(self, handle) -> bool:
        """Whether NIXL reports the transfer over (DONE or ERR): nothing of it can land later. Then the
        handle is released."""
        try:
            if self.agent.check_xfer_state(handle) == "PROC":
                return False
        except Exception:  # state unknown: treated as still running
            return False
        self._release(handle)
        return True

    def _linger(self, handle, agent_name: str, local_rows: np.ndarray, error: TransferError) -> ReadInFlight:
        """Keep a failed READ still running until it ends (`settle`): it may still write into
        `local_rows`. A read into the staging buffer abandons the buffer (kept alive and registered
        with the handle; the next staged read gets a new one)."""
        self._next_token += 1
        kept = None
        for reader, (buf, reg) in list(self._staging.items()):
            lo, hi = buf.data_ptr(), buf.data_ptr() + buf.numel()
            if bool(((local_rows[:, 0] >= lo) & (local_rows[:, 0] < hi)).any()):
                kept = self._staging.pop(reader)
        self._lingering[self._next_token] = (handle, kept, agent_name)
        log.warning("%s while still running, so it may still write: its destination is held until NIXL reports it "
                    "ended (%d such reads)", error, len(self._lingering))
        return ReadInFlight(f"{error} (still running: its blocks are held until it ends)", self._next_token)

    @property
    def num_lingering(self) -> int:
        """Failed READs still running (their destinations are held)."""
        return len(self._lingering)

    def settle(self, tokens: Iterable[int] | None = None) -> list[int]:
        """Of the lingering READs' tokens (ReadInFlight.token) `tokens` (None: all), those whose READ
        has ended since: their destinations will not be written any more. An abandoned staging buffer
        is deregistered then. A token asked about once it ended is not named again."""
        with self._lock:
            asked = list(self._lingering) if tokens is None else [t for t in tokens if t in self._lingering]
            ended = [token for token in asked if self._ended(self._lingering[token][0])]
            for token in ended:
                _, kept, _ = self._lingering.pop(token)
                if kept is not None and kept[1] is not None:
                    self.agent.deregister_memory(kept[1])
            return ended

    def remove_peer(self, agent_name: str) -> None:
        """Forget a peer, unless a READ from it lingers (its connection stays until the READ ends)."""
        with self._lock:
            if agent_name in self._peers and not any(peer == agent_name for *_, peer in self._lingering.values()):
                self._peers.discard(agent_name)
                try:
                    self.agent.remove_remote_agent(agent_name)
                except Exception:
                    pass

    def close(self) -> None:
        """Forget peers and deregister the cache (NIXL crashed at interpreter exit without this)."""
        for name in list(self._peers):
            self.remove_peer(name)
        for reader in list(self._staging):
            self.drop_staging(reader)
        if self._reg is not None:
            self.agent.deregister_memory(self._reg)
            self._reg = None


def _descs(rows: np.ndarray) -> np.ndarray:
    """[N, 2] (address, bytes) -> NIXL's [N, 3] (address, bytes, device 0)."""
    return np.concatenate([rows, np.zeros((len(rows), 1), dtype=np.int64)], axis=1)
