"""Speculative decoding in an engine step (core/engine.py's `step`): verifying the scheduled drafts
against the target tokens the step sampled, rolling the scheduler back by the rejected ones, and the
next step's drafts. V1 (the n-gram drafter, `_accept_drafts` / `_update_with_drafts`: greedy
acceptance, then core/spec_decode.py proposes from each request's own tokens) and Model Runner V2
(`_verify_v2`: V2's rejection sampler with greedy targets, core/ngram_v2.py; then post_update and
the worker's n-gram speculator, synchronously or, under async scheduling, on the worker at once:
`_worker_drafts_v2`). What each step adds to the trace: the `rejection_sampler` stage and
`forward`'s generated, rejected and proposed tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.engine_core import QueuedBatch
from pagedviz.core.ngram_v2 import gather_draft_sampled, greedy_verify
from pagedviz.core.request import Status
from pagedviz.core.scenario import Scenario
from pagedviz.core.scheduler import Scheduler
from pagedviz.core.scheduler_output import SchedulerOutput
from pagedviz.core.spec_decode import greedy_accept, ngram_propose
from pagedviz.core.trace import Stage, StepTrace

# V1's rejection sampler (GPUModelRunner's spec-decode path, greedy targets), as each step records it
V1_REJECTION_STAGE = Stage(
    "rejection_sampler",
    ["logits_indices", "target_logits_indices", "bonus_logits_indices", "draft_token_ids"],
    ["target_token_ids", "num_accepted_tokens", "num_rejected_tokens"],
    "target_token_ids = argmax(logits); accepted while draft_token_ids == "
    "target_token_ids[target_logits_indices]; output = accepted drafts + "
    "(first mismatch's target token | target_token_ids[bonus_logits_indices])",
    "Greedy verification: the target model's own choice at each draft's row decides. "
    "Every request outputs its accepted drafts plus one token: the target's token "
    "where the first draft was wrong, or the bonus token when all were right. The "
    "scheduler rolls num_computed_tokens back by the rejected drafts; their KV "
    "slots stay allocated (as in vLLM) and are overwritten by later tokens.",
)

V2_REJECTION_STAGE = Stage(
    "rejection_sampler",
    ["logits_indices", "input_ids", "expanded_local_pos", "cu_num_logits"],
    ["target_token_ids", "draft_sampled", "num_sampled", "num_rejected"],
    "draft_sampled = input_ids[logits_indices] (-1 for a draft slot that starts in the prompt); "
    "row i accepts its draft at local position j + 1 while it equals argmax(logits) at local "
    "position j; num_sampled = accepted + 1; num_rejected = num_logits - num_sampled (both 0 for a "
    "partial prefill)",
    "Model Runner V2's rejection sampler with greedy targets (spec_decode/rejection_sampler.py, "
    "get_num_sampled_and_rejected in input_batch.py): the target model's own choice at each row "
    "decides. Every row outputs its accepted drafts plus one token: the target's where the first "
    "draft was wrong, or the bonus token when all were right. post_update then advances the slot's "
    "num_computed_tokens by the row's tokens less the rejected ones, and the scheduler rolls its "
    "own count back by as many; the rejected drafts' KV slots are overwritten by later tokens.",
)


class DraftSteps:
    """The engine's speculative-decoding steps (module docstring); mixed into the engine, whose
    fields below they read."""

    scenario: Scenario
    capture: bool
    step_no: int
    runner: Any
    scheduler: Scheduler
    # V2: the step's target tokens, num_sampled and num_rejected per row (`_verify_v2`)
    v2_result: tuple[np.ndarray, np.ndarray, np.ndarray]

    def _accept_drafts(self, v: dict[str, Any], tokens: np.ndarray, trace: StepTrace) -> dict[str, list[int]]:
        """Greedy rejection sampling: per request, drafts are accepted while they equal the
        target's token at their row; the first mismatch is replaced by the target's token, and a
        request whose drafts all pass gets the bonus token (one loop step per request)."""
        ib = self.runner.input_batch
        n = v["num_reqs"]
        cu_sampled, num_sampled = v["cu_num_sampled_tokens"], v["num_sampled_tokens"]
        cu_draft, num_draft = v["cu_num_draft_tokens"], v["num_draft_tokens"]
        accepted = np.zeros(n, dtype=np.int64)
        generated: dict[str, list[int]] = {}
        for row in range(n):
            if v["discard_request_mask"][row]:
                continue
            targets = tokens[cu_sampled[row] - num_sampled[row] : cu_sampled[row]]
            drafts = v["draft_token_ids"][cu_draft[row] - num_draft[row] : cu_draft[row]]
            generated[ib.req_ids[row]], accepted[row] = greedy_accept(drafts, targets)
        if self.capture:
            trace.stages.append(V1_REJECTION_STAGE)
            trace.record("target_token_ids", "logits", tokens.astype(np.int32), "rejection_sampler")
            trace.record("num_accepted_tokens", "request", accepted, "rejection_sampler")
            trace.record("num_rejected_tokens", "request", num_draft - accepted, "rejection_sampler")
        return generated

    def _update_with_drafts(
        self, out: SchedulerOutput, generated: dict[str, list[int]], trace: StepTrace
    ) -> None:
        """Roll back rejected drafts, append the generated tokens, then let the n-gram drafter
        propose the next step's drafts from each running request's own tokens."""
        drafts = {s.req_id: len(s.spec_token_ids) for s in out.scheduled}
        rejected = {rid: drafts[rid] - (len(toks) - 1) for rid, toks in generated.items() if drafts[rid]}
        self.scheduler.update_from_spec_output(out, generated, rejected)
        self.runner.append_generated(generated)
        cfg = self.scenario.config
        proposed: dict[str, list[int]] = {}
        for rid in generated:
            req = self.scheduler.requests[rid]
            # drafts after the step that samples the last output token would go unused
            if req.is_done or req.max_tokens - req.num_output_tokens <= 1:
                continue
            req.spec_token_ids = ngram_propose(
                req.all_token_ids,
                cfg.prompt_lookup_min,
                cfg.prompt_lookup_max,
                cfg.num_speculative_tokens,
                cfg.max_model_len,
            )
            if req.spec_token_ids:
                proposed[rid] = list(req.spec_token_ids)
        trace.forward["generated_token_ids"] = {rid: list(map(int, t)) for rid, t in generated.items()}
        trace.forward["num_rejected_tokens"] = rejected
        trace.forward["proposed_draft_token_ids"] = proposed

    def _verify_v2(self, v: dict[str, Any], tokens: np.ndarray, trace: StepTrace) -> dict[str, list[int]]:
        """Model Runner V2's rejection sampler with greedy targets (spec_decode/rejection_sampler.py)
        and get_num_sampled_and_rejected: per row, num_sampled = accepted drafts + 1 (0 for a
        partial prefill), num_rejected = num_logits - num_sampled (0 for a partial prefill)."""
        r = self.runner
        cu = v["cu_num_logits"]
        draft_sampled = gather_draft_sampled(
            v["input_ids"],
            v["positions"],
            v["logits_indices"],
            v["expanded_local_pos"],
            r.prefill_len[v["expanded_idx_mapping"]],
        )
        num_sampled = greedy_verify(tokens, draft_sampled, cu)
        discard = v["discard_request_mask"]
        num_sampled[discard] = 0
        num_rejected = (np.diff(cu) - num_sampled).astype(np.int32)
        num_rejected[discard] = 0
        self.v2_result = (tokens, num_sampled, num_rejected)
        starts = cu[:-1].tolist()
        generated = {
            rid: tokens[s : s + ns].tolist()
            for rid, s, ns in zip(r.row_req_ids, starts, num_sampled.tolist())
            if ns
        }
        if self.capture:
            trace.stages.append(V2_REJECTION_STAGE)
            trace.record("target_token_ids", "logits", tokens.astype(np.int32), "rejection_sampler")
            trace.record("draft_sampled", "logits", draft_sampled, "rejection_sampler")
            trace.record("num_sampled", "request", num_sampled, "rejection_sampler")
            trace.record("num_rejected", "request", num_rejected, "rejection_sampler")
        return generated

    def _update_with_drafts_v2(
        self, out: SchedulerOutput, generated: dict[str, list[int]], trace: StepTrace
    ) -> None:
        """After V2's step: post_update on the worker, the n-gram speculator's drafts into the
        slots, update_from_output (the scheduler rolls back the rejected drafts), then
        update_draft_token_ids: each request of the batch that is still running and not a prefill
        chunk carries num_speculative_tokens drafts of -1 (their values stay on the worker)."""
        r = self.runner
        tokens, num_sampled, num_rejected = self.v2_result
        rejected = {
            rid: int(k)
            for rid, k, d in zip(r.row_req_ids, num_rejected.tolist(), r.v["num_draft_tokens"].tolist())
            if d and rid in generated
        }
        self.scheduler.update_from_spec_output(out, generated, rejected)
        r.post_update_spec(tokens, num_sampled, num_rejected)
        drafts = r.propose_drafts(num_sampled)
        k = self.scenario.config.num_speculative_tokens
        proposed: dict[str, list[int]] = {}
        for rid, row in zip(r.row_req_ids, drafts.tolist()):
            req = self.scheduler.requests.get(rid)
            if req is None or req.status is Status.FINISHED:
                continue
            if req.is_prefill_chunk:
                req.spec_token_ids = []
                continue
            req.spec_token_ids = [-1] * k
            proposed[rid] = row
        trace.forward["generated_token_ids"] = {rid: list(map(int, t)) for rid, t in generated.items()}
        trace.forward["num_rejected_tokens"] = rejected
        trace.forward["proposed_draft_token_ids"] = proposed

    def _worker_drafts_v2(
        self, out: SchedulerOutput, generated: dict[str, list[int]], trace: StepTrace
    ) -> QueuedBatch:
        """V2's step with drafts under async scheduling, on the worker: post_update with the
        rejections and the n-gram speculator's drafts into the slots, at once (the device runs
        its batches in order). The scheduler learns the tokens and rolls back the rejected drafts
        only when the batch leaves the queue, and is never told the drafts: AsyncScheduler gave
        every request that is not a prefill chunk placeholders of -1 when it scheduled it
        (EngineCore.post_step skips update_draft_token_ids under async scheduling)."""
        r = self.runner
        tokens, num_sampled, num_rejected = self.v2_result
        rejected = {
            rid: int(k)
            for rid, k, d in zip(r.row_req_ids, num_rejected.tolist(), r.v["num_draft_tokens"].tolist())
            if d and rid in generated
        }
        r.post_update_spec(tokens, num_sampled, num_rejected)
        drafts = r.propose_drafts(num_sampled)
        trace.forward["generated_token_ids"] = {rid: list(map(int, t)) for rid, t in generated.items()}
        trace.forward["num_rejected_tokens"] = rejected
        trace.forward["proposed_draft_token_ids"] = dict(zip(r.row_req_ids, drafts.tolist()))
        sampled = {rid: toks[-1] for rid, toks in generated.items()}
        return QueuedBatch(self.step_no, out, sampled, generated, rejected)
