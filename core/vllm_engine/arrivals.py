"""Feeds a scenario's requests to a vLLM 0.33.0 scheduler at their arrival steps, for both sides
(v1.py's `VllmSide`, v2.py's `VllmV2Side`): each request becomes what vLLM's engine core adds, when
its step is scheduled. Imported only after env.py has made vLLM's process-wide settings (by the
sides, below their own).

A request is an `EngineCoreRequest` (its prompt token ids, `ignore_eos`, its priority) turned into
the scheduler's `Request` as the engine core does (`Request.from_engine_core_request`, with the
side's block hasher). A request with n > 1 fans out as `LLMEngine.add_request` does: vLLM's own
`ParentRequest` names each child (`get_child_info`: `{index}_{request_id}`, its sampling params),
and the children are added in index order, sharing the parent's arrival time.

Its arrival time is its arrival step plus a millionth per place in the scenario's list: a server
receives one step's requests in order, and the priority policy breaks (priority) ties by arrival
time before request id (`Request.__lt__`), as pagedviz's queue does (core/request_queue.py).

Sampling: pagedviz samples (greedy with its tiny model, or its synthetic sampler); vLLM's side
only does the bookkeeping. vLLM refuses n > 1 with greedy params ("n must be 1 when using greedy
sampling"), so a parent with n > 1 carries temperature 1. It carries no seed: a seeded request
gets a torch generator in V1's input batch, whose offset rewind for a discarded sample
(`gen.set_offset`) a CPU generator does not support; the children then share one copy of the
params (`_get_child_sampling_params` caches it), as unseeded children do on a server.
"""

from __future__ import annotations

from copy import copy
from typing import Any

from vllm.sampling_params import SamplingParams
from vllm.v1.engine import EngineCoreRequest
from vllm.v1.engine.parallel_sampling import ParentRequest
from vllm.v1.request import Request

from pagedviz.core.scenario import Scenario

# a request's arrival time: its step, plus this per place in the scenario's list
ARRIVAL_ORDER_GAP = 1e-6


class ArrivalFeed:
    """A mixin: `scheduler` and `block_hasher` are the side's; `feed(scenario)` starts the feed."""

    scheduler: Any
    block_hasher: Any

    def feed(self, scenario: Scenario) -> None:
        self.arrivals: dict[int, list[Any]] = {}
        self.order: dict[str, int] = {}
        for k, spec in enumerate(scenario.requests):
            self.arrivals.setdefault(spec.arrival_step, []).append(spec)
            self.order[spec.id] = k
        self.step_no = 0
        self.parents: dict[str, ParentRequest] = {}

    def _requests(self, spec: Any) -> list[Request]:
        """What vLLM's engine adds to the scheduler for `spec`: the request, or its n children."""
        greedy = spec.n == 1
        params = SamplingParams(
            n=spec.n,
            max_tokens=spec.max_tokens,
            ignore_eos=True,
            temperature=0.0 if greedy else 1.0,
        )
        core = EngineCoreRequest(
            request_id=spec.id,
            prompt_token_ids=list(spec.prompt_token_ids),
            mm_features=None,
            sampling_params=params,
            pooling_params=None,
            arrival_time=self.step_no + ARRIVAL_ORDER_GAP * self.order[spec.id],
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
            priority=spec.priority,
            external_req_id=spec.id,
        )
        if greedy:
            return [Request.from_engine_core_request(core, self.block_hasher)]
        parent = self.parents[spec.id] = ParentRequest(core)
        children = []
        for idx in range(spec.n):  # LLMEngine.add_request's fan-out
            child_id, child_params = parent.get_child_info(idx)
            child = core if idx == spec.n - 1 else copy(core)
            child.request_id = child_id
            child.sampling_params = child_params
            children.append(Request.from_engine_core_request(child, self.block_hasher))
        return children

    def _request(self, spec: Any) -> Request:
        """The one `Request` of a spec with n = 1 (callers that add requests one by one)."""
        if spec.n != 1:
            raise ValueError(f"request {spec.id!r} has n = {spec.n}: add its children with _requests")
        return self._requests(spec)[0]

    def add_arrivals(self) -> None:
        """The requests arriving at `step_no` reach the scheduler's `add_request`, in listed order."""
        for spec in self.arrivals.pop(self.step_no, []):
            for request in self._requests(spec):
                self.scheduler.add_request(request)

    def schedule(self) -> Any:
        """The next step: its arrivals added, then vLLM's `schedule()`."""
        self.step_no += 1
        self.add_arrivals()
        return self.scheduler.schedule()
