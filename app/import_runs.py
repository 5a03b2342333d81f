"""Imported runs (POST /api/runs/import, run ids `rec-…`) kept on disk, never whole in memory.

The route streams the body to a temporary file and reads it once (`first_pass`: every line
validated, the arrivals and each request's output length summarised), so a bad recording is
refused at once naming its line. The store then keeps the recording and the scenario it amounts
to in its database (app/db.py), and a background task replays it with cheap steps (core/replay_seek.py)
on the compute pool (app/compute_replay.py: a worker process; in a thread of this process where
the store computes in threads), writing each step's overview line and, every CHECKPOINT_EVERY
steps, the replay's state to the database as it goes; the progress says how many of the
recording's steps are done. A reader may ask for any step of the recording at once: it is
computed from the nearest checkpoint (app/import_seek.py) while the replay pauses (the pool's
pause between two of its steps), and kept.

The recording stays in the database, so an imported run outlives eviction and restarts: a
server that finds a recording whose replay did not end (it stopped meanwhile) replays it again,
keeping the steps it has. Workers sharing a store leave a recording to the one replaying it (its
claim in the database: host and pid, and when it last stored a step) and read its steps as they
are stored. The whole-run readers (metrics, figures, narration, compare) take the steps one at a
time, replayed in full from the start (`StoredSteps`, app/import_seek.py).

The interface a recording that grows (a live run) may use: `start(run_id, path, summary, total)`
replays a kept recording; `step`/`trace` read any step up to the recording's kept total;
`status` says how far the replay has come.

Bounds: the body (PAGEDVIZ_MAX_IMPORT_MB, the route's 413), each line
(PAGEDVIZ_MAX_RECORD_LINE_MB), the replayed steps' encoded bytes (PAGEDVIZ_STORE_MB: past it the
replay stops and the run answers 413 naming it), and how many runs and imports are in flight
(PAGEDVIZ_MAX_IN_PROGRESS + PAGEDVIZ_MAX_QUEUED, a 503 past them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import sqlite3
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from pagedviz.app.cache import BoundedCache
from pagedviz.app.compute import ComputePool
from pagedviz.app.compute_replay import ReplaySpec
from pagedviz.app.compute_stream import WorkerError
from pagedviz.app.db import RunDB, StoreError
from pagedviz.app.import_reads import ImportReads, ImportStopped
from pagedviz.app.import_replay import ImportJob, replay_into
from pagedviz.app.run import BusyError, RunTooLargeError
from pagedviz.core import Scenario, ScenarioError
from pagedviz.core.limits import Limits
from pagedviz.core.recording import RecordingError
from pagedviz.core.replay import ReplayError, Summary

log = logging.getLogger("pagedviz")
REC_ID = re.compile(r"rec-[0-9a-f]{16}")
# an imported scenario read back is checked for its form only (its size is the recording's)
UNBOUNDED = Limits(**{n: 1 << 62 for n in Limits.__dataclass_fields__})
# the process replaying a recording (several workers share one store: one replays, the others
# read its steps from the database); its claim lapses when it stores no step for STALE_S seconds
OWNER = f"{socket.gethostname()}:{os.getpid()}"
STALE_S = 60


def _size(n: int) -> str:
    return f"{n >> 20} MB" if n >= 1 << 20 else f"{n >> 10} KB"


def is_import(run_id: str) -> bool:
    return REC_ID.fullmatch(run_id) is not None


class Host(Protocol):
    """What the imports need of the run store they belong to (app/store.py's RunStore)."""

    @property
    def db(self) -> RunDB: ...

    @property
    def in_flight(self) -> Mapping[str, object]: ...  # computed runs in flight, beside the replays

    @property
    def max_in_progress(self) -> int: ...

    @property
    def max_queued(self) -> int: ...

    @property
    def max_db_bytes(self) -> int: ...

    @property
    def pool(self) -> ComputePool | None: ...  # where the replays run (None: in threads of this process)


class Imports(ImportReads):
    """The store's imported runs: the replays in flight, and reads of kept ones."""

    def __init__(self, store: Host, line_limit: int) -> None:
        self.store = store
        self.line_limit = line_limit
        self.jobs: dict[str, ImportJob] = {}
        self.scenarios: BoundedCache[str, Scenario] = BoundedCache(16)
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots: asyncio.Semaphore | None = None
        self.live: Any = None  # the live runs (app/import_live.py): handles(), resume(), received(), flag()

    @property
    def max_bytes(self) -> int:
        return self.store.max_db_bytes

    def _kept(self, run_id: str) -> tuple[int, str | None] | None:
        try:
            return self.store.db.recording(run_id)
        except (sqlite3.Error, StoreError) as e:
            log.error("pagedviz store: cannot read the recording of run %s: %s", run_id, e)
            return None

    def _done_steps(self, run_id: str) -> int | None:
        kept = self.store.db.run(run_id)
        return None if kept is None else kept[0]

    def _job(self, run_id: str) -> ImportJob | None:
        """The replay in flight, resumed where none is (or where it was started in an event loop
        that has ended: a test client's per-request loop, whose tasks ended with it)."""
        job = self.jobs.get(run_id)
        if job is not None and job.done.get_loop() is not asyncio.get_running_loop():
            job.cancel.set()
            self.jobs.pop(run_id, None)
            job = None
        return job or self.resume(run_id)

    def knows(self, run_id: str) -> bool:
        return run_id in self.jobs or self._kept(run_id) is not None

    # --- replays ---------------------------------------------------------------------------

    def start(self, run_id: str, path: Path, summary: Summary | None, total: int) -> ImportJob:
        """Replay the recording at `path` (removed afterwards) into the database, as a task of
        its own. Raises BusyError when every slot and queue place is taken."""
        job = self.jobs.get(run_id)
        if job is not None and job.done.get_loop() is asyncio.get_running_loop():
            with contextlib.suppress(OSError):
                path.unlink()
            return job
        store = self.store
        if len(self.jobs) + len(store.in_flight) >= store.max_in_progress + store.max_queued:
            with contextlib.suppress(OSError):
                path.unlink()
            raise BusyError(retry_after=5)
        loop = asyncio.get_running_loop()
        job = ImportJob(run_id, total, time.monotonic(), loop.create_future(), path=path)
        self.jobs[run_id] = job
        task = loop.create_task(self._replay(job, path, summary))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    async def _replay(self, job: ImportJob, path: Path, summary: Summary | None) -> None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.store.max_in_progress)
        db = self.store.db
        try:
            async with self._slots:
                job.started = time.monotonic()
                await asyncio.to_thread(db.claim_recording, job.run_id, OWNER)
                pool = self.store.pool
                if pool is None:
                    await asyncio.to_thread(
                        replay_into, db, job, path, self.line_limit, summary, self.max_bytes
                    )
                else:
                    await self._on_pool(pool, job, path, summary)
        except asyncio.CancelledError:
            job.cancel.set()
            job.done.cancel()
            raise
        except (
            RecordingError,
            ReplayError,
            RunTooLargeError,
            sqlite3.Error,
            StoreError,
            ScenarioError,
            WorkerError,
        ) as e:
            problem = (
                f"too_large:{e.steps_done}"
                if isinstance(e, RunTooLargeError)
                else f"failed:{str(e).removeprefix('the run failed: ')}"
                if isinstance(e, WorkerError)
                else f"failed:{type(e).__name__}: {e}"
            )
            log.warning("pagedviz import of %s stopped: %s", job.run_id, e)
            with contextlib.suppress(sqlite3.Error, StoreError):
                db.set_recording_problem(job.run_id, problem)
        except Exception:
            log.exception("pagedviz import of %s failed", job.run_id)
            with contextlib.suppress(sqlite3.Error, StoreError):
                db.set_recording_problem(job.run_id, "failed:the replay failed (the server's log says why)")
        finally:
            run_id = job.run_id
            if self.jobs.get(run_id) is job:
                del self.jobs[run_id]
            self.scenarios.pop(run_id)  # its notes now hold the agreement
            with contextlib.suppress(OSError):
                path.unlink()
        if not job.done.done():
            job.done.set_result(None)

    async def _on_pool(self, pool: ComputePool, job: ImportJob, path: Path, summary: Summary | None) -> None:
        """The replay as a job of the compute pool (app/compute_replay.py), in a worker process."""
        db = self.store.db
        spec = ReplaySpec(
            str(db.folder),
            db.max_bytes,
            db.max_total_bytes,
            job.run_id,
            str(path),
            self.line_limit,
            summary,
            self.max_bytes,
        )

        def progress(n: int) -> None:
            job.steps_done = n

        pj = pool.submit_replay(job.run_id, spec, progress)
        job.pool_job = pj
        try:
            await asyncio.wrap_future(pj.future)
        except asyncio.CancelledError:
            pool.cancel(pj)
            raise

    def resume(self, run_id: str) -> ImportJob | None:
        """The replay of a kept recording whose replay did not end (the server stopped
        meanwhile), started again from the recording kept in the database."""
        job = self.jobs.get(run_id)
        if job is not None and job.done.get_loop() is asyncio.get_running_loop():
            return job
        kept = self._kept(run_id)
        if kept is None or kept[1] is not None or self._done_steps(run_id) is not None:
            return None
        if self.live is not None and self.live.handles(run_id):  # a live run: its holder replays it
            return self.live.resume(run_id)  # type: ignore[no-any-return]
        if self.replayed_elsewhere(run_id):
            return None
        fd, name = tempfile.mkstemp(prefix="pagedviz-import-", suffix=".jsonl")
        os.close(fd)
        path = Path(name)
        try:
            if not self.store.db.copy_recording(run_id, path):
                path.unlink()
                return None
        except (OSError, sqlite3.Error) as e:
            log.error("pagedviz store: cannot read the recording of run %s: %s", run_id, e)
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        return self.start(run_id, path, None, kept[0])

    def replayed_elsewhere(self, run_id: str) -> bool:
        """Whether another process (a worker beside this one) is replaying the recording: it
        claimed it, stored a step within STALE_S seconds and, on this host, is alive."""
        try:
            owner, beat = self.store.db.recording_owner(run_id)
        except (sqlite3.Error, StoreError):
            return False
        if owner is None or owner == OWNER or time.time() - beat > STALE_S:
            return False
        host, _, pid = owner.rpartition(":")
        if host == socket.gethostname():
            try:
                os.kill(int(pid), 0)
            except (ProcessLookupError, ValueError):
                return False
            except PermissionError:
                pass
        return True

    def stopped(self, run_id: str) -> ImportStopped | None:
        """Why the run's replay stopped, or None."""
        kept = self._kept(run_id)
        if kept is None or kept[1] is None:
            return None
        kind, _, detail = kept[1].partition(":")
        if kind == "too_large":
            return ImportStopped(
                413,
                "run_too_large",
                "recording",
                f"the imported run's steps passed {_size(self.max_bytes)} after {detail} steps "
                "(PAGEDVIZ_STORE_MB raises it)",
            )
        return ImportStopped(422, "invalid_recording", "recording", detail)

    # --- reads -----------------------------------------------------------------------------

    def status(self, run_id: str) -> dict[str, Any] | None:
        job = self._job(run_id)
        if job is not None:
            if job.started is None:
                return {"state": "queued", "steps_done": 0, "max_steps": job.total}
            elapsed = round(time.monotonic() - job.started, 2)
            return {
                "state": "computing",
                "steps_done": job.steps_done,
                "max_steps": job.total,
                "elapsed_s": elapsed,
            }
        kept = self._kept(run_id)
        if kept is None:
            return None
        done = self._done_steps(run_id)
        if done is not None:
            return {"state": "done", "steps_done": done, "max_steps": done}
        kept_steps = self.store.db.rec_steps_kept(run_id)
        if self.replayed_elsewhere(run_id):
            return {"state": "computing", "steps_done": kept_steps, "max_steps": kept[0]}
        stopped = self.stopped(run_id)
        out: dict[str, Any] = {"state": "refused", "steps_done": kept_steps}
        return {**out, "max_steps": kept[0], "reason": stopped.message if stopped else ""}

    def scenario(self, run_id: str) -> Scenario | None:
        live = self.live is not None and self.live.handles(run_id)  # its scenario grows: read afresh
        sc = None if live else self.scenarios.get(run_id)
        if sc is not None:
            return sc
        try:
            raw = self.store.db.scenario(run_id)
        except (sqlite3.Error, StoreError) as e:
            log.error("pagedviz store: cannot read the scenario of run %s: %s", run_id, e)
            return None
        if raw is None:
            return None
        try:
            sc = Scenario.from_dict(json.loads(raw), UNBOUNDED)
        except (ScenarioError, ValueError, RecursionError):
            return None
        if not live:
            self.scenarios.put(run_id, sc)
        return sc

    async def wait_for(self, run_id: str, n: int) -> tuple[int, bool] | None:
        """Wait until step n is in the database or the replay has ended: (steps kept, whether
        the run is complete); None for a run this server does not know. Raises ImportStopped
        for a replay that stopped before step n."""
        job = self._job(run_id)
        first = time.monotonic() + 60  # a live run's first step is waited for a minute
        while job is not None and job.steps_done < n and not job.done.done():
            arrived = None if self.live is None else self.live.received(run_id)
            if arrived is not None and n > arrived and (arrived or time.monotonic() > first):
                return job.steps_done, False  # a live run's step that has not arrived
            await asyncio.sleep(0.01)
        if job is not None and job.steps_done >= n:
            return job.steps_done, False
        while job is None and self.replayed_elsewhere(run_id):  # another worker replays it
            kept = await asyncio.to_thread(self.store.db.rec_steps_kept, run_id)
            arrived = None if self.live is None else self.live.received(run_id)
            if kept >= n or (arrived is not None and n > arrived):  # kept, or not arrived yet
                return kept, False
            if self._done_steps(run_id) is not None:
                break
            await asyncio.sleep(0.05)
            job = self._job(run_id)  # taken over here if that worker has gone
            while job is not None and job.steps_done < n and not job.done.done():
                await asyncio.sleep(0.01)
            if job is not None and job.steps_done >= n:
                return job.steps_done, False
        done = self._done_steps(run_id)
        if done is not None:
            return done, True
        stopped = self.stopped(run_id)
        if stopped is not None:
            kept = self.store.db.rec_steps_kept(run_id)
            if n > kept:
                raise stopped
            return kept, False
        return None

    def overview_chunks(self, run_id: str, head: dict[str, Any], count: int) -> Iterator[bytes]:
        """The run's overview as JSON, written in chunks: `head` and the overview lines of steps
        1..count read from the database a thousand at a time; the lines the replay stored after
        `count` was taken are left out, so that the steps listed are the `num_steps` in `head`."""
        text = json.dumps(head, separators=(",", ":"))
        yield text[:-1].encode() + b',"steps":['
        for start in range(1, count + 1, 1000):
            lines = self.store.db.rec_summaries(run_id, start, min(1000, count + 1 - start))
            yield (b"," if start > 1 and lines else b"") + b",".join(lines)
        yield b"]}"

    def close(self) -> None:
        """The server stops: each replay in flight stops at its next step and its temporary copy
        of the recording goes now (the task may not get to its own cleanup; a later server
        resumes the replay from the database)."""
        for job in self.jobs.values():
            job.cancel.set()
            if job.pool_job is not None and self.store.pool is not None:
                self.store.pool.cancel(job.pool_job)
            if job.path is not None:
                with contextlib.suppress(OSError):
                    job.path.unlink()
