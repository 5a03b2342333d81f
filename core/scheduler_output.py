"""What one schedule() hands the model runner: `SchedulerOutput`, pagedviz's counterpart of vLLM 0.33's
(`scheduled_new_reqs`, `scheduled_cached_reqs`, `num_scheduled_tokens`, the preempted and finished
ids), with each scheduled request's kind, progress, tokens and blocks per KV cache group
(`ScheduledRequest`), and what the trace adds: the waiting requests and why each waits, for whom
each was preempted, and the blocks a sliding window dropped. pagedviz's own scheduler
(core/scheduler.py) makes it; so do the engine `vllm` and the import, from vLLM's output
(core/vllm_output.py). `to_dict` is the trace's `scheduler` section (docs/arrays.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ScheduledRequest:
    """One request in a step: its kind, progress before the step, and its tokens and blocks."""

    req_id: str
    kind: str  # "new" | "running" | "resumed"
    num_computed_tokens: int
    num_scheduled: int
    num_prompt_tokens: int
    token_ids: np.ndarray  # all known ids (prompt + outputs)
    block_ids: list[int]  # the first KV cache group's (the only one with one group)
    new_block_ids: list[int]
    spec_token_ids: list[int] = field(default_factory=list)  # draft tokens scheduled after token_ids
    # one list per KV cache group, in vLLM's group order (with one group: [block_ids])
    group_block_ids: list[list[int]] = field(default_factory=list)
    new_group_block_ids: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.group_block_ids:
            self.group_block_ids = [self.block_ids]
        if not self.new_group_block_ids:
            self.new_group_block_ids = [self.new_block_ids]

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class SchedulerOutput:
    step: int
    # which runner the output is built for: Model Runner V2 gets resumed requests as new ones
    runner: str = "v1"
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    preempted_req_ids: list[str] = field(default_factory=list)
    finished_req_ids: list[str] = field(default_factory=list)
    waiting_req_ids: list[str] = field(default_factory=list)
    # why each waiting request waits / each preempted one was preempted (docs/arrays.md)
    waiting_causes: dict[str, dict[str, object]] = field(default_factory=dict)
    preemption_causes: dict[str, dict[str, object]] = field(default_factory=dict)
    num_groups: int = 1  # KV cache groups
    # the blocks each sliding group replaced by the null block this step (docs/arrays.md)
    window_drops: dict[str, list[dict[str, object]]] = field(default_factory=dict)

    @property
    def num_scheduled_tokens(self) -> dict[str, int]:
        return {s.req_id: s.num_scheduled for s in self.scheduled}

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(s.num_scheduled for s in self.scheduled)

    def ids_of(self, kind: str) -> list[str]:
        return [s.req_id for s in self.scheduled if s.kind == kind]

    @property
    def new_req_ids(self) -> list[str]:
        """`scheduled_new_reqs` as vLLM 0.33 sends them: for Model Runner V2 the resumed requests
        travel as new ones, after the new ones, with all their tokens (scheduler.py:1642-1653)."""
        if self.runner == "v2":
            return self.ids_of("new") + self.ids_of("resumed")
        return self.ids_of("new")

    @property
    def resumed_req_ids(self) -> list[str]:
        """`scheduled_cached_reqs.resumed_req_ids`: always empty for Model Runner V2."""
        return [] if self.runner == "v2" else self.ids_of("resumed")

    def to_dict(self) -> dict[str, object]:
        return {
            "num_scheduled_tokens": self.num_scheduled_tokens,
            "total_num_scheduled_tokens": self.total_num_scheduled_tokens,
            "new_req_ids": self.new_req_ids,
            "resumed_req_ids": self.resumed_req_ids,
            "preempted_req_ids": list(self.preempted_req_ids),
            "finished_req_ids": list(self.finished_req_ids),
            "waiting_req_ids": list(self.waiting_req_ids),
            # the requests behind one head share one cause object (read-only)
            "waiting_causes": dict(self.waiting_causes),
            "preemption_causes": dict(self.preemption_causes),
            # one group: a flat list per request (as before); several: one list per group, as
            # vLLM's tuple
            "new_block_ids": (
                {s.req_id: list(s.new_block_ids) for s in self.scheduled if s.new_block_ids}
                if self.num_groups == 1
                else {
                    s.req_id: [list(g) for g in s.new_group_block_ids]
                    for s in self.scheduled
                    if any(s.new_group_block_ids)
                }
            ),
            # every scheduled request's blocks, one list per group (vLLM's `get_block_ids`)
            "block_ids": {s.req_id: [list(g) for g in s.group_block_ids] for s in self.scheduled},
            "scheduled_spec_decode_tokens": {
                s.req_id: list(s.spec_token_ids) for s in self.scheduled if s.spec_token_ids
            },
            # only on steps where a sliding window dropped blocks (never with one full group)
            **({"window_drops": dict(self.window_drops)} if self.window_drops else {}),
        }
