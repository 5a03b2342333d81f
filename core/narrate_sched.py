"""Step-level sentences about the scheduler: finishes and frees, the engine core's batch queue,
preemptions, admissions and prefix-cache hits, chunked prefills, block growth, the token budget and
why requests wait (narrate.py puts them in order)."""

from __future__ import annotations

from typing import Any

from pagedviz.core.narrate_causes import preempted_for
from pagedviz.core.narrate_common import Item, block_ranges, en_zh, join_en, join_zh, plural, sentence
from pagedviz.core.narrate_facts import Facts
from pagedviz.core.narrate_groups import blocks_by_group, flat, new_blocks_per_group
from pagedviz.core.scenario_parts import EngineConfig
from pagedviz.core.trace import StepTrace


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


def _word(xs: list[Any], word: str) -> str:
    return word if len(xs) == 1 else word + "s"


def finish_items(f: Facts, prev: StepTrace | None) -> list[Item]:
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
            en += f": its {_word(freed, 'block')} {block_ranges(freed)} went back to the free queue then"
            zh += f"：它的块 {block_ranges(freed)} 当时已回到空闲队列"
        if kept:
            holders = sorted({o for b in kept for o in prev_owners[b]} - finished)
            en += f"; {block_ranges(kept)} stay allocated, still used by {join_en(holders)}"
            en += " (ref count dropped by one)"
            zh += f"；块 {block_ranges(kept)} 仍被 {join_zh(holders)} 使用，保持分配（引用计数减一）"
        if row is not None and not f.nano and not f.v2:
            en += f", and its row {row} of the persistent batch is removed now"
            zh += f"，它在持久批次中的第 {row} 行现在被移除"
            refs.append(("row", row))
        items.append(sentence(f"finish:{rid}", en_zh(en + ".", zh + "。"), refs))
    return items


def engine_core_items(f: Facts) -> list[Item]:
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
            f"holds {_word(queue, 'step')} {join_en(queue)}, whose sampled tokens reach the scheduler "
            "only once the queue is full or nothing is left to schedule."
        )
        zh = (
            f"异步调度：update_from_output 暂不执行；引擎核心的批次队列（容量 {size}）中有第 "
            f"{join_zh(queue)} 步，其采样结果要等队列满了或没有可调度的请求时才交给调度器。"
        )
        return [sentence("engine_core", en_zh(en, zh), refs)]
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
            f"; {join_en(fin)} {'reaches' if one else 'reach'} max_tokens there and "
            f"{'finishes' if one else 'finish'}, and {'its' if one else 'their'} blocks go back to the "
            f"free queue, a step after step {k} sampled the last token (the runner hears of it at the "
            "next schedule())"
        )
        zh += (
            f"；{join_zh(fin)} 在其中达到 max_tokens 而完成，块回到空闲队列，比采样出最后一个 token 的"
            f"第 {k} 步晚一步（runner 在下一次 schedule() 时得知）"
        )
    return [sentence("engine_core", en_zh(en + ".", zh + "。"), refs)]


