"""Step-level sentences about the batch and its results: condense moves, CUDA-graph padding,
speculative decoding, sampling, the last step, the pool and idle steps."""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.narrate_common import Item, block_ranges, en_zh, join_en, join_zh, plural, sentence
from pagedviz.core.narrate_facts import Facts


def move_items(f: Facts) -> list[Item]:
    items = []
    for m in f.t.batch.get("moves", []):
        rid, src, dst = str(m["req_id"]), int(m["from"]), int(m["to"])
        en = (
            f"Condense: request {rid} moves from row {src} to row {dst}, the lowest hole, so the active "
            f"rows stay 0..{len(f.rows) - 1} with no gaps (its token ids and block-table row move with it)."
        )
        zh = (
            f"压缩（condense）：请求 {rid} 从第 {src} 行移到第 {dst} 行（最低的空洞），让活跃行保持 "
            f"0..{len(f.rows) - 1} 连续（它的 token id 和块表行一起移动）。"
        )
        items.append(
            sentence(
                f"move:{rid}", en_zh(en, zh), [("request", rid), ("row", src), ("row", dst)], "update_states"
            )
        )
    return items


def padding_items(f: Facts) -> list[Item]:
    n_in = int(f.t.scalars.get("num_input_tokens", f.T))
    if n_in <= f.T:
        return []
    pad = n_in - f.T
    en = (
        f"Padding: {f.T} tokens are padded to {n_in} (num_input_tokens, the next CUDA-graph capture size); "
        f"the {plural(pad, 'padded slot')} in slot_mapping hold -1, so nothing is written there."
    )
    zh = (
        f"填充：{f.T} 个 token 被填充到 {n_in} 个（num_input_tokens，下一个 CUDA graph 捕获尺寸）；"
        f"slot_mapping 中的 {pad} 个填充位置为 -1，不会写入任何 KV。"
    )
    return [sentence("padding", en_zh(en, zh), [("token", i) for i in range(f.T, n_in)], "attn_metadata")]


def sampling_items(f: Facts) -> list[Item]:
    sampled = f.t.sampled_token_ids
    if not sampled:
        return []
    ids = list(sampled)
    counts = {rid: (len(v) if isinstance(v, list) else 1) for rid, v in sampled.items()}
    en = f"After the forward, {join_en(ids)} {'samples' if len(ids) == 1 else 'each sample'} the next token"
    zh = f"前向计算之后，{join_zh(ids)} 各采样下一个 token"
    if any(c > 1 for c in counts.values()):
        en += " (" + ", ".join(f"{rid}: {c}" for rid, c in counts.items()) + " tokens)"
        zh += "（" + "，".join(f"{rid}：{c} 个" for rid, c in counts.items()) + "）"
    if "logits_indices" in f.a:
        en += " at logits_indices (the last scheduled token of each request)"
        zh += "，位置由 logits_indices 给出（每个请求最后一个调度的 token）"
    en += "."
    zh += "。"
    return [sentence("sample", en_zh(en, zh), [("request", r) for r in ids])]


