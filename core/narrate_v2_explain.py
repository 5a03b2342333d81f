"""Model Runner V2's entry explanations: one entry of a V2 array with this step's numbers worked
through V2's formulas (positions and seq_lens from the slot's num_computed_tokens, input ids from
the slot's state, slot_mapping read through idx_mapping). narrate_explain.explain() uses them for
a V2 trace."""

from __future__ import annotations

import numpy as np

from pagedviz.core.narrate_common import Text, en_zh
from pagedviz.core.narrate_facts import Facts, SlotFacts
from pagedviz.core.narrate_v1_explain import padding_entry


def _ex_positions(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, rid, p = f.token(i)
    s = SlotFacts(f)
    j = s.slot_of_row(r)
    off = i - int(f.qsl[r])
    c = p - off
    t = (
        f"positions[{i}] = num_computed_tokens[idx_mapping[{r}]] + {off} = num_computed_tokens[{j}] + {off} "
        f"= {c} + {off} = {p}"
    )
    return en_zh(t + f" (request {rid}, state slot {j})", t + f"（请求 {rid}，状态槽 {j}）")


def _ex_seq_lens(f: Facts, i: int, arr: np.ndarray) -> Text:
    j = SlotFacts(f).slot_of_row(i)
    c, n = int(f.computed[i]), int(f.qsl[i + 1] - f.qsl[i])
    t = (
        f"seq_lens[{i}] = num_computed_tokens[idx_mapping[{i}]] + num_scheduled_tokens[{i}] = "
        f"num_computed_tokens[{j}] + {n} = {c} + {n} = {int(arr[i])}"
    )
    return en_zh(t + " (tokens attended to)", t + "（注意力要看的 token 数）")


def _ex_query_start_loc(f: Facts, i: int, arr: np.ndarray) -> Text:
    if i == 0:
        return en_zh(
            "query_start_loc[0] = 0: row 0 starts at token 0",
            "query_start_loc[0] = 0：第 0 行从第 0 个 token 开始",
        )
    if i > len(f.rows):
        t = f"query_start_loc[{i}] = T = {int(arr[i])}"
        return en_zh(
            t + ": past the real rows (padding), an empty query", t + "：超出真实行（补齐），query 为空"
        )
    n = int(arr[i] - arr[i - 1])
    t = (
        f"query_start_loc[{i}] = query_start_loc[{i - 1}] + num_scheduled_tokens[{i - 1}] = "
        f"{int(arr[i - 1])} + {n} = {int(arr[i])}"
    )
    return en_zh(t + " (in the sorted order)", t + "（按排序后的顺序）")


def explain_input_ids(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, rid, p = f.token(i)
    j = SlotFacts(f).slot_of_row(r)
    prefill = f.a.get("prefill_len")
    if prefill is not None and p >= int(prefill[j]):
        t = f"input_ids[{i}] = last_sampled_tokens[idx_mapping[{r}]] = last_sampled_tokens[{j}]"
        t += f" = {int(arr[i])}"
        return en_zh(
            t + f" (request {rid} decodes: the token its slot sampled last step, kept on the device)",
            t + f"（请求 {rid} 在解码：其状态槽上一步采样出的 token，保存在设备上）",
        )
    t = f"input_ids[{i}] = all_token_ids[idx_mapping[{r}], {p}] = all_token_ids[{j}, {p}] = {int(arr[i])}"
    return en_zh(t + f" (request {rid}'s token at position {p})", t + f"（请求 {rid} 位置 {p} 的 token）")


def _ex_slot_mapping(f: Facts, i: int, arr: np.ndarray) -> Text:
    pad = padding_entry(f, "slot_mapping", i)
    if pad is not None:
        return pad
    r, rid, p = f.token(i)
    j = SlotFacts(f).slot_of_row(r)
    q, o = p // f.bs, p % f.bs
    b = (int(arr[i]) - o) // f.bs
    t = (
        f"slot_mapping[{i}] = block_tables[idx_mapping[{r}], {p} // {f.bs}] * {f.bs} + {p} % {f.bs} = "
        f"block_tables[{j}, {q}] * {f.bs} + {o} = block {b} * {f.bs} + {o} = {int(arr[i])}"
    )
    return en_zh(
        t + f": request {rid}'s position {p} is written to slot {o} of physical block {b}",
        t + f"：请求 {rid} 位置 {p} 的 KV 写入物理块 {b} 的第 {o} 个槽位",
    )


def explain_idx_mapping(f: Facts, i: int, arr: np.ndarray) -> Text:
    rid = f.rows[i] if i < len(f.rows) else "?"
    t = f"idx_mapping[{i}] = req_id_to_index[{rid}] = {int(arr[i])}"
    return en_zh(
        t + f": batch row {i} reads state slot {int(arr[i])}", t + f"：批次第 {i} 行读取状态槽 {int(arr[i])}"
    )


V2_EXPLAIN = {
    "positions": _ex_positions,
    "seq_lens": _ex_seq_lens,
    "query_start_loc": _ex_query_start_loc,
    "input_ids": explain_input_ids,
    "slot_mapping": _ex_slot_mapping,
    "idx_mapping": explain_idx_mapping,
}
