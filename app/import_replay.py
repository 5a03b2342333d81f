"""The replay of an imported recording into the run store's database (app/import_runs.py runs it
in a worker thread).

`first_pass` reads the recording once: every line validated, the arrivals and each request's
output length summarised. `replay_into` replays it with cheap steps (core/replay_seek.py: the
recorded decisions applied, no trace), writing each step's overview line every FLUSH_STEPS steps
or FLUSH_S seconds and the replay's state every CHECKPOINT_EVERY steps, and compares pagedviz's
own scheduler as it goes; its `ImportJob` says how far it has come, takes its cancellation and
pauses it while a reader computes a step. The steps themselves are computed on demand from the
checkpoints (app/import_seek.py, whose `StoredSteps` the whole-run readers take).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pagedviz.app.db import RunDB
from pagedviz.app.encoding import encode_step
from pagedviz.app.import_seek import CHECKPOINT_EVERY, StepNotKeptError, StoredSteps
from pagedviz.app.run import RunTooLargeError
from pagedviz.app.summaries import step_summary
from pagedviz.core import Scenario
from pagedviz.core.recording import Header, bounded_lines, iter_recording
from pagedviz.core.replay import ReplayError, StreamingImport, Summary, replay_problem, summarise
from pagedviz.core.replay_seek import FileSource, StepLines, cheap_step, checkpoint, header_end

# a replay writes its overview lines to the database every FLUSH_STEPS steps or FLUSH_S seconds
FLUSH_STEPS = 512
FLUSH_S = 0.25
PAUSE_S = 0.005  # a paused replay looks again this often
__all__ = ["StepNotKeptError", "StoredSteps"]  # app/import_seek.py's, for the routes


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
    readers: int = 0  # steps being computed on demand: the replay pauses meanwhile
    pool_job: Any = None  # the compute pool's job replaying it (None: a thread of this process)
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
    """replay_steps in this thread: stops at job.cancel, pauses between two steps while a reader
    computes one (job.readers), and says in job.steps_done how far it has stored."""
    for _, stored in replay_steps(db, job.run_id, path, line_limit, summary, max_bytes):
        job.steps_done = stored
        if job.cancel.is_set():
            return
        while job.readers and not job.cancel.is_set():  # paused while someone reads a step
            time.sleep(PAUSE_S)


def replay_steps(
    db: RunDB, run_id: str, path: Path, line_limit: int, summary: Summary | None, max_bytes: int
) -> Iterator[tuple[int, int]]:
    """Replay the recording at `path` into the database, step by step: each step cheap
    (core/replay_seek.py) but the first (in full, kept encoded: the page reads it first), its
    overview line kept, and the replay's state every CHECKPOINT_EVERY steps. Yields after each
    step (the step, and how many steps are stored); the caller may stop or pause between two."""
    with open(path, "rb") as f1, open(path, "rb") as f2:
        header, first = iter_recording(bounded_lines(f1, line_limit), line_limit)
        if summary is None:
            summary = summarise(first)
        source = FileSource(f2)
        lines = StepLines(source, header_end(source), summary.num_steps)
        imp = StreamingImport(header, summary, lines)
        e = imp.engine
        rows: list[tuple[int, bytes, bytes | None, str, bytes]] = []
        nbytes, last, n, stored = 0, time.monotonic(), 0, 0

        def flush() -> int:
            if rows and not db.put_rec_steps(run_id, rows):
                raise ReplayError("the recording was dropped from the store (PAGEDVIZ_STORE_MAX_MB)")
            rows.clear()
            return n

        while not e.done and e.step_no < e.scenario.max_steps:
            if e.step_no == 0:  # the first step in full, kept: the page reads it first
                t = e.step()
                line, scheduled = step_summary(t), t.scheduler
                enc = encode_step(t)
                nbytes += len(enc.gzipped or enc.body)
                db.put_step(run_id, 1, enc.body, enc.gzipped, enc.etag)
            else:
                line, out = cheap_step(e)
                scheduled = out.to_dict()
            n = e.step_no
            imp.comparer.feed(e.scheduler.current, scheduled)  # type: ignore[attr-defined]
            raw = json.dumps(line, separators=(",", ":")).encode()
            nbytes += len(raw)
            # an overview line alone (no body, no ETag): the step itself is computed on demand
            rows.append((n, b"", None, "", raw))
            if n % CHECKPOINT_EVERY == 0:
                cp = checkpoint(e, lines)
                nbytes += len(cp.body)
                stored = flush()
                if not db.put_checkpoint(run_id, cp.n, cp.offset, cp.body):
                    raise ReplayError("the recording was dropped from the store (PAGEDVIZ_STORE_MAX_MB)")
            if nbytes > max_bytes:
                raise RunTooLargeError(n, max_bytes)
            if n == 1 or len(rows) >= FLUSH_STEPS or time.monotonic() - last > FLUSH_S:
                stored = flush()
                last = time.monotonic()
            yield n, stored
        flush()
        db.replace_scenario(run_id, scenario_bytes(imp.imported([]).scenario))
        db.put_run(run_id, n, False, "cpu")
        yield n, n
