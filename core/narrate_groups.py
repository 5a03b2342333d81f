"""Sentences about KV cache groups (a hybrid model: sliding-window layers beside full-attention
ones, core/kv_groups.py): the blocks a sliding window dropped this step and why, a block a full
group took that a sliding group held at the step before, and the words that name a group and its
blocks for the admission and growth sentences (core/narrate_sched.py).

Everything is read from the trace: the window drops only from `scheduler.window_drops` (each drop's
group, block ids, block indices, num_computed_tokens, sliding_window and first_kept_token, written
by the KV cache manager when vLLM's `SlidingWindowManager.remove_skipped_blocks` frees them), the
groups from `kv_cache.kv_cache_groups`, which group holds a block from `kv_cache.block_group` and
each request's lists from `scheduler.block_ids`. A trace with one group says none of this.
"""

from __future__ import annotations

from typing import Any

from pagedviz.core.narrate_common import Item, block_ranges, en_zh, join_en, join_zh, sentence
from pagedviz.core.narrate_facts import Facts
from pagedviz.core.trace import StepTrace

NULL_BLOCK = 0


def groups_of(t: StepTrace | None) -> list[dict[str, Any]]:
    """The trace's KV cache groups ({kind, layers, sliding_window}); [] with one group."""
    if t is None:
        return []
    return [g for g in t.kv_cache.get("kv_cache_groups") or [] if isinstance(g, dict)]


def _layers(g: dict[str, Any]) -> tuple[str, str]:
    layers = [int(x) for x in g.get("layers") or []]
    if not layers:
        return "", ""
    if len(layers) == 1:
        return f"layer {layers[0]}", f"第 {layers[0]} 层"
    return f"layers {join_en(layers)}", f"第 {join_zh(layers)} 层"


def group_name(groups: list[dict[str, Any]], g: int) -> tuple[str, str]:
    """ "sliding-window group (layer 1, window 8)" / "滑动窗口组（第 1 层，窗口 8）", from the trace's
    groups; a group the trace does not describe is named by its index."""
    if not 0 <= g < len(groups):
        return f"group {g}", f"第 {g} 组"
    grp = groups[g]
    lay_en, lay_zh = _layers(grp)
    if grp.get("kind") == "sliding_attention":
        w = grp.get("sliding_window")
        where_en, where_zh = (f"{lay_en}, " if lay_en else ""), (f"{lay_zh}，" if lay_zh else "")
        en = f"sliding-window group ({where_en}window {w})"
        zh = f"滑动窗口组（{where_zh}窗口 {w}）"
        return en, zh
    return (
        f"full-attention group ({lay_en})" if lay_en else "full-attention group",
        f"全注意力组（{lay_zh}）" if lay_zh else "全注意力组",
    )


def new_blocks_per_group(f: Facts) -> dict[str, list[list[int]]]:
    """Each request's blocks added this step, one list per group (`scheduler.new_block_ids` is flat
    with one group and holds one list per group with several)."""
    out: dict[str, list[list[int]]] = {}
    for rid, v in (f.sched.get("new_block_ids") or {}).items():
        lists = v if v and isinstance(v[0], list) else [v]
        out[str(rid)] = [[int(b) for b in blocks] for blocks in lists]
    return out


def flat(lists: list[list[int]]) -> list[int]:
    return [b for blocks in lists for b in blocks]


def short_group_name(groups: list[dict[str, Any]], g: int) -> tuple[str, str]:
    """ "layer 0, sliding window" / "第 0 层，滑动窗口": a group in a list of every group's blocks."""
    if not 0 <= g < len(groups):
        return f"group {g}", f"第 {g} 组"
    lay_en, lay_zh = _layers(groups[g])
    sliding = groups[g].get("kind") == "sliding_attention"
    kind_en, kind_zh = ("sliding window", "滑动窗口") if sliding else ("full attention", "全注意力")
    return (f"{lay_en}, {kind_en}", f"{lay_zh}，{kind_zh}") if lay_en else (kind_en, kind_zh)


