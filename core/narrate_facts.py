"""The narration's vocabulary: the sentence items the page renders (`Item`, `Text`), the helpers
that write lists of requests and blocks in en and zh, and `Facts`, what a step's trace says in one
vocabulary for every flavour."""

from __future__ import annotations

from typing import Any

import numpy as np

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
