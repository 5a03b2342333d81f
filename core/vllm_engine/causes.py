"""Why each request waits, and for whom each was preempted, as vLLM 0.33.0's own `Scheduler`
decides it: the causes oracle. Given vLLM's Scheduler (or AsyncScheduler, either model runner's
build), it watches each `schedule()` and derives that step's `waiting_causes` and
`preemption_causes` in the trace's format (the causes contract), from vLLM's code alone: what
vLLM's methods were called with and answered, and what copies of the scheduler do when one limit is
lifted. No rule of pagedviz's is consulted.

What is watched during the real `schedule()` (instance attributes set for the call, removed after):
- `KVCacheManager.allocate_slots`: each call's request and token count, and its answer; on a None,
  the blocks vLLM's coordinator said the allocation needs (`get_num_blocks_to_allocate`, the last
  call, which is the check that failed) and the block pool's free count (`get_num_free_blocks`).
- `Scheduler._preempt_request`: each victim, preempted for the request whose `allocate_slots` had
  just returned None (the running loop preempts until that request fits or is itself preempted).
- The waiting queue's `peek_request` / `pop_request`: which requests the waiting loop looked at,
  took, or skipped (`skip_request` pops a request and puts it back at the front after the loop).

What follows from them (vLLM 0.33 scheduler.py, `schedule()`'s waiting loop):
- A step that preempted runs no waiting loop (`if not preempted_reqs`): every waiting request is
  `preemption`, with the victims in preemption order.
- A request the loop popped and put back (`skip_request`) with stale output still in flight
  (`num_stale_output_tokens and not drop_stale_output`: async scheduling, a request preempted with
  a step in flight) is `output_in_flight`; the loop goes on to the next one. No other skip rule of
  the loop applies to the scenarios pagedviz runs (structured output, LoRA, KV connectors, encoder
  inputs, streaming input: none); one would be `unknown` (below). With the engine core's batch
  queue of 2 the stale output is consumed before the next `schedule()`, so in practice the loop
  never skips; a stale request the loop never reached is `behind` (or the head), as vLLM never
  checked it.
- The head: the first waiting request after the step that the loop did not skip; the requests
  after it are `behind` it.
- The head's cause: `kv_pool` if `allocate_slots` returned None for it. Else counterfactuals, each
  on a deep copy of the scheduler taken just before the real `schedule()` (sched_copy.py) and
  scheduled with vLLM's own method, with one limit lifted:
  1. `max_num_running_reqs` and `max_num_active_reqs` (max_num_seqs) unbounded: if the head gets
     further than in the real step, the cause is `max_num_seqs`;
  2. else the token budget unbounded, the scheduler's and the input budget both
     (`max_num_scheduled_tokens`, and the copy's own `scheduler_config.max_num_batched_tokens`,
     which `schedule()` reads as `input_budget`): further means `token_budget`. The encoder budget
     is never consulted for a text-only model, so it is left as it is;
  3. else both unbounded: further means both limits held it, and the cause is the one the loop
     checks first: the budget (`while token_budget > 0`) if none was left, else max_num_seqs (the
     next check; the budget's other checks come after it).
  "Further" ranks what the loop did with the head: not looked at < looked at (peeked) <
  `allocate_slots` called for it < admitted. Lifting a limit changes nothing before the check it
  lifts, so a copy that gets further shows that check stopped it. One case can blur it: with the
  budget unbounded, a request before the head that the real step had cut to the budget takes more
  tokens and may not fit the pool, stopping the copy's loop before the head. It only arises when
  the budget ran out before the head (nothing is cut otherwise), and then the loop's own first
  check is the budget: with no copy getting further and no budget left, the cause is
  `token_budget`, read off vLLM's loop condition with vLLM's numbers. Nothing else is inferred;
  a head no copy explains is `unknown`, with the step's numbers (`tokens_left`, `blocks_free`,
  `running`, `max_num_seqs`), and `StepCauses.problem` says why (the live engine puts it among the
  step's differences from vLLM); vLLM's `schedule()` itself is never disturbed.

The numbers each cause carries (the contract's keys):
- `token_budget`: `tokens_left`, the budget left when the loop stopped (min of the scheduler's
  budget and the input budget less the drafting slots, from the step's scheduled tokens; 0 when
  the running requests used it all); `tokens_needed`, the token count the copy with the budget
  lifted passed to `allocate_slots` for the head (after its prefix hit and the long-prefill cap,
  padded to 1 + num_speculative_tokens where vLLM pads it: then also `padded: true`, read off the
  same call, which asked for more tokens than the request has left to compute). With no budget
  left (the loop never reached the head), or where no copy reached the allocation, its uncomputed
  tokens after the prefix hit vLLM's `_get_local_prefix_cache_hit` finds on the step's real state
  (a copy taken just after `schedule()`: a copy with the budget lifted may have let a request
  before it take more tokens and cache blocks the head would hit), capped by the step's
  long-prefill threshold.
- `kv_pool`: `blocks_needed` (the coordinator's count of the check that failed, without the
  watermark), `blocks_free`; `watermark_blocks` when `allocate_slots` added the watermark (a
  waiting or preempted request while some request runs, its own condition on the call's
  `has_scheduled_reqs` and the request's status); `full_sequence: true` when the refusal came from
  the full-sequence check (`scheduler_reserve_full_isl`: the first of its two counts).
- `max_num_seqs`: `running` (running requests, plus paused streaming sessions, as the check
  counts them) and `max_num_seqs` (`max_num_active_reqs`).
- `preemption`: `preempted`, the victims in order. `behind`: `behind`, the head.
  `output_in_flight`: `tokens_in_flight`, the stale output tokens still to arrive.
- `preemption_causes`: `{"cause": "kv_pool", "for": R}` per victim, with the numbers of R's
  allocation that failed just before that victim was preempted (`blocks_needed`, `blocks_free`);
  under the priority policy also the victim's `policy`, `priority` and `arrival_step`.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from pagedviz.core.vllm_engine import env as vllm_env

vllm_env.prepare()  # before vLLM: Triton usable, V1 pinned by default (env.py)
from vllm.v1.request import RequestStatus  # noqa: E402

from pagedviz.core.vllm_engine.sched_copy import copy_scheduler  # noqa: E402

UNBOUNDED = 1 << 40

# how far the waiting loop got with a request, in one schedule()
NOT_REACHED, PEEKED, ALLOCATING, ADMITTED = range(4)


# the statuses allocate_slots applies the watermark to
WAITING = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


class UndeterminedCauseError(RuntimeError):
    """vLLM's scheduler left a request waiting for a reason the oracle cannot name."""


