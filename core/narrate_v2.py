"""Narration of a Model Runner V2 step (vLLM 0.33.0's vllm/v1/worker/gpu/), called by narrate.py for
a trace whose batch has state slots.

V2 has no persistent batch whose rows move: each request holds a fixed state slot. The step-level
sentences say which slots were freed and which were handed out (`free_indices.pop()`: the highest
slot at first, then the most recently freed one first), that a resumed request comes back as a new
one in a fresh slot, how the batch was sorted and where each row's state lives (`idx_mapping`).
The stage sentences work this step's numbers through V2's formulas: the slot a row reads, the
gathered block table, the slot mapping read through `idx_mapping`. Every number comes from the trace
(the V2 trace contract, docs/arrays.md); the V1 step sentences that hold for both runners (chunks,
budget, waiting, padding, sampling, the pool) are V1's (narrate_sched.py, narrate_batch.py); the
entry explanations are in narrate_v2_explain.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.narrate_batch import idle_items, last_step_items, padding_items, pool_items, sampling_items
from pagedviz.core.narrate_causes import waiting_items
from pagedviz.core.narrate_common import Item, block_ranges, en_zh, join_en, join_zh, plural, sentence
from pagedviz.core.narrate_facts import Facts, SlotFacts
from pagedviz.core.narrate_family import sibling_items
from pagedviz.core.narrate_groups import group_moves, window_drops
from pagedviz.core.narrate_sched import (
    admission_items,
    budget_items,
    chunk_items,
    engine_core_items,
    finish_items,
    growth_items,
    preemption_items,
)
from pagedviz.core.narrate_stages import example_token, token_refs
from pagedviz.core.narrate_stages import stage_sentence as v1_stage_sentence
from pagedviz.core.narrate_v1_explain import explain_logits_indices
from pagedviz.core.narrate_v2_explain import V2_EXPLAIN, explain_idx_mapping, explain_input_ids
from pagedviz.core.scenario_parts import EngineConfig
from pagedviz.core.trace import StepTrace


def _resumed(f: Facts, s: SlotFacts, prev: StepTrace | None) -> list[str]:
    """New requests that come back from a preemption: where the trace has V2's per-slot prompt_len,
    those whose prefill is longer than their prompt (it carries their outputs so far); else those
    the previous step preempted."""
    new = [str(r) for r in f.sched.get("new_req_ids", [])]
    prompt, prefill = f.a.get("prompt_len"), f.a.get("prefill_len")
    if prompt is not None and prefill is not None:
        return [r for r in new if r in s.slots and int(prefill[s.slots[r]]) > int(prompt[s.slots[r]])]
    before = {str(r) for r in prev.scheduler.get("preempted_req_ids", [])} if prev is not None else set()
    return [r for r in new if r in before]


def _slot_events(f: Facts, s: SlotFacts, resumed: list[str]) -> list[Item]:
    """One sentence per slot freed or handed out, in the order the runner did it."""
    items: list[Item] = []
    finished = {str(r) for r in f.sched.get("finished_req_ids", [])}
    freed_now: set[int] = set()
    for e in s.events:
        rid, j = str(e["req_id"]), int(e["slot"])
        if e["event"] == "freed":
            freed_now.add(j)
            why_en, why_zh = (
                ("it finished", "它已完成") if rid in finished else ("it was preempted", "它被抢占")
            )
            en = (
                f"Request {rid} frees state slot {j} ({why_en}): free_indices.append({j}) puts it on top "
                "of the free list, so it is the next slot handed out"
            )
            zh = (
                f"请求 {rid} 释放状态槽 {j}（{why_zh}）：free_indices.append({j}) 把它放到空闲列表顶部，"
                "所以它是下一个被分出的状态槽"
            )
            items.append(
                sentence(
                    f"slot_freed:{rid}", en_zh(en + ".", zh + "。"), [("request", rid)], "finish_and_add"
                )
            )
            continue
        kind_en = "comes back from its preemption as a new request" if rid in resumed else "is added"
        kind_zh = "从抢占中恢复，作为新请求回来" if rid in resumed else "加入"
        en = f"Request {rid} {kind_en} and takes state slot {j}, free_indices.pop(), the top of the free list"
        zh = f"请求 {rid} {kind_zh}，取得状态槽 {j}（free_indices.pop()，空闲列表的顶部）"
        if j in freed_now:
            en += ": the slot freed just before in this step, reused first (last in, first out)"
            zh += "：正是这一步刚释放的状态槽，后进先出，最先被再次使用"
        else:
            en += " (slots are handed out from the highest down, a freed one first)"
            zh += "（状态槽从编号最大的开始分出，释放过的优先）"
        items.append(
            sentence(f"slot_added:{rid}", en_zh(en + ".", zh + "。"), [("request", rid)], "finish_and_add")
        )
    return items


def _resumptions(f: Facts, s: SlotFacts, resumed: list[str]) -> list[Item]:
    """A resumed request: all its tokens again as one prefill, in a fresh slot."""
    items = []
    prefill = f.a.get("prefill_len")
    for rid in resumed:
        j = s.slots.get(rid)
        r = f.row(rid)
        if j is None or r is None:
            continue
        size = int(prefill[j]) if prefill is not None else int(f.seq_lens[r])
        n = f.nst.get(rid, 0)
        en = (
            f"Request {rid} resumes after its preemption. Model Runner V2 has no resumed path: the "
            f"scheduler sends it as a new request with its prompt and its outputs so far, {size} tokens "
            f"(prefill_len[{j}] = {size}), which add_requests writes into all_token_ids[{j}]; it "
            f"schedules {n} of them now, in row {r} of the batch, and recomputes their KV"
        )
        zh = (
            f"请求 {rid} 在被抢占后恢复。模型运行器 V2 没有单独的恢复路径：调度器把它当作新请求发送，"
            f"带着提示和目前为止的输出，共 {size} 个 token（prefill_len[{j}] = {size}），add_requests 把它们"
            f"写入 all_token_ids[{j}]；这一步调度其中 {n} 个，位于批次第 {r} 行，重新计算它们的 KV"
        )
        items.append(sentence(f"resumed:{rid}", en_zh(en + ".", zh + "。"), [("request", rid), ("row", r)]))
    return items


def _is_decode(f: Facts, rid: str, config: EngineConfig | None) -> bool:
    return f.nst.get(rid, 0) == 1 + (config.num_speculative_tokens if config else 0)


def _sort(f: Facts, s: SlotFacts, config: EngineConfig | None) -> list[Item]:
    """Why the batch is in this order, and where each row's state lives."""
    if not f.rows:
        return []
    order = list(f.nst)
    dec = [r for r in f.rows if _is_decode(f, r, config)]
    pre = [r for r in f.rows if r not in dec]
    parts_en, parts_zh = [], []
    if dec:
        parts_en.append(f"decodes first ({join_en(dec)})")
        parts_zh.append(f"先是解码（{join_zh(dec)}）")
    if pre:
        chunks = ", ".join(f"{r}: {f.nst[r]}" for r in pre)
        parts_en.append(f"{'then ' if dec else ''}prefill chunks by ascending length ({chunks})")
        parts_zh.append(f"{'再' if dec else ''}按长度升序排预填充分块（{chunks}）")
    same = order == f.rows
    en = f"The batch is sorted: {', '.join(parts_en)}"
    zh = f"批次重新排序：{'，'.join(parts_zh)}"
    en += ", the same as the scheduler's order" if same else f"; the scheduler's order was {', '.join(order)}"
    zh += "（与调度器的顺序相同）" if same else f"；调度器的顺序是 {', '.join(order)}"
    if dec:
        en += ". Decode rows come first and together, so a batch of decodes alone has a uniform shape"
        en += " a CUDA graph can replay"
        zh += "。解码行排在前面且连在一起，只有解码的批次形状一致，可以重放 CUDA Graph"
    en += f". idx_mapping = [{', '.join(map(str, s.idx))}]: " + ", ".join(
        f"row {r} ({rid}) reads slot {s.idx[r]}" for r, rid in enumerate(f.rows)
    )
    zh += f"。idx_mapping = [{', '.join(map(str, s.idx))}]：" + "，".join(
        f"第 {r} 行（{rid}）读状态槽 {s.idx[r]}" for r, rid in enumerate(f.rows)
    )
    refs = [("request", rid) for rid in f.rows] + [("row", r) for r in range(len(f.rows))]
    return [sentence("sort", en_zh(en + ".", zh + "。"), refs)]


