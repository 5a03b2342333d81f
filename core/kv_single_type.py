"""One KV cache group's block lists: vLLM 0.33's `SingleTypeKVCacheManager`s for full attention and
sliding-window attention (vllm/v1/core/single_type_kv_cache_manager.py), over the shared BlockPool.

Both keep one block list per request. A full-attention group keeps every block until the request
finishes. A sliding-window group of window W only needs the last W - 1 computed tokens (the
next token attends to them and itself): the blocks wholly before them are *skipped*. vLLM frees
them, putting the null block 0 in their place (`remove_skipped_blocks`), and a prefix-cache hit of
a sliding group is found from the right: only its last `cdiv(W - 1, block_size)` blocks must be
cached, the rest of the hit is null blocks (`find_longest_cache_hit`). Under vLLM's default
`prefix_cache_retention_interval` 0 a sliding group caches only the blocks a later request could
hit: the ones just before its prompt's last token and before a shared prefix it met
(`reachable_block_mask`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pagedviz.core.block_pool import BlockPool

NULL_BLOCK = 0


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class FullAttentionManager:
    """A full-attention group's block list per request (vLLM's `FullAttentionManager`)."""

    sliding_window: int | None = None

    def __init__(self, pool: BlockPool, block_size: int, group_id: int) -> None:
        self.pool = pool
        self.block_size = block_size
        self.group_id = group_id
        self.req_to_blocks: dict[str, list[int]] = {}
        # blocks of the request already offered to the prefix cache (vLLM's num_cached_block)
        self.num_cached_block: dict[str, int] = {}
        # the admission cap of a recycling group (None: none)
        self.max_admission_blocks: int | None = None

    def num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Tokens before the attention window of the next token (none for full attention)."""
        return 0

    def num_blocks_to_allocate(
        self,
        req_id: str,
        num_tokens: int,
        hits: Sequence[int],
        total_computed_tokens: int,
        apply_admission_cap: bool = False,
    ) -> int:
        """Free-queue blocks that giving the request `num_tokens` slots takes: new blocks past
        the window's skipped ones and the ones held or hit, plus the hit blocks now sitting free
        (vLLM's `get_num_blocks_to_allocate`)."""
        bs = self.block_size
        num_required = cdiv(num_tokens, bs)
        if apply_admission_cap and self.max_admission_blocks is not None:
            num_required = min(num_required, self.max_admission_blocks)
        num_held = len(self.req_to_blocks.get(req_id, ()))
        num_skipped_blocks = self.num_skipped_tokens(total_computed_tokens) // bs
        num_new = max(num_required - max(num_skipped_blocks, len(hits) + num_held), 0)
        kept_hits = hits[max(0, num_skipped_blocks - num_held) :]
        if kept_hits:
            ref = self.pool.ref_cnt
            num_new += sum(1 for b in kept_hits if b != NULL_BLOCK and ref[b] == 0)
        return num_new

    def add_hits(self, req_id: str, hits: Sequence[int], total_computed_tokens: int) -> None:
        """A request's prefix-cache hits become its first blocks (touched); skipped ones are the
        null block (vLLM's `add_local_computed_blocks`)."""
        num_skipped = self.num_skipped_tokens(total_computed_tokens) // self.block_size
        kept = list(hits[num_skipped:])
        self.pool.touch([b for b in kept if b != NULL_BLOCK])
        blocks = [NULL_BLOCK] * num_skipped + kept
        self.req_to_blocks[req_id] = blocks
        self.num_cached_block[req_id] = len(blocks)

    def allocate_new(self, req_id: str, num_tokens: int) -> list[int]:
        """New blocks from the free queue's head until the request has `num_tokens` slots."""
        blocks = self.req_to_blocks.setdefault(req_id, [])
        n = cdiv(num_tokens, self.block_size) - len(blocks)
        if n <= 0:
            return []
        new = self.pool.allocate(n)
        blocks.extend(new)
        return new

    def remove_skipped_blocks(self, req_id: str, num_computed_tokens: int) -> list[tuple[int, int]]:
        """Nothing leaves a full-attention group before the request ends."""
        return []

    def cacheable_mask(self, start: int, end: int, boundaries: Sequence[int]) -> list[bool] | None:
        """Which of the blocks start..end-1 enter the prefix cache (None: all)."""
        return None

    def cache_blocks(
        self, req_id: str, hashes: Sequence[str], num_tokens: int, boundaries: Sequence[int]
    ) -> None:
        """Offer the request's blocks that `num_tokens` tokens fill to the prefix cache, keyed
        by (hash, group) (vLLM's `cache_blocks` / `cache_full_blocks`); null blocks, blocks the
        mask leaves out and blocks that have a hash already are skipped."""
        num_cached = self.num_cached_block.get(req_id, 0)
        num_full = min(num_tokens, len(hashes) * self.block_size) // self.block_size
        if num_cached >= num_full:
            return
        blocks = self.req_to_blocks[req_id]
        mask = self.cacheable_mask(num_cached, num_full, boundaries)
        pool = self.pool
        for i in range(num_cached, num_full):
            b = blocks[i]
            if b == NULL_BLOCK or (mask is not None and not mask[i - num_cached]):
                continue
            if b not in pool.block_hash:
                pool.cache_block(b, hashes[i], self.group_id)
        self.num_cached_block[req_id] = num_full

    def pop(self, req_id: str) -> list[int]:
        """The request's blocks for freeing, without the leading null blocks (`trim_null_head`)."""
        blocks = self.req_to_blocks.pop(req_id, [])
        self.num_cached_block.pop(req_id, None)
        i = 0
        while i < len(blocks) and blocks[i] == NULL_BLOCK:
            i += 1
        return blocks[i:]

    @staticmethod
    def find_longest_cache_hit(
        pool: BlockPool,
        hashes: Sequence[str],
        max_length: int,
        group_ids: Sequence[int],
        block_size: int,
        sliding_window: int | None,
    ) -> tuple[list[list[int]], int]:
        """The leading blocks cached in every group of `group_ids`, left to right."""
        hits: list[list[int]] = [[] for _ in group_ids]
        for h in hashes[: max_length // block_size]:
            cached = pool.get_cached(h, group_ids)
            if cached is None:
                break
            for blocks, b in zip(hits, cached):
                blocks.append(b)
        return hits, len(hits[0]) * block_size


class SlidingWindowManager(FullAttentionManager):
    """A sliding-window group's block list per request (vLLM's `SlidingWindowManager`)."""

    def __init__(
        self,
        pool: BlockPool,
        block_size: int,
        group_id: int,
        sliding_window: int,
        max_admission_blocks: int,
        retention_interval: int | None = 0,
    ) -> None:
        super().__init__(pool, block_size, group_id)
        self.sliding_window = sliding_window
        self.window = sliding_window
        self.retention_interval = retention_interval
        # the most blocks a request holds here (core/kv_planning.py): admission asks for no more
        self.max_admission_blocks = max_admission_blocks

    def num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - self.window + 1)

    def remove_skipped_blocks(self, req_id: str, num_computed_tokens: int) -> list[tuple[int, int]]:
        """Replace the blocks wholly before the window by the null block and free them, walking
        from the last skipped one back to the first null (vLLM's `_remove_blocks_in_range`: the
        walked order is the order `free_blocks` gets them). Returns (index, block) as freed."""
        num_skipped = self.num_skipped_tokens(num_computed_tokens)
        blocks = self.req_to_blocks.get(req_id)
        if num_skipped <= 0 or not blocks:
            return []
        last = min(num_skipped // self.block_size, len(blocks))
        freed: list[tuple[int, int]] = []
        for i in range(last - 1, -1, -1):
            if blocks[i] == NULL_BLOCK:
                break
            freed.append((i, blocks[i]))
            blocks[i] = NULL_BLOCK
        if freed:
            self.pool.free_ordered([b for _, b in freed])
        return freed

    def cacheable_mask(self, start: int, end: int, boundaries: Sequence[int]) -> list[bool] | None:
        """vLLM's `SlidingWindowManager.reachable_block_mask` with the hit alignment of one block:
        a hit needs the `cdiv(W - 1, block_size)` blocks before its end, so only the blocks that
        end a reachable hit are cached: at every `retention_interval` segment (None: every
        block), and before each of the request's reachable boundaries (its prompt's last token,
        a shared prefix it met)."""
        bs = self.block_size
        need = cdiv(self.window - 1, bs)
        mask = [False] * (end - start)
        interval = self.retention_interval
        segment = bs if interval is None else (interval or None)
        if segment is not None:
            per_segment = segment // bs
            if need >= per_segment:
                return None
            for i in range(start, end):
                if i % per_segment >= per_segment - need:
                    mask[i - start] = True
        if interval is not None:
            for boundary in boundaries:
                last = boundary // bs
                for j in range(max(start, last - need), min(end, last)):
                    mask[j - start] = True
        return mask

    @staticmethod
    def find_longest_cache_hit(
        pool: BlockPool,
        hashes: Sequence[str],
        max_length: int,
        group_ids: Sequence[int],
        block_size: int,
        sliding_window: int | None,
    ) -> tuple[list[list[int]], int]:
        """The longest hit whose last `cdiv(W - 1, block_size)` blocks are cached in every group,
        searched from the right; the blocks before them are null blocks. Without such a run, the
        run of cached blocks at the start (if any) is the hit."""
        assert sliding_window is not None
        need = cdiv(sliding_window - 1, block_size)
        max_blocks = max_length // block_size
        hits = [[NULL_BLOCK] * max_blocks for _ in group_ids]
        run = 0
        found = False
        for i in range(max_blocks - 1, -1, -1):
            cached = pool.get_cached(hashes[i], group_ids)
            if cached is None:
                run = 0
                continue
            for blocks, b in zip(hits, cached):
                blocks[i] = b
            run += 1
            if run >= need:
                for blocks in hits:
                    del blocks[i + run :]
                found = True
                break
        if not found:
            for blocks in hits:
                del blocks[run:]
        return hits, len(hits[0]) * block_size
