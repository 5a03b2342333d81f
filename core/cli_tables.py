"""`pagedviz run` and `pagedviz import` print a step as tables: the request level (a column per
batch row), the token level (a column per scheduled token), the scalars and the system level
(token_ids_cpu, the block tables and the KV pool drawn as the documents draw them), split to the
terminal's width."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from pagedviz.core.cli_common import print_tables
from pagedviz.core.runners.stages import base_name
from pagedviz.core.tokenizer import decode_ids
from pagedviz.core.trace import StepTrace

REQUEST_ARRAYS = (
    "num_computed_tokens_cpu",
    "num_scheduled_tokens",
    "num_tokens",
    "cu_num_tokens",
    "seq_lens",
    "context_lens",
    "logits_indices",
    "last_indices",
    "discard_request_mask",
)
TOKEN_ARRAYS = (
    "req_indices",
    "arange",
    "positions",
    "token_indices",
    "input_ids",
    "block_table_indices",
    "block_numbers",
    "block_offsets",
    "slot_mapping",
)


def _table(first: str, headers: list[str], rows: list[list[str]]) -> Table:
    table = Table(box=box.MARKDOWN, show_edge=True, pad_edge=True)
    table.add_column(first, justify="left", no_wrap=True)
    for h in headers:
        table.add_column(h, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(*r)
    return table


def column_tables(
    console: Console, first: str, headers: list[str], rows: list[tuple[str, list[Any]]]
) -> list[Table]:
    """A table with one column per token (or request), split into tables whose columns fit the
    console's width; each row is (array name, its values)."""
    cells = [[str(v) for v in values] for _, values in rows]
    names = [name for name, _ in rows]
    n = len(headers)
    name_w = max([len(first), *map(len, names)])
    col_w = max([1, *map(len, headers), *(len(c) for r in cells for c in r)])
    # rich's markdown box: "| " + cell + " " per column, then "|"
    per = max(1, (console.width - 1 - (name_w + 3)) // (col_w + 3))
    out = []
    for lo in range(0, max(n, 1), per):
        hi = min(n, lo + per)
        out.append(_table(first, headers[lo:hi], [[nm, *r[lo:hi]] for nm, r in zip(names, cells)]))
    return out


def draw_grid(tab: np.ndarray, rows: int, filled: np.ndarray | None = None, width: int = 1 << 20) -> str:
    """A table the way the documents draw it: `| 1  | 2  | 0  |`; '?' where nothing is filled.
    Columns past `width` characters continue below, under a `columns lo..hi` line."""
    w = max(2, len(str(int(tab.max()))) if tab.size else 1)
    ncols = tab.shape[1] if tab.ndim == 2 else 0
    per = max(1, (width - 2) // (w + 3))
    lines = []
    for lo in range(0, max(ncols, 1), per):
        hi = min(ncols, lo + per)
        if ncols > per:
            lines.append(f"columns {lo}..{hi - 1}:")
        for r in range(rows):
            cells = []
            for c in range(lo, hi):
                txt = "?" if filled is not None and c >= filled[r] else str(int(tab[r, c]))
                cells.append(txt.ljust(w))
            lines.append("| " + " | ".join(cells) + " |")
    if rows < tab.shape[0]:
        lines.append(f"... ({tab.shape[0] - rows} more rows, all empty)")
    return "\n".join(lines)


def _short(text: str, wide: bool, n: int = 12) -> str:
    return text if wide or len(text) <= n else text[: n - 1] + "…"


def render_step(t: StepTrace, console: Console, wide: bool = False) -> None:
    """Print one step's tables: request level, token level, scalars, system level."""
    a = t.arrays
    sch = t.scheduler
    say = console.print
    say(f"=== step {t.step}" + (" (idle)" if t.idle else "") + " ===")
    say(
        f"scheduled: {sch.get('num_scheduled_tokens', {})}  total: {sch.get('total_num_scheduled_tokens', 0)}"
    )
    for key in ("new_req_ids", "resumed_req_ids", "preempted_req_ids", "finished_req_ids", "waiting_req_ids"):
        if sch.get(key):
            say(f"{key}: {sch[key]}")
    if sch.get("new_block_ids"):
        say(f"new_block_ids: {sch['new_block_ids']}")
    groups = t.kv_cache.get("kv_cache_groups") or []
    if len(groups) > 1:  # several KV cache groups: each request's blocks per group, null block 0
        say("kv_cache_groups: " + "; ".join(_group_label(g, i) for i, g in enumerate(groups)))
        say(f"block_ids (one list per group): {sch.get('block_ids', {})}")
    if sch.get("window_drops"):
        say(f"window_drops: {sch['window_drops']}")
    for key in ("waiting_causes", "preemption_causes"):  # why each waits / was preempted
        if sch.get(key):
            say(f"{key}: {sch[key]}")
    for m in t.batch.get("moves", []):
        say(f"condense: request {m['req_id']} moved from row {m['from']} to row {m['to']}")
    if t.idle:
        return
    req_ids = t.batch["req_ids"]
    say("\n-- request level (one column per batch row) --")
    rows: list[tuple[str, list[Any]]] = [("req_id", [_short(r, wide) for r in req_ids])]
    rows += [(n, a[n].tolist()) for n in REQUEST_ARRAYS if n in a]
    print_tables(console, column_tables(console, "row", [str(i) for i in range(len(req_ids))], rows))
    for n in ("query_start_loc", "cu_seqlens_q", "cu_seqlens_k"):
        if n in a:
            say(f"{n}: {a[n].tolist()}")
    say("\n-- token level (one column per scheduled token) --")
    # each KV cache group's copy (suffix _g{g}) right after group 0's
    names = [n for base in TOKEN_ARRAYS for n in _with_group_copies(base, a)]
    if names:
        T = len(a[names[0]])
        token_rows: list[tuple[str, list[Any]]] = [(n, a[n].tolist()) for n in names]
        print_tables(console, column_tables(console, "token", [str(i) for i in range(T)], token_rows))
    scheduled = int(t.scalars.get("total_num_scheduled_tokens", 0))
    if "slot_mapping" in a and len(a["slot_mapping"]) > scheduled:
        # CUDA-graph padding: the padded entries are -1 (written nowhere)
        say(f"slot_mapping padded to num_input_tokens={len(a['slot_mapping'])}: {a['slot_mapping'].tolist()}")
    for n in ("query_start_loc", "seq_lens"):
        entry = t.array_entries.get(n)
        if entry is not None and entry.buffer is not None and len(entry.buffer) > (entry.valid or 0):
            say(f"{n} buffer (first {entry.valid} real, then padding): {entry.buffer.tolist()}")
    # everything else the step computed (speculative decoding, async scheduling, M-RoPE, what-if)
    listed = {*REQUEST_ARRAYS, *TOKEN_ARRAYS, "query_start_loc", "cu_seqlens_q", "cu_seqlens_k"}
    listed |= {"token_ids_cpu", "block_table", "block_tables", "attn_mask"}
    for n, arr in a.items():
        if n not in listed and base_name(n) not in listed:
            say(f"{n}: {arr.tolist()}")
    say("\n-- scalars --")
    say("  ".join(f"{k}={v}" for k, v in t.scalars.items()))
    say("\n-- system level --")
    num_rows = len(req_ids)
    grid = functools.partial(draw_grid, width=console.width)
    out = console.out  # pre-drawn lines: never re-wrapped
    if "token_ids_cpu" in a:
        filled = np.array([len(tokens) for tokens in _row_tokens(t, a)])
        say("token_ids_cpu (max_num_reqs x max_model_len):")
        out(
            grid(
                a["token_ids_cpu"],
                min(num_rows + 1, a["token_ids_cpu"].shape[0]),
                np.concatenate([filled, np.zeros(a["token_ids_cpu"].shape[0], dtype=int)]),
            ),
        )
        for i, rid in enumerate(req_ids):
            say(f"  row {i} (request {rid}): {decode_ids(a['token_ids_cpu'][i, : filled[i]])!r}")
    bt_name = "block_table" if "block_table" in a else "block_tables"
    for i, name in enumerate(_with_group_copies(bt_name, a)):  # one table per KV cache group
        where = f" (group {_group_label(groups[i], i)})" if len(groups) > 1 and i < len(groups) else ""
        say(f"{name}{where}:")
        out(grid(a[name], min(num_rows + 1, a[name].shape[0])))
    if "attn_mask" in a:
        say(f"attn_mask {a['attn_mask'].shape[0]} x {a['attn_mask'].shape[1]} (1 = masked):")
        out(grid(a["attn_mask"], a["attn_mask"].shape[0]))
    kv = t.kv_cache
    say(
        f"free_block_queue (head first): {kv['free_block_queue'][:24]}"
        + (" ..." if len(kv["free_block_queue"]) > 24 else "")
    )
    if "num_usable_blocks" in kv:
        say(f"KV pool: {len(kv['free_block_queue'])} of {kv['num_usable_blocks']} usable blocks free")
    if t.forward:
        say(f"forward: {t.forward}")
    say(f"sampled: {t.sampled_token_ids}")


def _with_group_copies(name: str, a: dict[str, np.ndarray]) -> list[str]:
    """`name` and its KV cache groups' copies (name_g1, name_g2, ...) that the step holds."""
    out = [name] if name in a else []
    g = 1
    while f"{name}_g{g}" in a:
        out.append(f"{name}_g{g}")
        g += 1
    return out


def _group_label(group: dict[str, Any], i: int) -> str:
    """`1 sliding_attention layers [1] window 8`: a KV cache group as the trace gives it."""
    window = f" window {group['sliding_window']}" if group.get("sliding_window") else ""
    return f"{i} {group['kind']} layers {group['layers']}{window}"


def _row_tokens(t: StepTrace, a: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Known tokens of each active row: num_tokens when recorded, else up to seq_lens."""
    lens = a["num_tokens"] if "num_tokens" in a else a["seq_lens"]
    return [a["token_ids_cpu"][i, : int(lens[i])] for i in range(len(t.batch["req_ids"]))]