# ------------------------------------------------------------------ stage sentences
def _stage_finish_and_add(f: Facts, s: SlotFacts) -> Item:
    freed = [f"{e['req_id']} → {e['slot']}" for e in s.events if e["event"] == "freed"]
    added = [f"{e['req_id']} → {e['slot']}" for e in s.events if e["event"] == "added"]
    held = ", ".join(f"{r}: {j}" for r, j in sorted(s.slots.items(), key=lambda kv: kv[1]))
    en = f"finish_and_add: slots held ({held or 'none'})"
    zh = f"finish_and_add：状态槽占用（{held or '无'}）"
    if freed:
        en += f"; freed (sorted request ids): {', '.join(freed)}"
        zh += f"；释放（按请求 ID 排序）：{', '.join(freed)}"
    if added:
        en += f"; added by free_indices.pop(): {', '.join(added)}"
        zh += f"；由 free_indices.pop() 分配：{', '.join(added)}"
    free = ", ".join(map(str, s.free))
    en += f"; free list, next first: [{free}]. Running requests keep their slots: no row moves"
    zh += f"；空闲列表（下一个在前）：[{free}]。运行中的请求保留原状态槽：没有行移动"
    refs = [("request", r) for r in s.slots]
    return sentence("stage:finish_and_add", en_zh(en + ".", zh + "。"), refs, "finish_and_add")


