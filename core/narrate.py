"""Narration of one engine step, generated from its StepTrace (and the previous step's).

Each sentence is a structured item the page can render and link:
`{"key": ..., "text": {"en": ..., "zh": ...}, "refs": [{"kind": "request"|"block"|"token"|"row",
"id": ...}], "stage": name | None}`. Step-level sentences (stage None) say what the scheduler did
and why: admissions, chunking and the token budget, preemptions (the pool ran out; the victim is
the last running request), finishes and frees, prefix-cache hits, condense moves, CUDA-graph
padding, idle steps, speculative tokens when the trace has them. Stage sentences substitute this
step's numbers into the stage's formula (`slot_mapping[3] = 7 * 2 + 1 = 15`); `explain()` does the
same for any one entry, which is what a predict-then-reveal check shows for a wrong answer.

Nothing here is written per preset: the facts come from the trace contract (docs/arrays.md), so the
three flavours narrate alike. Arrays a flavour or an engine version lacks are skipped, not assumed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.config import EngineConfig
from pagedviz.core.trace import StepTrace

Item = dict[str, Any]
Text = dict[str, str]


def _text(en: str, zh: str) -> Text:
    return {"en": en, "zh": zh}


def _item(key: str, text: Text, refs: list[tuple[str, Any]] | None = None, stage: str | None = None) -> Item:
    return {
        "key": key,
        "text": text,
        "refs": [{"kind": k, "id": i} for k, i in (refs or [])],
        "stage": stage,
    }


def _join_en(xs: list[Any]) -> str:
    s = [str(x) for x in xs]
    return s[0] if len(s) == 1 else ", ".join(s[:-1]) + " and " + s[-1]


def _join_zh(xs: list[Any]) -> str:
    s = [str(x) for x in xs]
    return s[0] if len(s) == 1 else "、".join(s[:-1]) + " 和 " + s[-1]


def _blocks(bs: list[int]) -> str:
    """Block ids, runs written as ranges: 1–9, 13, 14."""
    out: list[str] = []
    i = 0
    while i < len(bs):
        j = i
        while j + 1 < len(bs) and bs[j + 1] == bs[j] + 1:
            j += 1
        out.append(f"{bs[i]}–{bs[j]}" if j - i >= 2 else ", ".join(str(b) for b in bs[i : j + 1]))
        i = j + 1
    return ", ".join(out)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _word(xs: list[Any], word: str) -> str:
    return word if len(xs) == 1 else word + "s"


# ------------------------------------------------------------------ facts read from a trace
class Facts:
    """What a step's trace says, in one vocabulary for every flavour (vllm/ascend or nanovllm)."""

    def __init__(self, t: StepTrace) -> None:
        self.t = t
        self.a = t.arrays
        self.sched = t.scheduler
        self.rows: list[str] = list(t.batch.get("req_ids", []))
        self.nst: dict[str, int] = {
            str(k): int(v) for k, v in self.sched.get("num_scheduled_tokens", {}).items()
        }
        self.T = int(self.sched.get("total_num_scheduled_tokens", sum(self.nst.values())))
        self.bs = int(t.kv_cache.get("block_size", 0))
        self.nano = "cu_seqlens_q" in self.a or "context_lens" in self.a
        self.v2 = "slots" in t.batch  # Model Runner V2: state slots, no persistent batch rows
        n = len(self.rows)
        a = self.a
        if "query_start_loc" in a:
            self.qsl = a["query_start_loc"][: n + 1].astype(np.int64)
        elif "cu_seqlens_q" in a:
            self.qsl = a["cu_seqlens_q"].astype(np.int64)
        else:
            self.qsl = np.concatenate([[0], np.cumsum([self.nst.get(r, 0) for r in self.rows])]).astype(
                np.int64
            )
        if "seq_lens" in a:
            self.seq_lens = a["seq_lens"].astype(np.int64)
        elif "cu_seqlens_k" in a:
            self.seq_lens = np.diff(a["cu_seqlens_k"]).astype(np.int64)
        elif "context_lens" in a:
            self.seq_lens = a["context_lens"].astype(np.int64)
        else:
            self.seq_lens = np.zeros(n, dtype=np.int64)
        self.computed = self.seq_lens - np.diff(self.qsl) if n else np.zeros(0, dtype=np.int64)

    def row(self, req_id: str) -> int | None:
        return self.rows.index(req_id) if req_id in self.rows else None

    def row_of_token(self, i: int) -> int:
        if "req_indices" in self.a and i < len(self.a["req_indices"]):
            return int(self.a["req_indices"][i])
        return int(np.searchsorted(self.qsl, i, side="right") - 1)

    def total_tokens(self, r: int) -> int | None:
        """The request's known tokens (prompt + outputs) when the trace has them."""
        if "num_tokens" in self.a:
            return int(self.a["num_tokens"][r])
        return None

    def owners(self) -> dict[int, list[str]]:
        return {int(b): list(o) for b, o in self.t.kv_cache.get("owners", {}).items()}


def _blocks_of(t: StepTrace | None, req_id: str) -> list[int]:
    if t is None:
        return []
    return [int(b) for b, o in t.kv_cache.get("owners", {}).items() if req_id in o]


def _running_order(prev: StepTrace | None) -> list[str]:
    """The running queue after the previous step: its scheduling order, finished ones left out."""
    if prev is None:
        return []
    order = [str(r) for r in prev.scheduler.get("num_scheduled_tokens", {})]
    return [r for r in order if r in {str(x) for o in prev.kv_cache.get("owners", {}).values() for x in o}]