def _per_request(value: Any, rows: list[str]) -> dict[str, int]:
    """A per-request count from a {req_id: n} dict or a per-row array; {} if neither."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            try:
                out[str(k)] = len(v) if isinstance(v, list) else int(v)
            except (TypeError, ValueError):
                continue
        return out
    if isinstance(value, np.ndarray) and value.ndim == 1 and len(value) == len(rows):
        return {rid: int(x) for rid, x in zip(rows, value.tolist())}
    return {}


def spec_items(f: Facts) -> list[Item]:
    """Speculative decoding, when the trace carries it (drafts, accepted, rejected per request)."""
    t = f.t
    found: dict[str, dict[str, int]] = {}
    sources: list[tuple[str, Any]] = [(k, v) for k, v in f.sched.items()]
    sources += [(k, v) for k, v in f.a.items() if v.ndim == 1]
    extra = getattr(t, "spec_decode", None)
    if isinstance(extra, dict):
        sources += list(extra.items())
    for key, value in sources:
        k = key.lower()
        kind = (
            "draft"
            if ("draft" in k and "cu_" not in k) or k == "scheduled_spec_decode_tokens"
            else "accepted"
            if "accept" in k
            else "rejected"
            if "reject" in k
            else None
        )
        if kind is None or kind in found:
            continue
        per = _per_request(value, f.rows)
        if per:
            found[kind] = per
    drafts = found.get("draft", {})
    if not any(drafts.values()) and not found.get("accepted") and not found.get("rejected"):
        return []
    items = []
    for rid in [r for r in f.rows if any(r in d for d in found.values())]:
        d, acc, rej = drafts.get(rid), found.get("accepted", {}).get(rid), found.get("rejected", {}).get(rid)
        if rej is None and d is not None and acc is not None:
            rej = max(d - acc, 0)
        if not d and acc is None and not rej:
            continue
        parts_en, parts_zh = [], []
        if d is not None:
            parts_en.append(f"verifies {plural(d, 'draft token')}")
            parts_zh.append(f"验证 {d} 个草稿 token")
        if acc is not None:
            parts_en.append(f"{acc} accepted")
            parts_zh.append(f"接受 {acc} 个")
        if rej:
            parts_en.append(f"{rej} rejected and rolled back (blocks and num_computed_tokens)")
            parts_zh.append(f"拒绝 {rej} 个并回退（块和 num_computed_tokens）")
        en = f"Speculative decoding: request {rid} " + ", ".join(parts_en) + "."
        zh = f"推测解码：请求 {rid} " + "，".join(parts_zh) + "。"
        items.append(sentence(f"spec:{rid}", en_zh(en, zh), [("request", rid)]))
    return items


def last_step_items(f: Facts) -> list[Item]:
    done = list(f.t.sampled_token_ids)
    if not done:
        return []
    blocks = sorted({int(b) for b, o in f.t.kv_cache.get("owners", {}).items() if set(o) & set(done)})
    one = len(done) == 1
    en = (
        f"This is the run's last step: {join_en(done)} "
        + ("samples its last token and finishes; its" if one else "sample their last token and finish; their")
        + f" blocks {block_ranges(blocks)} go back to the free queue at the end of the step."
    )
    zh = (
        f"这是运行的最后一步：{join_zh(done)} 采样出最后一个 token 后完成；"
        f"{'它' if one else '它们'}的块 {block_ranges(blocks)} 在这一步结束时回到空闲队列。"
    )
    return [
        sentence(
            "finish:last", en_zh(en, zh), [*(("request", r) for r in done), *(("block", b) for b in blocks)]
        )
    ]


def pool_items(f: Facts) -> list[Item]:
    kv = f.t.kv_cache
    if "free_block_queue" not in kv:
        return []
    free = [int(b) for b in kv["free_block_queue"]]
    head = free[:4]
    en = f"The pool has {plural(len(free), 'free block')} after scheduling"
    zh = f"调度之后块池还有 {len(free)} 个空闲块"
    if head and str(kv.get("free_queue_order", "")).startswith("not recorded"):
        # an older recording: the count is recorded, the order not (the blocks in id order)
        more = ", …" if len(free) > len(head) else ""
        en += (
            f"; free are {', '.join(map(str, head))}{more} (this recording, from an older recorder, keeps "
            "how many, not the free queue's order)"
        )
        zh += (
            f"；空闲的是 {', '.join(map(str, head))}{more}"
            "（这份录制来自较早的录制器，只记下数量，没有记下空闲队列的顺序）"
        )
    elif head:
        en += f"; the next allocations take {', '.join(map(str, head))} from the head of the free queue"
        zh += f"；下一次分配从空闲队列头部取 {', '.join(map(str, head))}"
    return [sentence("pool", en_zh(en + ".", zh + "。"), [("block", b) for b in head])]


def idle_items(f: Facts) -> list[Item]:
    waiting = [str(r) for r in f.sched.get("waiting_req_ids", [])]
    en = "Idle step: nothing can be scheduled (no request is running"
    zh = "空闲步：没有可调度的内容（没有运行中的请求"
    if waiting:
        en += f"; {join_en(waiting)} wait"
        zh += f"；{join_zh(waiting)} 在等待"
    en += "). It is recorded with empty arrays so step numbers stay aligned with arrival steps."
    zh += "）。它仍被记录（数组为空），让步号与请求到达的步号对齐。"
    return [sentence("idle", en_zh(en, zh), [("request", r) for r in waiting])]
