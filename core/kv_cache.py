"""The KV cache manager of the vllm flavour (docs/architecture.md, README "Fidelity"): vLLM's
`KVCacheManager` and its KV cache coordinator, over one shared BlockPool (core/block_pool.py) and
one manager per KV cache group (core/kv_single_type.py).
"""

from __future__ import annotations

import numpy as np

from pagedviz.core.block_pool import NULL_BLOCK, BlockPool, hash_block, usable_blocks
from pagedviz.core.kv_groups import FULL, KVCacheGroup, block_group_of, block_owners
from pagedviz.core.kv_planning import group_max_blocks
from pagedviz.core.kv_single_type import FullAttentionManager, SlidingWindowManager

__all__ = ["NULL_BLOCK", "BlockPool", "KVCacheManager", "hash_block", "usable_blocks"]


class KVCacheManager:
    """Per-request block lists, one per KV cache group, on top of one shared BlockPool, with
    prefix-cache hashing of full blocks: vLLM 0.33's `KVCacheManager` and its KV cache coordinator.

    With one group (every layer full attention) a request has one block list. With several
    (core/kv_groups.py) each group's manager (core/kv_single_type.py) keeps its own lists over the
    shared pool; the coordinator walks them in group order: touching every group's prefix hits
    before allocating any group's new blocks, dropping each sliding group's out-of-window blocks,
    and freeing group by group. Prefix hits (`Hits`) are one list per group."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool,
        free_queue_order: str = "lifo",
        groups: tuple[KVCacheGroup, ...] = (KVCacheGroup(FULL, (0,)),),
        max_model_len: int | None = None,
        max_in_flight_tokens: int | None = None,
        retention_interval: int | None = 0,
    ) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.groups = groups
        self.pool = BlockPool(num_blocks, enable_prefix_caching, free_queue_order)
        self.max_model_len = max_model_len
        max_len = max_model_len if max_model_len is not None else num_blocks * block_size
        in_flight = max_in_flight_tokens if max_in_flight_tokens is not None else max_len
        self.managers: list[FullAttentionManager] = [
            SlidingWindowManager(
                self.pool,
                block_size,
                g,
                group.sliding_window,
                group_max_blocks(group, max_len, block_size, in_flight),
                retention_interval,
            )
            if group.sliding and group.sliding_window is not None
            else FullAttentionManager(self.pool, block_size, g)
            for g, group in enumerate(groups)
        ]
        # each group's block list per request, in group order (the managers' own lists)
        self.group_blocks: list[dict[str, list[int]]] = [m.req_to_blocks for m in self.managers]
        # the groups looked up together (one spec each: vLLM's `attention_groups`), full
        # attention first (HybridKVCacheCoordinator.verify_and_split_kv_cache_groups)
        spec_groups: dict[tuple[str, int | None], list[int]] = {}
        for g, group in enumerate(groups):
            spec_groups.setdefault((group.kind, group.sliding_window), []).append(g)
        self.spec_groups = sorted(spec_groups.items(), key=lambda kv: kv[0][0] != FULL)
        self.req_hashes: dict[str, list[str]] = {}  # the request's full blocks' hashes
        self.prefix_hashes: dict[str, list[str]] = {}  # computed_blocks' hashes, per request
        # the block-aligned end of a prefix some groups had cached but a sliding group had not
        # (vLLM's `request.shared_prefix_boundary`): the request's sliding blocks before it are
        # cached, so the next request meeting it hits
        self.shared_prefix_boundary: dict[str, int] = {}
        self.num_prompt_tokens: dict[str, int] = {}
        # why the last allocate_slots returned None: blocks_needed, blocks_free (+ watermark_blocks)
        self.last_refusal: dict[str, object] = {}
        # the blocks the last allocate_slots dropped out of a sliding window, one entry per group
        self.last_drops: list[dict[str, object]] = []

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
        return block_owners(self.group_blocks)

    def block_groups(self) -> dict[str, int]:
        """Block id (as a string) -> the group whose table holds it (several groups only)."""
        return block_group_of(self.group_blocks)

    def block_hashes(self, token_ids: np.ndarray, num_blocks: int, start: list[str]) -> list[str]:
        hashes = list(start)
        for i in range(len(hashes), num_blocks):
            parent = hashes[-1] if hashes else None
            hashes.append(hash_block(parent, token_ids[i * self.block_size : (i + 1) * self.block_size]))
        return hashes

    def no_hits(self) -> list[list[int]]:
        return [[] for _ in self.groups]

    def hit_tokens(self, hits: list[list[int]]) -> int:
        """Tokens a prefix hit covers (every group's hit list covers the same tokens; a sliding
        group's starts with null blocks)."""
        return len(hits[0]) * self.block_size

    def computed_blocks(self, req_id: str, token_ids: np.ndarray, record: bool = True) -> list[list[int]]:
        """Prefix-cache hits for a request about to start, one list per group; at most
        num_tokens - 1 tokens (vLLM's `get_computed_blocks`). With several groups each group (of
        one spec) finds its own hit and the shortest wins: full attention first, left to right;
        then the sliding groups, from the right, within the full groups' hit; the full groups'
        hits are cut to it (HybridKVCacheCoordinator.find_longest_cache_hit). `record`: keep the
        shared prefix a sliding group had not cached, as the scheduler's lookup does (a peek by
        the causes does not)."""
        if not self.enable_prefix_caching:
            if record:
                self.shared_prefix_boundary.pop(req_id, None)
            return self.no_hits()
        bs = self.block_size
        max_length = len(token_ids) - 1
        max_blocks = max_length // bs
        # a request's leading tokens never change, so its block hashes are computed once (vLLM
        # keeps them on the request too) and extended as it grows
        known = self.prefix_hashes.get(req_id, [])
        if len(known) < max_blocks:
            known = self.prefix_hashes[req_id] = self.block_hashes(token_ids, max_blocks, known)
        if len(self.groups) == 1:
            if self.managers[0].sliding_window is None:
                return [self.pool.lookup(known[:max_blocks])]
            hits, _ = self._find(0, known, max_length)
            return hits
        hit_length = max_length
        longest = 0
        found: list[list[int] | None] = [None] * len(self.groups)
        length_of = [0] * len(self.groups)
        simple = len(self.spec_groups) == 2 and self.spec_groups[0][0][0] == FULL
        while True:
            curr = hit_length
            for (kind, _), gids in self.spec_groups:
                if kind == FULL and found[gids[0]] is not None:
                    curr = min(curr, length_of[gids[0]])  # downward-closed: cut, not searched
                    continue
                hits, curr = self._find(gids, known, curr)
                for g, blocks in zip(gids, hits):
                    found[g], length_of[g] = blocks, curr
                longest = max(longest, curr)
            if curr >= hit_length:
                break
            hit_length = curr
            if simple:
                break
        num_blocks = hit_length // bs
        for (kind, _), gids in self.spec_groups:
            for g in gids:
                cut = found[g]
                if kind == FULL and cut is not None:
                    del cut[num_blocks:]
        if record:
            if longest > hit_length:
                self.shared_prefix_boundary[req_id] = longest
            else:
                self.shared_prefix_boundary.pop(req_id, None)
        return [blocks if blocks is not None else [] for blocks in found]

    def _find(self, gids: int | list[int], hashes: list[str], max_length: int) -> tuple[list[list[int]], int]:
        ids = [gids] if isinstance(gids, int) else gids
        m = self.managers[ids[0]]
        return m.find_longest_cache_hit(self.pool, hashes, max_length, ids, self.block_size, m.sliding_window)

    def _num_blocks_to_allocate(
        self, req_id: str, num_tokens: int, hits: list[list[int]], total_computed: int, cap: bool = False
    ) -> int:
        return sum(
            m.num_blocks_to_allocate(req_id, num_tokens, h, total_computed, cap)
            for m, h in zip(self.managers, hits)
        )

    def allocate_slots(
        self,
        req_id: str,
        token_ids: np.ndarray,
        num_computed_tokens: int,
        num_new_tokens: int,
        hits: list[list[int]] | None = None,
        full_sequence_tokens: int | None = None,
        watermark_blocks: int = 0,
        num_in_flight_tokens: int = 0,
        num_prompt_tokens: int | None = None,
    ) -> list[list[int]] | None:
        """Grow a request's block lists to hold computed + new tokens; None when the pool is short
        (vLLM's `allocate_slots`).

        `num_computed_tokens` counts the prefix hit `hits` (one list per group) of a request
        being admitted. `full_sequence_tokens` (admission with scheduler_reserve_full_isl): first
        require that the free blocks could hold that many tokens (vLLM's `full_sequence_must_fit`,
        a sliding group capped at what its window and the tokens in flight can hold). Then each
        sliding group drops the blocks before its window, on the tokens processed so far (the
        computed ones less `num_inflight_tokens`), even if the allocation then fails
        (`last_drops`). Both checks keep `watermark_blocks` free. Returns the blocks added per
        group (a request with no blocks before: its whole lists, hits and null blocks first).
        Blocks filled by this step's tokens are hashed now, so a request scheduled later in the
        same step can hit them.
        """
        hits = hits or self.no_hits()
        self.last_drops = []
        if num_prompt_tokens is not None:
            self.num_prompt_tokens[req_id] = num_prompt_tokens
        total_computed = num_computed_tokens
        if self.max_model_len is not None:
            total_computed = min(total_computed, self.max_model_len)
        if full_sequence_tokens is not None:
            needed = self._num_blocks_to_allocate(
                req_id, full_sequence_tokens, hits, total_computed, cap=True
            )
            if needed + watermark_blocks > self.pool.num_free:
                self._refuse(needed, watermark_blocks, full_sequence=True)
                return None
        num_tokens = total_computed + num_new_tokens
        if self.max_model_len is not None:
            num_tokens = min(num_tokens, self.max_model_len)
        processed = max(0, total_computed - num_in_flight_tokens)
        for g, m in enumerate(self.managers):
            freed = m.remove_skipped_blocks(req_id, processed)
            if freed:
                self.last_drops.append(self._drop(g, m, freed, processed))
        needed = self._num_blocks_to_allocate(req_id, num_tokens, hits, total_computed)
        if needed + watermark_blocks > self.pool.num_free:
            self._refuse(needed, watermark_blocks)
            return None
        fresh = [not m.req_to_blocks.get(req_id) for m in self.managers]
        if any(hits):
            # every group's hits are touched before any group takes new blocks, so a later
            # group's hit sitting free cannot be taken as an earlier group's new block
            for m, h in zip(self.managers, hits):
                m.add_hits(req_id, h, total_computed)
        added_per_group = []
        for m, new_fresh in zip(self.managers, fresh):
            added = m.allocate_new(req_id, num_tokens)
            added_per_group.append(list(m.req_to_blocks[req_id]) if new_fresh else added)
        if self.enable_prefix_caching:
            # only known tokens are hashed (vLLM caps at request.num_tokens): with async scheduling
            # a decode's input token is still a placeholder; update_from_output hashes it later
            self.cache_full_blocks(
                req_id, token_ids, min(num_computed_tokens + num_new_tokens, len(token_ids))
            )
        return added_per_group

    def _drop(
        self, g: int, m: FullAttentionManager, freed: list[tuple[int, int]], processed: int
    ) -> dict[str, object]:
        """One entry of the trace's `scheduler.window_drops` (docs/arrays.md)."""
        return {
            "group": g,
            "block_ids": [b for _, b in freed],
            "block_indices": [i for i, _ in freed],
            "num_computed_tokens": processed,
            "sliding_window": m.sliding_window,
            "first_kept_token": m.num_skipped_tokens(processed),
        }

    def _refuse(self, needed: int, watermark_blocks: int, full_sequence: bool = False) -> None:
        """Record why the last allocate_slots returned None (the trace's `kv_pool` cause)."""
        refusal: dict[str, object] = {"blocks_needed": needed, "blocks_free": self.pool.num_free}
        if watermark_blocks:
            refusal["watermark_blocks"] = watermark_blocks
        if full_sequence:
            refusal["full_sequence"] = True
        self.last_refusal = refusal

    def cache_full_blocks(self, req_id: str, token_ids: np.ndarray, num_tokens: int) -> None:
        """Hash the request's blocks that the first `num_tokens` tokens fill, group by group
        (vLLM's `cache_blocks`); blocks hashed before keep their hash. A sliding group caches
        only the blocks a later hit can end on: before the prompt's last token and before a
        shared prefix the request met (vLLM's `replay_boundaries` and `shared_prefix_boundary`)."""
        if not self.enable_prefix_caching:
            return
        full = num_tokens // self.block_size
        done = self.req_hashes.get(req_id, [])
        if full > len(done):
            done = self.req_hashes[req_id] = self.block_hashes(token_ids, full, done)
        boundaries: list[int] = []
        if len(self.groups) > 1 or self.managers[0].sliding_window is not None:
            prompt = self.num_prompt_tokens.get(req_id, len(token_ids))
            boundaries.append(prompt - 1)
            if shared := self.shared_prefix_boundary.get(req_id):
                boundaries.append(shared)
        for m in self.managers:
            m.cache_blocks(req_id, done, num_tokens, boundaries)

    def free(self, req_id: str) -> None:
        """Free every group's blocks of the request, group by group in order (vLLM's
        coordinator frees each manager's blocks in turn, each list walked in reverse, its
        leading null blocks left out)."""
        for m in self.managers:
            self.pool.free(m.pop(req_id))
        self.req_hashes.pop(req_id, None)
        self.prefix_hashes.pop(req_id, None)
        self.num_prompt_tokens.pop(req_id, None)
        self.shared_prefix_boundary.pop(req_id, None)
