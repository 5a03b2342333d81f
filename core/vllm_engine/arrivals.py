"""Feeds a scenario's requests to a vLLM 0.33.0 scheduler at their arrival steps, for both sides
(v1.py's `VllmSide`, v2.py's `VllmV2Side`): each request becomes a vLLM `Request` (greedy,
`ignore_eos`, its prompt token ids, the side's block hasher) when its step is scheduled. Imported
only after env.py has made vLLM's process-wide settings (by the sides, below their own)."""

from __future__ import annotations

from typing import Any

from vllm.sampling_params import SamplingParams
from vllm.v1.request import Request

from pagedviz.core.config import Scenario


class ArrivalFeed:
    """A mixin: `scheduler` and `block_hasher` are the side's; `feed(scenario)` starts the feed."""

    scheduler: Any
    block_hasher: Any

    def feed(self, scenario: Scenario) -> None:
        self.arrivals: dict[int, list[Any]] = {}
        for spec in scenario.requests:
            self.arrivals.setdefault(spec.arrival_step, []).append(spec)
        self.step_no = 0

    def _request(self, spec: Any) -> Request:
        params = SamplingParams(max_tokens=spec.max_tokens, ignore_eos=True, temperature=0.0)
        return Request(
            request_id=spec.id,
            prompt_token_ids=list(spec.prompt_token_ids),
            sampling_params=params,
            pooling_params=None,
            arrival_time=float(self.step_no),
            block_hasher=self.block_hasher,
        )

    def schedule(self) -> Any:
        """The next step: its arrivals added, then vLLM's `schedule()`."""
        self.step_no += 1
        for spec in self.arrivals.pop(self.step_no, []):
            self.scheduler.add_request(self._request(spec))
        return self.scheduler.schedule()
