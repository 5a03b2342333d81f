"""Model Runner V1's (and nanovllm's and ascend's) entry explanations: one entry of a V1 array with
this step's numbers worked through its formula (req_indices, positions, token_indices, the block
table's indices, slot_mapping, query_start_loc, seq_lens, logits_indices...). narrate_explain.explain()
uses them; `padding_entry` also explains V2's padded entries (narrate_v2_explain.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.narrate_common import Text, en_zh, plural
from pagedviz.core.narrate_facts import Facts


def _v(arr: np.ndarray, i: int) -> Any:
    return arr[i].item()


def padding_entry(f: Facts, name: str, i: int) -> Text | None:
    if i < f.T:
        return None
    n_in = int(f.t.scalars.get("num_input_tokens", f.T))
    return en_zh(
        f"{name}[{i}] = -1: a padding entry past the {f.T} scheduled tokens (num_input_tokens = {n_in}, "
        "a CUDA-graph size); nothing is written there",
        f"{name}[{i}] = -1：超出 {f.T} 个调度 token 的填充位置"
        f"（num_input_tokens = {n_in}，CUDA graph 尺寸）；不写入任何内容",
    )


def _ex_req_indices(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, rid, _ = f.token(i)
    lo, hi = int(f.qsl[r]), int(f.qsl[r + 1]) - 1
    return en_zh(
        f"req_indices[{i}] = {r}: token {i} lies in row {r} (request {rid}), whose tokens are {lo}..{hi}",
        f"req_indices[{i}] = {r}：第 {i} 个 token 属于第 {r} 行（请求 {rid}），该行的 token 是 {lo}..{hi}",
    )


def _ex_arange(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, rid, _ = f.token(i)
    start = int(f.qsl[r])
    s = f"arange[{i}] = {i} - (cu_num_tokens[{r}] - num_scheduled_tokens[{r}]) = {i} - {start} = {_v(arr, i)}"
    return en_zh(
        s + f": token {i} is request {rid}'s token number {_v(arr, i)} in this step",
        s + f"：第 {i} 个 token 是请求 {rid} 这一步的第 {_v(arr, i)} 个",
    )


def _ex_positions(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, rid, p = f.token(i)
    if f.nano:
        if "context_lens" in f.a:
            s = f"positions[{i}] = len(seq {rid}) - 1 = {int(f.a['context_lens'][r])} - 1 = {p}"
            return en_zh(s + " (decode: the last token)", s + "（decode：最后一个 token）")
        off = i - int(f.qsl[r])
        s = f"positions[{i}] = num_cached_tokens + {off} = {int(f.computed[r])} + {off} = {p}"
        return en_zh(s + f" (request {rid})", s + f"（请求 {rid}）")
    c = int(f.computed[r])
    s = f"positions[{i}] = num_computed_tokens_cpu[{r}] + arange[{i}] = {c} + {p - c} = {p}"
    return en_zh(s + f" (request {rid})", s + f"（请求 {rid}）")


def _ex_token_indices(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, _, p = f.token(i)
    M = int(f.t.array_entries["token_ids_cpu"].full_shape[1]) if "token_ids_cpu" in f.a else 0
    s = f"token_indices[{i}] = positions[{i}] + req_indices[{i}] * M = {p} + {r} * {M} = {_v(arr, i)}"
    return en_zh(s + f" (row {r}, column {p} of token_ids_cpu)", s + f"（token_ids_cpu 第 {r} 行第 {p} 列）")


def _ex_input_ids(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, rid, p = f.token(i)
    if "token_indices" in f.a:
        x = int(f.a["token_indices"][i])
        s = f"input_ids[{i}] = token_ids_cpu.flatten()[{x}] = token_ids_cpu[{r}, {p}] = {_v(arr, i)}"
    else:
        s = f"input_ids[{i}] = seq {rid}.token_ids[{p}] = {_v(arr, i)}"
    return en_zh(s + f" (request {rid}'s token at position {p})", s + f"（请求 {rid} 位置 {p} 的 token）")


def _ex_block_table_indices(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, _, p = f.token(i)
    K = int(f.t.array_entries["block_table"].full_shape[1]) if "block_table" in f.a else 0
    s = (
        f"block_table_indices[{i}] = req_indices[{i}] * K + positions[{i}] // block_size = "
        f"{r} * {K} + {p} // {f.bs} = {_v(arr, i)}"
    )
    return en_zh(s + f" (block_table[{r}, {p // f.bs}])", s + f"（即 block_table[{r}, {p // f.bs}]）")


def _ex_block_numbers(f: Facts, i: int, arr: np.ndarray) -> Text:
    r, rid, p = f.token(i)
    x = int(f.a["block_table_indices"][i]) if "block_table_indices" in f.a else r
    s = f"block_numbers[{i}] = block_table.flatten()[{x}] = block_table[{r}, {p // f.bs}] = {_v(arr, i)}"
    return en_zh(
        s + f": position {p} of request {rid} lies in its block number {p // f.bs}",
        s + f"：请求 {rid} 的位置 {p} 落在它的第 {p // f.bs} 个块",
    )


def _ex_block_offsets(f: Facts, i: int, arr: np.ndarray) -> Text:
    _, _, p = f.token(i)
    s = f"block_offsets[{i}] = positions[{i}] % block_size = {p} % {f.bs} = {_v(arr, i)}"
    return en_zh(s + " (the slot inside the block)", s + "（块内的槽位）")


def _ex_slot_mapping(f: Facts, i: int, arr: np.ndarray) -> Text:
    pad = padding_entry(f, "slot_mapping", i)
    if pad is not None:
        return pad
    r, rid, p = f.token(i)
    o = p % f.bs
    b = int(f.a["block_numbers"][i]) if "block_numbers" in f.a else (_v(arr, i) - o) // f.bs
    s = f"slot_mapping[{i}] = block {b} * {f.bs} + {o} = {_v(arr, i)}"
    return en_zh(
        s + f": request {rid}'s position {p} is written to slot {o} of physical block {b}",
        s + f"：请求 {rid} 位置 {p} 的 KV 写入物理块 {b} 的第 {o} 个槽位",
    )


def _ex_query_start_loc(f: Facts, i: int, arr: np.ndarray) -> Text:
    if i == 0:
        return en_zh(
            "query_start_loc[0] = 0: the first request starts at token 0",
            "query_start_loc[0] = 0：第一个请求从第 0 个 token 开始",
        )
    s = f"query_start_loc[{i}] = cu_num_tokens[{i - 1}] = {_v(arr, i)}"
    return en_zh(
        s + f": rows 0..{i - 1} schedule {plural(_v(arr, i), 'token')} together",
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
        return en_zh(s + f" (cumulative {src})", s + f"（{src} 的累加）")

    return fn


def _ex_seq_lens(f: Facts, i: int, arr: np.ndarray) -> Text:
    c, n = int(f.computed[i]), int(f.qsl[i + 1] - f.qsl[i])
    s = f"seq_lens[{i}] = num_computed_tokens_cpu[{i}] + num_scheduled_tokens[{i}] = {c} + {n} = {_v(arr, i)}"
    return en_zh(s + " (tokens attended to)", s + "（注意力要看的 token 数）")


def explain_logits_indices(f: Facts, i: int, arr: np.ndarray) -> Text:
    q = int(f.qsl[i + 1])
    s = f"logits_indices[{i}] = query_start_loc[{i + 1}] - 1 = {q} - 1 = {_v(arr, i)}"
    return en_zh(
        s + f" (request {f.rows[i]}'s last scheduled token)", s + f"（请求 {f.rows[i]} 最后一个调度的 token）"
    )


def _ex_discard(f: Facts, i: int, arr: np.ndarray) -> Text:
    total = f.total_tokens(i)
    s = (
        f"discard_request_mask[{i}] = seq_lens[{i}] < num_tokens[{i}] = "
        f"{int(f.seq_lens[i])} < {total} = {bool(_v(arr, i))}"
    )
    if _v(arr, i):
        return en_zh(s + ": a partial prefill, nothing is sampled", s + "：预填充未完成，不采样")
    return en_zh(s + ": the request samples a token", s + "：该请求会采样一个 token")


def _ex_context_lens(f: Facts, i: int, arr: np.ndarray) -> Text:
    s = f"context_lens[{i}] = len(seq {f.rows[i]}) = {_v(arr, i)}"
    return en_zh(s + " (tokens attended to)", s + "（注意力要看的 token 数）")


V1_EXPLAIN = {
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
    "logits_indices": explain_logits_indices,
    "discard_request_mask": _ex_discard,
    "context_lens": _ex_context_lens,
}