# ------------------------------------------------------------------ step-level sentences
def _finishes(f: Facts, prev: StepTrace | None) -> list[Item]:
    items = []
    finished = {str(r) for r in f.sched.get("finished_req_ids", [])}
    prev_owners = {int(b): o for b, o in prev.kv_cache.get("owners", {}).items()} if prev else {}
    for rid in f.sched.get("finished_req_ids", []):
        blocks = _blocks_of(prev, rid)
        kept = [b for b in blocks if set(prev_owners.get(b, [])) - finished]
        freed = [b for b in blocks if b not in kept]
        row = (
            prev.batch.get("req_ids", []).index(rid)
            if prev and rid in prev.batch.get("req_ids", [])
            else None
        )
        refs: list[tuple[str, Any]] = [("request", rid), *(("block", b) for b in blocks)]
        consumed = (prev.engine_core or {}).get("consumed_step") if prev else None
        if consumed is not None:
            # async scheduling: the update that finished it ran a step after its last token
            en = (
                f"Request {rid} finished at the end of step {f.t.step - 1}, in the update_from_output "
                f"that took step {consumed}'s output (the step that sampled its last token)"
            )
            zh = (
                f"请求 {rid} 在第 {f.t.step - 1} 步结束时完成，即在接收第 {consumed} 步输出"
                f"（采样出最后一个 token 的那一步）的 update_from_output 中"
            )
        else:
            en = f"Request {rid} finished at the end of step {f.t.step - 1} (it sampled its last token)"
            zh = f"请求 {rid} 在第 {f.t.step - 1} 步结束时完成（采样出了最后一个 token）"
        if freed:
            en += f": its {_word(freed, 'block')} {_blocks(freed)} went back to the free queue then"
            zh += f"：它的块 {_blocks(freed)} 当时已回到空闲队列"
        if kept:
            holders = sorted({o for b in kept for o in prev_owners[b]} - finished)
            en += f"; {_blocks(kept)} stay allocated, still used by {_join_en(holders)}"
            en += " (ref count dropped by one)"
            zh += f"；块 {_blocks(kept)} 仍被 {_join_zh(holders)} 使用，保持分配（引用计数减一）"
        if row is not None and not f.nano and not f.v2:
            en += f", and its row {row} of the persistent batch is removed now"
            zh += f"，它在持久批次中的第 {row} 行现在被移除"
            refs.append(("row", row))
        items.append(_item(f"finish:{rid}", _text(en + ".", zh + "。"), refs))
    return items


def _engine_core(f: Facts) -> list[Item]:
    """Async scheduling: one sentence on what the engine core's batch queue did this step, whose
    output update_from_output took, and why finishes and frees come a step late."""
    ec = f.t.engine_core
    if not ec or (ec["consumed_step"] is None and not ec["scheduled"]):
        return []  # no batch queue, or an idle step (the idle sentence says why)
    step, k, size = f.t.step, ec["consumed_step"], ec["batch_queue_size"]
    queue, fin = [int(q) for q in ec["batch_queue"]], [str(r) for r in ec.get("finished_req_ids", [])]
    refs: list[tuple[str, Any]] = [("request", r) for r in fin]
    if k is None:
        en = (
            f"Async scheduling: update_from_output waits; the engine core's batch queue (size {size}) "
            f"holds {_word(queue, 'step')} {_join_en(queue)}, whose sampled tokens reach the scheduler "
            "only once the queue is full or nothing is left to schedule."
        )
        zh = (
            f"异步调度：update_from_output 暂不执行；引擎核心的批次队列（容量 {size}）中有第 "
            f"{_join_zh(queue)} 步，其采样结果要等队列满了或没有可调度的请求时才交给调度器。"
        )
        return [_item("engine_core", _text(en, zh), refs)]
    if not ec["scheduled"]:
        en = f"Nothing is left to schedule, so this step only drains the queue: update_from_output ← step {k}"
        zh = f"没有可调度的请求，这一步只排空批次队列：update_from_output ← 第 {k} 步"
    elif f.t.idle:
        en = (
            f"schedule() planned an empty batch (every running request's last token is already in flight, "
            f"or only finished request ids had to reach the runner); the queue is full: "
            f"update_from_output ← step {k}"
        )
        zh = (
            f"schedule() 规划了一个空批次（运行中请求的最后一个 token 都已在途，或者只需把已完成请求的 id "
            f"告诉 runner）；队列已满：update_from_output ← 第 {k} 步"
        )
    else:
        en = (
            f"The batch queue (size {size}) is full: after scheduling step {step}, the engine core hands "
            f"step {k}'s sampled tokens to the scheduler: update_from_output ← step {k}"
        )
        zh = (
            f"批次队列（容量 {size}）已满：调度完第 {step} 步之后，引擎核心把第 {k} 步的采样结果交给调度器："
            f"update_from_output ← 第 {k} 步"
        )
    if fin:
        one = len(fin) == 1
        en += (
            f"; {_join_en(fin)} {'reaches' if one else 'reach'} max_tokens there and "
            f"{'finishes' if one else 'finish'}, and {'its' if one else 'their'} blocks go back to the "
            f"free queue, a step after step {k} sampled the last token (the runner hears of it at the "
            "next schedule())"
        )
        zh += (
            f"；{_join_zh(fin)} 在其中达到 max_tokens 而完成，块回到空闲队列，比采样出最后一个 token 的"
            f"第 {k} 步晚一步（runner 在下一次 schedule() 时得知）"
        )
    return [_item("engine_core", _text(en + ".", zh + "。"), refs)]


