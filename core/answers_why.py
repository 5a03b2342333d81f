"""Why a checked entry has its value, in two degrees: a hint that points at the rule and the inputs
without giving the value (shown after a wrong answer, before the answer is revealed), and the cause
told from the step's trace with the value (shown when it is revealed).

A hint comes in two parts: the rule of the array, said once for all the checked entries (`rule`),
and each entry's own pointer (`hint`: which request, which logical block, which token), so a page
prints the rule once and a different line per entry. Neither has a placeholder: a request the trace
cannot name is not named.

The arrays update_states writes (the block table, num_computed_tokens_cpu) have no formula of their
own: their cause is what the scheduler did, told from the trace (the blocks a request got from the
free queue this step, a preemption that reset a request's computed tokens, a prefix-cache hit).
Model Runner V2's idx_mapping is told by its slot stack (batch.slot_events, batch.free_slots): the
slot a request popped and whose freed slot was on top. positions are told by what set the request's
computed tokens (a prefix hit, a preemption). The other arrays' causes are core/narrate.explain's
formulas with this entry's numbers. A preemption told from an earlier step reads that step's
`scheduler.preemption_causes` (core/trace.py) where it has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pagedviz.core.answers_groups import group_cause, is_group_table, rule_extra, table_group
from pagedviz.core.narrate_common import Text, en_zh
from pagedviz.core.narrate_explain import explain
from pagedviz.core.narrate_facts import Facts
from pagedviz.core.trace import StepTrace


def _row_req(t: StepTrace, r: int) -> str | None:
    ids = t.batch.get("req_ids", [])
    return str(ids[r]) if 0 <= r < len(ids) else None


def _token_req(t: StepTrace, i: int) -> tuple[int, str | None]:
    """Token i's batch row and request id (req_indices, else the rows' scheduled tokens in order:
    every flavour, nano-vllm's too)."""
    a = t.arrays
    if "req_indices" in a and i < a["req_indices"].size:
        r = int(a["req_indices"][i])
    else:
        r = Facts(t).row_of_token(i)
    return r, _row_req(t, r)


def _req_en(rid: str | None) -> str:
    return f"request {rid}'s" if rid is not None else "its request's"


def _req_zh(rid: str | None) -> str:
    return f"请求 {rid} 的" if rid is not None else "它所属请求的"


def _shape_cols(t: StepTrace, array: str) -> int:
    v = t.arrays[array]
    return int(v.shape[1]) if v.ndim == 2 else 1


def _lst(xs: Any) -> str:
    return ", ".join(map(str, xs))


def rule(t: StepTrace, array: str) -> Text:
    """The rule of the array, said once for all its checked entries: what to apply, not a value."""
    a = t.arrays
    if (array == "block_tables" or table_group(array) is not None) and a[array].ndim == 2:
        text = en_zh(
            "A request holds ceil(tokens / block_size) blocks; the blocks it gets this step come from "
            "the head of the free queue, in order, after the rows before it took theirs. An entry past "
            "its blocks stays 0 (the null block).",
            "请求持有 ceil(token 数 / block_size) 个块；本步新分配的块按顺序从空闲队列头部取出，"
            "排在它前面的行先取。超出它所持块数的位置保持 0（空块）。",
        )
        extra = rule_extra(t)  # several KV cache groups: the window's drops, the groups' order
        return en_zh(text["en"] + extra["en"], text["zh"] + extra["zh"]) if extra else text
    if array in ("num_computed_tokens_cpu", "num_computed_tokens"):
        return en_zh(
            "The tokens whose KV is already in the cache before this step. A preemption throws a "
            "request's KV away; a prefix-cache hit counts the shared full blocks as computed.",
            "本步之前 KV 已在缓存中的 token 数。抢占会丢弃请求的 KV；前缀缓存命中把共享的满块算作已计算。",
        )
    if array == "positions":
        if "num_computed_tokens_cpu" in a:
            f_en = (
                "positions[i] = num_computed_tokens_cpu[row] + the token's offset among its request's "
                "tokens of this step"
            )
            f_zh = "positions[i] = num_computed_tokens_cpu[行] + 该 token 在所属请求本步 token 中的偏移"
        else:
            f_en = (
                "positions[i] = the request's computed tokens + the token's offset among its tokens of "
                "this step"
            )
            f_zh = "positions[i] = 请求已计算的 token 数 + 该 token 在它本步 token 中的偏移"
        return en_zh(f_en, f_zh)
    if array == "slot_mapping":
        bt = "block_table" if "block_table" in a else "block_tables"
        return en_zh(
            f"slot_mapping[i] = {bt}[row, position // block_size] * block_size + position % block_size",
            f"slot_mapping[i] = {bt}[行, position // block_size] * block_size + position % block_size",
        )
    formula = next((st.formula for st in t.stages if array in st.writes), "")
    return en_zh(
        formula or f"read the stage that writes {array}",
        formula or f"看写入 {array} 的阶段",
    )


