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

from pagedviz.core.kv_groups import FULL, KVCacheGroup

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
    """Per-request block lists, one per KV cache group, on top of one shared BlockPool, with
    prefix-cache hashing of full blocks.

    With one group (every layer full attention) a request has one block list. With several
    (core/kv_groups.py) each group keeps its own list over the shared pool, allocated in group
    order, as vLLM's KV cache coordinator does. Prefix hits (`Hits`) are one list per group."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool,
        free_queue_order: str = "lifo",
        groups: tuple[KVCacheGroup, ...] = (KVCacheGroup(FULL, (0,)),),
    ) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.groups = groups
        self.pool = BlockPool(num_blocks, enable_prefix_caching, free_queue_order)
        # each group's block list per request, in group order
        self.group_blocks: list[dict[str, list[int]]] = [{} for _ in groups]
        self.req_hashes: dict[str, list[str]] = {}
        self.prefix_hashes: dict[str, list[str]] = {}  # computed_blocks' hashes, per request
        # why the last allocate_slots returned None: blocks_needed, blocks_free (+ watermark_blocks)
        self.last_refusal: dict[str, object] = {}

    @property
    def req_blocks(self) -> dict[str, list[int]]:
        """The first group's block list per request (the only one with one group)."""
        return self.group_blocks[0]

    def blocks_of(self, req_id: str) -> list[int]:
        return self.group_blocks[0].get(req_id, [])

    def group_blocks_of(self, req_id: str) -> list[list[int]]:
        """One block list per group, in group order (vLLM's `get_block_ids`)."""
        return [list(blocks.get(req_id, [])) for blocks in self.group_blocks]

    def owners(self) -> dict[str, list[str]]:
        """Block id (as a string) -> the requests holding it, over every group; the null block
        (a sliding group's dropped places) is nobody's."""
        owners: dict[str, list[str]] = {}
        for blocks_of in self.group_blocks:
            for req_id, blocks in blocks_of.items():
                for b in blocks:
                    if b != NULL_BLOCK:
                        owners.setdefault(str(b), []).append(req_id)
        return owners

    def block_groups(self) -> dict[str, int]:
        """Block id (as a string) -> the group whose table holds it (several groups only)."""
        return {
            str(b): g
            for g, blocks_of in enumerate(self.group_blocks)
            for blocks in blocks_of.values()
            for b in blocks
            if b != NULL_BLOCK
        }

    def block_hashes(self, token_ids: np.ndarray, num_blocks: int, start: list[str]) -> list[str]:
        hashes = list(start)
        for i in range(len(hashes), num_blocks):
            parent = hashes[-1] if hashes else None
            hashes.append(hash_block(parent, token_ids[i * self.block_size : (i + 1) * self.block_size]))
        return hashes

    def no_hits(self) -> list[list[int]]:
        return [[] for _ in self.groups]

    def hit_tokens(self, hits: list[list[int]]) -> int:
        """Tokens a prefix hit covers (every group hits the same number of blocks)."""
        return len(hits[0]) * self.block_size

    def computed_blocks(self, req_id: str, token_ids: np.ndarray) -> list[list[int]]:
        """Prefix-cache hits for a request about to start, one list per group; at most
        num_tokens - 1 tokens. Several groups: no hits yet (the hybrid lookup is not modelled)."""
        if not self.enable_prefix_caching or len(self.groups) > 1:
            return self.no_hits()
        max_blocks = (len(token_ids) - 1) // self.block_size
        # a request's leading tokens never change, so its block hashes are computed once (vLLM
        # keeps them on the request too) and extended as it grows
        known = self.prefix_hashes.get(req_id, [])
        if len(known) < max_blocks:
            known = self.prefix_hashes[req_id] = self.block_hashes(token_ids, max_blocks, known)
        return [self.pool.lookup(known[:max_blocks])]

    def allocate_slots(
        self,
        req_id: str,
        token_ids: np.ndarray,
        num_computed_tokens: int,
        num_new_tokens: int,
        hits: list[list[int]] | None = None,
        full_sequence_tokens: int | None = None,
        watermark_blocks: int = 0,
    ) -> list[list[int]] | None:
        """Grow a request's block lists to hold computed + new tokens; None when the pool is short.

        `full_sequence_tokens` (admission with scheduler_reserve_full_isl): first require that the
        free blocks could hold that many tokens (vLLM's `full_sequence_must_fit`). Both checks keep
        `watermark_blocks` free. Returns the blocks added per group (hits first). Blocks filled by
        this step's tokens are hashed now, so a request scheduled later in the same step can hit
        them.
        """
        hits = hits or self.no_hits()
        held = [blocks.get(req_id, []) for blocks in self.group_blocks]
        if full_sequence_tokens is not None:
            full = math.ceil(full_sequence_tokens / self.block_size)
            needed = sum(self.pool.num_needed(h, max(0, full - len(b) - len(h))) for b, h in zip(held, hits))
            if needed + watermark_blocks > self.pool.num_free:
                self._refuse(needed, watermark_blocks, full_sequence=True)
                return None
        need = math.ceil((num_computed_tokens + num_new_tokens) / self.block_size)
        num_new = [max(0, need - len(b) - len(h)) for b, h in zip(held, hits)]
        needed = sum(self.pool.num_needed(h, n) for h, n in zip(hits, num_new))
        if needed + watermark_blocks > self.pool.num_free:
            self._refuse(needed, watermark_blocks)
            return None
        added_per_group = []
        for g, (h, n) in enumerate(zip(hits, num_new)):
            if h:
                self.pool.touch(h)
            added = [*h, *self.pool.allocate(n)]
            self.group_blocks[g].setdefault(req_id, []).extend(added)
            added_per_group.append(added)
        if self.enable_prefix_caching:
            # only known tokens are hashed (vLLM caps at request.num_tokens): with async scheduling
            # a decode's input token is still a placeholder; update_from_output hashes it later
            self.cache_full_blocks(
                req_id, token_ids, min(num_computed_tokens + num_new_tokens, len(token_ids))
            )
        return added_per_group

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
        if not self.enable_prefix_caching or len(self.groups) > 1:
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
        """Free every group's blocks of the request, group by group in order (vLLM's
        coordinator frees each manager's blocks in turn, each list walked in reverse)."""
        for blocks_of in self.group_blocks:
            self.pool.free([b for b in blocks_of.pop(req_id, []) if b != NULL_BLOCK])
        self.req_hashes.pop(req_id, None)
        self.prefix_hashes.pop(req_id, None)
