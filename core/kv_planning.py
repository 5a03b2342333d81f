"""The blocks one max_model_len request can hold at most, per KV cache group, and vLLM's refusal of a
pool that cannot hold them (vllm/v1/core/kv_cache_planning.py).

vLLM's planning checks that the pool, less the null block `BlockPool` holds back, has room for one
request of `max_model_len` tokens in every group at once (each group claims its own blocks from
the shared pool): `_check_enough_kv_cache_memory` over `_max_memory_usage_bytes_from_groups`. A
full-attention group needs `cdiv(max_model_len, block_size)` blocks (`FullAttentionSpec`). A
sliding-window group never holds more than its window's last W - 1 tokens and the tokens in
flight, plus one block since the window need not start at a block's start
(`SlidingWindowSpec.max_admission_blocks_per_request`, the same cap admission uses). When the
pool is short vLLM says so with the longest max_model_len that would fit
(`_estimate_max_model_len_from_groups`, a binary search). pagedviz counts the memory in blocks.
"""

from __future__ import annotations

import math

from pagedviz.core.kv_groups import FULL, KVCacheGroup

NULL_BLOCKS = 1  # vLLM's BlockPool keeps block 0 back as the null block


def max_in_flight_tokens(max_num_batched_tokens: int, async_scheduling: bool) -> int:
    """vLLM's `VllmConfig.max_in_flight_tokens`: one batch per concurrent step, two with async
    scheduling (`max_concurrent_batches`, pipeline size 1)."""
    return (2 if async_scheduling else 1) * max_num_batched_tokens


def group_max_blocks(group: KVCacheGroup, max_model_len: int, block_size: int, in_flight: int) -> int:
    """The most blocks one request holds in `group` (its spec's `max_memory_usage_bytes` in
    blocks)."""
    if group.sliding and group.sliding_window is not None:
        tokens = min(group.sliding_window - 1 + in_flight, max_model_len)
        return math.ceil(tokens / block_size) + 1
    return math.ceil(max_model_len / block_size)


def pool_too_small(
    max_model_len: int,
    block_size: int,
    num_kv_blocks: int,
    groups: tuple[KVCacheGroup, ...] = (KVCacheGroup(FULL, (0,)),),
    in_flight: int = 0,
) -> str | None:
    """Why vLLM refuses a KV pool that cannot hold one max_model_len sequence across `groups`, or
    None. `in_flight`: `max_in_flight_tokens` (it bounds a sliding group's blocks)."""
    usable = max(num_kv_blocks - NULL_BLOCKS, 0)

    def need(length: int) -> list[int]:
        return [group_max_blocks(g, length, block_size, in_flight) for g in groups]

    per_group = need(max_model_len)
    total = sum(per_group)
    if total <= usable:
        return None
    # the binary search of _estimate_max_model_len_from_groups: the longest length in
    # [1, max_model_len] whose blocks fit (0 when even one token's do not)
    estimate, lo, hi = 0, 1, max_model_len
    while lo <= hi:
        mid = (lo + hi) // 2
        if sum(need(mid)) <= usable:
            estimate, lo = mid, mid + 1
        else:
            hi = mid - 1
    estimated = (
        f"Based on the available blocks, the estimated maximum model length is {estimate}. "
        if estimate
        else ""
    )
    needed = f"{total} KV blocks are needed"
    if len(groups) > 1:
        parts = ", ".join(f"group {i} ({g.kind}): {n}" for i, (g, n) in enumerate(zip(groups, per_group)))
        needed = f"{needed}, one request's blocks in every KV cache group ({parts})"
    return (
        f"To serve at least one request with the model's max seq len ({max_model_len}), {needed}, "
        f"which is more than the {usable} usable blocks of the pool "
        f"(num_kv_blocks {num_kv_blocks} less the null block). {estimated}"
        f"Increase num_kv_blocks to at least {total + NULL_BLOCKS} or decrease max_model_len."
    )
