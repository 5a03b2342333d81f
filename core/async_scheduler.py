"""vLLM 0.33's AsyncScheduler (vllm/v1/core/sched/async_scheduler.py): the scheduler that plans a
step before the previous step's sampled tokens have reached it.

Each scheduled request that is not a prefill chunk gets output placeholders: one for the token
the step will sample, plus one per draft it verifies. The placeholders count as tokens still to
compute (`num_new = num_tokens + drafts + num_output_placeholders - num_computed_tokens`), so a
decode is scheduled again the very next step with a placeholder as its input token (the runner
fills it on the device). `update_from_output` resolves them when the step's output arrives
(core/scheduler.py `_append_and_finish`); until then the max_tokens guard (`_skip_running`)
keeps a request whose steps in flight already produce its last token from being scheduled
again. With speculative decoding the next step's drafts are not known to the scheduler either:
the request carries `num_speculative_tokens` drafts of -1, which the worker fills in.
"""

from __future__ import annotations

from pagedviz.core.request import Request
from pagedviz.core.scheduler import Scheduler
from pagedviz.core.scheduler_output import SchedulerOutput


class AsyncScheduler(Scheduler):
    """The synchronous scheduler plus output placeholders (see the module docstring)."""

    def _num_new(self, req: Request, budget: int, cap: int) -> int:
        n = req.num_tokens + len(req.spec_token_ids) + req.num_output_placeholders - req.num_computed_tokens
        if cap > 0:
            n = min(n, cap)
        n = min(n, budget)
        # no position past max_model_len: room for the sampled token (vLLM caps so in every mode)
        return min(n, self.config.max_model_len - req.num_computed_tokens - 1)

    def _update_after_schedule(self, out: SchedulerOutput) -> None:
        super()._update_after_schedule(out)
        drafts = [-1] * self.config.num_speculative_tokens
        for s in out.scheduled:
            req = self.requests[s.req_id]
            if req.is_prefill_chunk:
                continue
            # the token this step samples, plus one per draft it verifies
            req.num_output_placeholders += 1 + len(s.spec_token_ids)
            req.spec_token_ids = list(drafts)