def _preemptions(f: Facts, prev: StepTrace | None) -> list[Item]:
    victims = [str(r) for r in f.sched.get("preempted_req_ids", [])]
    if not victims:
        return []
    items = []
    free_before = len(prev.kv_cache.get("free_block_queue", [])) if prev else None
    running = _running_order(prev)
    for k, rid in enumerate(victims):
        blocks = _blocks_of(prev, rid)
        refs: list[tuple[str, Any]] = [("request", rid), *(("block", b) for b in blocks)]
        if k == 0 and free_before is not None:
            en = (
                f"The KV pool ran out: {_plural(free_before, 'block')} were free after step {f.t.step - 1}, "
                "too few for the running requests' next tokens. "
            )
            zh = (
                f"KV 块池不够用了：第 {f.t.step - 1} 步后只剩 {free_before} 个空闲块，"
                "装不下运行中请求的下一个 token。"
            )
        else:
            en, zh = "The pool is still short. ", "块池仍然不够。"
        last = f" (running queue: {', '.join(running)})" if running else ""
        lastz = f"（运行队列：{', '.join(running)}）" if running else ""
        en += (
            f"The scheduler preempts request {rid}, the last request in the running queue{last}: "
            "vLLM takes the most recently admitted one first, so the oldest requests keep making progress. "
            f"Its blocks {_blocks(blocks) if blocks else '(none)'} go back to the free queue, its "
            "num_computed_tokens is reset to 0 and it goes to the front of the waiting queue; it will "
            "recompute its tokens from scratch when it resumes."
        )
        zh += (
            f"调度器抢占请求 {rid}，它是运行队列中的最后一个{lastz}：vLLM 先抢占最晚加入的请求，"
            f"让最早的请求继续前进。它的块 {_blocks(blocks) if blocks else '（无）'} 回到空闲队列，"
            "num_computed_tokens 归零，它被放到等待队列最前面；恢复时要从头重新计算所有 token。"
        )
        items.append(_item(f"preempt:{rid}", _text(en, zh), refs))
    items.append(
        _item(
            "preempt:no_admission",
            _text(
                "In a step with a preemption no waiting request is admitted.",
                "发生抢占的这一步，不再接纳任何等待中的请求。",
            ),
        )
    )
    return items


def _admissions(f: Facts) -> list[Item]:
    items = []
    new_blocks = {str(k): [int(b) for b in v] for k, v in f.sched.get("new_block_ids", {}).items()}
    for kind in ("new", "resumed"):
        for rid in f.sched.get(f"{kind}_req_ids", []):
            r = f.row(rid)
            if r is None:
                continue
            blocks = new_blocks.get(rid, [])
            total = f.total_tokens(r)
            n = f.nst.get(rid, 0)
            refs: list[tuple[str, Any]] = [("request", rid), ("row", r), *(("block", b) for b in blocks)]
            size = total if total is not None else int(f.seq_lens[r])
            if kind == "new":
                en = f"Request {rid} is admitted: {_plural(size, 'token')} of prompt"
                zh = f"请求 {rid} 被接纳：提示共 {size} 个 token"
            else:
                en = f"Request {rid} resumes after its preemption: {_plural(size, 'token')} to recompute"
                zh = f"请求 {rid} 在被抢占后恢复：需要重新计算 {size} 个 token"
            en += f"; it schedules {n} now, takes row {r} of the batch"
            zh += f"；这一步调度 {n} 个，占用批次第 {r} 行"
            if blocks:
                en += f" and gets {_word(blocks, 'block')} {_blocks(blocks)}"
                en += " (prefix-cache hits included)" if int(f.computed[r]) > 0 else " from the free queue"
                zh += f"，拿到块 {_blocks(blocks)}"
                zh += "（含前缀缓存命中的块）" if int(f.computed[r]) > 0 else "（来自空闲队列）"
            items.append(_item(f"{kind}:{rid}", _text(en + ".", zh + "。"), refs))
            hit = int(f.computed[r]) if r < len(f.computed) else 0
            if hit > 0 and f.bs:
                items.append(_prefix_hit(f, rid, r, hit, blocks))
    return items


def _prefix_hit(f: Facts, rid: str, r: int, hit: int, blocks: list[int]) -> Item:
    nblk = hit // f.bs
    hits = blocks[:nblk] if len(blocks) >= nblk else blocks
    owners = f.owners()
    others = sorted({o for b in hits for o in owners.get(b, []) if o != rid})
    ref_cnt = f.t.kv_cache.get("ref_cnt", [])
    counts = sorted({int(ref_cnt[b]) for b in hits if b < len(ref_cnt)})
    refs: list[tuple[str, Any]] = [
        ("request", rid),
        *(("block", b) for b in hits),
        *(("request", o) for o in others),
    ]
    en = (
        f"Prefix-cache hit: request {rid}'s first {_plural(nblk, 'full block')} ({hit} tokens) hash the same "
        f"as cached blocks, so it reuses blocks {_blocks(hits)} instead of computing them"
    )
    zh = (
        f"前缀缓存命中：请求 {rid} 的前 {nblk} 个满块（{hit} 个 token）哈希与缓存中的块相同，"
        f"于是直接复用块 {_blocks(hits)}，不再计算"
    )
    if others:
        en += f" (shared with {_join_en(others)}"
        zh += f"（与 {_join_zh(others)} 共享"
        if counts:
            en += f", ref count {'/'.join(map(str, counts))}"
            zh += f"，引用计数 {'/'.join(map(str, counts))}"
        en += ")"
        zh += "）"
    en += f"; num_computed_tokens starts at {hit} and only the remaining {f.nst.get(rid, 0)} tokens"
    en += " are prefilled."
    zh += f"；num_computed_tokens 从 {hit} 开始，只预填充剩下的 {f.nst.get(rid, 0)} 个 token。"
    return _item(f"prefix_hit:{rid}", _text(en, zh), refs)


