"""Drives a real vLLM 0.33.0 scheduler through the engine core's batch-queue loop.

`EngineCoreLoop.step()` is `EngineCore.step_with_batch_queue` (vllm/v1/engine/core.py) with the
executor replaced by a callback: if the scheduler has requests, `schedule()`, run the batch at once
(`execute(scheduler_output)` returns the ModelRunnerOutput that the step's future would hold: the
runner runs in order, as the GPU does) and queue it; return early if the queue is not full and the
batch ran a forward or the scheduler still has requests; otherwise pop the oldest batch and hand
its output to `update_from_output`. Nothing else of vLLM's engine core is involved (no executor,
no structured output, so sampling is never deferred; no aborts).

Usable with either model runner: the V1 side calls it with `_Runner.step` and `_Runner.sampled`
(v1.py), the V2 side with its own runner methods (v2.py). The batch queue size is vLLM's
`VllmConfig.max_concurrent_batches` (2 for V1 with async scheduling; pipeline size + 1 for V2).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoopStep:
    """What one step_with_batch_queue call did."""

    step: int
    scheduler_output: Any | None  # the batch scheduled this step (None: schedule() was not called)
    consumed_step: int | None  # the step whose output update_from_output took (None: returned early)
    batch_queue: list[int] = field(default_factory=list)  # steps still queued after it, oldest first
    engine_core_outputs: Any = None


class EngineCoreLoop:
    """`step_with_batch_queue` over `scheduler` (vLLM's Scheduler or AsyncScheduler)."""

    def __init__(self, scheduler: Any, execute: Callable[[Any], Any], batch_queue_size: int = 2) -> None:
        self.scheduler = scheduler
        self.execute = execute
        self.size = batch_queue_size
        # newest at the left: vLLM appends with appendleft and takes the oldest with pop()
        self.queue: deque[tuple[int, Any, Any]] = deque()

    def has_work(self) -> bool:
        """`EngineCore.has_work` for one engine: requests in the scheduler or batches in flight."""
        return bool(self.scheduler.has_requests() or self.queue)

    def _queued(self) -> list[int]:
        return [s for s, _, _ in reversed(self.queue)]

    def step(self, step_no: int) -> LoopStep:
        assert len(self.queue) < self.size
        if self.scheduler.has_requests():
            out = self.scheduler.schedule()
            return self.finish(step_no, out, self.execute(out))
        return self.finish(step_no, None, None)

    def finish(self, step_no: int, out: Any | None, result: Any) -> LoopStep:
        """The rest of the step once the batch `out` (None: nothing was scheduled) has run with
        `result` as its output: queue it, return early or hand the oldest to update_from_output.
        (The engine `vllm` calls it itself: pagedviz's runner runs between schedule and this.)"""
        if out is not None:
            model_executed = out.total_num_scheduled_tokens > 0
            self.queue.appendleft((step_no, out, result))
            if len(self.queue) < self.size and (model_executed or self.scheduler.has_requests()):
                return LoopStep(step_no, out, None, self._queued())
        elif not self.queue:
            return LoopStep(step_no, None, None, [])
        consumed, done_out, model_output = self.queue.pop()
        outputs = self.scheduler.update_from_output(done_out, model_output)
        return LoopStep(step_no, out, consumed, self._queued(), outputs)