@dataclasses.dataclass
class StepCauses:
    """One `schedule()`'s causes, in the trace's format; `how` says, per waiting request, what in
    vLLM's run showed it."""

    waiting: dict[str, dict[str, Any]]
    preemption: dict[str, dict[str, Any]]
    head: str | None = None
    how: dict[str, str] = dataclasses.field(default_factory=dict)
    problem: str | None = None  # why a cause could not be named (that request's cause: unknown)


class _Watch:
    """Watches one `schedule()` of `scheduler` (module docstring): set up on entry, removed on exit."""

    def __init__(self, scheduler: Any) -> None:
        self.s = scheduler
        self.peeked: list[str] = []
        self.popped: list[str] = []
        self.allocs: dict[str, list[dict[str, Any]]] = {}
        self.preempted: list[tuple[str, str | None, dict[str, Any]]] = []
        # under the priority policy, each victim's (priority, arrival step), as the trace carries it
        self.victims: dict[str, dict[str, Any]] = {}
        self.last_failed: str | None = None
        self.last_refusal: dict[str, Any] = {}
        self._set: list[tuple[Any, str]] = []

    def _patch(self, obj: Any, name: str, fn: Any) -> None:
        assert name not in vars(obj), f"{name} is already watched"
        setattr(obj, name, fn)
        self._set.append((obj, name))

    def __enter__(self) -> _Watch:
        s, manager = self.s, self.s.kv_cache_manager
        coordinator, pool = manager.coordinator, manager.block_pool
        allocate, count = manager.allocate_slots, coordinator.get_num_blocks_to_allocate
        preempt = s._preempt_request
        queue = s.waiting
        peek, pop = queue.peek_request, queue.pop_request

        def allocate_slots(request: Any, num_new_tokens: int, *args: Any, **kwargs: Any) -> Any:
            needs: list[int] = []

            def get_num_blocks_to_allocate(*a: Any, **k: Any) -> int:
                needs.append(count(*a, **k))
                return needs[-1]

            coordinator.get_num_blocks_to_allocate = get_num_blocks_to_allocate
            try:
                result = allocate(request, num_new_tokens, *args, **kwargs)
            finally:
                del coordinator.get_num_blocks_to_allocate
            hit = kwargs.get("num_new_computed_tokens", 0) + kwargs.get("num_external_computed_tokens", 0)
            uncomputed = request.num_tokens - request.num_computed_tokens - hit
            rec: dict[str, Any] = {
                "tokens": int(num_new_tokens),
                "ok": result is not None,
                "padded": num_new_tokens > uncomputed,  # placeholder drafts past its known tokens
            }
            if result is None:
                # allocate_slots adds the watermark for a waiting or preempted request while
                # some request runs; a refusal after one count is the full-sequence check's
                applied = kwargs.get("has_scheduled_reqs", True) and request.status in WAITING
                rec["refusal"] = {
                    "blocks_needed": int(needs[-1]),
                    "blocks_free": int(pool.get_num_free_blocks()),
                    "watermark_blocks": int(manager.watermark_blocks) if applied else 0,
                    "full_sequence": bool(kwargs.get("full_sequence_must_fit")) and len(needs) == 1,
                }
                self.last_failed, self.last_refusal = request.request_id, rec["refusal"]
            self.allocs.setdefault(request.request_id, []).append(rec)
            return result

        def _preempt_request(request: Any, *args: Any, **kwargs: Any) -> Any:
            self.preempted.append((request.request_id, self.last_failed, self.last_refusal))
            if s.policy.value == "priority":
                self.victims[request.request_id] = {
                    "policy": "priority",
                    "priority": int(request.priority),
                    "arrival_step": int(request.arrival_time),  # the step (arrivals.py)
                }
            return preempt(request, *args, **kwargs)

        def peek_request() -> Any:
            request = peek()
            self.peeked.append(request.request_id)
            return request

        def pop_request() -> Any:
            request = pop()
            self.popped.append(request.request_id)
            return request

        self._patch(manager, "allocate_slots", allocate_slots)
        self._patch(s, "_preempt_request", _preempt_request)
        self._patch(queue, "peek_request", peek_request)
        self._patch(queue, "pop_request", pop_request)
        return self

    def __exit__(self, *exc: Any) -> None:
        for obj, name in reversed(self._set):
            delattr(obj, name)
        self._set.clear()

    def progress(self, rid: str, out: Any) -> int:
        if rid in out.num_scheduled_tokens:
            return ADMITTED
        if rid in self.allocs:
            return ALLOCATING
        return PEEKED if rid in self.peeked else NOT_REACHED