def _chunks(f: Facts, config: EngineConfig | None) -> list[Item]:
    """Requests that schedule only part of what they still need (a chunked prefill)."""
    items = []
    sampled = f.t.sampled_token_ids
    budget = config.max_num_batched_tokens if config else None
    used = 0
    for rid, n in f.nst.items():
        used += n
        r = f.row(rid)
        if r is None or rid in sampled or n == 0:
            continue
        total = f.total_tokens(r)
        done = int(f.seq_lens[r]) if r < len(f.seq_lens) else n
        start = done - n
        en = f"Request {rid} gets {n} tokens (positions {start}–{done - 1})"
        zh = f"请求 {rid} 这一步拿到 {n} 个 token（位置 {start}–{done - 1}）"
        if total is not None:
            en += f" of the {total - start} it still needs"
            zh += f"，它还需要 {total - start} 个"
        reason_en, reason_zh = "", ""
        if budget is not None and used == budget:
            reason_en = ": the token budget ran out at it, so its prefill is chunked"
            reason_zh = "：预算在它这里用完了，所以它的预填充被分块"
        elif config is not None and n == config.long_prefill_token_threshold:
            reason_en = f": the long-prefill cap (long_prefill_token_threshold = {n}) limits one chunk"
            reason_zh = f"：长预填充上限（long_prefill_token_threshold = {n}）限制了一块的大小"
        else:
            reason_en, reason_zh = ": its prefill is chunked", "：它的预填充被分块"
        en += (
            reason_en
            + ". A partial prefill samples nothing (discard_request_mask); the rest follows next step."
        )
        zh += reason_zh + "。未完成的预填充不采样（discard_request_mask）；剩下的下一步继续。"
        items.append(_item(f"chunk:{rid}", _text(en, zh), [("request", rid), ("row", r)]))
    return items


def _growth(f: Facts) -> list[Item]:
    """Running requests whose next tokens open a new block."""
    kinds = set(f.sched.get("new_req_ids", [])) | set(f.sched.get("resumed_req_ids", []))
    grown = {
        str(k): [int(b) for b in v]
        for k, v in f.sched.get("new_block_ids", {}).items()
        if str(k) not in kinds and v
    }
    if not grown:
        return []
    pairs = list(grown.items())
    en = (
        "New blocks for running requests whose next tokens cross into a block they do not have yet: "
        + "; ".join(f"{_blocks(bs)} for {rid}" for rid, bs in pairs)
    )
    zh = "运行中的请求下一个 token 进入了还没有的块，于是分到新块：" + "；".join(
        f"{rid} 得到 {_blocks(bs)}" for rid, bs in pairs
    )
    refs: list[tuple[str, Any]] = []
    for rid, bs in pairs:
        refs += [("request", rid), *(("block", b) for b in bs)]
    return [_item("grow", _text(en + ".", zh + "。"), refs)]


def _budget(f: Facts, config: EngineConfig | None) -> list[Item]:
    kinds = set(f.sched.get("new_req_ids", [])) | set(f.sched.get("resumed_req_ids", []))
    running = sum(n for rid, n in f.nst.items() if rid not in kinds)
    admitted = f.T - running
    en = f"This step schedules {_plural(f.T, 'token')} for {_plural(len(f.nst), 'request')}"
    zh = f"这一步为 {len(f.nst)} 个请求调度了 {f.T} 个 token"
    en += f" ({running} for running requests, {admitted} for new or resumed ones)"
    zh += f"（运行中的请求 {running} 个，新加入或恢复的请求 {admitted} 个）"
    if config is not None:
        left = config.max_num_batched_tokens - f.T
        en += f" out of a budget of {config.max_num_batched_tokens} (max_num_batched_tokens): {left} left"
        zh += f"，预算 {config.max_num_batched_tokens}（max_num_batched_tokens）剩下 {left}"
    refs = [("request", rid) for rid in f.nst]
    return [_item("budget", _text(en + ".", zh + "。"), refs)]


def _waiting(f: Facts, config: EngineConfig | None) -> list[Item]:
    waiting = [str(r) for r in f.sched.get("waiting_req_ids", [])]
    if not waiting:
        return []
    en = f"Still waiting: {_join_en(waiting)}"
    zh = f"仍在等待：{_join_zh(waiting)}"
    if f.sched.get("preempted_req_ids"):
        en += ", because a preemption in this step stops admissions"
        zh += "，因为这一步发生了抢占，不再接纳"
    elif config is not None and config.max_num_batched_tokens <= f.T:
        en += ", because the token budget is used up"
        zh += "，因为 token 预算已经用完"
    elif config is not None and len(f.rows) >= config.max_num_reqs:
        en += f", because max_num_reqs = {config.max_num_reqs} requests are already running"
        zh += f"，因为已有 max_num_reqs = {config.max_num_reqs} 个请求在运行"
    else:
        en += ", because the free blocks cannot hold the next one (admission checks the pool)"
        zh += "，因为空闲块放不下下一个请求（接纳时会检查块池）"
    return [_item("waiting", _text(en + ".", zh + "。"), [("request", r) for r in waiting])]


