"""The block pool's pinned rules (DESIGN.md §3, "Block pool")."""

from __future__ import annotations

import numpy as np

from pagedviz.core.kv_cache import BlockPool, KVCacheManager


def test_null_block_is_never_handed_out_and_allocation_takes_the_head() -> None:
    pool = BlockPool(5)
    assert list(pool.free_queue) == [1, 2, 3, 4]
    assert pool.allocate(2) == [1, 2]
    assert pool.allocate(2) == [3, 4]
    assert pool.num_free == 0


def test_free_walks_in_reverse_and_appends_to_the_tail() -> None:
    pool = BlockPool(6)
    blocks = pool.allocate(3)
    pool.free(blocks)
    assert list(pool.free_queue) == [4, 5, 3, 2, 1]


def test_with_prefix_caching_unhashed_blocks_go_to_the_head_in_reverse_walk_order() -> None:
    pool = BlockPool(8, enable_prefix_caching=True)
    blocks = pool.allocate(4)  # 1, 2, 3, 4
    pool.cache_block(1, "h1")
    pool.cache_block(2, "h2")
    pool.free(blocks)
    # reverse walk: 4, 3 unhashed -> head (in that order); 2, 1 hashed -> tail
    assert list(pool.free_queue) == [4, 3, 5, 6, 7, 2, 1]


def test_taking_a_hashed_block_for_a_new_allocation_evicts_its_hash() -> None:
    pool = BlockPool(3, enable_prefix_caching=True)
    b = pool.allocate(1)
    pool.cache_block(b[0], "h")
    pool.free(b)
    assert pool.lookup(["h"]) == [1]
    pool.allocate(2)
    assert pool.lookup(["h"]) == [] and not pool.block_hash


def test_hits_are_capped_below_the_last_token_and_share_ref_counts() -> None:
    kv = KVCacheManager(10, 4, enable_prefix_caching=True)
    ids = np.arange(100, 108, dtype=np.int32)  # exactly two full blocks
    kv.allocate_slots("a", ids, 0, 8)
    # a request with the same 8 tokens may reuse only one block: the last token is recomputed
    hits = kv.computed_blocks("b", ids)
    assert hits == [1]
    added = kv.allocate_slots("b", ids, 4, 4, hits)
    assert added == [1, 3]
    assert kv.pool.ref_cnt[1] == 2 and kv.pool.ref_cnt[2] == 1 and kv.pool.ref_cnt[3] == 1


def test_allocation_fails_cleanly_when_the_pool_is_short() -> None:
    kv = KVCacheManager(3, 2, enable_prefix_caching=False)
    assert kv.allocate_slots("a", np.zeros(6, np.int32), 0, 6) is None
    assert kv.pool.num_free == 2 and kv.blocks_of("a") == []