def hint(t: StepTrace, array: str, i: int) -> Text:
    """Entry i's own pointer, without its value: which request, which block, which token (the
    array's rule is said once, by rule())."""
    a = t.arrays
    if (array == "block_tables" or table_group(array) is not None) and a[array].ndim == 2:
        r, c = divmod(i, _shape_cols(t, array))
        rid = _slot_req(t, r) if array == "block_tables" else _row_req(t, r)
        bs = int(t.kv_cache.get("block_size", 0)) or None
        toks = f" (its tokens {c * bs}–{c * bs + bs - 1})" if bs else ""
        toks_zh = f"（它的第 {c * bs}–{c * bs + bs - 1} 个 token）" if bs else ""
        return en_zh(
            f"{array}[{r}][{c}] is {_req_en(rid)} logical block {c}{toks}",
            f"{array}[{r}][{c}] 是{_req_zh(rid)}第 {c} 个逻辑块{toks_zh}",
        )
    if array in ("num_computed_tokens_cpu", "num_computed_tokens") and a[array].ndim == 1:
        rid = _row_req(t, i) if array == "num_computed_tokens_cpu" else _slot_req(t, i)
        who, who_zh = (f"request {rid}", f"请求 {rid}") if rid is not None else ("this request", "这个请求")
        return en_zh(
            f"{array}[{i}]: was {who} admitted, resumed or preempted lately?",
            f"{array}[{i}]：{who_zh} 最近是否刚加入、恢复或被抢占？",
        )
    if array in ("slot_mapping", "positions") and i < int(t.scalars.get("total_num_scheduled_tokens", 0)):
        r, rid = _token_req(t, i)
        if array == "positions":
            row = f" (row {r})" if r >= 0 else ""
            return en_zh(
                f"positions[{i}]: token {i} is one of {_req_en(rid)} tokens of this step{row}: "
                "count its offset",
                f"positions[{i}]：第 {i} 个 token 是{_req_zh(rid)}本步 token 之一：数出它的偏移",
            )
        pos = int(a["positions"][i]) if "positions" in a and i < a["positions"].size else None
        at = f" at position {pos}" if pos is not None else ""
        at_zh = f"位置 {pos} 上的 " if pos is not None else ""
        return en_zh(
            f"slot_mapping[{i}]: token {i} is {_req_en(rid)} token{at}; "
            "find its logical block in the block table",
            f"slot_mapping[{i}]：第 {i} 个 token 是{_req_zh(rid)}{at_zh}token；在块表里找到它的逻辑块",
        )
    if array == "idx_mapping":
        return en_zh(
            f"idx_mapping[{i}]: which request does the sort put in batch row {i}, and which state slot "
            "does it hold? Did it get one this step, from the top of the free slot stack?",
            f"idx_mapping[{i}]：排序把哪个请求放在批次第 {i} 行？它占着哪个状态槽位？"
            "它是不是本步才从空闲槽位栈顶拿到的？",
        )
    n_rows = len(t.batch.get("req_ids", []))
    rid = _row_req(t, i) if a[array].ndim == 1 and a[array].size <= n_rows + 1 else None
    row = f" (row {i}: request {rid})" if rid is not None else ""
    row_zh = f"（第 {i} 行：请求 {rid}）" if rid is not None else ""
    return en_zh(
        f"{array}[{i}]{row}: this entry's numbers in the rule",
        f"{array}[{i}]{row_zh}：把这一项的数代入规则",
    )


def _slot_req(t: StepTrace, slot: int) -> str | None:
    """The request holding V2 state slot `slot` (batch.slots), if any."""
    return next((str(k) for k, v in (t.batch.get("slots") or {}).items() if int(v) == slot), None)