def _moves(f: Facts) -> list[Item]:
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
            _item(
                f"move:{rid}", _text(en, zh), [("request", rid), ("row", src), ("row", dst)], "update_states"
            )
        )
    return items


def _padding(f: Facts) -> list[Item]:
    n_in = int(f.t.scalars.get("num_input_tokens", f.T))
    if n_in <= f.T:
        return []
    pad = n_in - f.T
    en = (
        f"Padding: {f.T} tokens are padded to {n_in} (num_input_tokens, the next CUDA-graph capture size); "
        f"the {_plural(pad, 'padded slot')} in slot_mapping hold -1, so nothing is written there."
    )
    zh = (
        f"填充：{f.T} 个 token 被填充到 {n_in} 个（num_input_tokens，下一个 CUDA graph 捕获尺寸）；"
        f"slot_mapping 中的 {pad} 个填充位置为 -1，不会写入任何 KV。"
    )
    return [_item("padding", _text(en, zh), [("token", i) for i in range(f.T, n_in)], "attn_metadata")]


def _sampling(f: Facts) -> list[Item]:
    sampled = f.t.sampled_token_ids
    if not sampled:
        return []
    ids = list(sampled)
    counts = {rid: (len(v) if isinstance(v, list) else 1) for rid, v in sampled.items()}
    en = f"After the forward, {_join_en(ids)} {'samples' if len(ids) == 1 else 'each sample'} the next token"
    zh = f"前向计算之后，{_join_zh(ids)} 各采样下一个 token"
    if any(c > 1 for c in counts.values()):
        en += " (" + ", ".join(f"{rid}: {c}" for rid, c in counts.items()) + " tokens)"
        zh += "（" + "，".join(f"{rid}：{c} 个" for rid, c in counts.items()) + "）"
    if "logits_indices" in f.a:
        en += " at logits_indices (the last scheduled token of each request)"
        zh += "，位置由 logits_indices 给出（每个请求最后一个调度的 token）"
    en += "."
    zh += "。"
    return [_item("sample", _text(en, zh), [("request", r) for r in ids])]


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


def _spec(f: Facts) -> list[Item]:
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
            parts_en.append(f"verifies {_plural(d, 'draft token')}")
            parts_zh.append(f"验证 {d} 个草稿 token")
        if acc is not None:
            parts_en.append(f"{acc} accepted")
            parts_zh.append(f"接受 {acc} 个")
        if rej:
            parts_en.append(f"{rej} rejected and rolled back (blocks and num_computed_tokens)")
            parts_zh.append(f"拒绝 {rej} 个并回退（块和 num_computed_tokens）")
        en = f"Speculative decoding: request {rid} " + ", ".join(parts_en) + "."
        zh = f"推测解码：请求 {rid} " + "，".join(parts_zh) + "。"
        items.append(_item(f"spec:{rid}", _text(en, zh), [("request", rid)]))
    return items


def _last(f: Facts) -> list[Item]:
    done = list(f.t.sampled_token_ids)
    if not done:
        return []
    blocks = sorted({int(b) for b, o in f.t.kv_cache.get("owners", {}).items() if set(o) & set(done)})
    one = len(done) == 1
    en = (
        f"This is the run's last step: {_join_en(done)} "
        + ("samples its last token and finishes; its" if one else "sample their last token and finish; their")
        + f" blocks {_blocks(blocks)} go back to the free queue at the end of the step."
    )
    zh = (
        f"这是运行的最后一步：{_join_zh(done)} 采样出最后一个 token 后完成；"
        f"{'它' if one else '它们'}的块 {_blocks(blocks)} 在这一步结束时回到空闲队列。"
    )
    return [
        _item(
            "finish:last", _text(en, zh), [*(("request", r) for r in done), *(("block", b) for b in blocks)]
        )
    ]


def _pool(f: Facts) -> list[Item]:
    kv = f.t.kv_cache
    if "free_block_queue" not in kv:
        return []
    free = [int(b) for b in kv["free_block_queue"]]
    head = free[:4]
    en = f"The pool has {_plural(len(free), 'free block')} after scheduling"
    zh = f"调度之后块池还有 {len(free)} 个空闲块"
    if head:
        en += f"; the next allocations take {', '.join(map(str, head))} from the head of the free queue"
        zh += f"；下一次分配从空闲队列头部取 {', '.join(map(str, head))}"
    return [_item("pool", _text(en + ".", zh + "。"), [("block", b) for b in head])]


def _idle(f: Facts) -> list[Item]:
    waiting = [str(r) for r in f.sched.get("waiting_req_ids", [])]
    en = "Idle step: nothing can be scheduled (no request is running"
    zh = "空闲步：没有可调度的内容（没有运行中的请求"
    if waiting:
        en += f"; {_join_en(waiting)} wait"
        zh += f"；{_join_zh(waiting)} 在等待"
    en += "). It is recorded with empty arrays so step numbers stay aligned with arrival steps."
    zh += "）。它仍被记录（数组为空），让步号与请求到达的步号对齐。"
    return [_item("idle", _text(en, zh), [("request", r) for r in waiting])]


