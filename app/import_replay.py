"""The replay of an imported recording into the run store's database (app/import_runs.py runs it
in a worker thread), and its steps read back from there.

`first_pass` reads the recording once: every line validated, the arrivals and each request's
output length summarised. `replay_into` replays it (core/replay.py) step by step, writing each
step's trace gzipped with its overview line every FLUSH_STEPS steps or FLUSH_S seconds, and holds
no step once written; its `ImportJob` says how far it has come and takes its cancellation.
`StoredSteps` reads a replayed run's steps back one at a time, decoded (StepTrace.from_dict),
for the readers that want the whole run (metrics, figures, narration).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from pagedviz.app.cache import BoundedCache
from pagedviz.app.db import RunDB
from pagedviz.app.encoding import encode_step
from pagedviz.app.run import RunTooLargeError
from pagedviz.app.summaries import step_summary
from pagedviz.core import Scenario
from pagedviz.core.recording import Header, bounded_lines, iter_recording
from pagedviz.core.replay import ReplayError, StreamingImport, Summary, replay_problem, summarise
from pagedviz.core.trace import StepTrace

# a replay writes its steps to the database every FLUSH_STEPS steps or FLUSH_S seconds
FLUSH_STEPS = 64
FLUSH_S = 0.25
DECODED_CACHE = 4  # steps read back and decoded, kept per run for the next reader


class StepNotKeptError(LookupError):
    """A step of an imported run that the database does not hold."""


@dataclass
class ImportJob:
    """A replay in flight: written by its worker thread, read by routes."""

    run_id: str
    total: int
    queued: float
    done: asyncio.Future[None]
    started: float | None = None
    steps_done: int = 0  # steps replayed and in the database
    cancel: threading.Event = field(default_factory=threading.Event)
    path: Path | None = None  # the recording's temporary copy, removed when the replay ends


def first_pass(path: Path, line_limit: int) -> tuple[Header, Summary]:
    """Read the recording once: the header and the summary the replay needs. Raises
    RecordingError naming the line of the first problem, ReplayError for a configuration
    pagedviz does not replay."""
    with open(path, "rb") as f:
        header, steps = iter_recording(bounded_lines(f, line_limit), line_limit)
        problem = replay_problem(header)
        if problem:
            raise ReplayError(f"line 1: {problem}")
        return header, summarise(steps)


def scenario_bytes(scenario: Scenario) -> bytes:
    return json.dumps(scenario.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def replay_into(
    db: RunDB, job: ImportJob, path: Path, line_limit: int, summary: Summary | None, max_bytes: int
) -> None:
    """Replay the recording at `path` into the database (in a worker thread), step by step."""
    with open(path, "rb") as f1, open(path, "rb") as f2:
        header, first = iter_recording(bounded_lines(f1, line_limit), line_limit)
        _, second = iter_recording(bounded_lines(f2, line_limit), line_limit)
        imp = StreamingImport(header, first if summary is None else summary, second)
        job.total = imp.num_steps
        rows: list[tuple[int, bytes, bytes | None, str, bytes]] = []
        nbytes, last, n = 0, time.monotonic(), 0

        def flush() -> None:
            if rows and not db.put_rec_steps(job.run_id, rows):
                raise ReplayError("the recording was dropped from the store (PAGEDVIZ_STORE_MAX_MB)")
            rows.clear()
            job.steps_done = n

        for t in imp.engine.run():
            if job.cancel.is_set():
                return
            imp.comparer.feed(imp.engine.scheduler.current, t.scheduler)  # type: ignore[attr-defined]
            n = t.step
            e = encode_step(t)
            line = json.dumps(step_summary(t), separators=(",", ":")).encode()
            nbytes += len(e.gzipped or e.body) + len(line)
            if nbytes > max_bytes:
                raise RunTooLargeError(n, max_bytes)
            # a step is kept gzipped only (a quarter of its bytes); a reader that takes no gzip
            # gets it inflated
            rows.append((n, b"" if e.gzipped else e.body, e.gzipped, e.etag, line))
            del t, e
            if n == 1 or len(rows) >= FLUSH_STEPS or time.monotonic() - last > FLUSH_S:
                flush()
                last = time.monotonic()
        flush()
        db.replace_scenario(job.run_id, scenario_bytes(imp.imported([]).scenario))
        db.put_run(job.run_id, n, False, "cpu")


class StoredSteps(Sequence[StepTrace]):
    """An imported run's steps read back from the database one at a time, as they are asked
    for (the last few decoded are kept): whole-run readers iterate it without holding it."""

    def __init__(self, db: RunDB, run_id: str, num_steps: int) -> None:
        self.db, self.run_id, self.num_steps = db, run_id, num_steps
        self._cache: BoundedCache[int, StepTrace] = BoundedCache(DECODED_CACHE)

    def __len__(self) -> int:
        return self.num_steps

    def _get(self, i: int) -> StepTrace:
        if i < 0:
            i += self.num_steps
        if not 0 <= i < self.num_steps:
            raise IndexError(i)
        t = self._cache.peek(i)
        if t is None:
            kept = self.db.rec_step(self.run_id, i + 1)
            if kept is None:
                raise StepNotKeptError(f"step {i + 1} of {self.run_id} is not kept")
            t = StepTrace.from_dict(json.loads(kept[0]))  # rec_step inflates it
            self._cache.put(i, t)
        return t

    @overload
    def __getitem__(self, i: int) -> StepTrace: ...

    @overload
    def __getitem__(self, i: slice) -> list[StepTrace]: ...

    def __getitem__(self, i: int | slice) -> StepTrace | list[StepTrace]:
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(self.num_steps))]
        return self._get(i)

    def __iter__(self) -> Iterator[StepTrace]:
        for i in range(self.num_steps):
            yield self._get(i)
