"""Runs compute in worker processes, not in the server's: a run's engine work (scheduling, the
model, measuring its trace) then never holds the interpreter lock that the server needs to answer
readers, so cached steps stay fast while new runs compute.

This is the pool and its scheduling: which worker computes a run (the ready one with the fewest
runs; a new one while all are busy, up to `max_workers`), and how many of the runs in flight go
on while memory is short (the oldest; the others pause between two steps). The rest lives beside
it:
- app/compute_worker.py: a worker process (started with `spawn`, so CUDA works in it and nothing of
  the server's threads is forked) that imports the engine once and computes several runs at a
  time, one step of the run with the least time used each turn;
- app/compute_stream.py: the server's end of a worker, whose reader thread streams each step into
  its run's list of steps as it arrives and completes the run's future;
- app/compute_watchdog.py: a worker silent for longer than its runs' time bound and a grace is
  killed, and one that dies (killed for memory, say) fails only its own runs, with a message; the
  next run starts a fresh worker. A run whose caller goes away (`cancel`) is dropped by its worker
  before its next step.
"""

from __future__ import annotations

import atexit
import itertools
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from pagedviz.app.compute_stream import CancelledRunError, Job, Worker, WorkerError
from pagedviz.app.compute_watchdog import START_TIMEOUT_S
from pagedviz.app.run import Progress, Run
from pagedviz.core import Scenario
from pagedviz.core.limits import step_costs
from pagedviz.core.trace import StepTrace


def engine_bytes(scenario: Scenario) -> int:
    """What a run's engine is estimated to hold in its worker while it computes: the KV cache
    tensor, the persistent batch's token table, the block pool's Python objects."""
    c = scenario.config
    return (
        4 * step_costs(scenario).get("kv", 0) + 8 * c.max_num_reqs * c.max_model_len + 200 * c.num_kv_blocks
    )


