"""KV cache groups: which layers share one block table, planned as vLLM 0.33 plans them.

A model whose layers are all full attention has one group: every layer reads the same block table.
A hybrid model (sliding-window layers beside full-attention ones: gpt-oss, Gemma 3) has several,
each with its own block table over one shared pool of physical blocks. vLLM groups the layers by
their KV cache spec (in the order each kind first appears), then splits each kind into groups of
one size, the smallest kind's layer count (or the largest's, when the counts are within 1.5x), the
i-th group of a kind taking every `num_groups`-th layer from the i-th
(`_get_kv_cache_groups_uniform_page_size`, vllm/v1/core/kv_cache_planning.py). With one kind there
is one group of every layer (`_get_kv_cache_groups_uniform_spec`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FULL = "full_attention"
SLIDING = "sliding_attention"
LAYER_TYPES = (FULL, SLIDING)  # Hugging Face's `config.layer_types` names


@dataclass(frozen=True)
class KVCacheGroup:
    """One KV cache group: its attention kind, its layers (indices into the model's layers) and,
    for a sliding-window group, the window in tokens."""

    kind: str
    layers: tuple[int, ...]
    sliding_window: int | None = None

    @property
    def sliding(self) -> bool:
        return self.kind == SLIDING

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "layers": list(self.layers), "sliding_window": self.sliding_window}


def plan_kv_cache_groups(
    layer_types: tuple[str, ...] | None, sliding_window: int | None, num_layers: int = 1
) -> tuple[KVCacheGroup, ...]:
    """The groups vLLM plans for these layers. `layer_types` None: `num_layers` full-attention
    layers, one group (today's single block table)."""
    if not layer_types:
        return (KVCacheGroup(FULL, tuple(range(max(num_layers, 1)))),)
    buckets: dict[str, list[int]] = {}
    for i, kind in enumerate(layer_types):
        buckets.setdefault(kind, []).append(i)
    if len(buckets) == 1:
        kind = next(iter(buckets))
        return (KVCacheGroup(kind, tuple(range(len(layer_types))), _window(kind, sliding_window)),)
    sizes = [len(layers) for layers in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups = []
    for kind, layers in buckets.items():
        num_groups = math.ceil(len(layers) / group_size)
        for i in range(num_groups):
            groups.append(KVCacheGroup(kind, tuple(layers[i::num_groups]), _window(kind, sliding_window)))
    return tuple(groups)


def _window(kind: str, sliding_window: int | None) -> int | None:
    return sliding_window if kind == SLIDING else None


def group_of_layer(groups: tuple[KVCacheGroup, ...]) -> dict[int, int]:
    """Layer index -> the index of the group whose block table it reads."""
    return {layer: g for g, group in enumerate(groups) for layer in group.layers}


def flat_blocks(entry: list[int] | list[list[int]]) -> list[int]:
    """A request's `scheduler.new_block_ids` entry as one flat list of real blocks: with one group
    the entry is already flat; with several it is one list per group (the null block 0 left out)."""
    if entry and isinstance(entry[0], list):
        return [b for group in entry for b in group if b != 0]  # type: ignore[union-attr]
    return list(entry)  # type: ignore[arg-type]


def block_owners(group_blocks: list[dict[str, list[int]]]) -> dict[str, list[str]]:
    """Block id (as a string) -> the requests holding it, over every group's block lists; the
    null block 0 (a sliding group's dropped places) is nobody's."""
    owners: dict[str, list[str]] = {}
    for blocks_of in group_blocks:
        for req_id, blocks in blocks_of.items():
            for b in blocks:
                if b != 0:
                    owners.setdefault(str(b), []).append(req_id)
    return owners


def block_group_of(group_blocks: list[dict[str, list[int]]]) -> dict[str, int]:
    """Block id (as a string) -> the group whose block lists hold it (the null block left out)."""
    return {
        str(b): g
        for g, blocks_of in enumerate(group_blocks)
        for blocks in blocks_of.values()
        for b in blocks
        if b != 0
    }
