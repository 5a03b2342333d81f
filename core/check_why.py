"""Why a checked entry has its value, in two degrees: a hint that points at the rule and the inputs
without giving the value (shown after a wrong answer, before the answer is revealed), and the cause
told from the step's trace with the value (shown when it is revealed).

The arrays update_states writes (the block table, num_computed_tokens_cpu) have no formula of their
own: their cause is what the scheduler did, told from the trace (the blocks a request got from the
free queue this step, a preemption that reset a request's computed tokens, a prefix-cache hit).
The other arrays' causes are core/narrate.explain's formulas with this entry's numbers.
"""

from __future__ import annotations

from typing import Any

from pagedviz.core.narrate_explain import explain
from pagedviz.core.narrate_facts import Text, _text
from pagedviz.core.trace import StepTrace


def _row_req(t: StepTrace, r: int) -> str:
    ids = t.batch.get("req_ids", [])
    return str(ids[r]) if 0 <= r < len(ids) else "?"


def _token_req(t: StepTrace, i: int) -> tuple[int, str]:
    """Token i's batch row and request id, from query_start_loc (or req_indices)."""
    a = t.arrays
    if "req_indices" in a and i < a["req_indices"].size:
        r = int(a["req_indices"][i])
    elif "query_start_loc" in a:
        qsl = a["query_start_loc"]
        r = next((k for k in range(len(qsl) - 1) if int(qsl[k]) <= i < int(qsl[k + 1])), -1)
    else:
        r = -1
    return r, _row_req(t, r)


def _shape_cols(t: StepTrace, array: str) -> int:
    v = t.arrays[array]
    return int(v.shape[1]) if v.ndim == 2 else 1


def _lst(xs: Any) -> str:
    return ", ".join(map(str, xs))


def hint(t: StepTrace, array: str, i: int) -> Text:
    """Where to look and which rule to apply for entry i, without its value."""
    a = t.arrays
    if array == "block_table" and a["block_table"].ndim == 2:
        r, c = divmod(i, _shape_cols(t, array))
        rid = _row_req(t, r)
        return _text(
            f"block_table[{r}][{c}] is request {rid}'s logical block {c}. A request holds ceil(tokens / "
            f"block_size) "
            "blocks; the blocks it gets this step come from the head of the free queue, in order, after "
            "the rows "
            "before it took theirs. An entry past its blocks stays 0 (the null block).",
            f"block_table[{r}][{c}] 是请求 {rid} 的第 {c} 个逻辑块。"
            "请求持有 ceil(token 数 / block_size) 个块；"
            "本步新分配的块按顺序从空闲队列头部取出，排在它前面的行先取。"
            "超出它所持块数的位置保持 0（空块）。",
        )
    if array in ("num_computed_tokens_cpu", "num_computed_tokens") and a[array].ndim == 1:
        rid = _row_req(t, i)
        return _text(
            f"{array}[{i}]: the tokens of request {rid} whose KV is already in the cache before this step. "
            "Was it admitted, resumed or preempted lately? A preemption throws its KV away.",
            f"{array}[{i}]：请求 {rid} 在本步之前已在缓存中有 KV 的 token 数。"
            "它最近是否刚加入、恢复或被抢占？抢占会丢弃它的 KV。",
        )
    if array in ("slot_mapping", "positions") and i < int(t.scalars.get("total_num_scheduled_tokens", 0)):
        r, rid = _token_req(t, i)
        if array == "positions":
            return _text(
                f"positions[{i}] = num_computed_tokens_cpu[{r}] + the token's offset among request "
                f"{rid}'s tokens of this step",
                f"positions[{i}] = num_computed_tokens_cpu[{r}] + 该 token 在请求 {rid} 本步 token 中的偏移",
            )
        pos = int(a["positions"][i]) if "positions" in a and i < a["positions"].size else None
        at = f" at position {pos}" if pos is not None else ""
        at_zh = f"位置 {pos} 的" if pos is not None else ""
        bt = "block_table" if "block_table" in a else "block_tables"
        return _text(
            f"slot_mapping[{i}] = {bt}[row, position // block_size] * block_size + position % "
            f"block_size: token {i} is "
            f"request {rid}'s{at}; find its logical block in the block table",
            f"slot_mapping[{i}] = {bt}[行, position // block_size] * block_size + position % "
            f"block_size：第 {i} 个 token 是"
            f"请求 {rid} {at_zh}token；在块表里找到它的逻辑块",
        )
    formula = next((s.formula for s in t.stages if array in s.writes), "")
    where = f"{array}[{i}]"
    return _text(
        f"{where}: {formula}" if formula else f"{where}: read the stage that writes {array}",
        f"{where}：{formula}" if formula else f"{where}：看写入 {array} 的阶段",
    )


