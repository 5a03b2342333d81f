"""Which entries of a step's arrays a kernel reads, and which it never reads (stale).

Model Runner V2 keeps request state in persistent tables indexed by state slot (vLLM 0.33's
`worker/gpu/input_batch.py` and `block_table.py`): a slot's row of `block_tables` is written up to
its `num_blocks`, and past them keeps what an earlier holder left; the gather copies each batch
row's slot row into `input_block_tables`, stale tail included, and attention reads only the first
cdiv(seq_len, block_size) = num_blocks entries. The same holds for `all_token_ids` past a slot's
`total_len` and for any slot nobody holds. The main view strikes those cells out as "never read"
(static/v2tables.js); the compare ignores them by the same rule, and says which it ignored.

V1's block table zeroes a row's tail when it is written (core/input_batch.py), so it has no stale
entries; nano-vllm and Ascend pad with -1 / 0 likewise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.trace import StepTrace

# per-slot state arrays, one entry per state slot: read only for slots a request holds
SLOT_ARRAYS = ("num_computed_tokens", "prefill_len", "total_len", "num_blocks", "last_sampled_tokens")


def _held(t: StepTrace, n: int) -> np.ndarray:
    """Per state slot, whether a request holds it after this step's frees and adds."""
    held = np.zeros(n, dtype=bool)
    slots = [int(j) for j in (t.batch.get("slots") or {}).values() if 0 <= int(j) < n]
    held[slots] = True
    return held


def read_mask(t: StepTrace, name: str) -> np.ndarray | None:
    """Boolean mask of `name`'s entries a kernel reads this step; None when it reads them all."""
    xs = t.arrays
    x, nb, idx = xs.get(name), xs.get("num_blocks"), xs.get("idx_mapping")
    if x is None or nb is None or idx is None or not t.batch.get("slots"):
        return None  # not a runner with state slots
    if name == "input_block_tables" and x.ndim == 2:
        rows = min(len(t.batch.get("req_ids") or []), len(idx), x.shape[0])
        mask = np.zeros(x.shape, dtype=bool)
        own = nb[np.asarray(idx[:rows], dtype=np.int64)]
        mask[:rows] = np.arange(x.shape[1])[None, :] < own[:, None]
        return mask
    if name in ("block_tables", "all_token_ids") and x.ndim == 2:
        length = nb if name == "block_tables" else xs.get("total_len")
        if length is None or len(length) < x.shape[0]:
            return None
        held = _held(t, x.shape[0])
        return held[:, None] & (np.arange(x.shape[1])[None, :] < np.asarray(length[: x.shape[0]])[:, None])
    if name in SLOT_ARRAYS and x.ndim == 1:
        return _held(t, x.shape[0])
    return None


def stale_entries(t: StepTrace, limit: int = 32) -> list[dict[str, Any]]:
    """The kernel's gathered block table's stale entries in the batch's rows: the cells the main
    view strikes out as never read, [{array, req, row, col, value}] (at most `limit`)."""
    name = "input_block_tables"
    x, mask = t.arrays.get(name), read_mask(t, name)
    if x is None or mask is None:
        return []
    req_ids = [str(r) for r in t.batch.get("req_ids") or []]
    where = np.argwhere((x != 0) & ~mask)
    where = where[where[:, 0] < len(req_ids)][:limit]
    return [
        {"array": name, "req": req_ids[r], "row": int(r), "col": int(c), "value": int(x[r, c])}
        for r, c in where.tolist()
    ]
