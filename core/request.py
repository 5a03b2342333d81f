"""A request as the scheduler tracks it: its token ids, progress and status."""

from __future__ import annotations

import enum

import numpy as np

from pagedviz.core.scenario_parts import RequestSpec


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


class Request:
    """Prompt plus outputs in one preallocated array; `num_tokens` of it are valid."""

    def __init__(self, spec: RequestSpec) -> None:
        self.req_id = spec.id
        self.num_prompt_tokens = len(spec.prompt_token_ids)
        self.max_tokens = spec.max_tokens
        self.arrival_step = spec.arrival_step
        # scheduling_policy "priority": lower first; ties by arrival (step, then place in the list)
        self.priority = spec.priority
        self.order = spec.order
        self.token_ids = np.zeros(self.num_prompt_tokens + spec.max_tokens, dtype=np.int32)
        self.token_ids[: self.num_prompt_tokens] = spec.prompt_token_ids
        self.num_tokens = self.num_prompt_tokens
        self.num_computed_tokens = 0
        self.status = Status.WAITING
        self.spec_token_ids: list[int] = []  # n-gram drafts for the next step
        # async scheduling (vLLM's Request fields of the same names): outputs scheduled but not yet
        # returned; tokens of steps whose output is not processed yet; of those, the ones in flight
        # when the request was preempted (delivered later, but they must not touch the reset counters)
        self.num_output_placeholders = 0
        self.num_in_flight_tokens = 0
        self.num_stale_output_tokens = 0
        # set after each schedule: the request has known tokens left to compute (it samples nothing)
        self.is_prefill_chunk = False

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def all_token_ids(self) -> np.ndarray:
        return self.token_ids[: self.num_tokens]

    def append(self, token_id: int) -> None:
        self.token_ids[self.num_tokens] = token_id
        self.num_tokens += 1

    @property
    def is_done(self) -> bool:
        return self.num_output_tokens >= self.max_tokens
