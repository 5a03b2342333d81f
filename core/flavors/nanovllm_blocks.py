"""nano-vllm's `BlockManager` (`engine/block_manager.py` at the commit core/flavors/nanovllm.py
follows), for the nanovllm flavour: blocks counted from 0 (no null block), a free deque whose tail
takes freed blocks, ref counts, and prefix caching always on (full blocks hashed, chained to their
parent's hash, after their tokens were computed; `can_allocate` never looks up a sequence's last
block; a freed block keeps its hash until it is handed out again).
"""

from __future__ import annotations

import hashlib
from collections import deque

import numpy as np

from pagedviz.core.request import Request


def block_hash(token_ids: np.ndarray, prefix: str | None) -> str:
    """`BlockManager.compute_hash`: a 64-bit hash of the parent's hash and the block's token ids
    (nano-vllm uses xxh64; any 64-bit hash gives the same hits, as token ids are compared too)."""
    h = hashlib.blake2b(digest_size=8)
    if prefix is not None:
        h.update(bytes.fromhex(prefix))
    h.update(np.asarray(token_ids, dtype=np.int64).tobytes())
    return h.hexdigest()


class NanoBlockManager:
    """nano-vllm's `BlockManager`: free deque, used set, ref counts and the hash -> block map."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.ref_cnt = np.zeros(num_blocks, dtype=np.int32)
        self.hash: list[str | None] = [None] * num_blocks
        self.block_tokens: list[tuple[int, ...]] = [()] * num_blocks
        self.hash_to_block_id: dict[str, int] = {}
        self.free_block_ids: deque[int] = deque(range(num_blocks))
        self.used_block_ids: set[int] = set()
        self.block_tables: dict[str, list[int]] = {}
        self.last_refusal: dict[str, object] = {}  # why can_allocate last returned -1

    def num_blocks_of(self, seq: Request) -> int:
        return -(-seq.num_tokens // self.block_size)

    def block(self, seq: Request, i: int) -> np.ndarray:
        return seq.token_ids[i * self.block_size : min((i + 1) * self.block_size, seq.num_tokens)]

    def table(self, seq: Request) -> list[int]:
        return self.block_tables.setdefault(seq.req_id, [])

    def _allocate_block(self) -> int:
        b = self.free_block_ids.popleft()
        assert self.ref_cnt[b] == 0
        h = self.hash[b]
        if h is not None and self.hash_to_block_id.get(h) == b:
            del self.hash_to_block_id[h]
        self.ref_cnt[b] = 1
        self.hash[b] = None
        self.block_tokens[b] = ()
        self.used_block_ids.add(b)
        return b

    def _deallocate_block(self, b: int) -> None:
        self.used_block_ids.remove(b)
        self.free_block_ids.append(b)

    def _lookup(self, seq: Request, i: int, h: str | None) -> tuple[str, int]:
        tokens = self.block(seq, i)
        h2 = block_hash(tokens, h)
        b = self.hash_to_block_id.get(h2, -1)
        if b != -1 and self.block_tokens[b] != tuple(tokens.tolist()):
            b = -1
        return h2, b

    def probe(self, seq: Request) -> tuple[int, int]:
        """(leading full blocks found in the cache -- the last block is never looked up --, free
        blocks the sequence would take); a hit on a free block still takes a free block."""
        h: str | None = None
        num_cached_blocks = 0
        num_new_blocks = self.num_blocks_of(seq)
        for i in range(self.num_blocks_of(seq) - 1):
            h, b = self._lookup(seq, i, h)
            if b == -1:
                break
            num_cached_blocks += 1
            if b in self.used_block_ids:
                num_new_blocks -= 1
        return num_cached_blocks, num_new_blocks

    def can_allocate(self, seq: Request) -> int:
        """Leading full blocks found in the cache, or -1 when the free blocks cannot hold the rest
        (`last_refusal` then says how many it needs and how many are free)."""
        num_cached_blocks, num_new_blocks = self.probe(seq)
        if len(self.free_block_ids) < num_new_blocks:
            self.last_refusal = {"blocks_needed": num_new_blocks, "blocks_free": len(self.free_block_ids)}
            return -1
        return num_cached_blocks

    def allocate(self, seq: Request, num_cached_blocks: int) -> None:
        table = self.table(seq)
        assert not table
        h: str | None = None
        for i in range(num_cached_blocks):
            h, b = self._lookup(seq, i, h)
            if b in self.used_block_ids:
                self.ref_cnt[b] += 1
            else:
                self.ref_cnt[b] = 1
                self.free_block_ids.remove(b)
                self.used_block_ids.add(b)
            table.append(b)
        for _ in range(num_cached_blocks, self.num_blocks_of(seq)):
            table.append(self._allocate_block())
        seq.num_computed_tokens = num_cached_blocks * self.block_size

    def deallocate(self, seq: Request) -> None:
        for b in reversed(self.block_tables.pop(seq.req_id, [])):
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self._deallocate_block(b)
        seq.num_computed_tokens = 0

    def can_append(self, seq: Request) -> bool:
        return len(self.free_block_ids) >= (seq.num_tokens % self.block_size == 1)

    def may_append(self, seq: Request) -> list[int]:
        if seq.num_tokens % self.block_size == 1:
            b = self._allocate_block()
            self.table(seq).append(b)
            return [b]
        return []

    def hash_blocks(self, seq: Request, num_scheduled: int) -> None:
        """Hash the blocks this step filled (num_computed_tokens is the count before the step)."""
        bs = self.block_size
        start = seq.num_computed_tokens // bs
        end = (seq.num_computed_tokens + num_scheduled) // bs
        if start == end:
            return
        table = self.block_tables[seq.req_id]
        h = self.hash[table[start - 1]] if start > 0 else None
        for i in range(start, end):
            b = table[i]
            tokens = self.block(seq, i)
            h = block_hash(tokens, h)
            self.hash[b] = h
            self.block_tokens[b] = tuple(tokens.tolist())
            self.hash_to_block_id[h] = b
