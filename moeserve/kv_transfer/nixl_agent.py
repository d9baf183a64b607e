"""NIXL, as moeserve uses it: register this rank's KV cache, read remote blocks into local ones.

Mechanism only. `KvAgent` knows tensors, byte ranges and remote agents; it never knows requests,
never decides which blocks to read and never frees a block (the scheduler does, core/kv_pins.py).

A cache is described to a peer as plain JSON (`CacheLayout`): per cache tensor its base address and
the bytes of one block. Block b of tensor t starts at base[t] + b * block_bytes[t] on both sides
(a KV tensor is [num_blocks, block_size, ...], so one block is one contiguous range), which is what
makes a one-sided READ of named blocks possible without the owner's help.

NIXL 1.5 ships as `nixl-cu12` (module `nixl_cu12`, UCX bundled) and `nixl` (module `nixl`, a wrapper
that also pulls the CUDA 13 build); either import works.
"""
from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass

import numpy as np
import torch

MISSING = "--kv-transfer nixl needs NIXL: pip install 'moeserve[pd]' (nixl-cu12 1.5, UCX bundled)"


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


@dataclass(frozen=True)
class CacheLayout:
    """What a peer needs to read this rank's blocks: plain data, sent as JSON.

    base_addrs[t], block_bytes[t]: cache tensor t (layers x their K/V or latent tensors, in model
    order); num_blocks and block_size as the engine's pool; agent_metadata: NIXL's blob (base64)."""

    agent_name: str
    agent_metadata: str
    base_addrs: list[int]
    block_bytes: list[int]
    num_blocks: int
    block_size: int

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict) -> "CacheLayout":
        return cls(
            agent_name=str(data["agent_name"]),
            agent_metadata=str(data["agent_metadata"]),
            base_addrs=[int(a) for a in data["base_addrs"]],
            block_bytes=[int(b) for b in data["block_bytes"]],
            num_blocks=int(data["num_blocks"]),
            block_size=int(data["block_size"]),
        )


class TransferError(RuntimeError):
    """A READ failed or timed out (the owner died, or its blocks are gone)."""


def block_descs(base_addrs: list[int], block_bytes: list[int], block_ids: list[int]) -> np.ndarray:
    """[T * B, 3] int64 rows (address, bytes, device 0): every cache tensor's range of each block,
    tensor-major, so a local and a remote list of the same tensors pair up row by row."""
    ids = np.asarray(block_ids, dtype=np.int64)
    rows = [np.stack([base + ids * size, np.full_like(ids, size), np.zeros_like(ids)], axis=1)
            for base, size in zip(base_addrs, block_bytes)]
    return np.concatenate(rows) if rows else np.zeros((0, 3), dtype=np.int64)


class KvAgent:
    """One NIXL agent per rank over its KV cache tensors (each [num_blocks, ...], contiguous, CPU).

    Mutates: the local cache tensors, only through `read` into the blocks it is given."""

    def __init__(self, caches: list[torch.Tensor], block_size: int, name: str | None = None):
        nixl_agent, nixl_agent_config = import_nixl()
        assert caches and all(t.is_contiguous() for t in caches)
        self.name = name or f"moeserve-{uuid.uuid4().hex[:12]}"
        self.agent = nixl_agent(self.name, nixl_agent_config(backends=["UCX"]))
        self.caches = caches
        self._reg = self.agent.register_memory(caches)
        self.num_blocks = caches[0].shape[0]
        self.layout = CacheLayout(
            agent_name=self.name,
            agent_metadata=base64.b64encode(self.agent.get_agent_metadata()).decode(),
            base_addrs=[t.data_ptr() for t in caches],
            block_bytes=[t[0].numel() * t.element_size() for t in caches],
            num_blocks=self.num_blocks,
            block_size=block_size,
        )
        self._peers: dict[str, CacheLayout] = {}  # agent name -> its layout

    def add_peer(self, layout: CacheLayout) -> None:
        """Load a remote agent's metadata once (the handshake); later reads name it."""
        if layout.agent_name in self._peers:
            return
        if layout.block_bytes != self.layout.block_bytes:
            raise TransferError(
                f"the remote KV cache's blocks ({layout.block_bytes} bytes per tensor) differ from ours "
                f"({self.layout.block_bytes}): prefill and decode must serve the same model with the same "
                f"--block-size, --dtype and --tp")
        self.agent.add_remote_agent(base64.b64decode(layout.agent_metadata))
        self._peers[layout.agent_name] = layout

    def has_peer(self, agent_name: str) -> bool:
        return agent_name in self._peers

    def read(self, agent_name: str, remote_ids: list[int], local_ids: list[int], timeout_s: float) -> int:
        """One-sided READ of the peer's blocks `remote_ids` into our blocks `local_ids` (same length),
        every cache tensor; blocks until done. Returns the bytes read; raises TransferError."""
        assert len(remote_ids) == len(local_ids)
        if not remote_ids:
            return 0
        peer = self._peers[agent_name]
        if max(remote_ids) >= peer.num_blocks or min(remote_ids) < 0:
            raise TransferError(f"remote block ids out of range [0, {peer.num_blocks})")
        local = block_descs(self.layout.base_addrs, self.layout.block_bytes, local_ids)
        remote = block_descs(peer.base_addrs, peer.block_bytes, remote_ids)
        try:
            handle = self.agent.initialize_xfer(
                "READ", self.agent.get_xfer_descs(local, "DRAM"), self.agent.get_xfer_descs(remote, "DRAM"), agent_name)
        except Exception as e:  # nixl raises its own error types from the binding
            raise TransferError(f"could not start the KV read from {agent_name}: {e}") from None
        try:
            state = self.agent.transfer(handle)
            deadline = time.monotonic() + timeout_s
            while state == "PROC":
                if time.monotonic() > deadline:
                    raise TransferError(f"the KV read from {agent_name} took more than {timeout_s} s")
                time.sleep(0.0002)
                state = self.agent.check_xfer_state(handle)
            if state != "DONE":
                raise TransferError(f"the KV read from {agent_name} failed ({state})")
        except TransferError:
            raise
        except Exception as e:
            raise TransferError(f"the KV read from {agent_name} failed: {e}") from None
        finally:
            try:
                self.agent.release_xfer_handle(handle)
            except Exception:
                pass  # a handle of a failed transfer may refuse release; nothing more to do
        return int(local[:, 1].sum())

    def remove_peer(self, agent_name: str) -> None:
        if self._peers.pop(agent_name, None) is not None:
            try:
                self.agent.remove_remote_agent(agent_name)
            except Exception:
                pass

    def close(self) -> None:
        """Forget peers and deregister the cache (NIXL crashed at interpreter exit without this)."""
        for name in list(self._peers):
            self.remove_peer(name)
        if self._reg is not None:
            self.agent.deregister_memory(self._reg)
            self._reg = None
