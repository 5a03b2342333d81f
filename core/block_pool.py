"""The KV block pool of the vllm flavour (docs/architecture.md, README "Fidelity"): vLLM's
`BlockPool` and its `FreeKVCacheBlockQueue`.

Physical block 0 is the null block and is never handed out, so a block-table entry of 0 reads as
"not allocated" (and, in a sliding-window group, "dropped out of the window"). Free blocks wait in
a queue (head = next to allocate). Ref counts let several requests share a block through the
prefix cache: a full block's hash chains its parent's hash and its token ids, and a new request
whose leading blocks hash the same reuses them.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

NULL_BLOCK = 0


def usable_blocks(flavor: str, num_kv_blocks: int) -> int:
    """The pool's size as vLLM counts it: the physical blocks less the null block, which
    `BlockPool` takes off the free queue when it is built and never hands out (`get_usage` divides
    by `num_gpu_blocks - 1`). nano-vllm has no null block: all its blocks. Every view's pool size
    (the trace's `kv_cache.num_usable_blocks`, the run charts, the metrics) is this number."""
    return num_kv_blocks if flavor == "nanovllm" else max(num_kv_blocks - 1, 0)


def hash_block(parent: str | None, token_ids: np.ndarray) -> str:
    """Chained hash of one full block: parent hash, then the block's token ids."""
    h = hashlib.sha256((parent or "root").encode())
    h.update(np.ascontiguousarray(token_ids, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


class BlockPool:
    """Free queue, ref counts and the prefix-cache hash map of `num_blocks` physical blocks.

    Cached blocks are keyed by (hash, KV cache group), as vLLM's `BlockHashWithGroupId`: the same
    tokens cached by two groups are two entries, each group's own block."""

    def __init__(
        self, num_blocks: int, enable_prefix_caching: bool = False, free_queue_order: str = "lifo"
    ) -> None:
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.free_queue_order = free_queue_order
        self.ref_cnt = np.zeros(num_blocks, dtype=np.int32)
        # OrderedDict as a doubly linked list: O(1) pop at the head, append, prepend and removal
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(NULL_BLOCK + 1, num_blocks))
        self.block_hash: dict[int, str] = {}
        self.block_group: dict[int, int] = {}  # the group a cached block is cached for
        # (hash, group) -> the blocks holding it, oldest first (a lookup takes the oldest, as
        # vLLM's get_one_block does)
        self.cached: dict[tuple[str, int], dict[int, None]] = {}

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    def allocate(self, n: int) -> list[int]:
        """Take n blocks from the head of the free queue; a hashed one loses its hash."""
        if n > len(self.free_queue):
            raise RuntimeError(f"asked for {n} blocks, {len(self.free_queue)} free")
        blocks = [self.free_queue.popitem(last=False)[0] for _ in range(n)]
        for b in blocks:
            self._evict(b)
        self.ref_cnt[blocks] = 1
        return blocks

    def _evict(self, block: int) -> None:
        h = self.block_hash.pop(block, None)
        if h is not None:
            key = (h, self.block_group.pop(block))
            holders = self.cached[key]
            del holders[block]
            if not holders:
                del self.cached[key]

    def touch(self, blocks: Sequence[int]) -> None:
        """Take a reference on cached blocks (prefix-cache hits)."""
        for b in blocks:
            if self.ref_cnt[b] == 0:
                del self.free_queue[b]
            self.ref_cnt[b] += 1

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference on each block, walking the list in reverse (vLLM frees a request's
        blocks so: the tail first)."""
        self.free_ordered(blocks[::-1])

    def free_ordered(self, blocks: Sequence[int]) -> None:
        """Drop one reference on each block, in the given order (vLLM's `free_blocks`).

        Of the blocks that become free, those without a hash go to the head of the queue in the
        given order ("lifo", vLLM 0.33's `prepend_n`, reused first); hashed ones go to the tail
        (`append_n`, evicted last). With "fifo" (older vLLM) every block goes to the tail.
        """
        to_head: list[int] = []
        for b in blocks:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] > 0:
                continue
            if self.free_queue_order == "lifo" and b not in self.block_hash:
                to_head.append(b)
            else:
                self.free_queue[b] = None
        for b in reversed(to_head):
            self.free_queue[b] = None
            self.free_queue.move_to_end(b, last=False)

    def get_cached(self, h: str, group_ids: Sequence[int]) -> list[int] | None:
        """The oldest block caching `h` for each group, or None if a group has none
        (vLLM's `get_cached_block`)."""
        found = []
        for g in group_ids:
            holders = self.cached.get((h, g))
            if not holders:
                return None
            found.append(next(iter(holders)))
        return found

    def lookup(self, block_hashes: Sequence[str], group: int = 0) -> list[int]:
        """Longest run of leading hashes that are cached for `group`."""
        hits: list[int] = []
        for h in block_hashes:
            holders = self.cached.get((h, group))
            if not holders:
                break
            hits.append(next(iter(holders)))
        return hits

    def cache_block(self, block: int, h: str, group: int = 0) -> None:
        self.block_hash[block] = h
        self.block_group[block] = group
        self.cached.setdefault((h, group), {})[block] = None

    def snapshot(self) -> dict[str, object]:
        return {
            "free_block_queue": list(self.free_queue),
            "ref_cnt": self.ref_cnt.tolist(),
            "block_hash": {str(b): h for b, h in sorted(self.block_hash.items())},
        }
