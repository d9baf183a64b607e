import pytest

from moeserve.core.block_manager import BlockManager
from moeserve.core.prefix_cache import extend_block_hashes, hash_block, max_cacheable_blocks


def keys_of(tokens: list[int], block_size: int = 4) -> list[bytes]:
    keys: list[bytes] = []
    extend_block_hashes(keys, tokens, len(tokens) // block_size, block_size)
    return keys


def counts(bm: BlockManager) -> tuple[int, int, int]:
    bm.check_invariants()
    return bm.num_free, bm.num_cached, bm.num_in_use


def test_allocate_append_free_keep_the_invariant():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = bm.allocate([], 5)
    assert len(a) == 2 and counts(bm) == (6, 0, 2)
    bm.append_slots(a, 8)  # still two blocks
    assert len(a) == 2
    bm.append_slots(a, 9)
    assert len(a) == 3 and counts(bm) == (5, 0, 3)
    assert bm.can_append_slots(a, 32) and not bm.can_append_slots(a, 33)
    bm.free(a)
    assert counts(bm) == (8, 0, 0)
    with pytest.raises(AssertionError):
        bm.free(a)


def test_published_blocks_are_shared_with_reference_counts():
    bm = BlockManager(num_blocks=8, block_size=4)
    tokens = list(range(12))
    keys = keys_of(tokens)
    a = bm.allocate([], 12)
    for b, k in zip(a, keys):
        bm.publish(b, k)
    hits = bm.match_prefix(keys[:2])
    assert hits == a[:2]
    b = bm.allocate(hits, 10)
    assert b[:2] == a[:2] and b[2] not in a
    assert [bm.ref_count(x) for x in a] == [2, 2, 1]
    bm.free(a)
    assert [bm.ref_count(x) for x in b[:2]] == [1, 1]
    assert counts(bm) == (4, 1, 3)  # a's third block is keyed: cached, not free
    bm.free(b)
    assert counts(bm) == (5, 3, 0)
    assert bm.match_prefix(keys) == a  # the whole chain survives in the cache


def test_claiming_from_the_cache_counts_against_availability():
    bm = BlockManager(num_blocks=4, block_size=4)
    keys = keys_of(list(range(16)))
    a = bm.allocate([], 16)
    for blk, k in zip(a, keys):
        bm.publish(blk, k)
    bm.free(a)
    assert counts(bm) == (0, 4, 0)
    hits = bm.match_prefix(keys[:3])
    assert bm.can_allocate(hits, 16)  # 3 hits + 1 evicted block
    assert not bm.can_allocate(hits, 17)
    b = bm.allocate(hits, 16)
    assert counts(bm) == (0, 0, 4)
    assert b[:3] == a[:3] and b[3] == a[3]  # the only evictable block was a's last one
    assert bm.match_prefix(keys) == a[:3]  # its key is gone


def test_eviction_is_lru_and_tail_blocks_go_first():
    bm = BlockManager(num_blocks=6, block_size=4)
    ka, kb = keys_of(list(range(8))), keys_of(list(range(100, 108)))
    a, b = bm.allocate([], 8), bm.allocate([], 8)
    for blocks, keys in ((a, ka), (b, kb)):
        for blk, k in zip(blocks, keys):
            bm.publish(blk, k)
    bm.free(a)
    bm.free(b)
    c = bm.allocate([], 4 * 4)  # 2 free + 2 evicted: a's blocks, a's tail first
    assert c[2:] == [a[1], a[0]]
    assert bm.match_prefix(ka) == [] and bm.match_prefix(kb) == b
    counts(bm)


def test_duplicate_key_keeps_the_first_block():
    bm = BlockManager(num_blocks=4, block_size=4)
    k = keys_of([1, 2, 3, 4])
    a, b = bm.allocate([], 4), bm.allocate([], 4)
    bm.publish(a[0], k[0])
    bm.publish(b[0], k[0])
    assert bm.match_prefix(k) == a
    bm.free(b)
    assert counts(bm) == (3, 0, 1)  # the duplicate is plain free


def test_prefix_caching_off_never_hits():
    bm = BlockManager(num_blocks=4, block_size=4, enable_prefix_caching=False)
    k = keys_of([1, 2, 3, 4])
    a = bm.allocate([], 4)
    bm.publish(a[0], k[0])
    bm.free(a)
    assert bm.match_prefix(k) == [] and counts(bm) == (4, 0, 0)


def test_hash_chain_depends_on_the_whole_prefix():
    x = hash_block(None, [1, 2, 3, 4])
    assert hash_block(None, [1, 2, 3, 4]) == x
    assert hash_block(x, [5, 6, 7, 8]) != hash_block(None, [5, 6, 7, 8])
    assert hash_block(None, [1, 2, 3, 5]) != x
    incremental: list[bytes] = []
    tokens = list(range(20))
    for n in range(6):
        extend_block_hashes(incremental, tokens, n, 4)
    assert incremental == keys_of(tokens)


@pytest.mark.parametrize("num_tokens,expected", [(1, 0), (4, 0), (5, 1), (8, 1), (9, 2), (32, 7)])
def test_the_last_token_is_never_cacheable(num_tokens, expected):
    assert max_cacheable_blocks(num_tokens, 4) == expected
