"""Stage sentences: for each stage of the step, its formula worked through with this step's
numbers for one example entry (narrate.py appends them after the step-level sentences)."""

from __future__ import annotations

from typing import Any

from pagedviz.core.narrate_common import Item, block_ranges, en_zh, join_en, join_zh, plural, sentence
from pagedviz.core.narrate_explain import explain
from pagedviz.core.narrate_facts import Facts


def example_token(f: Facts) -> int:
    """The token a stage sentence works through: the first token of the last request."""
    return int(f.qsl[-2]) if len(f.qsl) >= 2 else 0


def token_refs(f: Facts, i: int, name: str) -> list[tuple[str, Any]]:
    r, rid, p = f.token(i)
    refs: list[tuple[str, Any]] = [("token", i), ("row", r), ("request", rid)]
    if name in ("block_numbers", "slot_mapping") and "block_numbers" in f.a:
        refs.append(("block", int(f.a["block_numbers"][i])))
    elif name == "slot_mapping" and f.bs and i < len(f.a.get("slot_mapping", [])):
        refs.append(("block", int(f.a["slot_mapping"][i]) // f.bs))
    return refs


def _stage_update_states(f: Facts) -> Item:
    added = [*f.sched.get("new_req_ids", []), *f.sched.get("resumed_req_ids", [])]
    removed = list(f.sched.get("finished_req_ids", [])) + list(f.sched.get("preempted_req_ids", []))
    en = f"update_states: the batch now holds {plural(len(f.rows), 'row')} ({', '.join(f.rows)})"
    zh = f"update_states：批次现在有 {len(f.rows)} 行（{', '.join(f.rows)}）"
    if removed:
        en += f"; removed: {join_en(removed)}"
        zh += f"；移除：{join_zh(removed)}"
    if added:
        en += f"; added (lowest hole first): {join_en(added)}"
        zh += f"；加入（先填最低的空洞）：{join_zh(added)}"
    moves = f.t.batch.get("moves", [])
    if moves:
        en += f"; {plural(len(moves), 'condense move')}"
        zh += f"；{len(moves)} 次压缩移动"
    refs = [("request", r) for r in [*f.rows, *removed]]
    return sentence("stage:update_states", en_zh(en + ".", zh + "。"), refs, "update_states")


def _stage_attn_metadata(f: Facts) -> Item:
    s = f.t.scalars
    en = (
        f"attn_metadata: num_reqs = {s.get('num_reqs')}, {plural(f.T, 'scheduled token')} "
        f"(num_input_tokens = {s.get('num_input_tokens', f.T)}), max_query_len = {s.get('max_query_len')}, "
        f"max_seq_len = {s.get('max_seq_len')}"
    )
    zh = (
        f"attn_metadata：num_reqs = {s.get('num_reqs')}，调度 {f.T} 个 token"
        f"（num_input_tokens = {s.get('num_input_tokens', f.T)}），max_query_len = {s.get('max_query_len')}，"
        f"max_seq_len = {s.get('max_seq_len')}"
    )
    return sentence("stage:attn_metadata", en_zh(en + ".", zh + "。"), [], "attn_metadata")


_ATTN_STATE = {
    "PrefillNoCache": (
        "every seq_len equals its num_scheduled_tokens (nothing computed before), so a causal mask "
        "[max_seq_len, max_seq_len]",
        "每个 seq_len 都等于它的 num_scheduled_tokens（之前没有算过），"
        "所以用因果掩码 [max_seq_len, max_seq_len]",
    ),
    "DecodeOnly": (
        "every request schedules exactly one token, so no mask is needed",
        "每个请求只调度一个 token，不需要掩码",
    ),
    "ChunkedPrefill": (
        "chunked prefill is on and some request continues from computed tokens, so the rows of the causal "
        "mask picked by positions, [T, max_seq_len]",
        "分块预填充开启且有请求接着已计算的 token 继续，"
        "所以按 positions 取因果掩码的行，形状 [T, max_seq_len]",
    ),
    "PrefillCacheHit": (
        "chunked prefill is off and a prefill runs over computed tokens "
        "(a prefix-cache hit or a resumed request)",
        "分块预填充关闭，预填充覆盖了已计算的 token（前缀缓存命中或恢复的请求）",
    ),
    "SpecDecoding": (
        "every request has one valid token plus its draft tokens and the drafter is MTP, so no causal "
        "mask of its own (the kernel reads a separate spec_attn_mask)",
        "每个请求只有一个有效 token 加上它的草稿 token，且草稿来自 MTP，"
        "所以不构造自己的因果掩码（算子读取单独的 spec_attn_mask）",
    ),
}


def _stage_attn_mask(f: Facts) -> Item:
    state = str(f.t.scalars.get("attn_state", ""))
    why_en, why_zh = _ATTN_STATE.get(state, ("", ""))
    shape = list(f.t.array_entries["attn_mask"].full_shape) if "attn_mask" in f.t.array_entries else None
    en = f"attn_state = {state}" + (f": {why_en}" if why_en else "")
    zh = f"attn_state = {state}" + (f"：{why_zh}" if why_zh else "")
    if shape is not None:
        en += f"; attn_mask has shape {shape}"
        zh += f"；attn_mask 形状为 {shape}"
    return sentence("stage:attn_mask", en_zh(en + ".", zh + "。"), [], "attn_mask")


def _stage_block_tables(f: Facts) -> Item:
    bt = f.a.get("block_tables")
    en = "block_tables: each sequence's block list, padded with -1 to the longest"
    zh = "block_tables：每个序列的块列表，用 -1 填充到最长的长度"
    refs: list[tuple[str, Any]] = []
    if bt is not None and bt.size and f.rows:
        row = [int(b) for b in bt[-1] if b >= 0]
        en += f"; sequence {f.rows[-1]} reads blocks {block_ranges(row)}"
        zh += f"；序列 {f.rows[-1]} 读块 {block_ranges(row)}"
        refs = [("request", f.rows[-1]), *(("block", b) for b in row)]
    elif bt is None:
        en += " (not passed to this prefill: no sequence has a prefix-cache hit)"
        zh += "（这次预填充没有传入：没有序列命中前缀缓存）"
    return sentence("stage:block_tables", en_zh(en + ".", zh + "。"), refs, "block_tables")


def stage_sentence(f: Facts, name: str, writes: list[str]) -> Item | None:
    special = {
        "update_states": _stage_update_states,
        "attn_metadata": _stage_attn_metadata,
        "attn_mask": _stage_attn_mask,
        "block_tables": _stage_block_tables,
    }
    if name in special:
        return special[name](f)
    # the array a stage is named for comes first (logits_indices before discard_request_mask)
    for arr_name in sorted(writes, key=lambda w: w != name):
        entry = f.t.array_entries.get(arr_name)
        if entry is None or entry.value.ndim != 1 or entry.value.size == 0:
            continue
        if entry.level == "token":
            i = example_token(f)
            refs = token_refs(f, i, arr_name)
        else:
            i = max(len(f.rows) - 1, 0)
            if arr_name in ("query_start_loc", "cu_seqlens_q", "cu_seqlens_k"):
                i = len(f.rows)
            refs = [("row", min(i, len(f.rows) - 1))] if f.rows else []
        text = explain(f.t, arr_name, i)
        if text is None:
            continue
        return sentence(f"stage:{name}", en_zh(text["en"] + ".", text["zh"] + "。"), refs, name)
    return None