def _stage_cudagraph(f: Facts) -> Item:
    sc = f.t.scalars
    mode = str(sc.get("cudagraph_mode", "NONE"))
    R, R_pad = sc.get("num_reqs"), sc.get("num_reqs_padded")
    T_pad = sc.get("num_tokens_after_padding", f.T)
    if mode == "FULL":
        en = (
            f"cudagraph_mode = FULL: a uniform decode batch of {R} requests replays the graph for {R_pad} "
            f"(requests and tokens padded to {T_pad})"
        )
        zh = (
            f"cudagraph_mode = FULL：{R} 个请求的统一解码批次重放 {R_pad} 个请求的图"
            f"（请求数和 token 数都补齐到 {T_pad}）"
        )
    elif mode == "PIECEWISE":
        en = f"cudagraph_mode = PIECEWISE: {f.T} tokens are padded to the capture size {T_pad}"
        en += f"; the {R} requests are not padded"
        zh = f"cudagraph_mode = PIECEWISE：{f.T} 个 token 补齐到捕获大小 {T_pad}；{R} 个请求不补齐"
    else:
        en = "cudagraph_mode = NONE: no captured graph fits, so the step runs eagerly"
        en += f" with {R} requests and {f.T} tokens, unpadded"
        zh = f"cudagraph_mode = NONE：没有合适的已捕获图，本步直接执行，{R} 个请求、{f.T} 个 token，不补齐"
    return sentence("stage:cudagraph_dispatch", en_zh(en + ".", zh + "。"), [], "cudagraph_dispatch")


def _stage_idx_mapping(f: Facts, s: SlotFacts) -> Item | None:
    if not f.rows:
        return None
    r = len(f.rows) - 1
    text = explain_idx_mapping(f, r, np.asarray(s.idx))
    return sentence(
        "stage:idx_mapping",
        en_zh(text["en"] + ".", text["zh"] + "。"),
        [("row", r), ("request", f.rows[r])],
        "idx_mapping",
    )