def cause(t: StepTrace, array: str, i: int, history: Sequence[StepTrace] = ()) -> Text | None:
    """Why entry i has its value, told from the trace, with the value; None where the trace has no
    more to say than the formula (core/narrate_explain.py)."""
    a = t.arrays
    if is_group_table(t, array):  # several KV cache groups: core/answers_groups.py
        return group_cause(t, array, i, history)
    if array == "block_table" and a["block_table"].ndim == 2:
        r, c = divmod(i, _shape_cols(t, array))
        rid = _row_req(t, r)
        if rid is None:
            return None
        b = int(a["block_table"][r, c])
        row = [int(x) for x in a["block_table"][r] if int(x) > 0]
        new = {str(k): list(v) for k, v in (t.scheduler.get("new_block_ids") or {}).items()}
        if b == 0:
            return en_zh(
                f"block_table[{r}][{c}] = 0: request {rid} holds {len(row)} blocks ([{_lst(row)}]), so "
                f"its logical block {c} "
                "is not allocated; 0 is the null block",
                f"block_table[{r}][{c}] = 0：请求 {rid} 只持有 {len(row)} 个块（[{_lst(row)}]），"
                f"它的第 {c} 个逻辑块未分配；0 是空块",
            )
        if b in new.get(rid, []):
            before = [f"{k} → [{_lst(v)}]" for k, v in new.items() if k != rid][: list(new).index(rid)]
            after_en = f", after {'; '.join(before)}" if before else ""
            after_zh = f"，排在 {'；'.join(before)} 之后" if before else ""
            return en_zh(
                f"block_table[{r}][{c}] = {b}: request {rid} got the new blocks [{_lst(new[rid])}] this "
                f"step, in order from the "
                f"head of the free queue{after_en}; its logical block {c} is block {b}",
                f"block_table[{r}][{c}] = {b}：请求 {rid} 本步按顺序从空闲队列头部"
                f"拿到新块 [{_lst(new[rid])}]{after_zh}；"
                f"它的第 {c} 个逻辑块就是块 {b}",
            )
        return en_zh(
            f"block_table[{r}][{c}] = {b}: request {rid} got block {b} in an earlier step and keeps it "
            f"until it finishes "
            "or is preempted",
            f"block_table[{r}][{c}] = {b}：请求 {rid} 在更早的一步拿到块 {b}，在完成或被抢占之前一直持有它",
        )
    if array == "num_computed_tokens_cpu" and a[array].ndim == 1:
        rid = _row_req(t, i)
        if rid is None:
            return None
        v = int(a[array][i])
        sch = t.scheduler
        if rid in map(str, sch.get("resumed_req_ids") or []):
            when_en, when_zh = _preempted(history, t.step, str(rid))
            return en_zh(
                f"num_computed_tokens_cpu[{i}] = {v}: request {rid} was preempted{when_en}; the "
                f"preemption freed its blocks and "
                f"reset its num_computed_tokens to 0, so it resumes now recomputing from {v}",
                f"num_computed_tokens_cpu[{i}] = {v}：请求 {rid} {when_zh}被抢占；"
                "抢占释放了它的块并把 num_computed_tokens 归零，"
                f"所以它现在从 {v} 开始重新计算",
            )
        if rid in map(str, sch.get("new_req_ids") or []):
            if v:
                return en_zh(
                    f"num_computed_tokens_cpu[{i}] = {v}: request {rid} is new, and its first {v} "
                    f"tokens are full blocks "
                    "already in the prefix cache",
                    f"num_computed_tokens_cpu[{i}] = {v}：请求 {rid} 是新请求，"
                    f"它的前 {v} 个 token 是前缀缓存中已有的满块",
                )
            return en_zh(
                f"num_computed_tokens_cpu[{i}] = 0: request {rid} is new; nothing of it is computed yet",
                f"num_computed_tokens_cpu[{i}] = 0：请求 {rid} 是新请求，还没有计算过任何 token",
            )
        return en_zh(
            f"num_computed_tokens_cpu[{i}] = {v}: request {rid}'s tokens computed in the steps before "
            f"this one",
            f"num_computed_tokens_cpu[{i}] = {v}：请求 {rid} 在此前各步已计算的 token 数",
        )
    if array == "idx_mapping" and a[array].ndim == 1:
        return _slot_cause(t, i)
    if array == "positions" and i < int(t.scalars.get("total_num_scheduled_tokens", 0)):
        return _positions_cause(t, i, history)
    return None


def _preempted(history: Sequence[StepTrace], step: int, rid: str) -> tuple[str, str]:
    """' in step 3, for request a (the pool had no free block for its allocation)', from the last
    step before `step` that preempted rid; its scheduler.preemption_causes (written by the engine
    where it records them) gives whom for. Empty where the history does not say."""
    for h in reversed([h for h in history if h.step < step]):
        if rid in map(str, h.scheduler.get("preempted_req_ids") or []):
            pc = (h.scheduler.get("preemption_causes") or {}).get(rid)
            if isinstance(pc, dict) and pc.get("cause") == "kv_pool" and pc.get("for") is not None:
                who = str(pc["for"])
                if who == rid:
                    return (
                        f" in step {h.step}: its own next block did not fit in the KV pool",
                        f"在第 {h.step} 步因自己的下一个块放不进 KV 块池而",
                    )
                return (
                    f" in step {h.step}, for request {who}, whose new block the KV pool could not give",
                    f"在第 {h.step} 步为请求 {who} 让路（块池给不出 {who} 的新块）而",
                )
            return f" in step {h.step}", f"在第 {h.step} 步"
    return " earlier", "之前"