def worker_threads(max_workers: int) -> int:
    """A worker's torch threads: the cores shared out among the processes there may be, and no
    more than OMP_NUM_THREADS where it is set to a whole number (the test suite sets 1: two threads
    on a busy 2-core machine spin against each other, 60 steps of the tiny model 10-18 s of CPU
    against 0.4 s with one)."""
    threads = max(1, (os.cpu_count() or 1) // max_workers)
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return min(threads, int(omp)) if omp.isdigit() and int(omp) > 0 else threads


class ComputePool:
    """Worker processes that compute runs, shared by every app of this server process. A run goes
    to the ready worker with the fewest runs (one still starting comes last); a new worker is
    started while all are busy and there are fewer than `max_workers` (the most any app of this
    process asked for).

    Memory: the runs in flight hold their steps so far here and their engines in the workers.
    While those bytes (measured steps, estimated engines) pass `memory_budget`, only the oldest
    run goes on and the others pause between two steps (new ones start paused); when runs end and
    the bytes fall back under the budget, they go on. So many small runs compute side by side,
    while big ones take their turn, as if only a few computed at once."""

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self._lock = threading.Lock()
        self.workers: list[Worker] = []
        self.max_workers = 1
        self.memory_budget: int | None = None  # bytes in flight past which runs pause
        self.started = 0  # workers started over the pool's life
        self.pauses = 0  # runs paused for memory over the pool's life
        self.moved = 0  # runs given again because their worker died before reading them
        self.closed = False
        self._keys = itertools.count(1)

    def _spawn(self) -> Worker:
        w = Worker(self._ctx, self._forget, worker_threads(self.max_workers), self._balance)
        self.workers.append(w)
        self.started += 1
        return w

    def _forget(self, w: Worker, orphans: list[Job], error: str) -> None:
        """A worker ended: drop it, and give the runs it never read to another."""
        with self._lock:
            if w in self.workers:
                self.workers.remove(w)
            closed = self.closed
        for job in orphans:
            if job.cancelled:
                job.future.set_exception(CancelledRunError("cancelled"))
            elif closed:
                job.future.set_exception(WorkerError(error))
            else:
                job.moves += 1
                self.moved += 1
                try:
                    self._place(job)
                except WorkerError as e:  # the next one ended too, in between
                    job.future.set_exception(e)
        self._balance()

    def warm(self, n: int, memory_budget: int | None = None) -> None:
        """Allow `n` workers and start them now (without waiting for them to be ready), so the
        first runs do not wait for a worker to import the engine; keep the runs in flight under
        `memory_budget` bytes (the largest any app of this process asked for)."""
        with self._lock:
            self.max_workers = max(self.max_workers, n)
            if memory_budget is not None:
                self.memory_budget = max(self.memory_budget or 0, memory_budget)
            while len(self.workers) < n:
                self._spawn()

    def jobs(self) -> list[Job]:
        """The runs in flight, oldest first."""
        with self._lock:
            workers = list(self.workers)
        jobs: list[Job] = []
        for w in workers:
            with w.lock:
                jobs.extend(w.jobs.values())
        return sorted(jobs, key=lambda j: j.key)

    def bytes_in_flight(self) -> int:
        return sum(j.nbytes + j.engine_bytes for j in self.jobs())

    def _balance(self) -> None:
        """Pause all but the oldest run while the runs in flight pass the memory budget; let
        them go on once they are back under it."""
        budget = self.memory_budget
        if budget is None:
            return
        with self._lock:  # one balance at a time (reader threads call it after every step)
            jobs: list[Job] = []
            for w in self.workers:
                with w.lock:
                    jobs.extend(w.jobs.values())
            jobs.sort(key=lambda j: j.key)
            over = sum(j.nbytes + j.engine_bytes for j in jobs) > budget
            for i, job in enumerate(jobs):
                pause = over and i > 0
                if job.paused != pause and job.worker is not None:
                    job.paused = pause
                    self.pauses += pause
                    if job.progress is not None:
                        job.progress.paused = pause
                    job.worker.tell("pause" if pause else "resume", job)

    def submit(
        self,
        run_id: str,
        scenario: Scenario,
        max_seconds: float | None = None,
        progress: Progress | None = None,
        max_bytes: int | None = None,
        steps: list[StepTrace] | None = None,
    ) -> Job:
        """Give the run to a worker; its steps are appended to `steps` as they arrive, and the
        job's future ends with the Run, RunTooLongError / RunTooLargeError past the bounds, or
        WorkerError when its worker fails."""
        job = Job(run_id, scenario, max_seconds, max_bytes, progress, [] if steps is None else steps)
        job.future.set_running_or_notify_cancel()  # only its worker ends it
        job.engine_bytes = engine_bytes(scenario)
        with self._lock:
            job.key = next(self._keys)
        self._place(job)
        return job

    def submit_replay(self, run_id: str, spec: Any, on_progress: Callable[[int], None]) -> Job:
        """Give an imported recording's replay (app/compute_replay.py's ReplaySpec) to a worker;
        `on_progress(steps stored)` is told as it goes, and the job's future ends with None, or
        RunTooLargeError past the store's bound, or WorkerError (its message names the error)."""
        job = Job(run_id, None, None, None, None, [], replay=spec, on_progress=on_progress)  # type: ignore[arg-type]
        job.future.set_running_or_notify_cancel()  # only its worker ends it
        with self._lock:
            job.key = next(self._keys)
        self._place(job)
        return job

    def pause(self, job: Job, pause: bool) -> None:
        """Pause the job before its next step (a replay while a reader computes one), or resume it."""
        if job.worker is not None and job.paused != pause:
            job.paused = pause
            job.worker.tell("pause" if pause else "resume", job)

    def _place(self, job: Job) -> None:
        """Give the run to the ready worker with the fewest runs, or to a new one (see the class)."""
        progress = job.progress
        with self._lock:
            live = [w for w in self.workers if not w.ended]
            # a worker still importing the engine (just started) comes last: a run given to it
            # would wait seconds for its first step, while a ready worker interleaves it at once
            idlest = min(live, key=lambda w: (not w.ready, w.load()), default=None)
            if idlest is None or (idlest.load() > 0 and len(live) < self.max_workers):
                idlest = self._spawn()
            job.paused = False  # (a run moved from a worker that died may have been paused there)
            if self.memory_budget is not None and live:
                in_flight = sum(j.nbytes + j.engine_bytes for w in live for j in list(w.jobs.values()))
                job.paused = in_flight + job.engine_bytes > self.memory_budget and in_flight > 0
                self.pauses += job.paused
            if progress is not None:
                progress.paused = job.paused
        idlest.submit(job)

    def cancel(self, job: Job) -> None:
        """Nobody waits for the run any more: its worker drops it before its next step."""
        job.cancelled = True
        if job.worker is not None:
            job.worker.tell("stop", job)

    def compute(self, *args: Any, **kwargs: Any) -> Run:
        """submit(...) and wait for the run (for callers outside an event loop)."""
        return self.submit(*args, **kwargs).future.result()

    def starting(self) -> bool:
        """Whether the pool cannot compute at once yet: no worker is ready and one is starting
        (importing the engine takes a second or two). A pool with no worker at all is not
        starting: the next run starts one."""
        with self._lock:
            live = [w for w in self.workers if not w.ended]
        return bool(live) and not any(w.ready for w in live)

    def readiness(self) -> tuple[int, int]:
        """(workers ready, workers alive): /healthz says it, so that a benchmark can wait for
        every worker (one still importing the engine takes a core from the first runs)."""
        with self._lock:
            live = [w for w in self.workers if not w.ended]
        return sum(w.ready for w in live), len(live)

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> bool:
        """Wait until the pool is not starting (see `starting`); whether it got there in time."""
        deadline = time.monotonic() + timeout
        while self.starting():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def pids(self) -> list[int]:
        with self._lock:
            return [w.proc.pid for w in self.workers if w.proc.pid is not None]

    def close(self) -> None:
        with self._lock:
            self.closed = True
            workers, self.workers = list(self.workers), []
        for w in workers:
            w.close()


_POOL: ComputePool | None = None
_POOL_LOCK = threading.Lock()


def compute_pool() -> ComputePool:
    """This server process's pool (made on first use, closed when the process exits)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ComputePool()
            atexit.register(_POOL.close)
        return _POOL