def blocks_by_group(f: Facts, lists: list[list[int]]) -> tuple[str, str] | None:
    """A request's blocks in each group: "1–5 (layer 0, full attention) and 6–10 (layer 1, sliding
    window)" / "1–5（第 0 层，全注意力）和 6–10（第 1 层，滑动窗口）"; None with one group (the
    callers' plain list)."""
    groups = groups_of(f.t)
    if len(lists) <= 1 or not groups:
        return None
    parts_en, parts_zh = [], []
    for g, blocks in enumerate(lists):
        if blocks:
            en, zh = short_group_name(groups, g)
            parts_en.append(f"{block_ranges(blocks)} ({en})")
            parts_zh.append(f"{block_ranges(blocks)}（{zh}）")
    return join_en(parts_en), join_zh(parts_zh)


def _token_ranges(indices: list[int], bs: int) -> tuple[str, str]:
    """Block indices [0, 1, 2] of block size 4 -> "0–11": each run of consecutive indices as the
    token positions it held."""
    runs: list[tuple[int, int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    spans = [f"{a * bs}–{(b + 1) * bs - 1}" for a, b in runs]
    return ", ".join(spans), "、".join(spans)


def window_drops(f: Facts) -> list[Item]:
    """One sentence per request and sliding group whose window dropped blocks this step: which
    blocks, the token positions they held, and why (the computed tokens, the window, the first
    position it keeps), all from `scheduler.window_drops`."""
    drops = f.sched.get("window_drops") or {}
    groups = groups_of(f.t)
    items = []
    for rid, entries in drops.items():
        rid = str(rid)
        for d in entries or []:
            blocks = [int(b) for b in d.get("block_ids") or []]
            if not blocks:
                continue
            g = int(d.get("group", 0))
            idx = [int(i) for i in d.get("block_indices") or []]
            n, w, first = d.get("num_computed_tokens"), d.get("sliding_window"), d.get("first_kept_token")
            name_en, name_zh = group_name(groups, g)
            word = "block" if len(blocks) == 1 else "blocks"
            en = f"Request {rid}'s {name_en} dropped {word} {block_ranges(sorted(blocks))}"
            zh = f"请求 {rid} 的{name_zh}丢弃了块 {block_ranges(sorted(blocks))}"
            if idx and f.bs:
                span_en, span_zh = _token_ranges(idx, f.bs)
                en += f" (token positions {span_en})"
                zh += f"（token 位置 {span_zh}）"
            if blocks != sorted(blocks):  # the order they reach the free queue in
                en += f", freed in the order {', '.join(map(str, blocks))}"
                zh += f"，按 {'、'.join(map(str, blocks))} 的顺序释放"
            if n is not None and w is not None and first is not None:
                en += (
                    f": at {n} computed tokens the window of {w} keeps positions {first} onward, since no "
                    f"token from position {n} on looks further back"
                )
                zh += (
                    f"：已计算 {n} 个 token 时，{w} 个 token 的窗口只保留位置 {first} 及之后的 token，"
                    f"因为从位置 {n} 起的 token 都不会再往前看"
                )
            one = len(blocks) == 1
            en += (
                f"; the null block {NULL_BLOCK} takes {'its place' if one else 'their places'} in the "
                f"group's block list (scheduler.block_ids) and the {word} {'returns' if one else 'return'} "
                "to the free queue. The runner is told only of new blocks: its block table keeps the old "
                f"{'id' if one else 'ids'}, which the sliding layer no longer reads."
            )
            zh += (
                f"；空块 {NULL_BLOCK} 在该组的块列表（scheduler.block_ids）中"
                f"顶替{'它' if one else '它们'}的位置，"
                f"{'这个块' if one else '这些块'}回到空闲队列。runner 只会收到新块：它的块表里仍是旧的块号，"
                f"滑动窗口层不再读取{'它' if one else '它们'}。"
            )
            refs: list[tuple[str, Any]] = [("request", rid), *(("block", b) for b in blocks)]
            items.append(sentence(f"window_drop:{rid}:{g}", en_zh(en, zh), refs))
    return items


def _drops_of(t: StepTrace) -> dict[int, tuple[str, int]]:
    """Block id -> (the request whose window dropped it in step t, the group)."""
    out: dict[int, tuple[str, int]] = {}
    for rid, entries in (t.scheduler.get("window_drops") or {}).items():
        for d in entries or []:
            for b in d.get("block_ids") or []:
                out[int(b)] = (str(rid), int(d.get("group", 0)))
    return out


def group_moves(f: Facts, prev: StepTrace | None) -> list[Item]:
    """A block a full-attention group takes this step that a sliding group held at the end of the
    step before (its window dropped it now) or dropped in the step before (it waited in the free
    queue): the pool is shared, so a block a window gives back serves any group next (prev's
    `kv_cache.block_group`, owners and `scheduler.window_drops`, this step's `scheduler.block_ids`)."""
    groups = groups_of(f.t)
    if prev is None or not groups:
        return []
    before = {int(b): int(g) for b, g in (prev.kv_cache.get("block_group") or {}).items()}
    prev_groups = groups_of(prev) or groups
    prev_owners = {int(b): [str(o) for o in os] for b, os in (prev.kv_cache.get("owners") or {}).items()}
    dropped, dropped_before = _drops_of(f.t), _drops_of(prev)
    items = []
    for rid, lists in (f.sched.get("block_ids") or {}).items():
        rid = str(rid)
        for g, blocks in enumerate(lists or []):
            if not 0 <= g < len(groups) or groups[g].get("kind") == "sliding_attention":
                continue
            for i, b in enumerate(int(x) for x in blocks):
                g0 = before.get(b, -1)
                held = 0 <= g0 < len(prev_groups)
                if b == NULL_BLOCK or not (held or b in dropped_before):
                    continue
                if held and prev_groups[g0].get("kind") != "sliding_attention":
                    continue
                new_en, new_zh = group_name(groups, g)
                if held:
                    holders = prev_owners.get(b, [])
                    old_en, old_zh = group_name(prev_groups, g0)
                    who_en = f"request {join_en(holders)}'s " if holders else "a "
                    who_zh = f"请求 {join_zh(holders)} 的" if holders else ""
                    en = f"Block {b} moved between groups: at the end of step {prev.step} it was in "
                    en += f"{who_en}{old_en}"
                    zh = f"块 {b} 换了组：第 {prev.step} 步结束时它在{who_zh}{old_zh}中"
                    if b in dropped:
                        en += ", whose window dropped it this step to the free queue"
                        zh += "，本步被该窗口丢弃回空闲队列"
                else:
                    holder, g1 = dropped_before[b]
                    holders = [holder]
                    old_en, old_zh = group_name(prev_groups, g1)
                    en = (
                        f"Block {b} moved between groups: request {holder}'s {old_en} dropped it in step "
                        f"{prev.step} and it waited in the free queue"
                    )
                    zh = f"块 {b} 换了组：请求 {holder} 的{old_zh}在第 {prev.step} 步丢弃了它，"
                    zh += "它在空闲队列里等着"
                en += (
                    f"; now request {rid}'s {new_en} holds it as its logical block {i}: every group "
                    "allocates from the one shared pool, so a block a window gives back can serve a "
                    "full-attention layer next."
                )
                zh += (
                    f"；现在请求 {rid} 的{new_zh}把它用作第 {i} 个逻辑块：所有组共用同一个块池，"
                    "窗口交回的块接着就能给全注意力层用。"
                )
                refs: list[tuple[str, Any]] = [("block", b), ("request", rid)]
                refs += [("request", o) for o in holders if o != rid]
                items.append(sentence(f"group_move:{b}", en_zh(en, zh), refs))
    return items
