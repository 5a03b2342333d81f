"""The vllm-flavour scheduler (docs/architecture.md, README "Fidelity"), one call per engine step.

Running requests are served first, in running order, from a token budget; then, if nothing was
preempted, waiting requests in queue order. When the pool runs short the last running request is
preempted (freed, reset to recompute from scratch, put at the front of the waiting queue). Under
`scheduling_policy: "priority"` the waiting queue is ordered by (priority, arrival) and the victim
is the running request with the largest (priority, arrival), which goes back to its place in that
order (core/request_queue.py). A request with n > 1 reaches the scheduler as its n children
(core/parallel_sampling.py). The result, a SchedulerOutput (core/scheduler_output.py), is everything the
model runner needs to update its persistent batch.
"""

from __future__ import annotations

from collections import deque

from pagedviz.core.kv_cache import KVCacheManager
from pagedviz.core.kv_planning import max_in_flight_tokens
from pagedviz.core.parallel_sampling import scheduled_specs
from pagedviz.core.request import Request, Status
from pagedviz.core.request_queue import PriorityQueue, victim_key, waiting_queue
from pagedviz.core.scenario_parts import EngineConfig, RequestSpec
from pagedviz.core.scheduler_output import ScheduledRequest, SchedulerOutput


class Scheduler:
    def __init__(self, config: EngineConfig, requests: tuple[RequestSpec, ...]) -> None:
        self.config = config
        self.kv = KVCacheManager(
            config.num_kv_blocks,
            config.block_size,
            config.enable_prefix_caching,
            config.free_queue_order,
            config.kv_cache_groups,
            max_model_len=config.max_model_len,
            max_in_flight_tokens=max_in_flight_tokens(config.max_num_batched_tokens, config.async_scheduling),
        )
        self.arrivals: dict[int, list[Request]] = {}
        for spec in scheduled_specs(requests):  # n > 1: the children, as vLLM's engine adds them
            self.arrivals.setdefault(spec.arrival_step, []).append(Request(spec))
        self.requests: dict[str, Request] = {}
        self.waiting: deque[Request] | PriorityQueue = waiting_queue(config.scheduling_policy)
        self.running: list[Request] = []
        self.finished_since_last_step: list[str] = []

    @property
    def has_unfinished(self) -> bool:
        return bool(self.arrivals or self.waiting or self.running)

    def has_requests(self) -> bool:
        """vLLM's `Scheduler.has_requests`: requests running or waiting, or finished ones whose
        ids the next SchedulerOutput has still to carry to the runner (arrivals of later steps
        are not in the scheduler yet)."""
        return bool(self.running or self.waiting or self.finished_since_last_step)

    def admit_arrivals(self, step: int) -> None:
        """The requests arriving at `step` join the waiting queue, in listed order (once)."""
        for req in self.arrivals.pop(step, []):
            self.requests[req.req_id] = req
            self.waiting.append(req)

    def _num_new(self, req: Request, budget: int, cap: int) -> int:
        n = req.num_tokens + self._num_spec(req) - req.num_computed_tokens
        if cap > 0:
            n = min(n, cap)
        return min(n, budget)

    def _long_prefill_cap(self) -> int:
        """The long-prefill cap of this step: 0 (none) when at most one request is running or
        waiting, since a lone request starves nobody (vLLM 0.33), unless the scenario asks for
        the older rule."""
        cfg = self.config
        if cfg.long_prefill_cap_lone_request or len(self.running) + len(self.waiting) > 1:
            return cfg.long_prefill_token_threshold
        return 0

    def _victim(self) -> Request:
        """Whom the running loop preempts: the last running request, or under the priority policy
        the one with the largest (priority, arrival), the first of equals in running order."""
        if self.config.scheduling_policy == "priority":
            return max(self.running, key=victim_key)
        return self.running[-1]

    def _preempt(self, victim: Request) -> Request:
        self.running.remove(victim)
        self.kv.free(victim.req_id)
        victim.num_computed_tokens = 0
        victim.status = Status.PREEMPTED
        # async scheduling: output still in flight becomes stale (delivered later, not counted)
        victim.num_stale_output_tokens = victim.num_in_flight_tokens
        victim.num_output_placeholders = 0
        victim.spec_token_ids = []
        self.waiting.appendleft(victim)
        return victim

    # ---------------------------------------------------------------- speculative decoding
    def _num_spec(self, req: Request) -> int:
        """Draft tokens a running request carries: scheduled like known tokens, but never past
        max_model_len - 1 positions (vLLM caps num_new_tokens so)."""
        if not req.spec_token_ids:
            return 0
        room = self.config.max_model_len - 1 - req.num_tokens
        return max(0, min(len(req.spec_token_ids), room))

    def _take_spec(self, req: Request, computed: int, n: int) -> list[int]:
        """The drafts that fit this step's scheduled tokens; the request's drafts are used up.
        Output placeholders (async scheduling) come before the drafts in the scheduled tokens."""
        spec = req.spec_token_ids[: max(0, computed + n - req.num_tokens - req.num_output_placeholders)]
        req.spec_token_ids = []
        return spec

    def update_from_spec_output(
        self, out: SchedulerOutput, generated: dict[str, list[int]], num_rejected: dict[str, int]
    ) -> list[str]:
        """Roll num_computed_tokens (and, with async scheduling, the output placeholders that
        covered the drafts) back by the rejected drafts (their blocks stay with the request, as
        in vLLM: later tokens overwrite those slots), then append the generated tokens up to
        max_tokens; finish and free as update_from_output does."""
        return self._append_and_finish(out, generated, num_rejected)

    def _scheduled(
        self, req: Request, kind: str, computed: int, n: int, added: list[list[int]]
    ) -> ScheduledRequest:
        group_block_ids = self.kv.group_blocks_of(req.req_id)
        return ScheduledRequest(
            req_id=req.req_id,
            kind=kind,
            num_computed_tokens=computed,
            num_scheduled=n,
            num_prompt_tokens=req.num_prompt_tokens,
            token_ids=req.all_token_ids.copy(),
            block_ids=group_block_ids[0],
            new_block_ids=added[0],
            spec_token_ids=self._take_spec(req, computed, n),
            group_block_ids=group_block_ids,
            new_group_block_ids=added,
        )

    def _pads_spec_decode(self, n: int, computed: int, prefill_scheduled: bool, running: bool) -> bool:
        """vLLM pads a waiting request with one token to compute to 1 + num_speculative_tokens
        (placeholder drafts of -1) when no running request scheduled this step is mid-prefill and
        some running request was scheduled or the request has computed tokens, so the step keeps
        a uniform decode shape (scheduler.py, the waiting loop). Modelled for Model Runner V2,
        whose worker reads the placeholders' values from the slot's (zeroed) draft_tokens and
        rejects them; the V1 runner does not model it."""
        K = self.config.num_speculative_tokens
        return (
            bool(K)
            and self.config.model_runner == "v2"
            and n == 1
            and not prefill_scheduled
            and (running or computed > 0)
            and computed + 1 + K + 1 <= self.config.max_model_len
        )

    def _skip_running(self, req: Request) -> bool:
        """vLLM's max_tokens guard (async scheduling): a request whose steps in flight already
        produce its last output token, even if all their drafts are rejected, is not scheduled
        again. Without placeholders (synchronous scheduling) it never applies."""
        return (
            req.num_output_placeholders > 0
            and req.num_computed_tokens + 2 - req.num_output_placeholders
            >= req.num_prompt_tokens + req.max_tokens
        )

    def schedule(self, step: int) -> SchedulerOutput:
        out = SchedulerOutput(
            step=step,
            runner=self.config.model_runner,
            finished_req_ids=self.finished_since_last_step,
            num_groups=len(self.kv.groups),
        )
        self.finished_since_last_step = []
        self.admit_arrivals(step)
        budget = self.config.max_num_batched_tokens
        cap = self._long_prefill_cap()

        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            if self._skip_running(req):
                i += 1
                continue
            n = self._num_new(req, budget, cap)
            if n == 0:
                i += 1
                continue
            added = None
            while added is None:
                added = self.kv.allocate_slots(
                    req.req_id,
                    req.all_token_ids,
                    req.num_computed_tokens,
                    n,
                    num_in_flight_tokens=req.num_in_flight_tokens,
                    num_prompt_tokens=req.num_prompt_tokens,
                )
                self._note_drops(out, req.req_id)
                if added is None:
                    victim = self._victim()
                    if self.running.index(victim) < i:
                        # priority: a victim ahead of req; if scheduled this step, it is taken back
                        i -= 1
                        budget += self._unschedule(out, victim.req_id)
                    self._preempt(victim)
                    out.preempted_req_ids.append(victim.req_id)
                    out.preemption_causes[victim.req_id] = self._preemption_cause(victim, req)
                    if victim is req:
                        break
            if added is None:
                if self.config.scheduling_policy == "priority" and req.status is Status.PREEMPTED:
                    # it preempted itself as the lowest priority: the requests after it rank higher
                    # and may still fit (vLLM's `continue`); i already points at the next one
                    continue
                break
            out.scheduled.append(self._scheduled(req, "running", req.num_computed_tokens, n, added))
            budget -= n
            i += 1

        # a running request scheduled this step that was mid-prefill (vLLM's prefill_scheduled)
        prefill_scheduled = any(self.requests[s.req_id].is_prefill_chunk for s in out.scheduled)
        scheduled_running = bool(out.scheduled)
        skipped: list[Request] = []
        # why the FCFS loop stopped, for the request it stopped at (see _waiting_causes)
        stop: dict[str, object] | None = None
        while not out.preempted_req_ids and self.waiting and budget > 0:
            if len(self.running) >= self.config.max_num_reqs:
                stop = {
                    "cause": "max_num_seqs",
                    "running": len(self.running),
                    "max_num_seqs": self.config.max_num_reqs,
                }
                break
            req = self.waiting[0]
            if req.num_stale_output_tokens:
                # async scheduling: a preempted request whose output is still in flight waits
                # for it (resuming now could resample a position that output delivers); the
                # requests behind it may go first. It keeps its place at the queue's front.
                skipped.append(self.waiting.popleft())
                continue
            hits = self.kv.computed_blocks(req.req_id, req.all_token_ids)
            computed = self.kv.hit_tokens(hits)
            n, padded = self._admission_tokens(req, computed, prefill_scheduled, scheduled_running, cap)
            if padded and 1 + self.config.num_speculative_tokens > budget:
                # vLLM prefers not scheduling it to scheduling it unpadded
                need = 1 + self.config.num_speculative_tokens
                stop = {"cause": "token_budget", "tokens_needed": need, "tokens_left": budget, "padded": True}
                break
            if n > budget and not self.config.enable_chunked_prefill:
                stop = {"cause": "token_budget", "tokens_needed": n, "tokens_left": budget}
                break
            n = min(n, budget)
            req.num_computed_tokens = computed
            added = self.kv.allocate_slots(
                req.req_id,
                req.all_token_ids,
                computed,
                n,
                hits,
                full_sequence_tokens=(
                    min(req.num_tokens, self.config.max_model_len)
                    if self.config.scheduler_reserve_full_isl
                    else None
                ),
                # the watermark holds back admissions only while some request runs
                watermark_blocks=self.config.watermark_blocks if self.running else 0,
                num_in_flight_tokens=req.num_in_flight_tokens,
                num_prompt_tokens=req.num_prompt_tokens,
            )
            self._note_drops(out, req.req_id)
            if added is None:
                req.num_computed_tokens = 0
                stop = {"cause": "kv_pool", **self.kv.last_refusal}
                break
            if padded:
                req.spec_token_ids = [-1] * self.config.num_speculative_tokens
            self.waiting.popleft()
            kind = "resumed" if req.status is Status.PREEMPTED else "new"
            req.status = Status.RUNNING
            self.running.append(req)
            out.scheduled.append(self._scheduled(req, kind, computed, n, added))
            budget -= n
        self.waiting.extendleft(reversed(skipped))

        self._update_after_schedule(out)
        out.waiting_req_ids = [r.req_id for r in self.waiting]
        out.waiting_causes = self._waiting_causes(
            out, stop, budget, prefill_scheduled, scheduled_running, cap
        )
        return out

    def _note_drops(self, out: SchedulerOutput, req_id: str) -> None:
        """The blocks the last allocate_slots dropped out of a sliding window, in the order vLLM
        freed them (`scheduler.window_drops`)."""
        if self.kv.last_drops:
            out.window_drops.setdefault(req_id, []).extend(self.kv.last_drops)

    def _preemption_cause(self, victim: Request, req: Request) -> dict[str, object]:
        """`scheduler.preemption_causes[victim]`: preempted for `req`, whose allocation failed
        (the pool's numbers); under the priority policy also the victim's (priority, arrival)."""
        cause: dict[str, object] = {"cause": "kv_pool", "for": req.req_id, **self.kv.last_refusal}
        if self.config.scheduling_policy == "priority":
            cause.update(policy="priority", priority=victim.priority, arrival_step=victim.arrival_step)
        return cause

    @staticmethod
    def _unschedule(out: SchedulerOutput, req_id: str) -> int:
        """Take `req_id` back out of this step's output; the tokens it had (0: not scheduled)."""
        for k, s in enumerate(out.scheduled):
            if s.req_id == req_id:
                del out.scheduled[k]
                return s.num_scheduled
        return 0

    def _admission_tokens(
        self, req: Request, computed: int, prefill_scheduled: bool, scheduled_running: bool, cap: int
    ) -> tuple[int, bool]:
        """The tokens the waiting loop would schedule for `req` before the budget clips them (its
        uncomputed tokens after `computed` prefix-hit tokens, spec-decode padding, the long-prefill
        cap), and whether they are padded to 1 + num_speculative_tokens. Changes nothing."""
        n = req.num_tokens - computed
        padded = self._pads_spec_decode(n, computed, prefill_scheduled, scheduled_running)
        if padded:
            n = 1 + self.config.num_speculative_tokens
        if cap > 0:
            n = min(n, cap)
        return n, padded

    def _waiting_causes(
        self,
        out: SchedulerOutput,
        stop: dict[str, object] | None,
        budget: int,
        prefill_scheduled: bool,
        scheduled_running: bool,
        cap: int,
    ) -> dict[str, dict[str, object]]:
        """`scheduler.waiting_causes` (docs/arrays.md): why each request still waiting was not
        scheduled, in waiting order. A step that preempted admits nobody (`preemption`); a request
        whose stale output is in flight was skipped (`output_in_flight`); the first other request
        (the head) carries what stopped the loop at it -- `stop`, or, when the loop ended on an
        empty budget before it, `token_budget` with what it would need; the rest wait `behind` it.
        No per-token work, and no Python loop over the waiting requests in synchronous runs: the
        entries behind the head share one object (built by dict.fromkeys)."""
        ids = out.waiting_req_ids
        if not ids:
            return {}
        if out.preempted_req_ids:
            # one object shared by every entry: dict.fromkeys runs in C, no Python loop per request
            return dict.fromkeys(ids, {"cause": "preemption", "preempted": list(out.preempted_req_ids)})
        # a stale output exists only with async scheduling (a preemption while a step is in flight)
        stale = (
            {r.req_id: r.num_stale_output_tokens for r in self.waiting if r.num_stale_output_tokens}
            if self.config.async_scheduling
            else {}
        )
        head = next((rid for rid in ids if rid not in stale), None)
        causes: dict[str, dict[str, object]] = dict.fromkeys(ids, {"cause": "behind", "behind": head})
        for rid, n in stale.items():
            causes[rid] = {"cause": "output_in_flight", "tokens_in_flight": n}
        if head is None:
            return causes
        if stop is None:
            # the loop ran out of budget before it reached the head
            req = self.requests[head]
            hits = self.kv.computed_blocks(req.req_id, req.all_token_ids, record=False)
            computed = self.kv.hit_tokens(hits)
            n, padded = self._admission_tokens(req, computed, prefill_scheduled, scheduled_running, cap)
            stop = {"cause": "token_budget", "tokens_needed": n, "tokens_left": max(budget, 0)}
            if padded:
                stop["padded"] = True
        causes[head] = stop
        return causes

    def _update_after_schedule(self, out: SchedulerOutput) -> None:
        """Advance each scheduled request's num_computed_tokens (and its tokens in flight) now,
        so the next schedule() can plan past them; a request with known tokens left to compute
        is a prefill chunk (vLLM's `_update_after_schedule`)."""
        for s in out.scheduled:
            req = self.requests[s.req_id]
            req.num_computed_tokens += s.num_scheduled
            req.num_in_flight_tokens += s.num_scheduled
            req.is_prefill_chunk = req.num_computed_tokens < req.num_tokens + req.num_output_placeholders

    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[str]:
        """Append sampled tokens; finish and free requests that reached max_tokens."""
        return self._append_and_finish(out, {req_id: [token] for req_id, token in sampled.items()})

    def _append_and_finish(
        self,
        out: SchedulerOutput,
        tokens_of: dict[str, list[int]],
        num_rejected: dict[str, int] | None = None,
    ) -> list[str]:
        """Append each request's new tokens up to max_tokens; finish and free the done ones.

        Walks the step's requests in scheduling order (vLLM walks `num_scheduled_tokens`), so
        requests finishing together free their blocks in that order. With async scheduling the
        step's tokens leave flight here and resolve output placeholders; a request preempted
        while the step ran gets its (stale) tokens but keeps its reset counters, and a request
        already finished gets nothing."""
        finished: list[str] = []
        for s in out.scheduled:
            req = self.requests[s.req_id]
            req.num_in_flight_tokens -= s.num_scheduled
            stale = req.num_stale_output_tokens > 0
            if stale:
                req.num_stale_output_tokens -= s.num_scheduled
            tokens = tokens_of.get(s.req_id)
            if tokens is None or req.status is Status.FINISHED:
                continue
            k = num_rejected.get(s.req_id, 0) if num_rejected else 0
            if k and not stale:
                if req.num_computed_tokens > 0:
                    req.num_computed_tokens -= k
                if req.num_output_placeholders > 0:
                    req.num_output_placeholders -= k
            had_placeholders = req.num_output_placeholders > 0
            for token in tokens[: req.max_tokens - req.num_output_tokens]:
                req.append(token)
            if not stale and had_placeholders:
                # every returned token resolves a placeholder, one trimmed at max_tokens too
                req.num_output_placeholders -= len(tokens)
                if req.status is Status.RUNNING:
                    # the blocks the now-known tokens fill get their hashes (prefix caching)
                    done = min(req.num_computed_tokens - req.num_in_flight_tokens, req.num_tokens)
                    self.kv.cache_full_blocks(req.req_id, req.all_token_ids, done)
            if req.is_done:
                if req.status is Status.PREEMPTED:
                    self.waiting.remove(req)
                else:
                    self.running.remove(req)
                req.status = Status.FINISHED
                self.kv.free(s.req_id)
                finished.append(s.req_id)
        self.finished_since_last_step.extend(finished)
        return finished