def cause(t: StepTrace, array: str, i: int) -> Text | None:
    """Why entry i has its value, told from the trace, with the value; None where the trace has no
    more to say than the formula (core/narrate_explain.py)."""
    a = t.arrays
    if array == "block_table" and a["block_table"].ndim == 2:
        r, c = divmod(i, _shape_cols(t, array))
        rid = _row_req(t, r)
        b = int(a["block_table"][r, c])
        row = [int(x) for x in a["block_table"][r] if int(x) > 0]
        new = {str(k): list(v) for k, v in (t.scheduler.get("new_block_ids") or {}).items()}
        if b == 0:
            return _text(
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
            return _text(
                f"block_table[{r}][{c}] = {b}: request {rid} got the new blocks [{_lst(new[rid])}] this "
                f"step, in order from the "
                f"head of the free queue{after_en}; its logical block {c} is block {b}",
                f"block_table[{r}][{c}] = {b}：请求 {rid} 本步按顺序从空闲队列头部"
                f"拿到新块 [{_lst(new[rid])}]{after_zh}；"
                f"它的第 {c} 个逻辑块就是块 {b}",
            )
        return _text(
            f"block_table[{r}][{c}] = {b}: request {rid} got block {b} in an earlier step and keeps it "
            f"until it finishes "
            "or is preempted",
            f"block_table[{r}][{c}] = {b}：请求 {rid} 在更早的一步拿到块 {b}，在完成或被抢占之前一直持有它",
        )
    if array == "num_computed_tokens_cpu" and a[array].ndim == 1:
        rid = _row_req(t, i)
        v = int(a[array][i])
        sch = t.scheduler
        if rid in map(str, sch.get("resumed_req_ids") or []):
            return _text(
                f"num_computed_tokens_cpu[{i}] = {v}: request {rid} was preempted earlier; the "
                f"preemption freed its blocks and "
                f"reset its num_computed_tokens to 0, so it resumes now recomputing from {v}",
                f"num_computed_tokens_cpu[{i}] = {v}：请求 {rid} 之前被抢占；"
                "抢占释放了它的块并把 num_computed_tokens 归零，"
                f"所以它现在从 {v} 开始重新计算",
            )
        if rid in map(str, sch.get("new_req_ids") or []):
            if v:
                return _text(
                    f"num_computed_tokens_cpu[{i}] = {v}: request {rid} is new, and its first {v} "
                    f"tokens are full blocks "
                    "already in the prefix cache",
                    f"num_computed_tokens_cpu[{i}] = {v}：请求 {rid} 是新请求，"
                    f"它的前 {v} 个 token 是前缀缓存中已有的满块",
                )
            return _text(
                f"num_computed_tokens_cpu[{i}] = 0: request {rid} is new; nothing of it is computed yet",
                f"num_computed_tokens_cpu[{i}] = 0：请求 {rid} 是新请求，还没有计算过任何 token",
            )
        return _text(
            f"num_computed_tokens_cpu[{i}] = {v}: request {rid}'s tokens computed in the steps before "
            f"this one",
            f"num_computed_tokens_cpu[{i}] = {v}：请求 {rid} 在此前各步已计算的 token 数",
        )
    return None


def why(t: StepTrace, array: str, i: int) -> Text | None:
    """The cause of entry i where the trace tells one, else its formula with the numbers."""
    return cause(t, array, i) or explain(t, array, i)
