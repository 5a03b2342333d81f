"""A run and its computation: the engine's steps measured as the trace grows (the bytes each step
holds in memory), within a run's bounds on time (RunTooLongError, core/engine.py) and bytes
(RunTooLargeError), in this process (`compute`) or in a compute process (app/compute_worker.py);
`Progress` says where a computation in flight stands, and BusyError refuses a run when every
computing slot and queue place is taken.

Shared by the run store (app/store.py), the compute pool (app/compute*.py) and the imports
(app/import_runs.py, app/import_replay.py), which all sit above it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pagedviz.core import Scenario, make_engine
from pagedviz.core.table_versions import TableVersion
from pagedviz.core.trace import StepTrace

if TYPE_CHECKING:
    from pagedviz.core.engine import Engine

_SCALARS = (int, float, str, bytes)


class RunTooLargeError(RuntimeError):
    """A run's trace grew past the server's bound on one run's bytes."""

    def __init__(self, steps_done: int, max_bytes: int) -> None:
        self.steps_done, self.max_bytes = steps_done, max_bytes
        super().__init__(f"the run's trace passed {max_bytes >> 20} MB after {steps_done} steps")


class BusyError(RuntimeError):
    """Every computing slot and every queue place is taken; try again after `retry_after` s."""

    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__("the server is computing as many runs as it may; try again shortly")


@dataclass
class Run:
    run_id: str
    scenario: Scenario
    steps: list[StepTrace]
    truncated: bool
    device: str
    nbytes: int


@dataclass
class Progress:
    """Where a computation in flight stands (written by the worker thread, read by routes)."""

    max_steps: int
    queued: float
    started: float | None = None  # None while it waits for a computing slot
    steps_done: int = 0
    paused: bool = False  # paused by the compute pool while memory is short


def measured_bytes(root: Any) -> int:
    """Bytes an object graph holds in memory: sys.getsizeof of every container reached (each
    once), numpy buffers by their nbytes, and every scalar (int, float, str) that the graph alone
    holds. A scalar referenced from elsewhere too (a constant name, a small int, an id the block
    pool also holds) is shared, not this graph's: it is not counted. A table recorded by change
    (TableVersion) counts its own payload, not the steps before it that it is read from."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            total += sys.getsizeof(o) + (o.nbytes if o.base is not None else 0)
            continue
        if isinstance(o, TableVersion):
            total += o.own_nbytes()
            continue
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            for k, v in o.items():  # a scalar only the dict holds has 6 references here
                for x in (k, v):
                    if type(x) not in _SCALARS:
                        stack.append(x)
                    elif sys.getrefcount(x) <= 6:
                        total += sys.getsizeof(x)
            continue
        if isinstance(o, (list, tuple, set, frozenset)):
            items: Any = o
        elif hasattr(o, "__dict__"):
            items = [vars(o)]
        elif hasattr(o, "__slots__"):
            items = [getattr(o, a) for a in type(o).__slots__ if hasattr(o, a)]
        else:
            continue
        for x in items:  # a scalar only the container holds has 3 references here
            if type(x) not in _SCALARS:
                stack.append(x)
            elif sys.getrefcount(x) <= 3:
                total += sys.getsizeof(x)
    return total


def measured_steps(
    engine: Engine, max_seconds: float | None = None, max_bytes: int | None = None
) -> Iterator[tuple[StepTrace, int]]:
    """The engine's steps with the bytes each holds, measured as the trace grows: past
    `max_seconds` of its steps' time (RunTooLongError) or `max_bytes` (RunTooLargeError) it stops
    rather than run on."""
    nbytes = 0
    for n, t in enumerate(engine.run(budget=max_seconds), start=1):
        t.array_entries  # noqa: B018 - builds the entries here, where the run computes, before measuring
        t.compact()
        size = measured_bytes(t)
        nbytes += size
        if max_bytes is not None and nbytes > max_bytes:
            raise RunTooLargeError(n, max_bytes)
        yield t, size


def compute(
    run_id: str,
    scenario: Scenario,
    max_seconds: float | None = None,
    progress: Progress | None = None,
    max_bytes: int | None = None,
    steps: list[StepTrace] | None = None,
) -> Run:
    """Run the scenario in this process (measured_steps' bounds). Each step is appended to
    `steps` (when given) as soon as it is made, for readers in other threads."""
    engine = make_engine(scenario)
    steps = [] if steps is None else steps
    nbytes = 0
    for t, size in measured_steps(engine, max_seconds, max_bytes):
        nbytes += size
        steps.append(t)
        if progress is not None:
            progress.steps_done = len(steps)
    return Run(run_id, scenario, steps, engine.truncated, str(engine.device), nbytes)
