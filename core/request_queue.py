"""The waiting queue of the vllm flavour under each scheduling policy (vLLM's
vllm/v1/core/sched/request_queue.py): fcfs is a deque; priority keeps the requests ordered by
(priority, arrival time, request id) (`Request.__lt__`), so `prepend` is only an insert in order:
a preempted request goes back to its place, not to the front.

A request's arrival time is its arrival step, then its place in the scenario's list (a server
receives a step's requests in order); children of one request share it, and their ids break the tie
as vLLM's string comparison does ("10_a" before "2_a").
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from pagedviz.core.request import Request


def priority_key(req: Request) -> tuple[int, int, int, str]:
    """vLLM's `Request.__lt__`: priority, then arrival time, then the request id."""
    return (req.priority, req.arrival_step, req.order, req.req_id)


def victim_key(req: Request) -> tuple[int, int, int]:
    """What priority preemption maximises over the running requests: (priority, arrival_time)
    (scheduler.py's `max(self.running, key=lambda r: (r.priority, r.arrival_time))`; on a tie the
    first in running order)."""
    return (req.priority, req.arrival_step, req.order)


class PriorityQueue:
    """The priority policy's waiting queue with the deque methods the scheduler calls: it stays
    sorted by `priority_key`, and every insertion, at either end, goes to the request's place."""

    def __init__(self) -> None:
        self._items: list[Request] = []

    def append(self, req: Request) -> None:
        bisect.insort(self._items, req, key=priority_key)

    appendleft = append

    def extendleft(self, reqs: Iterable[Request]) -> None:
        for r in reqs:
            self.append(r)

    def popleft(self) -> Request:
        return self._items.pop(0)

    def remove(self, req: Request) -> None:
        self._items.remove(req)

    def __getitem__(self, i: int) -> Request:
        return self._items[i]

    def __iter__(self) -> Iterator[Request]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)


def waiting_queue(policy: str) -> Any:
    """The waiting queue of `policy` (vLLM's `create_request_queue`)."""
    return PriorityQueue() if policy == "priority" else deque()