def preemption_items(f: Facts, prev: StepTrace | None) -> list[Item]:
    victims = [str(r) for r in f.sched.get("preempted_req_ids", [])]
    if not victims:
        return []
    items = []
    running = _running_order(prev)
    for k, rid in enumerate(victims):
        blocks = _blocks_of(prev, rid)
        refs: list[tuple[str, Any]] = [("request", rid), *(("block", b) for b in blocks)]
        why = preempted_for(f, rid)  # from scheduler.preemption_causes, or no reason at all
        if why is None:
            en, zh = "", ""
        elif k == 0:
            en, zh = "The KV pool ran out: " + why[0] + ". ", "KV 块池不够用了：" + why[1] + "。"
        else:
            en, zh = "The pool is still short: " + why[0] + ". ", "块池仍然不够：" + why[1] + "。"
        last = f" (running queue: {', '.join(running)})" if running else ""
        lastz = f"（运行队列：{', '.join(running)}）" if running else ""
        c = (f.sched.get("preemption_causes") or {}).get(rid) or {}
        if c.get("policy") == "priority":
            words = _priority_victim(rid, c, blocks, last, lastz)
            items.append(sentence(f"preempt:{rid}", en_zh(en + words[0], zh + words[1]), refs))
            continue
        en += (
            f"The scheduler preempts request {rid}, the last request in the running queue{last}: "
            "vLLM takes the most recently admitted one first, so the oldest requests keep making progress. "
            f"Its blocks {block_ranges(blocks) if blocks else '(none)'} go back to the free queue, its "
            "num_computed_tokens is reset to 0 and it goes to the front of the waiting queue; it will "
            "recompute its tokens from scratch when it resumes."
        )
        zh += (
            f"调度器抢占请求 {rid}，它是运行队列中的最后一个{lastz}：vLLM 先抢占最晚加入的请求，"
            f"让最早的请求继续前进。它的块 {block_ranges(blocks) if blocks else '（无）'} 回到空闲队列，"
            "num_computed_tokens 归零，它被放到等待队列最前面；恢复时要从头重新计算所有 token。"
        )
        items.append(sentence(f"preempt:{rid}", en_zh(en, zh), refs))
    causes = (f.sched.get("waiting_causes") or {}).values()
    if f.nano or not any(c.get("cause") == "preemption" for c in causes):
        return items  # nano-vllm preempts in a decode step, which admits no prefill anyway
    items.append(
        sentence(
            "preempt:no_admission",
            en_zh(
                "In a step with a preemption no waiting request is admitted.",
                "发生抢占的这一步，不再接纳任何等待中的请求。",
            ),
        )
    )
    return items


def _priority_victim(
    rid: str, c: dict[str, Any], blocks: list[int], last: str, lastz: str
) -> tuple[str, str]:
    """The victim of priority preemption (scheduling_policy priority), from its cause object."""
    p, step = c.get("priority"), c.get("arrival_step")
    en = (
        f"The scheduler preempts request {rid}, the lowest-priority running request{last}: under "
        "scheduling_policy priority vLLM takes the running request with the largest (priority, "
        f"arrival), not the last one, and {rid} has priority {p} (lower is served first) and arrived "
        f"at step {step}. Its blocks {block_ranges(blocks) if blocks else '(none)'} go back to the free "
        "queue and its num_computed_tokens is "
        "reset to 0; it goes back into the waiting queue at its place in (priority, arrival) order, "
        "not to the front, and will recompute its tokens from scratch when it resumes."
    )
    zh = (
        f"调度器抢占请求 {rid}，它是运行中优先级最低的请求{lastz}：在 scheduling_policy priority 下，"
        "vLLM 抢占 (priority, arrival) 最大的运行请求，而不是最后一个；"
        f"{rid} 的 priority 为 {p}（数值越小越先服务），在第 {step} 步到达。"
        f"它的块 {block_ranges(blocks) if blocks else '（无）'} 回到空闲队列，num_computed_tokens 归零；"
        "它按 (priority, arrival) 顺序回到等待队列中自己的位置，而不是最前面；"
        "恢复时要从头重新计算所有 token。"
    )
    return en, zh