def _pool_numbers(refusal: dict[str, Any]) -> dict[str, Any]:
    """A refused allocation's numbers as the trace carries them (watermark and full-sequence
    only where they applied)."""
    out = {"blocks_needed": refusal["blocks_needed"], "blocks_free": refusal["blocks_free"]}
    if refusal["watermark_blocks"]:
        out["watermark_blocks"] = refusal["watermark_blocks"]
    if refusal["full_sequence"]:
        out["full_sequence"] = True
    return out


class CausesOracle:
    """Watches every `schedule()` of `scheduler` (a `schedule` set on the instance); after each,
    `last` holds that step's causes. `close()` gives the scheduler its own method back."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.last: StepCauses | None = None
        self._schedule = type(scheduler).schedule.__get__(scheduler)
        scheduler.schedule = self._watched  # the closure below is not copied by sched_copy

    def close(self) -> None:
        self.scheduler.__dict__.pop("schedule", None)

    def _watched(self, *args: Any, **kwargs: Any) -> Any:
        s = self.scheduler
        before = copy_scheduler(s) if (s.waiting or s.kv_holding_waiting) else None
        with _Watch(s) as watch:
            out = self._schedule(*args, **kwargs)
        self.last = None  # no stale answer if the derivation raises
        self.last = self._derive(before, watch, out, args, kwargs)
        return out

    # ------------------------------------------------------------------ derivation
    def _derive(self, before: Any, w: _Watch, out: Any, args: Any, kwargs: Any) -> StepCauses:
        s = self.scheduler
        preemption = {
            v: {"cause": "kv_pool", "for": f, **_pool_numbers(r), **w.victims.get(v, {})}
            for v, f, r in w.preempted
        }
        waiting = [r.request_id for r in s.waiting]
        if w.preempted:
            victims = [v for v, _, _ in w.preempted]
            stopped: dict[str, dict[str, Any]] = {
                r: {"cause": "preemption", "preempted": victims} for r in waiting
            }
            return StepCauses(stopped, preemption, how={r: "_preempt_request" for r in waiting})
        skipped = {r for r in w.popped if r not in out.num_scheduled_tokens}
        head = next((r for r in waiting if r not in skipped), None)
        causes: dict[str, dict[str, Any]] = {}
        how: dict[str, str] = {}
        problem = None
        for rid in waiting:
            try:
                if rid in skipped:
                    causes[rid], how[rid] = self._skipped(before, rid), "skip_request"
                elif rid == head:
                    causes[rid], how[rid] = self._head(before, w, out, rid, args, kwargs)
                else:
                    causes[rid], how[rid] = {"cause": "behind", "behind": head}, "queue order"
            except UndeterminedCauseError as e:
                causes[rid], how[rid], problem = self._unknown(out), "undetermined", str(e)
        return StepCauses(causes, preemption, head, how, problem)

    def _unknown(self, out: Any) -> dict[str, Any]:
        """`unknown`, with the step's numbers: what the loop had left when it stopped."""
        s = self.scheduler
        return {
            "cause": "unknown",
            "tokens_left": self._tokens_left(out),
            "blocks_free": int(s.kv_cache_manager.block_pool.get_num_free_blocks()),
            "running": len(s.running),
            "max_num_seqs": s.max_num_active_reqs,
        }

    def _skipped(self, before: Any, rid: str) -> dict[str, Any]:
        req = before.requests[rid] if before is not None else None
        if req is None or not req.num_stale_output_tokens or req.drop_stale_output:
            raise UndeterminedCauseError(f"vLLM's waiting loop skipped {rid} for a reason not modelled")
        return {"cause": "output_in_flight", "tokens_in_flight": int(req.num_stale_output_tokens)}

    def _tokens_left(self, out: Any) -> int:
        s = self.scheduler
        spec = s.vllm_config.speculative_config
        draft_slots = spec.max_num_new_slots_for_drafting if spec is not None else 0
        n = out.num_scheduled_tokens
        token_budget = s.max_num_scheduled_tokens - out.total_num_scheduled_tokens
        input_budget = s.scheduler_config.max_num_batched_tokens - sum(k + draft_slots for k in n.values())
        return max(0, min(token_budget, input_budget - draft_slots))

    def _head(
        self, before: Any, w: _Watch, out: Any, rid: str, args: Any, kwargs: Any
    ) -> tuple[dict[str, Any], str]:
        s = self.scheduler
        allocs = w.allocs.get(rid)
        if allocs and not allocs[-1]["ok"]:
            cause = {"cause": "kv_pool", **_pool_numbers(allocs[-1]["refusal"])}
            return cause, "allocate_slots returned None"
        if before is None:
            raise UndeterminedCauseError(f"{rid} waits, and no copy was taken before the step")
        real = w.progress(rid, out)
        left = self._tokens_left(out)
        seqs = {
            "running": len(s.running) + s.num_waiting_for_streaming_input,
            "max_num_seqs": s.max_num_active_reqs,
        }
        got = self._counterfactual(before, rid, args, kwargs, seqs=True)
        if got[0] > real:
            return {"cause": "max_num_seqs", **seqs}, "copy with max_num_seqs unbounded"
        got = self._counterfactual(before, rid, args, kwargs, budget=True)
        if got[0] > real:
            return self._budget(before, rid, got[1], left), "copy with the token budget unbounded"
        got = self._counterfactual(before, rid, args, kwargs, seqs=True, budget=True)
        if got[0] > real:
            if left == 0:
                how = "copy with both unbounded; no budget left (the loop's first check)"
                return self._budget(before, rid, got[1], 0), how
            return {"cause": "max_num_seqs", **seqs}, "copy with both unbounded; max_num_seqs checked first"
        if left == 0 and real == NOT_REACHED:
            return self._budget(before, rid, None, 0), "the loop's condition: no budget left"
        raise UndeterminedCauseError(f"no counterfactual admits {rid} (it got to stage {real})")

    def _budget(self, before: Any, rid: str, alloc: dict[str, Any] | None, left: int) -> dict[str, Any]:
        """`token_budget` with the tokens the copy asked `allocate_slots` for (`padded` when they
        are 1 + num_speculative_tokens for a request with fewer known tokens to compute). With no
        budget left the loop never reached the head, and a copy with the budget lifted may have
        let a request before it take more (and cache more blocks it would hit): then the tokens
        are counted on the step's real state, as the loop would have found it."""
        if alloc is None or left == 0:
            return {"cause": "token_budget", "tokens_needed": self._wanted(before, rid), "tokens_left": left}
        cause = {"cause": "token_budget", "tokens_needed": alloc["tokens"], "tokens_left": left}
        if alloc["padded"]:
            cause["padded"] = True
        return cause

    def _counterfactual(
        self, before: Any, rid: str, args: Any, kwargs: Any, seqs: bool = False, budget: bool = False
    ) -> tuple[int, dict[str, Any] | None]:
        """Schedule a fresh copy of `before` with the limits lifted: how far `rid` got, and its
        first allocate_slots call (None: none was made)."""
        c = copy_scheduler(before)
        if seqs:
            c.max_num_running_reqs = c.max_num_active_reqs = UNBOUNDED
        if budget:
            c.max_num_scheduled_tokens = UNBOUNDED
            c.scheduler_config = copy.copy(c.scheduler_config)
            object.__setattr__(c.scheduler_config, "max_num_batched_tokens", UNBOUNDED)
        with _Watch(c) as w:
            out = type(c).schedule(c, *args, **kwargs)
        allocs = w.allocs.get(rid)
        return w.progress(rid, out), (allocs[0] if allocs else None)

    def _wanted(self, before: Any, rid: str) -> int:
        """The tokens `rid` would schedule with budget to spare, on the step's real state (a copy
        of the scheduler just after its `schedule()`): its uncomputed tokens after the prefix hit
        vLLM's `_get_local_prefix_cache_hit` finds, capped by the step's long-prefill threshold
        (none for a lone request, counted before the step as `schedule()` counts it)."""
        c = copy_scheduler(self.scheduler)
        req = c.requests[rid]
        hit = 0
        if req.num_computed_tokens == 0:
            _, hit, _, _ = c._get_local_prefix_cache_hit(req)
        n = req.num_tokens - req.num_computed_tokens - hit
        running, waiting = before.get_request_counts()
        cap = c.scheduler_config.long_prefill_token_threshold if running + waiting > 1 else 0
        return int(min(n, cap) if 0 < cap < n else n)
