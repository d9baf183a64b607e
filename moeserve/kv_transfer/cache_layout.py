"""What one rank's registered KV cache looks like to a peer (`CacheLayout`, sent as JSON on the side
channel's /layout), and the byte ranges a decode rank reads from a prefill group's ranks
(`pull_rows`). Pure: no NIXL, no torch; the descriptor math is in head_slices.py.

Block b of cache tensor t starts at base_addrs[t] + b * block_bytes[t] on every rank (each tensor is
[num_blocks, block_size, num_heads, head_dim] or MLA's [num_blocks, block_size, latent]), which is
what lets a one-sided READ name blocks without the owner's help.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeserve.kv_transfer.head_slices import HeadRange, TensorSide, coalesce, run_rows, source_runs


class LayoutMismatch(ValueError):
    """The two sides' caches cannot be paired (another model, --block-size or --dtype)."""


@dataclass(frozen=True)
class CacheLayout:
    """One rank's cache, as plain data.

    base_addrs[t]: cache tensor t's address (layers x their K/V or latent tensors, model order);
    head_bytes[t]: bytes of one KV head of one token in tensor t (MLA: the whole latent row);
    group, tp_rank: the rank's attention group and its place in it; head_start, num_heads,
    total_heads: the KV heads it holds of the model's (MLA: 0, 1, 1, replicated on every rank);
    agent_metadata: NIXL's blob (base64); host: the address its peers reach it at (its host's
    --kv-side-channel-host, where its UCX transports listen: a server spanning hosts has one per host)."""

    agent_name: str
    agent_metadata: str
    base_addrs: list[int]
    head_bytes: list[int]
    num_blocks: int
    block_size: int
    dtype: str
    group: int = 0
    tp_rank: int = 0
    head_start: int = 0
    num_heads: int = 1
    total_heads: int = 1
    host: str = ""

    @property
    def heads(self) -> HeadRange:
        return HeadRange(self.head_start, self.num_heads, self.total_heads)

    @property
    def block_bytes(self) -> list[int]:
        return [t.block_bytes for t in self.tensors()]

    def tensors(self) -> list[TensorSide]:
        return [TensorSide(base, hb, self.heads, self.block_size) for base, hb in zip(self.base_addrs, self.head_bytes)]

    def to_json(self) -> dict:
        return dict(self.__dict__, block_bytes=self.block_bytes)  # block_bytes: for a reader's eyes only

    @classmethod
    def from_json(cls, data: dict) -> "CacheLayout":
        ints = ("num_blocks", "block_size", "group", "tp_rank", "head_start", "num_heads", "total_heads")
        return cls(
            agent_name=str(data["agent_name"]),
            agent_metadata=str(data["agent_metadata"]),
            base_addrs=[int(a) for a in data["base_addrs"]],
            head_bytes=[int(b) for b in data["head_bytes"]],
            dtype=str(data["dtype"]),
            host=str(data.get("host", "")),
            **{k: int(data[k]) for k in ints if k in data},
        )

    def check_pairs_with(self, peer: "CacheLayout") -> None:
        """LayoutMismatch unless our tensors and the peer's hold the same heads' bytes per token."""
        if (peer.head_bytes, peer.block_size, peer.dtype, peer.total_heads) != (
                self.head_bytes, self.block_size, self.dtype, self.total_heads):
            raise LayoutMismatch(
                f"the remote KV cache ({len(peer.head_bytes)} tensors of {peer.head_bytes} bytes per head, "
                f"{peer.total_heads} KV heads, block size {peer.block_size}, {peer.dtype}) does not pair with ours "
                f"({len(self.head_bytes)} of {self.head_bytes}, {self.total_heads} heads, {self.block_size}, "
                f"{self.dtype}): prefill and decode must serve the same model with the same --block-size and --dtype "
                f"(and both or neither with --speculative-config method mtp, whose MTP layer has a cache of its own)")


def group_ranks(ranks: list[CacheLayout], group: int) -> list[CacheLayout]:
    """The layouts of attention group `group`'s ranks, in tp order (LayoutMismatch if it has none)."""
    out = sorted((r for r in ranks if r.group == group), key=lambda r: r.tp_rank)
    if not out:
        raise LayoutMismatch(f"the prefill engine has no attention group {group}")
    return out


def checked_runs(local: CacheLayout, sources: list[CacheLayout], remote_ids: list[int]) -> list:
    """source_runs for `local` reading `sources` (the prefill group's ranks in tp order), after checking
    that the caches pair and the block ids are in every source's pool; LayoutMismatch otherwise, also
    for a head no source holds."""
    for src in sources:
        local.check_pairs_with(src)
        if remote_ids and (max(remote_ids) >= src.num_blocks or min(remote_ids) < 0):
            raise LayoutMismatch(f"remote block ids out of range [0, {src.num_blocks})")
    try:
        return source_runs(local.heads, [s.heads for s in sources], local.tp_rank)
    except ValueError as e:
        raise LayoutMismatch(str(e)) from None


def pull_rows(local: CacheLayout, sources: list[CacheLayout], local_ids: list[int],
              remote_ids: list[int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per source agent name: (local rows, remote rows), each [N, 2] int64 (address, bytes), pairing
    row by row, that bring remote blocks remote_ids[i] into local_ids[i] for exactly the heads `local`
    holds. `sources`: the prefill group's ranks in tp order."""
    runs = checked_runs(local, sources, remote_ids)
    parts: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for t, mine in enumerate(local.tensors()):
        for run in runs:
            src = sources[run.rank]
            lo, re = run_rows(mine, src.tensors()[t], run, local_ids, remote_ids)
            bucket = parts.setdefault(src.agent_name, ([], []))
            bucket[0].append(lo)
            bucket[1].append(re)
    return {name: coalesce(np.concatenate(lo), np.concatenate(re)) for name, (lo, re) in parts.items()}