def admission_items(f: Facts) -> list[Item]:
    items = []
    new_blocks = new_blocks_per_group(f)  # one list per KV cache group
    for kind in ("new", "resumed"):
        for rid in f.sched.get(f"{kind}_req_ids", []):
            r = f.row(rid)
            if r is None:
                continue
            lists = new_blocks.get(rid, [[]])
            blocks = flat(lists)
            total = f.total_tokens(r)
            n = f.nst.get(rid, 0)
            refs: list[tuple[str, Any]] = [("request", rid), ("row", r), *(("block", b) for b in blocks)]
            size = total if total is not None else int(f.seq_lens[r])
            if kind == "new":
                en = f"Request {rid} is admitted: {plural(size, 'token')} of prompt"
                zh = f"请求 {rid} 被接纳：提示共 {size} 个 token"
            else:
                en = f"Request {rid} resumes after its preemption: {plural(size, 'token')} to recompute"
                zh = f"请求 {rid} 在被抢占后恢复：需要重新计算 {size} 个 token"
            en += f"; it schedules {n} now, takes row {r} of the batch"
            zh += f"；这一步调度 {n} 个，占用批次第 {r} 行"
            if blocks:
                shown = blocks_by_group(f, lists)  # several KV cache groups: each group's blocks
                en += f" and gets {_word(blocks, 'block')} {shown[0] if shown else block_ranges(blocks)}"
                en += " (prefix-cache hits included)" if int(f.computed[r]) > 0 else " from the free queue"
                zh += f"，拿到块 {shown[1] if shown else block_ranges(blocks)}"
                zh += "（含前缀缓存命中的块）" if int(f.computed[r]) > 0 else "（来自空闲队列）"
            items.append(sentence(f"{kind}:{rid}", en_zh(en + ".", zh + "。"), refs))
            hit = int(f.computed[r]) if r < len(f.computed) else 0
            if hit > 0 and f.bs:
                items.append(_prefix_hit(f, rid, r, hit, lists[0]))
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
        f"Prefix-cache hit: request {rid}'s first {plural(nblk, 'full block')} ({hit} tokens) hash the same "
        f"as cached blocks, so it reuses blocks {block_ranges(hits)} instead of computing them"
    )
    zh = (
        f"前缀缓存命中：请求 {rid} 的前 {nblk} 个满块（{hit} 个 token）哈希与缓存中的块相同，"
        f"于是直接复用块 {block_ranges(hits)}，不再计算"
    )
    if others:
        en += f" (shared with {join_en(others)}"
        zh += f"（与 {join_zh(others)} 共享"
        if counts:
            en += f", ref count {'/'.join(map(str, counts))}"
            zh += f"，引用计数 {'/'.join(map(str, counts))}"
        en += ")"
        zh += "）"
    en += f"; num_computed_tokens starts at {hit} and only the remaining {f.nst.get(rid, 0)} tokens"
    en += " are prefilled."
    zh += f"；num_computed_tokens 从 {hit} 开始，只预填充剩下的 {f.nst.get(rid, 0)} 个 token。"
    return sentence(f"prefix_hit:{rid}", en_zh(en, zh), refs)


def chunk_items(f: Facts, config: EngineConfig | None) -> list[Item]:
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
        items.append(sentence(f"chunk:{rid}", en_zh(en, zh), [("request", rid), ("row", r)]))
    return items


def growth_items(f: Facts) -> list[Item]:
    """Running requests whose next tokens open a new block."""
    kinds = set(f.sched.get("new_req_ids", [])) | set(f.sched.get("resumed_req_ids", []))
    grown = {rid: lists for rid, lists in new_blocks_per_group(f).items() if rid not in kinds and flat(lists)}
    if not grown:
        return []
    parts_en, parts_zh = [], []
    for rid, lists in grown.items():
        shown = blocks_by_group(f, lists)  # several KV cache groups: each group's blocks
        parts_en.append(f"{shown[0] if shown else block_ranges(flat(lists))} for {rid}")
        parts_zh.append(f"{rid} 得到 {shown[1] if shown else block_ranges(flat(lists))}")
    en = (
        "New blocks for running requests whose next tokens cross into a block they do not have yet: "
        + "; ".join(parts_en)
    )
    zh = "运行中的请求下一个 token 进入了还没有的块，于是分到新块：" + "；".join(parts_zh)
    refs: list[tuple[str, Any]] = []
    for rid, lists in grown.items():
        refs += [("request", rid), *(("block", b) for b in flat(lists))]
    return [sentence("grow", en_zh(en + ".", zh + "。"), refs)]


def budget_items(f: Facts, config: EngineConfig | None) -> list[Item]:
    kinds = set(f.sched.get("new_req_ids", [])) | set(f.sched.get("resumed_req_ids", []))
    running = sum(n for rid, n in f.nst.items() if rid not in kinds)
    admitted = f.T - running
    en = f"This step schedules {plural(f.T, 'token')} for {plural(len(f.nst), 'request')}"
    zh = f"这一步为 {len(f.nst)} 个请求调度了 {f.T} 个 token"
    en += f" ({running} for running requests, {admitted} for new or resumed ones)"
    zh += f"（运行中的请求 {running} 个，新加入或恢复的请求 {admitted} 个）"
    if config is not None:
        left = config.max_num_batched_tokens - f.T
        en += f" out of a budget of {config.max_num_batched_tokens} (max_num_batched_tokens): {left} left"
        zh += f"，预算 {config.max_num_batched_tokens}（max_num_batched_tokens）剩下 {left}"
    refs = [("request", rid) for rid in f.nst]
    return [sentence("budget", en_zh(en + ".", zh + "。"), refs)]