def _slot_cause(t: StepTrace, row: int) -> Text | None:
    """V2: the state slot batch row `row` reads, told by the slot stack (batch.slot_events in order,
    batch.free_slots after them, next first): a request that got its slot this step popped the top
    of the stack, where a slot freed this step had just been pushed; a request that kept its slot got
    it when it arrived."""
    slots = t.batch.get("slots")
    rid = _row_req(t, row)
    if not isinstance(slots, dict) or rid is None or rid not in map(str, slots):
        return None
    slot = int({str(k): v for k, v in slots.items()}[rid])
    head = f"idx_mapping[{row}] = req_id_to_index[{rid}] = {slot}"
    events = [e for e in t.batch.get("slot_events") or [] if isinstance(e, dict)]
    got = next(
        (j for j, e in enumerate(events) if str(e.get("req_id")) == rid and e.get("event") == "added"), None
    )
    if got is None:
        return en_zh(
            f"{head}: request {rid} got slot {slot} when it arrived and keeps it until it leaves; the "
            f"sort only moves its batch row",
            f"{head}：请求 {rid} 到来时拿到槽位 {slot}，直到离开都不变；排序只移动它在批次中的行",
        )
    # the stack just before its pop: the free slots after the step, with the later events undone
    stack = [int(x) for x in t.batch.get("free_slots") or []]
    for e in reversed(events[got:]):
        s_ = int(e.get("slot", -1))
        if e.get("event") == "added":
            stack.insert(0, s_)
        elif e.get("event") == "freed" and s_ in stack:
            stack.remove(s_)
    freed = next(
        (e for e in events[:got] if e.get("event") == "freed" and int(e.get("slot", -1)) == slot), None
    )
    top = f"[{_lst(stack)}]"
    if freed is not None:
        by = str(freed.get("req_id"))
        return en_zh(
            f"{head}: {by} left this step and its slot {slot} went back on top of the free slot stack "
            f"(free_indices, top first {top}); {rid}, sent as a new request, popped the top: slot {slot}, "
            f"not the slot it had before",
            f"{head}：{by} 本步离开，它的槽位 {slot} 回到空闲槽位栈（free_indices，栈顶在前 {top}）的顶上；"
            f"{rid} 作为新请求弹出栈顶，拿到槽位 {slot}，而不是它以前的槽位",
        )
    return en_zh(
        f"{head}: request {rid} got its slot this step from the top of the free slot stack "
        f"(free_indices, top first {top}): slot {slot}",
        f"{head}：请求 {rid} 本步从空闲槽位栈（free_indices，栈顶在前 {top}）顶上拿到槽位 {slot}",
    )


def _positions_cause(t: StepTrace, i: int, history: Sequence[StepTrace]) -> Text | None:
    """positions[i] when its request's computed tokens were set by something the student must know:
    a prefix-cache hit (a new request that starts past 0) or a preemption (a resumed request that
    starts again from 0)."""
    formula = explain(t, "positions", i)
    if formula is None:
        return None
    r, rid = _token_req(t, i)
    if rid is None or r < 0:
        return None
    f = Facts(t)
    c = int(f.computed[r]) if r < len(f.computed) else 0
    sch = t.scheduler
    if rid in map(str, sch.get("new_req_ids") or []) and c > 0:
        bs = f.bs
        blocks = f" ({c // bs} full blocks of {bs})" if bs and c % bs == 0 else ""
        blocks_zh = f"（{c // bs} 个 {bs} token 的满块）" if bs and c % bs == 0 else ""
        return en_zh(
            f"{formula['en']}: request {rid} is new, and its first {c} tokens{blocks} hit the prefix "
            f"cache: their blocks were already computed, so its computed tokens start at {c}",
            f"{formula['zh']}：请求 {rid} 是新请求，它的前 {c} 个 token{blocks_zh}命中前缀缓存："
            f"这些块早已算好，所以它的已计算 token 数从 {c} 开始",
        )
    if rid in map(str, sch.get("resumed_req_ids") or []):
        when_en, when_zh = _preempted(history, t.step, str(rid))
        return en_zh(
            f"{formula['en']}: request {rid} was preempted{when_en}, which reset its computed tokens "
            f"to 0: it recomputes from position {c}",
            f"{formula['zh']}：请求 {rid} {when_zh}被抢占，已计算 token 数归零：它从位置 {c} 重新计算",
        )
    return None


def why(t: StepTrace, array: str, i: int, history: Sequence[StepTrace] = ()) -> Text | None:
    """The cause of entry i where the trace tells one, else its formula with the numbers."""
    return cause(t, array, i, history) or explain(t, array, i)
