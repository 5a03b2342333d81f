"""The KV block pool of the vllm flavour (docs/architecture.md, README "Fidelity").

Physical block 0 is the null block and is never handed out, so a block-table entry of 0 reads as
"not allocated". Free blocks wait in a queue (head = next to allocate). Ref counts let several
requests share a block through the prefix cache: a full block's hash chains its parent's hash and
its token ids, and a new request whose leading blocks hash the same reuses them.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

NULL_BLOCK = 0


def hash_block(parent: str | None, token_ids: np.ndarray) -> str:
    """Chained hash of one full block: parent hash, then the block's token ids."""
    h = hashlib.sha256((parent or "root").encode())
    h.update(np.ascontiguousarray(token_ids, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


class BlockPool:
    """Free queue, ref counts and the prefix-cache hash map of `num_blocks` physical blocks."""

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
        # hash -> the blocks holding it, oldest first (a lookup takes the oldest, as vLLM's does)
        self.cached: dict[str, dict[int, None]] = {}

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
            holders = self.cached[h]
            del holders[block]
            if not holders:
                del self.cached[h]

    def touch(self, blocks: Sequence[int]) -> None:
        """Take a reference on cached blocks (prefix-cache hits)."""
        for b in blocks:
            if self.ref_cnt[b] == 0:
                del self.free_queue[b]
            self.ref_cnt[b] += 1

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference on each block, walking the list in reverse (vLLM's order).

        Of the blocks that become free, those without a hash go to the head of the queue in
        reverse-walk order ("lifo", vLLM 0.33's `prepend_n`, reused first); hashed ones go to the
        tail (`append_n`, evicted last). With "fifo" (older vLLM) every block goes to the tail.
        """
        to_head: list[int] = []
        for b in reversed(blocks):
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

    def lookup(self, block_hashes: Sequence[str]) -> list[int]:
        """Longest run of leading hashes that are cached."""
        hits: list[int] = []
        for h in block_hashes:
            holders = self.cached.get(h)
            if not holders:
                break
            hits.append(next(iter(holders)))
        return hits

    def cache_block(self, block: int, h: str) -> None:
        self.block_hash[block] = h
        self.cached.setdefault(h, {})[block] = None

    def num_needed(self, hits: Sequence[int], num_new_blocks: int) -> int:
        """Free-queue blocks an allocation would consume: new ones plus hits sitting free."""
        free_hits = int(np.count_nonzero(self.ref_cnt[list(hits)] == 0)) if hits else 0
        return num_new_blocks + free_hits

    def snapshot(self) -> dict[str, object]:
        return {
            "free_block_queue": list(self.free_queue),
            "ref_cnt": self.ref_cnt.tolist(),
            "block_hash": {str(b): h for b, h in sorted(self.block_hash.items())},
        }


class KVCacheManager:
    """Per-request block lists on top of a BlockPool, with prefix-cache hashing of full blocks."""

    def __init__(
        self, num_blocks: int, block_size: int, enable_prefix_caching: bool, free_queue_order: str = "lifo"
    ) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks, enable_prefix_caching, free_queue_order)
        self.req_blocks: dict[str, list[int]] = {}
        self.req_hashes: dict[str, list[str]] = {}
        # why the last allocate_slots returned None: blocks_needed, blocks_free (+ watermark_blocks)
        self.last_refusal: dict[str, object] = {}

    def blocks_of(self, req_id: str) -> list[int]:
        return self.req_blocks.get(req_id, [])

    def block_hashes(self, token_ids: np.ndarray, num_blocks: int, start: list[str]) -> list[str]:
        hashes = list(start)
        for i in range(len(hashes), num_blocks):
            parent = hashes[-1] if hashes else None
            hashes.append(hash_block(parent, token_ids[i * self.block_size : (i + 1) * self.block_size]))
        return hashes

    def computed_blocks(self, req_id: str, token_ids: np.ndarray) -> list[int]:
        """Prefix-cache hits for a request about to start; at most num_tokens - 1 tokens."""
        if not self.enable_prefix_caching:
            return []
        max_blocks = (len(token_ids) - 1) // self.block_size
        hashes = self.block_hashes(token_ids, max_blocks, [])
        return self.pool.lookup(hashes)

    def allocate_slots(
        self,
        req_id: str,
        token_ids: np.ndarray,
        num_computed_tokens: int,
        num_new_tokens: int,
        hits: Sequence[int] = (),
        full_sequence_tokens: int | None = None,
        watermark_blocks: int = 0,
    ) -> list[int] | None:
        """Grow a request's block list to hold computed + new tokens; None when the pool is short.

        `full_sequence_tokens` (admission with scheduler_reserve_full_isl): first require that the
        free blocks could hold that many tokens (vLLM's `full_sequence_must_fit`). Both checks keep
        `watermark_blocks` free. Returns the blocks added (hits first). Blocks filled by this
        step's tokens are hashed now, so a request scheduled later in the same step can hit them.
        """
        held = self.req_blocks.get(req_id, [])
        if full_sequence_tokens is not None:
            full = math.ceil(full_sequence_tokens / self.block_size)
            needed = self.pool.num_needed(hits, max(0, full - len(held) - len(hits)))
            if needed + watermark_blocks > self.pool.num_free:
                self._refuse(needed, watermark_blocks, full_sequence=True)
                return None
        need = math.ceil((num_computed_tokens + num_new_tokens) / self.block_size)
        num_new_blocks = max(0, need - len(held) - len(hits))
        needed = self.pool.num_needed(hits, num_new_blocks)
        if needed + watermark_blocks > self.pool.num_free:
            self._refuse(needed, watermark_blocks)
            return None
        if hits:
            self.pool.touch(hits)
        added = [*hits, *self.pool.allocate(num_new_blocks)]
        blocks = self.req_blocks.setdefault(req_id, [])
        blocks.extend(added)
        if self.enable_prefix_caching:
            # only known tokens are hashed (vLLM caps at request.num_tokens): with async scheduling
            # a decode's input token is still a placeholder; update_from_output hashes it later
            self.cache_full_blocks(
                req_id, token_ids, min(num_computed_tokens + num_new_tokens, len(token_ids))
            )
        return added

    def _refuse(self, needed: int, watermark_blocks: int, full_sequence: bool = False) -> None:
        """Record why the last allocate_slots returned None (the trace's `kv_pool` cause)."""
        refusal: dict[str, object] = {"blocks_needed": needed, "blocks_free": self.pool.num_free}
        if watermark_blocks:
            refusal["watermark_blocks"] = watermark_blocks
        if full_sequence:
            refusal["full_sequence"] = True
        self.last_refusal = refusal

    def cache_full_blocks(self, req_id: str, token_ids: np.ndarray, num_tokens: int) -> None:
        """Hash the request's blocks that the first `num_tokens` tokens fill (vLLM's
        `cache_blocks`); blocks hashed before keep their hash."""
        if not self.enable_prefix_caching:
            return
        full = num_tokens // self.block_size
        done = self.req_hashes.get(req_id, [])
        if full > len(done):
            blocks = self.req_blocks[req_id]
            hashes = self.block_hashes(token_ids, full, done)
            for i in range(len(done), full):
                if blocks[i] not in self.pool.block_hash:
                    self.pool.cache_block(blocks[i], hashes[i])
            self.req_hashes[req_id] = hashes

    def free(self, req_id: str) -> None:
        self.pool.free(self.req_blocks.pop(req_id, []))
        self.req_hashes.pop(req_id, None)