# ------------------------------------------------------------------ entry explanations
def explain(t: StepTrace, name: str, index: int) -> Text | None:
    """One entry of one array, with this step's numbers substituted into its formula;
    None if the step has no such array or entry (index counts into the flattened array)."""
    entry = t.array_entries.get(name)
    if entry is None:
        return None
    arr = entry.value
    if not 0 <= index < arr.size:
        return None
    f = Facts(t)
    fn = _EXPLAIN.get(name)
    if f.v2:  # Model Runner V2's formulas read through idx_mapping (core/narrate_v2.py)
        from pagedviz.core.narrate_v2 import V2_EXPLAIN

        fn = V2_EXPLAIN.get(name, fn)
    if fn is not None and arr.ndim == 1:
        out = fn(f, index, arr)
        if out is not None:
            return out
    flat = arr.reshape(-1)
    where = f"[{', '.join(map(str, np.unravel_index(index, arr.shape)))}]" if arr.ndim > 1 else f"[{index}]"
    formula = next((s.formula for s in t.stages if s.name == entry.stage), "")
    value = flat[index].item()
    en = f"{name}{where} = {value} (stage {entry.stage}" + (f": {formula})" if formula else ")")
    zh = f"{name}{where} = {value}（阶段 {entry.stage}" + (f"：{formula}）" if formula else "）")
    return _text(en, zh)


def _v(arr: np.ndarray, i: int) -> Any:
    return arr[i].item()


def _tok(f: Facts, i: int) -> tuple[int, str, int]:
    """Token i's row, request id and position."""
    r = f.row_of_token(i)
    rid = f.rows[r] if 0 <= r < len(f.rows) else "?"
    if "positions" in f.a and i < len(f.a["positions"]):
        p = int(f.a["positions"][i])
    else:
        p = int(f.computed[r]) + i - int(f.qsl[r])
    return r, rid, p


def _padded(f: Facts, name: str, i: int) -> Text | None:
    if i < f.T:
        return None
    n_in = int(f.t.scalars.get("num_input_tokens", f.T))
    return _text(
        f"{name}[{i}] = -1: a padding entry past the {f.T} scheduled tokens (num_input_tokens = {n_in}, "
        "a CUDA-graph size); nothing is written there",
        f"{name}[{i}] = -1：超出 {f.T} 个调度 token 的填充位置"
        f"（num_input_tokens = {n_in}，CUDA graph 尺寸）；不写入任何内容",
    )


