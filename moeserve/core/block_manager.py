"""Paged KV blocks of one attention group, with prefix caching. Mechanism only: no policy.

Every block is in exactly one state:
  free    ref 0, no key: handed out first;
  cached  ref 0, keyed: its KV is a known prefix, reusable on a hit, evicted LRU when free runs out;
  in use  ref >= 1: held by that many sequences (more than one only for shared prefix blocks).
Invariant: num_free + num_cached + num_in_use == num_blocks (`check_invariants`).

The manager mutates only its own pool and the block-id lists handed to `append_slots`. It never
decides who gets blocks, never preempts, and never reads a request: the scheduler does that.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

from moeserve.core.prefix_cache import PrefixCacheStats


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        assert num_blocks >= 1 and block_size >= 1
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._ref = [0] * num_blocks
        self._key: list[bytes | None] = [None] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._cached: OrderedDict[int, None] = OrderedDict()  # LRU first
        self._by_key: dict[bytes, int] = {}
        self._num_in_use = 0
        self.stats = PrefixCacheStats()

    # ---- counts -------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    @property
    def num_in_use(self) -> int:
        return self._num_in_use

    @property
    def num_available(self) -> int:
        """Blocks a caller could get right now (free, then evicted from the cache)."""
        return len(self._free) + len(self._cached)

    def ref_count(self, block_id: int) -> int:
        return self._ref[block_id]

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # ---- prefix cache -------------------------------------------------------------------------
    def match_prefix(self, keys: Sequence[bytes]) -> list[int]:
        """Blocks holding the longest cached run of `keys` (a key chain, see prefix_cache.py).
        Pure lookup: claims nothing, records no statistics."""
        hits: list[int] = []
        if not self.enable_prefix_caching:
            return hits
        for key in keys:
            block = self._by_key.get(key)
            if block is None:
                break
            hits.append(block)
        return hits

    def publish(self, block_id: int, key: bytes) -> None:
        """Offer a full block whose KV is computed to the cache under `key`. A block already keyed,
        or a key already served by another block (two sequences computed the same prefix at once),
        is left as is: the duplicate simply returns to the free list when released."""
        assert self._ref[block_id] > 0, "only a held block can be published"
        if not self.enable_prefix_caching or self._key[block_id] is not None or key in self._by_key:
            return
        self._key[block_id] = key
        self._by_key[key] = block_id

    def record_prefix_lookup(self, query_tokens: int, hit_tokens: int) -> None:
        self.stats.record(query_tokens, hit_tokens)

    # ---- allocation ---------------------------------------------------------------------------
    def can_allocate(self, hit_blocks: Sequence[int], num_tokens: int) -> bool:
        """Whether a new sequence can hold `num_tokens` tokens, starting with `hit_blocks`."""
        claimed_from_cache = sum(1 for b in hit_blocks if self._ref[b] == 0)
        need = self.blocks_for(num_tokens) - len(hit_blocks)
        return need <= self.num_available - claimed_from_cache

    def allocate(self, hit_blocks: Sequence[int], num_tokens: int) -> list[int]:
        """Block ids for a new sequence of `num_tokens` tokens: `hit_blocks` (reference taken) then
        fresh blocks. Caller checks `can_allocate` first."""
        block_ids: list[int] = []
        for b in hit_blocks:  # claim hits before fresh blocks so none of them gets evicted
            self._take(b)
            block_ids.append(b)
        self.append_slots(block_ids, num_tokens)
        return block_ids

    def can_append_slots(self, block_ids: Sequence[int], num_tokens: int) -> bool:
        return self.blocks_for(num_tokens) - len(block_ids) <= self.num_available

    def append_slots(self, block_ids: list[int], num_tokens: int) -> None:
        """Grow `block_ids` in place with fresh blocks until it covers `num_tokens` tokens."""
        need = self.blocks_for(num_tokens) - len(block_ids)
        assert need <= self.num_available, f"need {need} blocks, {self.num_available} available"
        for _ in range(need):
            block_ids.append(self._pop_fresh())

    def free(self, block_ids: Sequence[int]) -> None:
        """Drop one reference to each block. Released blocks go to the cache when keyed, else to
        the free list. Reverse order: a sequence's tail blocks (least shareable) are evicted first."""
        for b in reversed(block_ids):
            self._ref[b] -= 1
            assert self._ref[b] >= 0, f"block {b} freed twice"
            if self._ref[b] == 0:
                self._num_in_use -= 1
                if self._key[b] is not None:
                    self._cached[b] = None
                else:
                    self._free.append(b)

    def _take(self, block: int) -> None:
        if self._ref[block] == 0:
            del self._cached[block]
            self._num_in_use += 1
        self._ref[block] += 1

    def _pop_fresh(self) -> int:
        if self._free:
            block = self._free.popleft()
        else:
            block, _ = self._cached.popitem(last=False)
            del self._by_key[self._key[block]]  # type: ignore[index]
            self._key[block] = None
        self._ref[block] = 1
        self._num_in_use += 1
        return block

    # ---- checks -------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise AssertionError if the pool is inconsistent. O(num_blocks): for tests and debugging."""
        _check(self.num_free + self.num_cached + self.num_in_use == self.num_blocks, "free + cached + in_use != total")
        _check(len(set(self._free)) == len(self._free), "a block is on the free list twice")
        in_use = sum(1 for r in self._ref if r > 0)
        _check(in_use == self._num_in_use, f"in-use counter {self._num_in_use} != {in_use} referenced blocks")
        for b in self._free:
            _check(self._ref[b] == 0 and self._key[b] is None, f"free block {b} is referenced or keyed")
        for b in self._cached:
            _check(self._ref[b] == 0 and self._key[b] is not None, f"cached block {b} is referenced or unkeyed")
        for key, b in self._by_key.items():
            _check(self._key[b] == key, f"key index points at block {b} with another key")
        _check(sum(k is not None for k in self._key) == len(self._by_key), "keyed blocks missing from the index")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise AssertionError(message)