def _stage_combine(f: Facts, s: SlotFacts) -> Item | None:
    """The first decode row's input from last_sampled_tokens, else the last row's logits index."""
    ids = f.a.get("input_ids")
    prefill = f.a.get("prefill_len")
    if ids is not None and prefill is not None:
        for r in range(len(f.rows)):
            last = int(f.qsl[r + 1]) - 1
            if int(f.seq_lens[r]) > int(prefill[s.slot_of_row(r)]):
                text = explain_input_ids(f, last, ids)
                refs: list[tuple[str, Any]] = [("token", last), ("row", r), ("request", f.rows[r])]
                return sentence(
                    "stage:combine_sampled_and_draft_tokens",
                    en_zh(text["en"] + ".", text["zh"] + "。"),
                    refs,
                    "combine_sampled_and_draft_tokens",
                )
    li = f.a.get("logits_indices")
    if li is None or not f.rows:
        return None
    text = explain_logits_indices(f, len(f.rows) - 1, li)
    return sentence(
        "stage:combine_sampled_and_draft_tokens",
        en_zh(text["en"] + ".", text["zh"] + "。"),
        [("row", len(f.rows) - 1)],
        "combine_sampled_and_draft_tokens",
    )


def _stage_prefill_inputs(f: Facts, s: SlotFacts) -> Item | None:
    """A prefilling row's first token, read from its slot's all_token_ids."""
    ids, prefill = f.a.get("input_ids"), f.a.get("prefill_len")
    if ids is None or prefill is None:
        return None
    for r in range(len(f.rows)):
        i = int(f.qsl[r])
        _, _, p = f.token(i)
        if p < int(prefill[s.slot_of_row(r)]):
            text = explain_input_ids(f, i, ids)
            refs: list[tuple[str, Any]] = [("token", i), ("row", r), ("request", f.rows[r])]
            return sentence(
                "stage:prefill_inputs", en_zh(text["en"] + ".", text["zh"] + "。"), refs, "prefill_inputs"
            )
    en = "prefill_inputs: no row is prefilling in this step; every input comes from last_sampled_tokens"
    zh = "prefill_inputs：这一步没有处于预填充的行；所有输入都来自 last_sampled_tokens"
    return sentence("stage:prefill_inputs", en_zh(en + ".", zh + "。"), [], "prefill_inputs")


def _stage_gather(f: Facts, s: SlotFacts) -> Item | None:
    if not f.rows:
        return None
    parts_en, parts_zh, refs = [], [], []
    for r, rid in enumerate(f.rows):
        j = s.slot_of_row(r)
        bs = s.row_blocks(f, r)
        parts_en.append(f"row {r} ← slot {j} (blocks {block_ranges(bs)})")
        parts_zh.append(f"第 {r} 行 ← 状态槽 {j}（块 {block_ranges(bs)}）")
        refs += [("row", r), ("request", rid), *(("block", b) for b in bs)]
    en = (
        "gather_block_tables: input_block_tables[row] = block_tables[idx_mapping[row]], the row's own "
        f"blocks only: {'; '.join(parts_en)}. Cells past them keep what an earlier step left (stale, never "
        "read: attention reads cdiv(seq_len, block_size) entries)"
    )
    zh = (
        "gather_block_tables：input_block_tables[行] = block_tables[idx_mapping[行]]，只复制本行自己的块："
        f"{'；'.join(parts_zh)}。其后的单元格保留之前某一步留下的值（已过期，从不被读取：注意力只读 "
        "cdiv(seq_len, block_size) 个元素）"
    )
    return sentence("stage:gather_block_tables", en_zh(en + ".", zh + "。"), refs, "gather_block_tables")


def _stage_token(f: Facts, name: str, array: str) -> Item | None:
    """A stage explained at its example token (the first token of the last row)."""
    arr = f.a.get(array)
    if arr is None or arr.size == 0:
        return None
    i = example_token(f)
    text = V2_EXPLAIN[array](f, i, arr)
    return sentence(
        f"stage:{name}", en_zh(text["en"] + ".", text["zh"] + "。"), token_refs(f, i, array), name
    )