def _ex_req_indices(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, rid, _ = _tok(f, i)
    lo, hi = int(f.qsl[r]), int(f.qsl[r + 1]) - 1
    return _text(
        f"req_indices[{i}] = {r}: token {i} lies in row {r} (request {rid}), whose tokens are {lo}..{hi}",
        f"req_indices[{i}] = {r}：第 {i} 个 token 属于第 {r} 行（请求 {rid}），该行的 token 是 {lo}..{hi}",
    )


def _ex_arange(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, rid, _ = _tok(f, i)
    start = int(f.qsl[r])
    s = f"arange[{i}] = {i} - (cu_num_tokens[{r}] - num_scheduled_tokens[{r}]) = {i} - {start} = {_v(arr, i)}"
    return _text(
        s + f": token {i} is request {rid}'s token number {_v(arr, i)} in this step",
        s + f"：第 {i} 个 token 是请求 {rid} 这一步的第 {_v(arr, i)} 个",
    )


def _ex_positions(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, rid, p = _tok(f, i)
    if f.nano:
        if "context_lens" in f.a:
            s = f"positions[{i}] = len(seq {rid}) - 1 = {int(f.a['context_lens'][r])} - 1 = {p}"
            return _text(s + " (decode: the last token)", s + "（decode：最后一个 token）")
        off = i - int(f.qsl[r])
        s = f"positions[{i}] = num_cached_tokens + {off} = {int(f.computed[r])} + {off} = {p}"
        return _text(s + f" (request {rid})", s + f"（请求 {rid}）")
    c = int(f.computed[r])
    s = f"positions[{i}] = num_computed_tokens_cpu[{r}] + arange[{i}] = {c} + {p - c} = {p}"
    return _text(s + f" (request {rid})", s + f"（请求 {rid}）")


def _ex_token_indices(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, _, p = _tok(f, i)
    M = int(f.t.array_entries["token_ids_cpu"].full_shape[1]) if "token_ids_cpu" in f.a else 0
    s = f"token_indices[{i}] = positions[{i}] + req_indices[{i}] * M = {p} + {r} * {M} = {_v(arr, i)}"
    return _text(s + f" (row {r}, column {p} of token_ids_cpu)", s + f"（token_ids_cpu 第 {r} 行第 {p} 列）")


def _ex_input_ids(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, rid, p = _tok(f, i)
    if "token_indices" in f.a:
        x = int(f.a["token_indices"][i])
        s = f"input_ids[{i}] = token_ids_cpu.flatten()[{x}] = token_ids_cpu[{r}, {p}] = {_v(arr, i)}"
    else:
        s = f"input_ids[{i}] = seq {rid}.token_ids[{p}] = {_v(arr, i)}"
    return _text(s + f" (request {rid}'s token at position {p})", s + f"（请求 {rid} 位置 {p} 的 token）")


def _ex_block_table_indices(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, _, p = _tok(f, i)
    K = int(f.t.array_entries["block_table"].full_shape[1]) if "block_table" in f.a else 0
    s = (
        f"block_table_indices[{i}] = req_indices[{i}] * K + positions[{i}] // block_size = "
        f"{r} * {K} + {p} // {f.bs} = {_v(arr, i)}"
    )
    return _text(s + f" (block_table[{r}, {p // f.bs}])", s + f"（即 block_table[{r}, {p // f.bs}]）")


def _ex_block_numbers(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, rid, p = _tok(f, i)
    x = int(f.a["block_table_indices"][i]) if "block_table_indices" in f.a else r
    s = f"block_numbers[{i}] = block_table.flatten()[{x}] = block_table[{r}, {p // f.bs}] = {_v(arr, i)}"
    return _text(
        s + f": position {p} of request {rid} lies in its block number {p // f.bs}",
        s + f"：请求 {rid} 的位置 {p} 落在它的第 {p // f.bs} 个块",
    )


def _ex_block_offsets(f: Facts, i: int, arr: np.ndarray) -> Text:
    _, _, p = _tok(f, i)
    s = f"block_offsets[{i}] = positions[{i}] % block_size = {p} % {f.bs} = {_v(arr, i)}"
    return _text(s + " (the slot inside the block)", s + "（块内的槽位）")


def _ex_slot_mapping(f: Facts, i: int, arr: np.ndarray) -> Text:
    pad = _padded(f, "slot_mapping", i)
    if pad is not None:
        return pad
    r, rid, p = _tok(f, i)
    o = p % f.bs
    b = int(f.a["block_numbers"][i]) if "block_numbers" in f.a else (_v(arr, i) - o) // f.bs
    s = f"slot_mapping[{i}] = block {b} * {f.bs} + {o} = {_v(arr, i)}"
    return _text(
        s + f": request {rid}'s position {p} is written to slot {o} of physical block {b}",
        s + f"：请求 {rid} 位置 {p} 的 KV 写入物理块 {b} 的第 {o} 个槽位",
    )


def _ex_query_start_loc(f: Facts, i: int, arr: np.ndarray) -> Text:
    if i == 0:
        return _text(
            "query_start_loc[0] = 0: the first request starts at token 0",
            "query_start_loc[0] = 0：第一个请求从第 0 个 token 开始",
        )
    s = f"query_start_loc[{i}] = cu_num_tokens[{i - 1}] = {_v(arr, i)}"
    return _text(
        s + f": rows 0..{i - 1} schedule {_plural(_v(arr, i), 'token')} together",
        s + f"：第 0..{i - 1} 行一共调度 {_v(arr, i)} 个 token",
    )


def _ex_cu(name: str) -> Any:
    def fn(f: Facts, i: int, arr: np.ndarray) -> Text:
        src = "num_scheduled_tokens" if name == "cu_num_tokens" else "len"
        if name == "cu_num_tokens":
            terms = [f.nst.get(f.rows[j], 0) for j in range(i + 1)]
        else:
            terms = [int(x) for x in np.diff(arr[: i + 1])]
        s = f"{name}[{i}] = {_v(arr, i)}"
        if len(terms) > 1:
            s = f"{name}[{i}] = {' + '.join(map(str, terms))} = {_v(arr, i)}"
        return _text(s + f" (cumulative {src})", s + f"（{src} 的累加）")

    return fn


def _ex_seq_lens(f: Facts, i: int, arr: np.ndarray) -> Text:
    c, n = int(f.computed[i]), int(f.qsl[i + 1] - f.qsl[i])
    s = f"seq_lens[{i}] = num_computed_tokens_cpu[{i}] + num_scheduled_tokens[{i}] = {c} + {n} = {_v(arr, i)}"
    return _text(s + " (tokens attended to)", s + "（注意力要看的 token 数）")


def _ex_logits_indices(f: Facts, i: int, arr: np.ndarray) -> Text:
    q = int(f.qsl[i + 1])
    s = f"logits_indices[{i}] = query_start_loc[{i + 1}] - 1 = {q} - 1 = {_v(arr, i)}"
    return _text(
        s + f" (request {f.rows[i]}'s last scheduled token)", s + f"（请求 {f.rows[i]} 最后一个调度的 token）"
    )


def _ex_discard(f: Facts, i: int, arr: np.ndarray) -> Text:
    total = f.total_tokens(i)
    s = (
        f"discard_request_mask[{i}] = seq_lens[{i}] < num_tokens[{i}] = "
        f"{int(f.seq_lens[i])} < {total} = {bool(_v(arr, i))}"
    )
    if _v(arr, i):
        return _text(s + ": a partial prefill, nothing is sampled", s + "：预填充未完成，不采样")
    return _text(s + ": the request samples a token", s + "：该请求会采样一个 token")


def _ex_context_lens(f: Facts, i: int, arr: np.ndarray) -> Text:
    s = f"context_lens[{i}] = len(seq {f.rows[i]}) = {_v(arr, i)}"
    return _text(s + " (tokens attended to)", s + "（注意力要看的 token 数）")


_EXPLAIN = {
    "req_indices": _ex_req_indices,
    "arange": _ex_arange,
    "positions": _ex_positions,
    "token_indices": _ex_token_indices,
    "input_ids": _ex_input_ids,
    "block_table_indices": _ex_block_table_indices,
    "block_numbers": _ex_block_numbers,
    "block_offsets": _ex_block_offsets,
    "slot_mapping": _ex_slot_mapping,
    "query_start_loc": _ex_query_start_loc,
    "cu_num_tokens": _ex_cu("cu_num_tokens"),
    "cu_seqlens_q": _ex_cu("cu_seqlens_q"),
    "cu_seqlens_k": _ex_cu("cu_seqlens_k"),
    "seq_lens": _ex_seq_lens,
    "logits_indices": _ex_logits_indices,
    "discard_request_mask": _ex_discard,
    "context_lens": _ex_context_lens,
}


# ------------------------------------------------------------------ stage sentences
def _example_token(f: Facts) -> int:
    """The token a stage sentence works through: the first token of the last request."""
    return int(f.qsl[-2]) if len(f.qsl) >= 2 else 0


def _token_refs(f: Facts, i: int, name: str) -> list[tuple[str, Any]]:
    r, rid, p = _tok(f, i)
    refs: list[tuple[str, Any]] = [("token", i), ("row", r), ("request", rid)]
    if name in ("block_numbers", "slot_mapping") and "block_numbers" in f.a:
        refs.append(("block", int(f.a["block_numbers"][i])))
    elif name == "slot_mapping" and f.bs and i < len(f.a.get("slot_mapping", [])):
        refs.append(("block", int(f.a["slot_mapping"][i]) // f.bs))
    return refs


def _stage_update_states(f: Facts) -> Item:
    added = [*f.sched.get("new_req_ids", []), *f.sched.get("resumed_req_ids", [])]
    removed = list(f.sched.get("finished_req_ids", [])) + list(f.sched.get("preempted_req_ids", []))
    en = f"update_states: the batch now holds {_plural(len(f.rows), 'row')} ({', '.join(f.rows)})"
    zh = f"update_states：批次现在有 {len(f.rows)} 行（{', '.join(f.rows)}）"
    if removed:
        en += f"; removed: {_join_en(removed)}"
        zh += f"；移除：{_join_zh(removed)}"
    if added:
        en += f"; added (lowest hole first): {_join_en(added)}"
        zh += f"；加入（先填最低的空洞）：{_join_zh(added)}"
    moves = f.t.batch.get("moves", [])
    if moves:
        en += f"; {_plural(len(moves), 'condense move')}"
        zh += f"；{len(moves)} 次压缩移动"
    refs = [("request", r) for r in [*f.rows, *removed]]
    return _item("stage:update_states", _text(en + ".", zh + "。"), refs, "update_states")


def _stage_attn_metadata(f: Facts) -> Item:
    s = f.t.scalars
    en = (
        f"attn_metadata: num_reqs = {s.get('num_reqs')}, {_plural(f.T, 'scheduled token')} "
        f"(num_input_tokens = {s.get('num_input_tokens', f.T)}), max_query_len = {s.get('max_query_len')}, "
        f"max_seq_len = {s.get('max_seq_len')}"
    )
    zh = (
        f"attn_metadata：num_reqs = {s.get('num_reqs')}，调度 {f.T} 个 token"
        f"（num_input_tokens = {s.get('num_input_tokens', f.T)}），max_query_len = {s.get('max_query_len')}，"
        f"max_seq_len = {s.get('max_seq_len')}"
    )
    return _item("stage:attn_metadata", _text(en + ".", zh + "。"), [], "attn_metadata")


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
    return _item("stage:attn_mask", _text(en + ".", zh + "。"), [], "attn_mask")


def _stage_block_tables(f: Facts) -> Item:
    bt = f.a.get("block_tables")
    en = "block_tables: each sequence's block list, padded with -1 to the longest"
    zh = "block_tables：每个序列的块列表，用 -1 填充到最长的长度"
    refs: list[tuple[str, Any]] = []
    if bt is not None and bt.size and f.rows:
        row = [int(b) for b in bt[-1] if b >= 0]
        en += f"; sequence {f.rows[-1]} reads blocks {_blocks(row)}"
        zh += f"；序列 {f.rows[-1]} 读块 {_blocks(row)}"
        refs = [("request", f.rows[-1]), *(("block", b) for b in row)]
    elif bt is None:
        en += " (not passed to this prefill: no sequence has a prefix-cache hit)"
        zh += "（这次预填充没有传入：没有序列命中前缀缓存）"
    return _item("stage:block_tables", _text(en + ".", zh + "。"), refs, "block_tables")


def _stage_sentence(f: Facts, name: str, writes: list[str]) -> Item | None:
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
            i = _example_token(f)
            refs = _token_refs(f, i, arr_name)
        else:
            i = max(len(f.rows) - 1, 0)
            if arr_name in ("query_start_loc", "cu_seqlens_q", "cu_seqlens_k"):
                i = len(f.rows)
            refs = [("row", min(i, len(f.rows) - 1))] if f.rows else []
        text = explain(f.t, arr_name, i)
        if text is None:
            continue
        return _item(f"stage:{name}", _text(text["en"] + ".", text["zh"] + "。"), refs, name)
    return None


# ------------------------------------------------------------------ entry point
def narrate(
    t: StepTrace, prev: StepTrace | None = None, config: EngineConfig | None = None, last: bool = False
) -> list[Item]:
    """The step's sentences, then one per stage. `prev` (the step before) names what was freed
    and who was running; `config` adds the token budget and the reasons requests wait; `last`
    (the run ends with this step) says that the requests sampling now finish."""
    f = Facts(t)
    if f.v2:  # Model Runner V2 narrates its state slots (core/narrate_v2.py)
        from pagedviz.core.narrate_v2 import narrate_v2

        return narrate_v2(f, prev, config, last)
    items = _finishes(f, prev)
    if t.idle:
        return items + (_engine_core(f) or _idle(f))
    items += _engine_core(f)
    items += _preemptions(f, prev)
    items += _admissions(f)
    items += _chunks(f, config)
    items += _growth(f)
    items += _budget(f, config)
    items += _waiting(f, config)
    items += _moves(f)
    items += _padding(f)
    items += _spec(f)
    items += _sampling(f)
    if last:
        items += _last(f)
    items += _pool(f)
    stage_names = [s.name for s in t.stages]
    if not f.nano and "update_states" not in stage_names:
        stage_names.insert(0, "update_states")
    writes = {s.name: s.writes for s in t.stages}
    for name in stage_names:
        item = _stage_sentence(f, name, writes.get(name, []))
        if item is not None:
            items.append(item)
    return items
