"""A deep copy of vLLM 0.33.0's `Scheduler` (or `AsyncScheduler`), independent of the original:
running the copy's `schedule()` changes nothing of the original's requests, queues, block pool or
free queue. The causes oracle (causes.py) runs its counterfactual steps on such copies.

`copy.deepcopy` alone cannot copy a scheduler whose pool has more than a few hundred blocks: the
free queue (`FreeKVCacheBlockQueue`) is a doubly linked list of `KVCacheBlock`s, and deepcopy
follows `next_free_block` recursively, one Python frame (several, in fact) per block, until the
recursion limit. So the blocks (every block of `BlockPool.blocks` and the queue's two sentinel
blocks) are copied flat first, one shallow copy each, their `prev_free_block` / `next_free_block`
links pointed at the copies, and all of them handed to deepcopy's memo: deepcopy then copies
everything else (requests, queues, the prefix-cache map, the managers) and reuses the block copies
wherever the original refers to a block. Each block's `pool` (set for blocks whose free may be
deferred) is pointed at the copied pool afterwards.

Shared, not copied: the `VllmConfig` and its parts (`scheduler_config`, `cache_config`, ...:
read-only in `schedule()`; a counterfactual that changes a
limit sets it on the copy's own attributes, causes.py), the `KVCacheConfig` and the
`StructuredOutputManager` (no structured outputs here; it may hold a thread pool). A `schedule`
wrapper the oracle sets on the original instance is dropped from the copy, which schedules with
vLLM's own method, and so is the live engine's watch on each sliding-window manager's
`remove_skipped_blocks` (live.py).
"""

from __future__ import annotations

import copy
from typing import Any


def copy_scheduler(scheduler: Any) -> Any:
    """An independent deep copy of `scheduler` (module docstring)."""
    pool = scheduler.kv_cache_manager.block_pool
    queue = pool.free_block_queue
    memo: dict[int, Any] = {
        id(scheduler.vllm_config): scheduler.vllm_config,
        id(scheduler.kv_cache_config): scheduler.kv_cache_config,
        id(scheduler.structured_output_manager): scheduler.structured_output_manager,
    }
    for part in vars(scheduler.vllm_config).values():  # its scheduler, cache, parallel configs
        memo.setdefault(id(part), part)
    blocks = [*pool.blocks, queue.fake_free_list_head, queue.fake_free_list_tail]
    for b in blocks:
        memo[id(b)] = copy.copy(b)
    for b in blocks:
        c = memo[id(b)]
        if b.prev_free_block is not None:
            c.prev_free_block = memo[id(b.prev_free_block)]
        if b.next_free_block is not None:
            c.next_free_block = memo[id(b.next_free_block)]
    new = copy.deepcopy(scheduler, memo)
    new_pool = new.kv_cache_manager.block_pool
    for b in blocks:
        if b.pool is pool:
            memo[id(b)].pool = new_pool
    new.__dict__.pop("schedule", None)  # the oracle's wrapper on the original (causes.py)
    for m in new.kv_cache_manager.coordinator.single_type_managers:
        m.__dict__.pop("remove_skipped_blocks", None)  # the live engine's drop watch (live.py)
    return new