def stage_sentence(f: Facts, s: SlotFacts, name: str, writes: list[str]) -> Item | None:
    if name == "finish_and_add":
        return _stage_finish_and_add(f, s)
    if name == "idx_mapping":
        return _stage_idx_mapping(f, s)
    if name == "cudagraph_dispatch":
        return _stage_cudagraph(f)
    if name == "prefill_inputs":
        return _stage_prefill_inputs(f, s)
    if name == "combine_sampled_and_draft_tokens":
        return _stage_combine(f, s)
    if name == "gather_block_tables":
        return _stage_gather(f, s)
    if name == "positions":
        return _stage_token(f, name, "positions")
    if name == "slot_mappings":
        return _stage_token(f, name, "slot_mapping")
    return v1_stage_sentence(f, name, writes)


def _rejections(f: Facts) -> list[Item]:
    """Rejected drafts (speculative decoding): post_update rolls the slot back on the worker at
    once; the scheduler rolls back its own count when update_from_output takes this step's output,
    which under async scheduling is a later step."""
    rejected = {str(r): int(k) for r, k in (f.t.forward.get("num_rejected_tokens") or {}).items() if k}
    if not rejected:
        return []
    ec = f.t.engine_core
    later = ec is not None and ec.get("consumed_step") != f.t.step
    items = []
    for rid, k in rejected.items():
        en = (
            f"Request {rid}: {plural(k, 'draft')} rejected. post_update advances its slot's "
            f"num_computed_tokens by the scheduled tokens less {k} on the worker now"
        )
        zh = (
            f"请求 {rid}：{k} 个草稿被拒绝。post_update 现在就在 worker 上把它槽位的 "
            f"num_computed_tokens 增加调度的 token 数减去 {k}"
        )
        if later:
            en += (
                "; the scheduler, which already planned the next step with placeholders, rolls back "
                "its own num_computed_tokens when update_from_output takes this step's output, a step late"
            )
            zh += (
                "；调度器已经用占位符排好了下一步，要等 update_from_output 取到这一步的输出时"
                "（晚一步）才回退它自己的 num_computed_tokens"
            )
        else:
            en += "; the scheduler rolls back its own count in this step's update_from_output"
            zh += "；调度器在这一步的 update_from_output 中回退自己的计数"
        items.append(sentence(f"rejected:{rid}", en_zh(en + ".", zh + "。"), [("request", rid)]))
    return items


# ------------------------------------------------------------------ entry point
def narrate_v2(
    f: Facts, prev: StepTrace | None, config: EngineConfig | None = None, last: bool = False
) -> list[Item]:
    """The step's sentences, then one per stage, for a Model Runner V2 trace (narrate.py's
    narrate() hands such a trace here)."""
    t = f.t
    s = SlotFacts(f)
    resumed = _resumed(f, s, prev)
    items = finish_items(f, prev)
    if t.idle:
        return (
            items
            + _slot_events(f, s, resumed)
            + (engine_core_items(f) or idle_items(f))
            + waiting_items(f, config)
        )
    items += engine_core_items(f)
    items += preemption_items(f, prev)
    items += [it for it in admission_items(f) if it["key"].split(":", 1)[1] not in resumed]
    items += sibling_items(f, resumed)
    items += _resumptions(f, s, resumed)
    items += _slot_events(f, s, resumed)
    items += _sort(f, s, config)
    items += chunk_items(f, config)
    items += window_drops(f)
    items += growth_items(f)
    items += group_moves(f, prev)
    items += budget_items(f, config)
    items += waiting_items(f, config)
    items += padding_items(f)
    items += _rejections(f)
    items += sampling_items(f)
    if last:
        items += last_step_items(f)
    items += pool_items(f)
    writes = {st.name: st.writes for st in t.stages}
    for st in t.stages:
        item = stage_sentence(f, s, st.name, writes.get(st.name, []))
        if item is not None:
            items.append(item)
    return items
