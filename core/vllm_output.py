"""vLLM 0.33's scheduler output as pagedviz's `SchedulerOutput`: the one adapter for the engine
`vllm` (core/vllm_engine/live.py, vLLM's `SchedulerOutput` objects as `schedule()` returns them)
and the import (core/replay_scheduler.py, the recorder's JSON lines: core/recording.py's `Step`,
which holds the same fields). No vLLM needed: vLLM's objects are read by their attributes.

Both sources become one list of `Scheduled` (`from_vllm`, `from_recorded`), which `OutputAdapter`
turns into pagedviz's scheduled requests in vLLM's order (`num_scheduled_tokens`). What differs
between the two stays with its side (`RequestSide`): where a request's tokens and its blocks per
KV cache group come from (vLLM's requests and `KVCacheManager.get_block_ids`, or the tokens and
blocks the replay keeps from the lines before).

A request's kind: one in `scheduled_new_reqs` is new, or resumed when it was scheduled before (Model
Runner V2's scheduler sends resumed requests as new ones, with all their tokens); one in
`scheduled_cached_reqs` is resumed when it is in `resumed_req_ids`, else running.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from pagedviz.core.scheduler_output import ScheduledRequest, SchedulerOutput


@dataclass(slots=True)
class Scheduled:
    """One scheduled request as vLLM's output carries it."""

    req_id: str
    num_scheduled: int
    num_computed_tokens: int
    is_new: bool  # in scheduled_new_reqs (else in scheduled_cached_reqs)
    resumed: bool  # a cached request in resumed_req_ids
    # the blocks this schedule() added, one list per KV cache group (vLLM's tuple); a new request's
    # are all its blocks. None: no new blocks
    new_block_ids: Any
    spec_token_ids: list[int] = field(default_factory=list)  # the drafts scheduled after its tokens
    # per group, how many of its first blocks a sliding window has dropped (recorded only)
    null_head: list[int] | None = None
    prompt_token_ids: Any = None  # a recorded new request's prompt (ids, or their count redacted)


@dataclass
class StepView:
    """One vLLM scheduler output: its scheduled requests in order, the preempted and the finished."""

    scheduled: Iterable[Scheduled]  # in vLLM's order (num_scheduled_tokens), read once
    preempted: list[str]
    finished: list[str]


def from_vllm(out: Any) -> StepView:
    """vLLM's own `SchedulerOutput` (`scheduled_new_reqs`, the columns of `scheduled_cached_reqs`)."""
    new = {n.req_id: n for n in out.scheduled_new_reqs}
    cached = out.scheduled_cached_reqs
    computed = dict(zip(cached.req_ids, cached.num_computed_tokens))
    added = dict(zip(cached.req_ids, cached.new_block_ids))
    resumed = set(cached.resumed_req_ids)
    spec = out.scheduled_spec_decode_tokens
    scheduled = []
    for rid, num in out.num_scheduled_tokens.items():
        drafts = list(spec.get(rid, ()))
        if rid in new:
            n = new[rid]
            scheduled.append(
                Scheduled(rid, int(num), int(n.num_computed_tokens), True, False, n.block_ids, drafts)
            )
        else:
            s = Scheduled(rid, int(num), int(computed[rid]), False, rid in resumed, added.get(rid), drafts)
            scheduled.append(s)
    return StepView(scheduled, sorted(out.preempted_req_ids or ()), sorted(out.finished_req_ids))


def from_recorded(step: Any, error: type[Exception] = ValueError) -> StepView:
    """A recorded line (core/recording.py's `Step`); `error`, raised (as the adapter reaches it) for
    a request scheduled but neither new nor cached. A redacted line's drafts are counts: no draft
    ids."""
    new = {n.id: n for n in step.new}
    cached = {c.id: c for c in step.cached}

    def scheduled() -> Iterator[Scheduled]:
        for rid, num in step.num_scheduled_tokens.items():
            spec = step.spec_tokens.get(rid)
            drafts = list(spec) if isinstance(spec, list) else []
            if rid in new:
                n = new[rid]
                yield Scheduled(
                    rid,
                    num,
                    n.num_computed_tokens,
                    True,
                    False,
                    n.block_ids,
                    drafts,
                    None,
                    n.prompt_token_ids,
                )
            elif rid in cached:
                c = cached[rid]
                yield Scheduled(
                    rid, num, c.num_computed_tokens, False, c.resumed, c.new_block_ids, drafts, c.null_head
                )
            else:
                raise error(f"step {step.step}: {rid!r} is scheduled but neither new nor cached")

    return StepView(scheduled(), list(step.preempted), list(step.finished))


class RequestSide(Protocol):
    """What the adapter asks of the side that holds the requests."""

    def blocks_of(self, s: Scheduled, kind: str) -> tuple[list[list[int]], list[list[int]]]:
        """The request's blocks and the blocks this step added, one list per group."""
        ...

    def tokens_of(self, s: Scheduled) -> tuple[np.ndarray, int]:
        """All the request's known token ids (prompt and outputs) and its prompt's length."""
        ...

    # (optional) fresh_lists: True where blocks_of's lists are made for this output alone and
    # never written afterwards, so that the adapter need not copy them


class OutputAdapter:
    """vLLM's scheduler outputs, in order, as pagedviz's: it keeps which requests it has seen
    scheduled (a new one seen before is a resumed one)."""

    def __init__(self, runner: str, num_groups: int) -> None:
        self.runner = runner
        self.num_groups = num_groups
        self.seen: set[str] = set()

    def forget(self, req_id: str) -> None:
        """A finished request (the replay keeps nothing of it)."""
        self.seen.discard(req_id)

    def kind(self, s: Scheduled) -> str:
        if s.is_new:
            return "resumed" if s.req_id in self.seen else "new"
        return "resumed" if s.resumed else "running"

    def convert(self, view: StepView, step_no: int, side: RequestSide) -> SchedulerOutput:
        """pagedviz's `SchedulerOutput` of one step: the scheduled requests, preempted and finished
        (the waiting ones and the causes are each caller's)."""
        out = SchedulerOutput(step=step_no, runner=self.runner, num_groups=self.num_groups)
        # the side's lists copied unless they are the output's own already (RequestSide)
        fresh = getattr(side, "fresh_lists", False)
        for s in view.scheduled:
            kind = self.kind(s)
            blocks, added = side.blocks_of(s, kind)
            tokens, num_prompt = side.tokens_of(s)
            if not fresh:
                blocks, added = [list(g) for g in blocks], [list(g) for g in added]
            out.scheduled.append(
                ScheduledRequest(
                    s.req_id,
                    kind,
                    s.num_computed_tokens,
                    s.num_scheduled,
                    num_prompt,
                    tokens,
                    blocks[0],
                    added[0],
                    s.spec_token_ids,
                    group_block_ids=blocks,
                    new_group_block_ids=added,
                )
            )
            self.seen.add(s.req_id)
        out.preempted_req_ids = view.preempted
        out.finished_req_ids = view.finished
        return out


def per_group(recorded: Any, num_groups: int) -> list[list[int]]:
    """Block ids one list per group (None or none: an empty list each)."""
    if not recorded:
        return [[] for _ in range(num_groups)]
    return [list(g) for g in recorded]
