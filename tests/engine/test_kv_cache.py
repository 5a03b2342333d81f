"""The block pool's pinned rules (docs/architecture.md, README "Fidelity")."""

from __future__ import annotations

import numpy as np

from pagedviz.core.kv_cache import BlockPool, KVCacheManager


def test_null_block_is_never_handed_out_and_allocation_takes_the_head() -> None:
    pool = BlockPool(5)
    assert list(pool.free_queue) == [1, 2, 3, 4]
    assert pool.allocate(2) == [1, 2]
    assert pool.allocate(2) == [3, 4]
    assert pool.num_free == 0


def test_free_puts_unhashed_blocks_at_the_head_in_reverse_walk_order() -> None:
    # vLLM 0.33 BlockPool.free_blocks: prepend_n of the reverse walk (LIFO reuse)
    pool = BlockPool(6)
    blocks = pool.allocate(3)
    pool.free(blocks)
    assert list(pool.free_queue) == [3, 2, 1, 4, 5]
    assert pool.allocate(1) == [3]


def test_fifo_free_queue_order_appends_everything_to_the_tail() -> None:
    # older vLLM: append_n of the reverse walk
    pool = BlockPool(6, free_queue_order="fifo")
    blocks = pool.allocate(3)
    pool.free(blocks)
    assert list(pool.free_queue) == [4, 5, 3, 2, 1]


def test_two_frees_in_a_row_put_the_later_one_first() -> None:
    pool = BlockPool(6)
    a, b = pool.allocate(2), pool.allocate(2)
    pool.free(a)
    pool.free(b)
    assert list(pool.free_queue) == [4, 3, 2, 1, 5]


def test_a_hash_held_by_two_blocks_survives_the_eviction_of_the_older_one() -> None:
    pool = BlockPool(5, enable_prefix_caching=True)
    a, b = pool.allocate(1), pool.allocate(1)
    pool.cache_block(a[0], "h")
    pool.cache_block(b[0], "h")
    assert pool.lookup(["h"]) == a  # the oldest holder, as vLLM's get_one_block
    pool.free(a)
    pool.free(b)  # both hashed: to the tail, a first
    pool.allocate(3)  # 3, 4, then a: a's hash entry goes, b's stays
    assert pool.lookup(["h"]) == b


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
    assert hits == [[1]]  # one list per KV cache group
    added = kv.allocate_slots("b", ids, 4, 4, hits)
    assert added == [[1, 3]]
    assert kv.pool.ref_cnt[1] == 2 and kv.pool.ref_cnt[2] == 1 and kv.pool.ref_cnt[3] == 1


def test_full_sequence_admission_needs_room_for_the_whole_prompt() -> None:
    kv = KVCacheManager(5, 2, enable_prefix_caching=False)  # 4 usable blocks
    ids = np.zeros(10, np.int32)
    # the first chunk (2 tokens, 1 block) would fit; the whole prompt (5 blocks) does not
    assert kv.allocate_slots("a", ids, 0, 2, full_sequence_tokens=10) is None
    assert kv.allocate_slots("a", ids[:8], 0, 2, full_sequence_tokens=8) == [[1]]


def test_watermark_blocks_stay_free() -> None:
    kv = KVCacheManager(5, 2, enable_prefix_caching=False)
    ids = np.zeros(6, np.int32)
    assert kv.allocate_slots("a", ids, 0, 6, watermark_blocks=2) is None
    assert kv.allocate_slots("a", ids, 0, 6, watermark_blocks=1) == [[1, 2, 3]]


def test_allocation_fails_cleanly_when_the_pool_is_short() -> None:
    kv = KVCacheManager(3, 2, enable_prefix_caching=False)
    assert kv.allocate_slots("a", np.zeros(6, np.int32), 0, 6) is None
    assert kv.pool.num_free == 2 and kv.blocks_of("a") == []
