"""The run store: computed runs in an LRU bounded by count and by their measured bytes, the
scenarios behind them in a larger LRU (also bounded in measured bytes), and behind both a SQLite
database (app/db.py) that keeps every scenario handed a run id and the steps served, so a run
evicted from memory is recomputed on demand, and a run id answers for as long as the database
lives: in a temporary folder by default, or in `--store DIR` across restarts and shared by
several workers. (Each LRU is an app/cache.py BoundedCache: the runs, the scenarios, the runs
refused, the steps encoded.)

Engine work runs in the compute processes (app/compute.py; a store made without a pool uses
threads of this process) under admission control: at most `max_in_progress` runs are started and
not finished (sharing the processes, which also pause runs while memory is short), up to
`max_queued` more wait their turn (their progress says `queued`), and past that a
new run is refused (BusyError: a 503 with Retry-After). Concurrent requests for one run share one
computation. A run refused for its time or size is remembered as refused, not recomputed.

Steps served are kept encoded (JSON and gzip bytes with an ETag) within the same byte budget, so
reading a step again costs no encoding; those of complete runs go to the database too, where a
later reader (after eviction, on another worker, after a restart) finds them without computing
(app/step_cache.py).

Runs stream: a computation is a task of its own, and its steps are readable as the engine makes
them (`get_step` answers step n once it exists), so a big run's first step is seen while the
later ones compute, and a reader that goes away does not stop the computation.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import sqlite3
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pagedviz.app.cache import BoundedCache
from pagedviz.app.db import RunDB, StoreError, cleanup_temporary, temporary_db
from pagedviz.app.import_runs import Imports, is_import
from pagedviz.app.run import BusyError, Progress, Run, RunTooLargeError, compute, measured_bytes
from pagedviz.app.step_cache import StepCache
from pagedviz.core import Scenario, ScenarioError, __version__
from pagedviz.core.engine import RunTooLongError
from pagedviz.core.limits import Limits
from pagedviz.core.trace import StepTrace

if TYPE_CHECKING:
    from pagedviz.app.compute import ComputePool

RUN_ID = re.compile(r"[0-9a-f]{20}")
log = logging.getLogger("pagedviz")


def canonical(scenario: Scenario) -> str:
    """The scenario as canonical JSON (sorted keys, no spaces): what its run id hashes."""
    return json.dumps(scenario.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def run_id_of(scenario: Scenario, canon: str | None = None) -> str:
    """Content hash of the canonical scenario and the engine version."""
    canon = canonical(scenario) if canon is None else canon
    return hashlib.sha256(f"pagedviz {__version__}\n{canon}".encode()).hexdigest()[:20]


class RunStore:
    def __init__(
        self,
        max_runs: int,
        max_bytes: int,
        max_scenarios: int,
        max_seconds: float | None = None,
        store_dir: Path | None = None,
        *,
        max_run_bytes: int | None = None,
        max_scenario_bytes: int = 1 << 40,
        max_in_progress: int = 1 << 10,
        max_queued: int = 1 << 10,
        max_db_bytes: int = 1 << 30,
        max_db_total_bytes: int = 4 << 30,
        limits: Limits | None = None,
        pool: ComputePool | None = None,
        max_record_line_bytes: int = 16 << 20,
    ) -> None:
        self.max_runs, self.max_bytes, self.max_scenarios = max_runs, max_bytes, max_scenarios
        self.max_seconds, self.max_run_bytes = max_seconds, max_run_bytes
        self.max_scenario_bytes = max_scenario_bytes
        self.max_in_progress, self.max_queued = max_in_progress, max_queued
        self.limits = limits or Limits()
        # where runs compute: in worker processes (the server's), else in threads of this process
        self.pool = pool
        # every scenario handed a run id, and the steps served: a named store (shared by workers,
        # kept across restarts) opened now, so that a bad one stops the server at start; else a
        # temporary one made on first use and removed with the store
        self.max_db_bytes, self.max_db_total_bytes = max_db_bytes, max_db_total_bytes
        self._db = RunDB(store_dir, max_db_bytes, max_db_total_bytes) if store_dir is not None else None
        # computed runs by their measured bytes, the scenarios behind them (a run evicted is
        # recomputed from its scenario), and the runs refused for a bound: run id -> (kind, steps)
        self.runs: BoundedCache[str, Run] = BoundedCache(max_runs, max_bytes)
        self.scenarios: BoundedCache[str, Scenario] = BoundedCache(max_scenarios, max_scenario_bytes)
        self.refused: BoundedCache[str, tuple[str, int]] = BoundedCache(max_scenarios)
        self.in_flight: dict[str, asyncio.Future[Run]] = {}
        self.progress: dict[str, Progress] = {}
        self.partial: dict[str, list[StepTrace]] = {}  # the steps so far of each run in flight
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots: asyncio.Semaphore | None = None
        self.computations = 0
        # steps served, encoded once: at most a quarter of max_bytes, counted with the runs' bytes
        self.step_cache = StepCache(max_bytes, self.runs, lambda: self.db)
        self._background: set[asyncio.Task[Any]] = set()  # runs noted in the database
        # imported recordings (rec- ids): kept in the database, replayed there (app/import_runs.py)
        self.imports = Imports(self, max_record_line_bytes)

    @property
    def db(self) -> RunDB:
        """The store's database (a temporary one is made here on first use)."""
        if self._db is None:
            self._db = temporary_db(self.max_db_bytes, self.max_db_total_bytes)
            weakref.finalize(self, cleanup_temporary, self._db)
        return self._db

    def db_problem(self) -> str | None:
        """Why the database cannot take a new run now, or None (a temporary one not yet made
        has none)."""
        return None if self._db is None else self._db.problem()

    def remember(self, scenario: Scenario) -> str:
        """Keep the scenario, in memory and in the database; its run id. Raises StoreError when
        the database cannot keep it, since the run id could then be forgotten."""
        canon = canonical(scenario)
        run_id = run_id_of(scenario, canon)
        if self.scenarios.touch(run_id):  # kept by this process already (and in the database)
            return run_id
        if self._db is not None:
            replaced = self._db.replaced()
            if replaced is not None:
                raise StoreError(replaced)
        self.db.put_scenario(run_id, canon.encode())
        self._keep(run_id, scenario)
        return run_id

    def _keep(self, run_id: str, scenario: Scenario) -> None:
        if not self.scenarios.touch(run_id):
            self.scenarios.put(run_id, scenario, measured_bytes(scenario))

    def _scenario(self, run_id: str) -> Scenario | None:
        """The remembered scenario of `run_id`: in memory, else read back from the database
        (checked: one that is not valid under this server's limits, or not this run's, is
        ignored)."""
        kept = self.scenarios.peek(run_id)
        if kept is not None:
            return kept
        if not RUN_ID.fullmatch(run_id):
            return None
        try:
            raw = self.db.scenario(run_id)
        except (sqlite3.Error, StoreError) as e:
            log.error("pagedviz store: cannot read the scenario of run %s: %s", run_id, e)
            return None
        if raw is None:
            return None
        try:
            scenario = Scenario.from_dict(json.loads(raw), self.limits)
        except (ScenarioError, ValueError, RecursionError):
            return None
        if run_id_of(scenario) != run_id:
            return None
        self._keep(run_id, scenario)
        return scenario

    async def stored_step(self, run_id: str, n: int) -> tuple[bytes, bytes | None, str, bool] | None:
        """Step n of a run not in memory, as the database keeps it encoded: (body, gzipped, ETag,
        whether the run is complete), or None (not kept: it is computed). Nothing is read for a
        run this process holds or computes, or one it refused."""
        if is_import(run_id):  # an imported run's steps are all kept, once replayed
            return await self.imports.step(run_id, n)
        if run_id in self.runs or run_id in self.in_flight or run_id in self.refused:
            return None
        if self._db is None or not RUN_ID.fullmatch(run_id):
            return None
        db = self.db

        def read() -> tuple[bytes, bytes | None, str, bool] | None:
            kept = db.step(run_id, n)
            return None if kept is None else (*kept, db.run(run_id) is not None)

        try:
            return await asyncio.to_thread(read)
        except sqlite3.Error as e:
            log.error("pagedviz store: cannot read step %d of run %s: %s", n, run_id, e)
            return None

    def knows(self, run_id: str) -> bool:
        """Whether this server can answer for the run: computed, computing, remembered here or
        in the database (computes nothing)."""
        if is_import(run_id):
            return self.imports.knows(run_id)
        return run_id in self.runs or run_id in self.in_flight or self._scenario(run_id) is not None

    def _refuse(self, run_id: str) -> None:
        kind, steps = self.refused[run_id]
        if kind == "too_long":
            raise RunTooLongError(steps)
        raise RunTooLargeError(steps, self.max_run_bytes or 0)

    async def get(self, run_id: str) -> Run | None:
        """The computed run, computing (once) from the remembered scenario if needed."""
        if is_import(run_id):  # its steps are read back from the database as they are asked for
            return await self.imports.get(run_id)  # type: ignore[no-any-return]
        run = self.runs.get(run_id)
        if run is not None:
            return run
        fut = self._start(run_id)
        return None if fut is None else await asyncio.shield(fut)

    async def get_step(self, run_id: str, n: int) -> tuple[StepTrace | None, Run | None]:
        """Step n (from 1) as soon as it is computed, with the run if that is complete: (trace,
        None) while later steps still compute, (trace or None when n is outside the run, run)
        once it is complete; (None, None) for a run this server does not know."""
        if is_import(run_id):
            found = await self.imports.trace(run_id, n)
            if found is None:
                return None, None
            return found[0], (await self.imports.get(run_id) if found[1] else None)
        run = self.runs.get(run_id)
        if run is None:
            fut = self._start(run_id)
            if fut is None:
                return None, None
            steps = self.partial.get(run_id, [])
            while n >= 1 and len(steps) < n and not fut.done():
                await asyncio.sleep(0.01)  # the worker thread appends steps; poll for step n
            if n >= 1 and len(steps) >= n:
                return steps[n - 1], None
            run = await asyncio.shield(fut)
        return (run.steps[n - 1] if 1 <= n <= len(run.steps) else None), run

    async def settles_within(self, run_id: str, seconds: float) -> bool:
        """Whether the run's computation ends (done or refused) within `seconds`: a run that
        finishes soon after its first step is answered whole rather than streamed."""
        if run_id in self.runs:
            return True
        fut = self.in_flight.get(run_id)
        if fut is None:
            return True
        done, _ = await asyncio.wait({fut}, timeout=seconds)
        return bool(done)

    def _start(self, run_id: str) -> asyncio.Future[Run] | None:
        """The future of the run's computation, started (as a task of its own) unless it is in
        flight already; None for a run this server does not know. Raises for a refused run and
        BusyError when every computing slot and queue place is taken."""
        if run_id in self.refused:
            self._refuse(run_id)
        fut = self.in_flight.get(run_id)
        if fut is not None:
            if fut.get_loop() is asyncio.get_running_loop():
                return fut
            # started in an event loop that has ended (a test client's per-request loop): its task
            # is gone with it, so this loop computes the run again
            for table in (self.in_flight, self.progress, self.partial):
                table.pop(run_id, None)
        scenario = self._scenario(run_id)
        if scenario is None:
            return None
        if len(self.in_flight) >= self.max_in_progress + self.max_queued:
            raise BusyError(retry_after=max(1, min(30, int(self.max_seconds or 5) // 2)))
        fut = asyncio.get_running_loop().create_future()
        self.in_flight[run_id] = fut
        self.progress[run_id] = Progress(scenario.max_steps, time.monotonic())
        self.partial[run_id] = []
        task = asyncio.create_task(self._compute(run_id, scenario, fut))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return fut

    async def _compute(self, run_id: str, scenario: Scenario, fut: asyncio.Future[Run]) -> None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_in_progress)
        progress, steps = self.progress[run_id], self.partial[run_id]
        try:
            async with self._slots:
                progress.started = time.monotonic()
                self.computations += 1
                args = (run_id, scenario, self.max_seconds, progress, self.max_run_bytes, steps)
                if self.pool is None:
                    run = await asyncio.to_thread(lambda: compute(*args))
                else:
                    job = self.pool.submit(*args)
                    try:
                        run = await asyncio.wrap_future(job.future)
                    except asyncio.CancelledError:
                        self.pool.cancel(job)  # its worker drops it before its next step
                        raise
        except BaseException as e:
            if isinstance(e, (RunTooLongError, RunTooLargeError)):
                kind = "too_long" if isinstance(e, RunTooLongError) else "too_large"
                self.refused.put(run_id, (kind, e.steps_done))
            if not isinstance(e, Exception):
                fut.cancel()
                raise  # cancelled (the server stops): the task ends so
            fut.set_exception(e)
            fut.exception()  # mark retrieved: waiters re-raise it themselves
            return
        finally:
            self.in_flight.pop(run_id, None)
            self.progress.pop(run_id, None)
            self.partial.pop(run_id, None)
        fut.set_result(run)
        self._put(run)
        persist = asyncio.get_running_loop().create_task(self._persist_run(run))
        self._background.add(persist)
        persist.add_done_callback(self._background.discard)
        self.step_cache.pre_encode_soon(run)

    async def _persist_run(self, run: Run) -> None:
        """Note the completed run in the database (its step count), with the steps encoded while
        it computed (a streamed first step)."""
        early = self.step_cache.of_run(run.run_id)
        db = self.db

        def write() -> None:
            db.put_run(run.run_id, len(run.steps), run.truncated, run.device)
            for n, e in early:
                db.put_step(run.run_id, n, e.body, e.gzipped, e.etag)

        try:
            await asyncio.to_thread(write)
        except (sqlite3.Error, StoreError) as e:
            log.error("pagedviz store: cannot note run %s in the database: %s", run.run_id, e)

    def status(self, run_id: str) -> dict | None:
        """done (with its steps), computing (steps so far, seconds), queued (waiting for a slot,
        with how many are ahead), refused (over a bound), waiting (known, not computed: the next
        read computes it), or None for a run this server does not know."""
        if is_import(run_id):
            return self.imports.status(run_id)
        run = self.runs.peek(run_id)
        if run is not None:
            return {"state": "done", "steps_done": len(run.steps), "max_steps": run.scenario.max_steps}
        p = self.progress.get(run_id)
        if p is not None:
            if p.started is None:
                ahead = sum(1 for q in self.progress.values() if q.started is None and q.queued < p.queued)
                return {"state": "queued", "steps_done": 0, "max_steps": p.max_steps, "queue_ahead": ahead}
            elapsed = round(time.monotonic() - p.started, 2)
            return {
                "state": "computing",
                "steps_done": p.steps_done,
                "max_steps": p.max_steps,
                "elapsed_s": elapsed,
                **({"paused": True} if p.paused else {}),
            }
        scenario = self._scenario(run_id)
        if scenario is not None:
            state = "refused" if run_id in self.refused else "waiting"
            return {"state": state, "steps_done": 0, "max_steps": scenario.max_steps}
        return None

    def _put(self, run: Run) -> None:
        # encoded steps give way first, then the least recently used runs (the newest one is
        # always kept: it is never over max_run_bytes)
        self.step_cache.make_room(run.nbytes)
        self.runs.put(run.run_id, run, run.nbytes)
