"""Steps served, encoded once: the run store's cache of encoded steps (JSON and gzip bytes with an
ETag, app/encoding.py), so that reading a step again costs no encoding.

It keeps them within a quarter of the store's byte budget, counted with the computed runs' bytes:
when runs and encoded steps together pass the budget, encoded steps give way first. Concurrent
readers of one step share one encoding (done in a worker thread, off the event loop). A step of
a complete run goes to the database too, where a later reader (after eviction, on another
worker, after a restart) finds it without computing. A completed run's first steps are encoded
before anyone asks (a class opens a run at its first steps), and a streaming run's first step as
soon as the run has started.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from typing import Any

from pagedviz.app.cache import BoundedCache
from pagedviz.app.db import RunDB, StoreError
from pagedviz.app.encoding import EncodedStep, encode_step
from pagedviz.app.run import Run
from pagedviz.core.trace import StepTrace

# how many of a completed run's first steps are encoded before anyone asks (a class opens a run at
# its first steps; later steps are encoded by their first reader)
PRE_ENCODE_STEPS = 16
PRE_ENCODE_MAX_RUN_BYTES = 4 << 20
log = logging.getLogger("pagedviz")


class StepCache:
    """The encoded steps of the runs in `runs` (the store's computed runs, whose bytes count
    against the same `max_bytes`), keyed by (run id, step number); `db` gives the store's
    database."""

    def __init__(self, max_bytes: int, runs: BoundedCache[str, Run], db: Callable[[], RunDB]) -> None:
        self.max_bytes, self.runs, self._db = max_bytes, runs, db
        self.encoded: BoundedCache[tuple[str, int], EncodedStep] = BoundedCache(
            max_bytes=max_bytes // 4, keep_newest=False
        )
        # steps being encoded (off the event loop): concurrent readers of one step share the work
        self.encoding: dict[tuple[str, int], tuple[StepTrace, asyncio.Future[EncodedStep]]] = {}
        self._background: set[asyncio.Task[Any]] = set()  # steps encoded before anyone asks

    async def encoded_step(self, run_id: str, n: int, t: StepTrace) -> EncodedStep:
        """Step n of the run (the trace `t`) encoded: from the cache, else encoded once in a
        worker thread, however many readers ask for it meanwhile, and kept."""
        e = self.cached_step(run_id, n, t)
        if e is not None:
            return e
        key = (run_id, n)
        pending = self.encoding.get(key)
        if pending is not None and pending[0] is t:
            return await asyncio.shield(pending[1])
        fut: asyncio.Future[EncodedStep] = asyncio.get_running_loop().create_future()
        self.encoding[key] = (t, fut)
        try:
            e = await asyncio.to_thread(self._encode, run_id, n, t)
        except BaseException as exc:
            if isinstance(exc, Exception):
                fut.set_exception(exc)
                fut.exception()  # mark retrieved: waiters re-raise it themselves
            else:
                fut.cancel()
            raise
        finally:
            if self.encoding.get(key, (None,))[0] is t:
                del self.encoding[key]
        fut.set_result(e)
        self.keep_step(run_id, n, e)
        return e

    def cached_step(self, run_id: str, n: int, t: StepTrace) -> EncodedStep | None:
        """Step n of the run as encoded before, if it was encoded from this very trace."""
        e = self.encoded.peek((run_id, n))
        if e is None or e.trace() is not t:
            return None
        self.encoded.touch((run_id, n))
        return e

    def keep_step(self, run_id: str, n: int, e: EncodedStep) -> None:
        """Keep an encoded step (LRU) within a quarter of the store's bytes; encoded steps give
        way first when runs and encoded steps together pass max_bytes."""
        self.encoded.pop((run_id, n))
        if e.nbytes > self.max_bytes // 16:
            return  # a huge step is encoded per request rather than crowd out the others
        self.encoded.put((run_id, n), e, e.nbytes)  # within a quarter of max_bytes
        self.encoded.shed(self.max_bytes - self.runs.nbytes)

    def make_room(self, run_bytes: int) -> None:
        """A run of `run_bytes` is about to be kept: encoded steps give way first."""
        self.encoded.shed(min(self.max_bytes // 4, self.max_bytes - self.runs.nbytes - run_bytes))

    def of_run(self, run_id: str) -> list[tuple[int, EncodedStep]]:
        """The run's steps encoded so far, by step number."""
        return [(n, e) for (rid, n), e in self.encoded.items() if rid == run_id]

    def _encode(self, run_id: str, n: int, t: StepTrace) -> EncodedStep:
        """encode_step, in a worker thread; a step of a complete run goes to the database too."""
        e = encode_step(t)
        run = self.runs.peek(run_id)
        if run is not None and 1 <= n <= len(run.steps) and run.steps[n - 1] is t:
            try:
                self._db().put_step(run_id, n, e.body, e.gzipped, e.etag)
            except (sqlite3.Error, StoreError) as err:
                log.error("pagedviz store: cannot keep step %d of run %s: %s", n, run_id, err)
        return e

    def pre_encode_soon(self, run: Run) -> None:
        """The first readers of a step would each wait for its encoding: encode a completed run's
        first steps now, one at a time in a worker thread, so that a class opening it finds them
        ready."""
        self._in_background(self._pre_encode(run))

    def encode_soon(self, run_id: str, n: int, t: StepTrace) -> None:
        """Start encoding step n in the background: a streaming run's first step, which its page
        asks for as soon as it hears the run has started (the request then finds the encoding done
        or under way, and waits for that one rather than starting its own)."""
        self._in_background(self._encode_quietly(run_id, n, t))

    def _in_background(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _pre_encode(self, run: Run) -> None:
        if run.nbytes > PRE_ENCODE_MAX_RUN_BYTES:
            return  # a big run's steps are big: each is encoded by its first reader
        for n, t in enumerate(run.steps[:PRE_ENCODE_STEPS], start=1):
            if self.runs.peek(run.run_id) is not run:
                return  # evicted meanwhile
            if not await self._encode_quietly(run.run_id, n, t):
                return

    async def _encode_quietly(self, run_id: str, n: int, t: StepTrace) -> bool:
        try:
            await self.encoded_step(run_id, n, t)
        except Exception:  # noqa: BLE001 - a reader's request reports its own encoding errors
            return False
        return True
