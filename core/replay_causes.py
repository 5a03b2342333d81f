"""The causes of an imported recording (core/replay_scheduler.py): `waiting_causes` and
`preemption_causes` derived from the numbers the recording holds, since a recording stores what
vLLM scheduled, not why it left a request waiting (docs/arrays.md, "Why requests wait").

Each step, the head of the waiting requests (the first in `waiting_req_ids`: arrival order, as the
recording keeps no queue order) is checked in the order of vLLM 0.33's waiting loop, with:

- the budget left: `max_num_batched_tokens` less the step's recorded scheduled tokens;
- the requests running after the step: those scheduled since their last preemption and not
  finished, against the header's `max_num_seqs`;
- the tokens it needs: its known tokens (prompt plus the outputs recorded so far), capped by the
  header's `long_prefill_token_threshold` while more than one request is running or waiting;
  prefix-cache hits are not recorded, so with prefix caching on this is an upper bound;
- the free blocks: the step's recorded `num_free_blocks`, against the blocks those tokens (a chunk
  of them with chunked prefill on) need, or, with the header's `scheduler_reserve_full_isl`, the
  whole sequence, in every KV cache group (a sliding-window group at most its admission cap); the
  header's `watermark` held back while requests run.

First match: a step that preempted (`preemption`), no budget left (`token_budget`), the running
list full (`max_num_seqs`), chunking off and too little budget (`token_budget`), the blocks short
(`kv_pool`); when none
of these holds the numbers do not show why (`unknown`, with the numbers checked). The others wait
`behind` the head. Every derived cause carries `"derived": "recording"`.

A victim of preemption was preempted for the running request whose allocation failed: the last
running request in scheduling order that gained blocks this step (it preempted until it fitted),
or, when none did, the last victim itself (it preempted itself).
"""

from __future__ import annotations

from typing import Any

from pagedviz.core.kv_groups import plan_kv_cache_groups
from pagedviz.core.recording import Header, Step
from pagedviz.core.replay_groups import recorded_layers
from pagedviz.core.scheduler_output import SchedulerOutput

Cause = dict[str, Any]
DERIVED = {"derived": "recording"}


def _blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class RecordedCauses:
    """Derives each replayed step's causes; keeps which requests are running."""

    def __init__(self, header: Header) -> None:
        self.header = header
        self.running: set[str] = set()
        extra = header.model_extra or {}
        self.full_isl = bool(extra.get("scheduler_reserve_full_isl", False))
        self.watermark_blocks = int(float(extra.get("watermark", 0.0) or 0.0) * header.num_kv_blocks)
        layers = recorded_layers(header)
        self.groups = plan_kv_cache_groups(layers.layer_types, layers.sliding_window)
        # the tokens scheduled but not yet settled: one budget per batch in flight
        self.in_flight = header.max_num_batched_tokens * (2 if header.async_scheduling else 1)

    def _blocks_needed(self, tokens: int) -> int:
        """The blocks `tokens` need in every KV cache group: a full-attention group all of them; a
        sliding-window group at most its admission cap, the window less one plus the tokens in
        flight (`max_admission_blocks_per_request`: the budget per batch in flight) and one block
        for a window that starts mid-block."""
        h = self.header
        total = 0
        for g in self.groups:
            n = _blocks(tokens, h.block_size)
            if g.sliding and g.sliding_window:
                reach = min(g.sliding_window - 1 + self.in_flight, h.max_model_len)
                n = min(n, _blocks(reach, h.block_size) + 1)
            total += n
        return total

    def fill(self, s: Step, out: SchedulerOutput, tokens: dict[str, list[int]]) -> None:
        """Set `out.waiting_causes` and `out.preemption_causes` for the recorded step `s`."""
        self.running -= set(s.finished)
        self.running |= set(s.num_scheduled_tokens)
        self.running -= set(s.preempted)
        out.preemption_causes = self._preemption(s, out)
        out.waiting_causes = self._waiting(s, out, tokens)

    def _preemption(self, s: Step, out: SchedulerOutput) -> dict[str, Cause]:
        if not s.preempted:
            return {}
        grew = [r.req_id for r in out.scheduled if r.kind == "running" and r.new_block_ids]
        who = grew[-1] if grew else s.preempted[-1]
        return {v: {"cause": "kv_pool", "for": who, **DERIVED} for v in s.preempted}

    def _waiting(self, s: Step, out: SchedulerOutput, tokens: dict[str, list[int]]) -> dict[str, Cause]:
        waiting = out.waiting_req_ids
        if not waiting:
            return {}
        if s.preempted:
            c = {"cause": "preemption", "preempted": list(s.preempted), **DERIVED}
            return {r: dict(c) for r in waiting}
        head = waiting[0]
        causes = {r: {"cause": "behind", "behind": head, **DERIVED} for r in waiting[1:]}
        return {head: self._head(s, head, len(tokens.get(head, [])), len(waiting)), **causes}

    def _head(self, s: Step, rid: str, num_tokens: int, num_waiting: int) -> Cause:
        h = self.header
        left = h.max_num_batched_tokens - sum(s.num_scheduled_tokens.values())
        needed = num_tokens
        cap = h.long_prefill_token_threshold
        if 0 < cap < needed and len(self.running) + num_waiting > 1:
            needed = cap
        running = len(self.running)
        budget = {"cause": "token_budget", "tokens_needed": needed, "tokens_left": max(left, 0), **DERIVED}
        if left <= 0:
            return budget
        if running >= h.max_num_seqs:
            return {"cause": "max_num_seqs", "running": running, "max_num_seqs": h.max_num_seqs, **DERIVED}
        if not h.enable_chunked_prefill and needed > left:
            return budget
        free = s.num_free_blocks
        watermark = self.watermark_blocks if running else 0
        chunk = min(needed, left)
        blocks = self._blocks_needed(min(num_tokens, h.max_model_len) if self.full_isl else chunk)
        if blocks + watermark > free:
            cause: Cause = {"cause": "kv_pool", "blocks_needed": blocks, "blocks_free": free}
            if watermark:
                cause["watermark_blocks"] = watermark
            if self.full_isl:
                cause["full_sequence"] = True
            return {**cause, **DERIVED}
        return {
            "cause": "unknown",
            "tokens_needed": needed,
            "tokens_left": left,
            "blocks_needed": blocks,
            "blocks_free": free,
            "running": running,
            "max_num_seqs": h.max_num_seqs,
            **DERIVED,
        }
