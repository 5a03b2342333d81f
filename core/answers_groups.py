"""Why a block-table entry of a KV cache group has its value (predict, then reveal: core/answers.py),
for a run with several groups (a sliding window beside full attention, core/kv_groups.py).

Group 0's table is `block_table` (V1); group g >= 1's is `block_table_g{g}` (the runners' contract).
An entry of a sliding-window group that holds the null block 0 inside the request's blocks was
dropped by the window: the step and the reason come from that step's `scheduler.window_drops` (its
num_computed_tokens, sliding_window and first_kept_token). A block the group took this step came
from the head of the free queue after the drops, group by group in vLLM's order; where a window had
just given it back, that is said. Every number is read from the trace.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pagedviz.core.narrate_common import Text, en_zh
from pagedviz.core.narrate_groups import group_name, groups_of
from pagedviz.core.trace import StepTrace

_TABLE = re.compile(r"^block_table(?:_g(\d+))?$")


def table_group(array: str) -> int | None:
    """The group whose V1 block table `array` is (block_table: 0, block_table_g2: 2), else None."""
    m = _TABLE.match(array)
    return None if m is None else int(m.group(1) or 0)


def is_group_table(t: StepTrace, array: str) -> bool:
    """A V1 block table of a run with several KV cache groups."""
    return bool(groups_of(t)) and table_group(array) is not None and array in t.arrays


def rule_extra(t: StepTrace) -> Text | None:
    """What the block-table rule adds for a run with a sliding-window group."""
    if not any(g.get("kind") == "sliding_attention" for g in groups_of(t)):
        return None
    return en_zh(
        " Each KV cache group has its own table over the one pool. Before a step's new blocks are "
        "taken, a sliding-window group replaces every block whose tokens all lie before the window "
        "(positions below num_computed_tokens − sliding_window + 1) with the null block 0 and gives it "
        "back to the free queue; then the groups take their new blocks from the head of the queue, "
        "in group order. The runner hears only of new block ids: a dropped entry of its table keeps "
        "the old id, which the sliding layer never reads.",
        "每个 KV cache 组在同一个块池上有自己的块表。本步取新块之前，滑动窗口组先把 token 全在窗口之前"
        "（位置小于 num_computed_tokens − sliding_window + 1）的块换成空块 0，并把它交还空闲队列；"
        "然后各组按组的顺序从队列头部取新块。runner 只收到新块的 id：它的块表里被丢弃的那一项保留旧 id，"
        "滑动窗口层不会再读它。",
    )


def _drop_of(
    history: Sequence[StepTrace], t: StepTrace, rid: str, g: int, c: int
) -> tuple[int, dict[str, Any]] | None:
    """(step, drop) of the window drop that took request rid's logical block c out of group g:
    this step or an earlier one since the request was last admitted."""
    steps = [h for h in history if h.step < t.step] + [t]
    for h in reversed(steps):
        for d in (h.scheduler.get("window_drops") or {}).get(rid, []) or []:
            if int(d.get("group", -1)) == g and c in [int(i) for i in d.get("block_indices") or []]:
                return h.step, d
        if rid in map(str, [*h.scheduler.get("new_req_ids", []), *h.scheduler.get("resumed_req_ids", [])]):
            return None
    return None


def _new_lists(t: StepTrace, rid: str) -> list[list[int]]:
    v = (t.scheduler.get("new_block_ids") or {}).get(rid) or []
    return [[int(b) for b in x] for x in v] if v and isinstance(v[0], list) else [[int(b) for b in v]]


def _lst(xs: Sequence[int]) -> str:
    return ", ".join(map(str, xs))


def _drop_words(t: StepTrace, step: int, d: dict[str, Any], c: int, bs: int) -> tuple[Text, Text, int | None]:
    """When (this step, at step 2) and why ("(logical block 1, token positions 4–7): at 20 computed
    tokens the window of 8 keeps positions 13 onward"), each in en and zh, and the block the drop
    took out of logical place c."""
    k = [int(x) for x in d.get("block_indices") or []].index(c)
    ids = [int(x) for x in d.get("block_ids") or []]
    blk = ids[k] if k < len(ids) else None
    when = en_zh("this step", "本步") if step == t.step else en_zh(f"at step {step}", f"在第 {step} 步")
    n, w, first = d.get("num_computed_tokens"), d.get("sliding_window"), d.get("first_kept_token")
    span = f", token positions {c * bs}–{c * bs + bs - 1}" if bs else ""
    span_zh = f"，token 位置 {c * bs}–{c * bs + bs - 1}" if bs else ""
    why = en_zh(
        f"(logical block {c}{span}): at {n} computed tokens the window of {w} keeps positions {first} onward",
        f"（第 {c} 个逻辑块{span_zh}）：已计算 {n} 个 token 时，{w} 个 token 的窗口只保留位置 {first} 及之后",
    )
    return when, why, blk


def group_cause(t: StepTrace, array: str, i: int, history: Sequence[StepTrace] = ()) -> Text | None:
    """Entry i of a group's block table, told from the trace; None where it has no row's request.

    The runner's table is not the scheduler's list: vLLM sends the runner only each step's new block
    ids (CachedRequestData.new_block_ids), so an entry the window dropped keeps its old id on the
    runner, where the sliding layer never reads it, while the scheduler's list
    (`scheduler.block_ids`, vLLM's get_block_ids) holds the null block 0 there."""
    g = table_group(array)
    a = t.arrays.get(array)
    if g is None or a is None or a.ndim != 2:
        return None
    r, c = divmod(i, int(a.shape[1]))
    ids = t.batch.get("req_ids", [])
    if not 0 <= r < len(ids):
        return None
    rid, b = str(ids[r]), int(a[r, c])
    groups = groups_of(t)
    name_en, name_zh = group_name(groups, g)
    bs = int(t.kv_cache.get("block_size", 0))
    head = f"{array}[{r}][{c}] = {b}"
    lists = (t.scheduler.get("block_ids") or {}).get(rid)
    sched = [int(x) for x in lists[g]] if lists and g < len(lists) else None
    listed_en = f" (its list now: [{_lst(sched)}])" if sched is not None else ""
    listed_zh = f"（它的列表现在是 [{_lst(sched)}]）" if sched is not None else ""
    drop = _drop_of(history, t, rid, g, c)
    if drop is not None:
        step, d = drop
        when, why, blk = _drop_words(t, step, d, c, bs)
        if b == 0:
            return en_zh(
                f"{head}: request {rid}'s {name_en} dropped this block {when['en']} {why['en']}; the null "
                "block 0 took its place",
                f"{head}：请求 {rid} 的{name_zh}{when['zh']}丢弃了这个块{why['zh']}；空块 0 顶替了它的位置",
            )
        was_en = f" (block {blk})" if blk is not None and blk != b else ""
        was_zh = f"（块 {blk}）" if blk is not None and blk != b else ""
        return en_zh(
            f"{head}: the runner's row keeps the block it was given for request {rid}'s logical block {c}. "
            f"The scheduler's {name_en} dropped it {when['en']} {why['en']}, so it put the null block 0 in "
            f"that place in its own list{listed_en} and gave the block{was_en} back to the free queue; but "
            "the runner hears only of new block ids, so its entry stays, and the sliding layer never reads "
            "it: its tokens lie before the window",
            f"{head}：runner 的这一行保留着当初为请求 {rid} 第 {c} 个逻辑块分配的块。调度器的{name_zh}"
            f"{when['zh']}丢弃了它{why['zh']}，于是在自己的列表里把这个位置换成空块 0{listed_zh}，"
            f"并把块{was_zh}交还空闲队列；但 runner 只收到新块的 id，所以这一项不变，"
            "滑动窗口层也不会再读它：它的 token 在窗口之前",
        )
    if b == 0:
        held = sched if sched is not None else [int(x) for x in a[r] if int(x) > 0]
        return en_zh(
            f"{head}: request {rid}'s {name_en} holds {len(held)} blocks ([{_lst(held)}]), so its logical "
            f"block {c} is not allocated; 0 is the null block",
            f"{head}：请求 {rid} 的{name_zh}只有 {len(held)} 个块（[{_lst(held)}]），它的第 {c} 个逻辑块"
            "未分配；0 是空块",
        )
    new = _new_lists(t, rid)
    if g < len(new) and b in new[g]:
        dropped = {
            int(x): str(q)
            for q, ds in (t.scheduler.get("window_drops") or {}).items()
            for d in ds or []
            for x in d.get("block_ids") or []
        }
        back_en = back_zh = ""
        if b in dropped:
            who = "its own" if dropped[b] == rid else f"request {dropped[b]}'s"
            who_zh = "它自己的" if dropped[b] == rid else f"请求 {dropped[b]} 的"
            back_en = f", where {who} window had just put it back"
            back_zh = f"，{who_zh}窗口刚把它放回那里"
        order = [(group_name(groups, k), x) for k, x in enumerate(new) if x]
        order_en = "; ".join(f"{nm[0]} [{_lst(x)}]" for nm, x in order)
        order_zh = "；".join(f"{nm[1]} [{_lst(x)}]" for nm, x in order)
        return en_zh(
            f"{head}: request {rid}'s {name_en} took block {b} this step from the head of the free "
            f"queue{back_en}, as its logical block {c}; its groups took their new blocks in group "
            f"order: {order_en}",
            f"{head}：请求 {rid} 的{name_zh}本步从空闲队列头部拿到块 {b}{back_zh}，作为它的第 {c} 个逻辑块；"
            f"各组按顺序取新块：{order_zh}",
        )
    sliding = 0 <= g < len(groups) and groups[g].get("kind") == "sliding_attention"
    keeps_en = "while its tokens stay in the window" if sliding else "until it finishes or is preempted"
    keeps_zh = "只要它的 token 还在窗口内" if sliding else "直到它完成或被抢占"
    return en_zh(
        f"{head}: request {rid}'s {name_en} got block {b} in an earlier step and keeps it {keeps_en}",
        f"{head}：请求 {rid} 的{name_zh}在更早的一步拿到块 {b}，{keeps_zh}一直持有它",
    )
