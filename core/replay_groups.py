"""The KV cache groups of a recording (core/recording.py's header) as a pagedviz scenario's layers:
`layer_types` and `sliding_window`, which pagedviz plans back into the same groups
(core/kv_groups.py), or why it cannot.

The recorder writes each group in vLLM's order: its spec class, block size, number of layers, its
window and, with several groups, its layer names. A `FullAttentionSpec` group is full attention, a
`SlidingWindowSpec` group a sliding window; any other kind (Mamba, chunked local attention, ...) is
refused, naming it, as are groups of different block sizes, different windows, or a window that
keeps extra tokens (multi-token prediction). The layers are ordered by the index in their names
(`model.layers.3.self_attn.attn` is layer 3), or group after group where the names do not say.
A model with more layers than a scenario holds (8) stands in as fewer layers that pagedviz plans
into the same groups, in the same order (the scheduler and the block tables depend on the groups,
not on the layers). Whatever the layers, pagedviz's plan must give the recorded groups: their
kinds, in order, and with the full list of layers their sizes.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import NoReturn

from pagedviz.core.kv_groups import FULL, SLIDING, plan_kv_cache_groups
from pagedviz.core.recording import Header, KVGroup

KINDS = {"FullAttentionSpec": FULL, "SlidingWindowSpec": SLIDING}
MAX_LAYERS = 8  # a scenario's layer_types holds at most this many (core/models.py)


class GroupsError(ValueError):
    """Why pagedviz cannot model the recorded KV cache groups."""


@dataclass(frozen=True)
class RecordedLayers:
    """The scenario's layers for a recording. `layer_types` None: one full-attention group (every
    recording before hybrid models: today's scenario). `stand_in`: the recorded model had more
    layers than a scenario holds, and these fewer plan into the same groups."""

    layer_types: tuple[str, ...] | None = None
    sliding_window: int | None = None
    num_recorded_layers: int = 0
    stand_in: bool = False

    @property
    def note(self) -> str | None:
        if not self.stand_in or not self.layer_types:
            return None
        n = len(plan_kv_cache_groups(self.layer_types, self.sliding_window))
        return (
            f"the recorded model's {self.num_recorded_layers} layers stand in as {len(self.layer_types)} "
            f"({', '.join(self.layer_types)}), which pagedviz plans into the same {n} KV cache groups"
        )


def _layer_index(name: str) -> int | None:
    numbers = re.findall(r"\d+", name)
    return int(numbers[0]) if len(numbers) == 1 else None


def _kind(i: int, g: KVGroup) -> str:
    kind = KINDS.get(g.kind)
    if kind is None:
        raise GroupsError(
            f"KV cache group {i} is {g.kind} ({g.num_layers} layer(s)): pagedviz models full attention "
            "(FullAttentionSpec) and sliding windows (SlidingWindowSpec)"
        )
    return kind


def _window(groups: list[KVGroup]) -> int | None:
    windows = set()
    for i, g in enumerate(groups):
        extra = (g.model_extra or {}).get("extra_retained_tokens") or 0
        if g.kind != "SlidingWindowSpec":
            continue
        w = (g.model_extra or {}).get("sliding_window")
        if not isinstance(w, int) or w < 1:
            raise GroupsError(
                f"KV cache group {i} is a sliding window whose size the recording does not say "
                "(record with this version of pagedviz.record)"
            )
        if extra:
            raise GroupsError(
                f"KV cache group {i} keeps {extra} token(s) past its window (multi-token prediction): "
                "pagedviz does not model it"
            )
        windows.add(w)
    if len(windows) > 1:
        raise GroupsError(
            f"sliding windows of {' and '.join(map(str, sorted(windows)))} tokens: pagedviz models one "
            "sliding_window"
        )
    return next(iter(windows), None)


def _layers_in_order(groups: list[KVGroup], kinds: list[str]) -> list[str]:
    """Each recorded layer's kind, by the index in its name (group after group where the names do
    not give one index each)."""
    named: list[tuple[int, str]] = []
    for g, kind in zip(groups, kinds):
        names = (g.model_extra or {}).get("layer_names")
        if not isinstance(names, list) or len(names) != g.num_layers:
            break
        indices = [_layer_index(str(n)) for n in names]
        if any(i is None for i in indices):
            break
        named += [(int(i), kind) for i in indices if i is not None]
    else:
        if len({i for i, _ in named}) == len(named):
            return [kind for _, kind in sorted(named)]
    return [kind for g, kind in zip(groups, kinds) for _ in range(g.num_layers)]


def _plans_to(types: tuple[str, ...], window: int | None, kinds: list[str], sizes: list[int] | None) -> bool:
    plan = plan_kv_cache_groups(types, window)
    if [g.kind for g in plan] != kinds:
        return False
    return sizes is None or [len(g.layers) for g in plan] == sizes


def recorded_layers(header: Header) -> RecordedLayers:
    """The scenario's `layer_types` and `sliding_window` for the recording (GroupsError: pagedviz
    does not model its groups)."""
    groups = list(header.kv_cache_groups)
    if not groups:
        raise GroupsError("no KV cache group (an attention-free model): pagedviz models attention")
    kinds = [_kind(i, g) for i, g in enumerate(groups)]
    for i, g in enumerate(groups):
        if g.block_size != header.block_size:
            raise GroupsError(
                f"KV cache group {i}'s block size is {g.block_size}, the scheduler's {header.block_size}: "
                "pagedviz models one block size"
            )
    window = _window(groups)
    num_layers = sum(g.num_layers for g in groups)
    if kinds == [FULL]:
        return RecordedLayers(None, None, num_layers)
    types = tuple(_layers_in_order(groups, kinds))
    if len(types) <= MAX_LAYERS:
        if _plans_to(types, window, kinds, [g.num_layers for g in groups]):
            return RecordedLayers(types, window, num_layers)
    else:
        # fewer layers, kind after kind in the order the groups come, that plan into the same groups
        order = list(dict.fromkeys(kinds))
        for counts in itertools.product(range(1, MAX_LAYERS + 1), repeat=len(order)):
            if sum(counts) > MAX_LAYERS:
                continue
            fewer = tuple(k for k, n in zip(order, counts) for _ in range(n))
            if _plans_to(fewer, window, kinds, None):
                return RecordedLayers(fewer, window, num_layers, stand_in=True)
    _refuse(groups, kinds, plan_kv_cache_groups(types, window))


def _refuse(groups: list[KVGroup], kinds: list[str], planned: tuple[object, ...]) -> NoReturn:
    recorded = ", ".join(f"{k} x{g.num_layers}" for k, g in zip(kinds, groups))
    raise GroupsError(
        f"vLLM recorded {len(groups)} KV cache groups ({recorded}), which pagedviz's planning of these "
        f"layers does not give ({len(planned)} groups)"
    )


def groups_problem(header: Header) -> str | None:
    """Why pagedviz cannot replay the recorded groups (None: it can)."""
    try:
        recorded_layers(header)
    except GroupsError as e:
        return str(e)
    return None
