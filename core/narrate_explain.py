"""`explain()`: one entry of one array, with this step's numbers substituted into its formula (what
a predict-then-reveal check shows for a wrong answer, and what the stage sentences work through)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.narrate_facts import Facts, Text, _plural, _text
from pagedviz.core.trace import StepTrace


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
    if f.v2:  # Model Runner V2's formulas read through idx_mapping (narrate_v2_explain.py, which reads ours)
        from pagedviz.core.narrate_v2_explain import V2_EXPLAIN

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
