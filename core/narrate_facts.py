"""`Facts`, what a step's trace says in one vocabulary for every flavour, and `SlotFacts`, what a
Model Runner V2 step says about its state slots. The words the narration writes them in are
core/narrate_common.py's."""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.trace import StepTrace


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

    def token(self, i: int) -> tuple[int, str, int]:
        """Token i's row, request id and position."""
        r = self.row_of_token(i)
        rid = self.rows[r] if 0 <= r < len(self.rows) else "?"
        if "positions" in self.a and i < len(self.a["positions"]):
            p = int(self.a["positions"][i])
        else:
            p = int(self.computed[r]) + i - int(self.qsl[r])
        return r, rid, p

    def total_tokens(self, r: int) -> int | None:
        """The request's known tokens (prompt + outputs) when the trace has them."""
        if "num_tokens" in self.a:
            return int(self.a["num_tokens"][r])
        return None

    def owners(self) -> dict[int, list[str]]:
        return {int(b): list(o) for b, o in self.t.kv_cache.get("owners", {}).items()}


class SlotFacts:
    """What a V2 step says about its state slots: the slot of each batch row, the slots after the
    step's frees and adds, the free list (next handed out first) and the events in order."""

    def __init__(self, f: Facts) -> None:
        b = f.t.batch
        self.slots: dict[str, int] = {str(k): int(v) for k, v in b.get("slots", {}).items()}
        self.free: list[int] = [int(j) for j in b.get("free_slots", [])]
        self.events: list[dict[str, Any]] = list(b.get("slot_events", []))
        idx = f.a.get("idx_mapping")
        self.idx: list[int] = [int(j) for j in idx] if idx is not None else [self.slots[r] for r in f.rows]

    def slot_of_row(self, r: int) -> int:
        return self.idx[r]

    def row_blocks(self, f: Facts, r: int) -> list[int]:
        """Row r's own blocks: its slot's row of block_tables up to num_blocks."""
        bt, nb = f.a.get("block_tables"), f.a.get("num_blocks")
        if bt is None or nb is None:
            return []
        j = self.idx[r]
        return [int(x) for x in bt[j, : int(nb[j])]]
