"""The engine core's loop with async scheduling: vLLM 0.33's `EngineCore.step_with_batch_queue`
(vllm/v1/engine/core.py) with a batch queue of 2 (`VllmConfig.max_concurrent_batches`: 2 for the
V1 runner, pipeline size + 1 = 2 for Model Runner V2 at PP = 1).

One pagedviz step is one call of `step_with_batch_queue`:
1. The requests arriving at this step join the waiting queue.
2. If the scheduler has requests (vLLM's `has_requests`: running, waiting, or finished ones whose
   ids have yet to reach the runner), `schedule()` plans a batch and the runner executes it. The
   batch goes into the queue, empty or not (an empty one runs no forward and samples nothing).
   If the queue is not full and the batch ran a forward or the scheduler still has requests,
   the step ends here: step n + 1 is planned before step n's output reaches the scheduler.
3. Otherwise (the queue is full, or there was nothing to schedule) the oldest batch leaves the
   queue and `update_from_output` takes its sampled tokens: it resolves their placeholders,
   finishes the requests that reached max_tokens and frees their blocks. A request therefore
   finishes, and its blocks return to the pool, one step after the step that sampled its last
   token, and the next `schedule()` tells the runner.
The run ends when no request is left to arrive, the scheduler has no requests and the queue is
empty.

Where vLLM's behaviour depends on timing, this is the deterministic reading: the GPU runs the
steps in order and each forward is done before the next is scheduled (pagedviz runs the runner
and model at once, so the runner sees its own sampled tokens in order, as the device does); the
engine core never waits for new requests (a step with no requests and an empty queue is an idle
step, so arrival steps stay aligned); no structured output, so sampling is never deferred.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pagedviz.core.scheduler import Scheduler
from pagedviz.core.scheduler_output import SchedulerOutput

# VllmConfig.max_concurrent_batches with async scheduling at pipeline size 1 (both runners)
BATCH_QUEUE_SIZE = 2


@dataclass
class QueuedBatch:
    """A scheduled batch whose output the scheduler has not seen yet."""

    step: int
    out: SchedulerOutput
    sampled: dict[str, int] = field(default_factory=dict)
    # with speculative decoding: each request's tokens (accepted drafts + one) and rejected drafts
    generated: dict[str, list[int]] | None = None
    rejected: dict[str, int] = field(default_factory=dict)


class BatchQueueLoop:
    """The batch queue and the order of schedule / update_from_output (module docstring). The
    engine asks `schedules(step)` whether to schedule and run a batch this step, then hands the
    batch (or None) to `end_step`, which queues it and calls update_from_output when vLLM does."""

    def __init__(self, scheduler: Scheduler, size: int = BATCH_QUEUE_SIZE) -> None:
        self.scheduler = scheduler
        self.size = size
        self.queue: deque[QueuedBatch] = deque()  # newest at the left, as vLLM's appendleft / pop

    def schedules(self, step: int) -> bool:
        """Arrivals join; whether this step calls schedule() (vLLM's `has_requests`)."""
        assert len(self.queue) < self.size
        self.scheduler.admit_arrivals(step)
        return self.scheduler.has_requests()

    def end_step(self, step: int, batch: QueuedBatch | None) -> dict[str, Any]:
        """Queue this step's batch (None: nothing was scheduled); pop the oldest and update the
        scheduler from it unless vLLM returns early. The trace's `engine_core` entry."""
        consumed: QueuedBatch | None = None
        finished: list[str] = []
        if batch is not None:
            self.queue.appendleft(batch)
            executed = batch.out.total_num_scheduled_tokens > 0
            early = len(self.queue) < self.size and (executed or self.scheduler.has_requests())
        else:
            early = not self.queue
        if not early:
            consumed = self.queue.pop()
            if consumed.generated is not None:
                finished = self.scheduler.update_from_spec_output(
                    consumed.out, consumed.generated, consumed.rejected
                )
            else:
                finished = self.scheduler.update_from_output(consumed.out, consumed.sampled)
        return {
            "scheduled": batch is not None,
            "consumed_step": consumed.step if consumed is not None else None,
            "finished_req_ids": finished,
            "batch_queue": [q.step for q in reversed(self.queue)],
            "batch_queue_size": self.size,
        }

    @property
    def done(self) -> bool:
        """Nothing left to arrive, no requests in the scheduler, no batch in flight."""
        return not (self.scheduler.arrivals or self.scheduler.has_requests() or self.queue)
