"""Prefix-cache keys: a hash chain over full KV blocks.

The key of block i is H(key of block i-1, token ids of block i), so equal keys mean equal whole
prefixes, not just equal blocks. H is blake2b (128-bit) rather than Python's `hash`: a collision
silently serves another prompt's KV, and the 64-bit tuple hash can be made to collide on purpose
by a crafted prompt. Cost: about a microsecond per 16-token block, paid once per block.
"""
from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass


def hash_block(parent: bytes | None, token_ids: Sequence[int]) -> bytes:
    """Key of one full block given its parent's key (None for the first block)."""
    h = hashlib.blake2b(digest_size=16)
    # Keys are 16 bytes and the root has none, so the framing is unambiguous.
    if parent is not None:
        h.update(parent)
    h.update(array("q", token_ids).tobytes())
    return h.digest()


def extend_block_hashes(hashes: list[bytes], token_ids: Sequence[int], num_blocks: int, block_size: int) -> None:
    """Grow `hashes` in place to the keys of the first `num_blocks` full blocks of `token_ids`."""
    assert num_blocks * block_size <= len(token_ids), "only full blocks have keys"
    for i in range(len(hashes), num_blocks):
        parent = hashes[i - 1] if i else None
        hashes.append(hash_block(parent, token_ids[i * block_size : (i + 1) * block_size]))


def max_cacheable_blocks(num_tokens: int, block_size: int) -> int:
    """Full blocks a sequence of `num_tokens` may take from the cache: never the block holding the
    last token, because at least one token must be computed to produce logits."""
    return (num_tokens - 1) // block_size


@dataclass
class PrefixCacheStats:
    """Counted once per admission (not per lookup), so a request that waits for blocks is not
    counted twice. Tokens, not blocks, so the hit rate reads as 'share of prompt not recomputed'."""

    queries: int = 0
    query_tokens: int = 0
    hit_tokens: int = 0

    def record(self, query_tokens: int, hit_tokens: int) -> None:
        self.queries += 1
        self.query_tokens += query_tokens
        self.hit_tokens += hit_tokens
