"""The reads of an imported run's steps (app/import_runs.py's Imports has them): any step of a kept
recording, read back from the store or computed at once from the replay's nearest checkpoint
(app/import_seek.py) in a worker thread, the replay in flight paused meanwhile; the whole run
(`get`) once its replay has ended, its steps taken one at a time (`StoredSteps`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from pagedviz.app.import_replay import ImportJob
from pagedviz.app.import_seek import RunSeeker, StoredSteps
from pagedviz.app.run import Run
from pagedviz.core import Scenario
from pagedviz.core.replay import ReplayError
from pagedviz.core.trace import StepTrace

T = TypeVar("T")


class KeptSteps(StoredSteps):
    """The steps of a live run so far, each stored in full as it was replayed (its recording is
    not kept whole yet, so none is replayed from the start): iterated, read back one by one."""

    def __iter__(self) -> Iterator[StepTrace]:
        for i in range(self.num_steps):
            yield self[i]


class ImportStopped(Exception):  # noqa: N818 - a state, like the store's RunTooLargeError
    """The imported run cannot be served: its replay stopped (a 413 past the store's bound, a 422
    for a recording the replay cannot follow). Answered as {"error", "detail": [{field, message}]}."""

    def __init__(self, status: int, error: str, field: str, message: str) -> None:
        self.status, self.error, self.field, self.message = status, error, field, message
        super().__init__(message)


class ImportReads:
    """Reads of imported runs' steps (a mixin of Imports: its store, jobs and states)."""

    store: Any
    jobs: dict[str, ImportJob]
    _job: Callable[[str], ImportJob | None]
    _kept: Callable[[str], tuple[int, str | None] | None]
    _done_steps: Callable[[str], int | None]
    stopped: Callable[[str], ImportStopped | None]
    replayed_elsewhere: Callable[[str], bool]
    scenario: Callable[[str], Scenario | None]
    live: Any  # the live runs (app/import_live.py), or None
    wait_for: Callable[[str, int], Awaitable[tuple[int, bool] | None]]

    def _growing(self, run_id: str) -> bool:
        """Whether the run is a live run whose steps are replayed in full as its lines arrive
        (app/live_replay.py, into the store) and not yet imported whole: its steps are read back
        as they are stored, up to those that have arrived."""
        return self.live is not None and self.live.handles(run_id) and self._done_steps(run_id) is None

    async def _live_step(self, run_id: str, n: int) -> tuple[bytes, bytes | None, str, bool] | None:
        where = await self.wait_for(run_id, n)
        if where is None:
            return None
        count, complete = where
        kept = None if n > count else await asyncio.to_thread(self.store.db.rec_step, run_id, n)
        if kept is None:
            raise ImportStopped(404, "not_found", "n", f"step {n} is outside 1..{count}")
        return (*kept, complete)

    async def _seekable(self, run_id: str, n: int) -> tuple[int, bool] | None:
        """(the run's number of steps, whether its replay is complete) when step n of it can be
        read now: any step of a kept recording is (computed on demand, app/import_seek.py), but
        past where a replay that stopped did stop. None for a run this server does not know.
        Raises ImportStopped for a step outside the run."""
        self._job(run_id)  # a replay that a restart stopped goes on
        kept = self._kept(run_id)
        if kept is None:
            return None
        done = self._done_steps(run_id)
        count = kept[0] if done is None else done
        stopped = self.stopped(run_id)
        if stopped is not None:
            count = await asyncio.to_thread(self.store.db.rec_steps_kept, run_id)
            if n > count:
                raise stopped
        if not 1 <= n <= count:
            raise ImportStopped(404, "not_found", "n", f"step {n} is outside 1..{max(1, count)}")
        return count, done is not None

    async def _computed(self, run_id: str, fn: Callable[[], T]) -> T:
        """fn() in a worker thread, the replay in flight paused meanwhile (a reader first)."""
        job = self.jobs.get(run_id)
        pool = self.store.pool
        if job is not None:
            job.readers += 1
            if pool is not None and job.pool_job is not None:
                pool.pause(job.pool_job, True)
        try:
            return await asyncio.to_thread(fn)
        except ReplayError as e:
            raise ImportStopped(422, "invalid_recording", "recording", str(e)) from None
        finally:
            if job is not None:
                job.readers -= 1
                if pool is not None and job.pool_job is not None and not job.readers:
                    pool.pause(job.pool_job, False)

    def _seeker(self, run_id: str, count: int) -> RunSeeker | None:
        scenario = self.scenario(run_id)
        return None if scenario is None else RunSeeker(self.store.db, run_id, scenario, count)

    async def step(self, run_id: str, n: int) -> tuple[bytes, bytes | None, str, bool] | None:
        """Step n encoded (body, gzipped, ETag, whether the run is complete): read back, or
        computed now; None for a run this server does not know. Raises ImportStopped for a step
        outside the run."""
        if self._growing(run_id):
            return await self._live_step(run_id, n)
        where = await self._seekable(run_id, n)
        seeker = None if where is None else self._seeker(run_id, where[0])
        if where is None or seeker is None:
            return None
        return (*await self._computed(run_id, lambda: seeker.encoded(n)), where[1])

    async def get(self, run_id: str) -> Any:
        """The run once its replay has ended, its steps read back or computed as they are asked
        for; None for a run this server does not know. A live run taking lines is its steps so far
        (as cut short: `truncated`), at once."""
        if self.live is not None and self.live.received(run_id) is not None:
            kept = await asyncio.to_thread(self.store.db.rec_steps_kept, run_id)
            scenario = self.scenario(run_id)
            if kept and scenario is not None:
                return Run(run_id, scenario, KeptSteps(self.store.db, run_id, kept, scenario), True, "cpu", 0)  # type: ignore[arg-type]
        job = self._job(run_id)
        if job is not None:
            await asyncio.shield(job.done)
        else:  # another worker replays it: wait for its end (or take it over if it goes)
            while self.replayed_elsewhere(run_id) and self._done_steps(run_id) is None:
                await asyncio.sleep(0.05)
            job = self._job(run_id)
            if job is not None:
                await asyncio.shield(job.done)
        done = self._done_steps(run_id)
        if done is None:
            stopped = self.stopped(run_id)
            if stopped is not None:
                raise stopped
            return None
        scenario = self.scenario(run_id)
        if scenario is None:
            return None
        steps = StoredSteps(self.store.db, run_id, done, scenario)
        return Run(run_id, scenario, steps, False, "cpu", 0)  # type: ignore[arg-type]

    async def trace(self, run_id: str, n: int) -> tuple[StepTrace | None, bool] | None:
        """Step n decoded (None outside the run) and whether the run is complete: read back, or
        computed now; None for a run this server does not know."""
        if self._growing(run_id):
            live = await self.wait_for(run_id, n)
            scenario = self.scenario(run_id)
            if live is None or scenario is None:
                return None
            count, complete = live
            if not 1 <= n <= count:
                return None, complete
            return KeptSteps(self.store.db, run_id, count, scenario)[n - 1], complete
        try:
            where = await self._seekable(run_id, n)
        except ImportStopped as e:
            if e.status != 404:
                raise
            kept = self._kept(run_id)
            return None, kept is not None and self._done_steps(run_id) is not None
        scenario = self.scenario(run_id)
        if where is None or scenario is None:
            return None
        steps = StoredSteps(self.store.db, run_id, where[0], scenario)
        return await self._computed(run_id, lambda: steps[n - 1]), where[1]
