"""Live runs: a recording posted as a vLLM server makes it (pagedviz.record with
PAGEDVIZ_RECORD=http://HOST:PORT, record/sink.py), replayed step by step as its lines arrive.

A live run is an imported run (`rec-…` id) whose recording grows: `open` checks the header as an
import's is checked and keeps it; `append` checks each line as an import checks it (a bad one is
refused naming its line, nothing of the batch kept), keeps the batch in the database (table
`live_lines`, so a restart keeps what arrived) and hands its steps to the run's replay, a worker
thread that replays them through core/replay.py's engine as they come (its recorded scheduler
reads the next step only when the engine asks for it, so a step is replayed as soon as it has
arrived) and stores each one as an import's replay does: every reader of imports (steps,
overview, progress, metrics) reads a live run as it reads an import in flight.

The run closes when the recorder says so (its last batch, `end`) or, cut, after
PAGEDVIZ_LIVE_IDLE_S seconds without a line; then it becomes the import of its recording: the
recording is kept as an import's and replayed once more as a posted file is (app/import_replay.py
`replay_into`, keeping the steps already stored), which gives the scenario and the agreement a
file import gives, and a cut adds the note a cut last line does. A server that finds an open live
run (it stopped meanwhile) replays what arrived and takes further lines.

Bounds (app/settings.py): live runs open at once (PAGEDVIZ_MAX_LIVE_RUNS), lines per batch
(PAGEDVIZ_MAX_LIVE_LINES), bytes per batch (PAGEDVIZ_MAX_LIVE_BODY_MB), bytes of a run's lines in
all (PAGEDVIZ_MAX_LIVE_MB), each line (PAGEDVIZ_MAX_RECORD_LINE_MB).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pagedviz.app.db import RunDB
from pagedviz.app.errors import ApiError
from pagedviz.app.import_replay import ImportJob, replay_into, scenario_bytes
from pagedviz.app.import_runs import OWNER, Imports
from pagedviz.app.live_replay import Live, add_step, check_line, replay_live
from pagedviz.app.run import RunTooLargeError
from pagedviz.core import __version__
from pagedviz.core.recording import Cut, Header, RecordingError, Step, parse_header
from pagedviz.core.replay import ReplayError, Summary, replay_problem, scenario_from

log = logging.getLogger("pagedviz")
LIVE_NOTE = "live: the recording is still arriving from the server; the agreement is said once it closes"
TABLES = [
    (
        "CREATE TABLE IF NOT EXISTS live_runs(run_id TEXT PRIMARY KEY, header BLOB NOT NULL, "
        "steps INTEGER NOT NULL, bytes INTEGER NOT NULL, closed INTEGER NOT NULL)",
        (),
    ),
    (
        "CREATE TABLE IF NOT EXISTS live_lines(run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
        "body BLOB NOT NULL, PRIMARY KEY(run_id, seq))",
        (),
    ),
]


class LiveRuns:
    """The live runs of a run store (its imports and database)."""

    def __init__(self, imports: Imports, settings: Any) -> None:
        self.imports, self.settings = imports, settings
        self.db: RunDB = imports.store.db
        self.open_runs: dict[str, Live] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._watch: asyncio.Task[None] | None = None
        self._ready = False
        imports.live = self  # the imports' hooks: resume(), received(), flag()

    @property
    def on(self) -> bool:
        return bool(self.settings.live_token)

    def _sql(self, statements: list[tuple[str, tuple[object, ...]]]) -> list[list[tuple]]:
        if not self._ready:
            self.db.live_exec(TABLES)
            self._ready = True
        return self.db.live_exec(statements)

    def _row(self, run_id: str) -> tuple | None:
        rows = self._sql([("SELECT header, steps, bytes, closed FROM live_runs WHERE run_id=?", (run_id,))])[
            0
        ]
        return rows[0] if rows else None

    # --- the hooks app/import_runs.py calls ------------------------------------------------

    def flag(self, run_id: str) -> bool | None:
        """True while the run is live, False once a live run closed, None for another run."""
        if run_id in self.open_runs:
            return True
        row = self._row(run_id)
        return None if row is None else not row[3]

    def received(self, run_id: str) -> int | None:
        """How many steps of an open live run have arrived (None: not an open live run)."""
        live = self.open_runs.get(run_id)
        return None if live is None or live.closing else live.steps

    def resume(self, run_id: str) -> ImportJob | None:
        """An open live run that a restart stopped: what arrived is replayed again, and it takes
        further lines (the quiet that closes it counts from now)."""
        if run_id in self.open_runs:
            return self.open_runs[run_id].job
        row = self._row(run_id)
        if row is None or row[3]:
            return None
        header = parse_header(bytes(row[0]), self.imports.line_limit)
        live = self._start(run_id, header)
        batches = self._sql([("SELECT body FROM live_lines WHERE run_id=? ORDER BY seq", (run_id,))])[0]
        for (body,) in batches:
            for raw in bytes(body).splitlines():
                if raw.strip():
                    try:
                        step = Step.model_validate_json(raw)
                    except ValidationError:
                        break
                    add_step(live.summary, step)
                    live.feed.put(step)
        live.steps, live.nbytes = int(row[1]), int(row[2])
        live.job.total = live.steps
        log.info("pagedviz live run %s resumed at step %d", run_id, live.steps)
        return live.job

    # --- opening, appending, closing -------------------------------------------------------

    def _start(self, run_id: str, header: Header) -> Live:
        loop = asyncio.get_running_loop()
        job = ImportJob(run_id, 0, time.monotonic(), loop.create_future(), started=time.monotonic())
        live = Live(run_id, header, job)
        self.open_runs[run_id] = live
        self.imports.jobs[run_id] = job
        task = loop.create_task(self._run(live))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self._watch is None or self._watch.done():
            self._watch = loop.create_task(self._watch_idle())
        return live

    async def open(self, raw: bytes) -> str:
        """A new live run from its header line; its run id."""
        if len(self.open_runs) >= self.settings.max_live_runs:
            raise ApiError(
                503,
                "busy",
                "live",
                f"{self.settings.max_live_runs} live runs are open (PAGEDVIZ_MAX_LIVE_RUNS)",
            )
        try:
            header = parse_header(raw.strip(), self.imports.line_limit)
        except RecordingError as e:
            raise ApiError(422, "invalid_recording", "line 1", e.message) from None
        problem = replay_problem(header)
        if problem:
            raise ApiError(422, "invalid_recording", "recording", f"line 1: {problem}")
        nonce = secrets.token_bytes(16)
        run_id = (
            "rec-" + hashlib.sha256(f"pagedviz {__version__} live\n".encode() + raw + nonce).hexdigest()[:16]
        )
        scenario = replace(scenario_from(header, Summary()), notes=(LIVE_NOTE,))
        fd, name = tempfile.mkstemp(prefix="pagedviz-live-", suffix=".jsonl")
        path = Path(name)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw.strip() + b"\n")
            await asyncio.to_thread(self.db.put_recording, run_id, scenario_bytes(scenario), path, 0)
        finally:
            path.unlink(missing_ok=True)
        statement = "INSERT INTO live_runs VALUES (?, ?, 0, ?, 0)"
        await asyncio.to_thread(self._sql, [(statement, (run_id, raw.strip(), len(raw)))])
        self._start(run_id, header)
        log.info("pagedviz live run %s opened (%s)", run_id, header.scheduler)
        return run_id

    def _live(self, run_id: str) -> Live:
        live = self.open_runs.get(run_id)
        if live is None and self.resume(run_id) is not None:
            live = self.open_runs.get(run_id)
        if live is None or live.closing:
            if self.flag(run_id) is False:
                raise ApiError(409, "closed", "run_id", f"the live run {run_id} is closed: open another one")
            raise ApiError(
                404, "not_found", "run_id", f"no live run {run_id[:40]!r} (POST /api/runs/live opens one)"
            )
        return live

    async def append(self, run_id: str, body: bytes, end: bool) -> tuple[int, int]:
        """Keep a batch of lines (each checked first: a bad one refuses the batch, naming its line)
        and hand its steps to the replay; `end`: the recorder closes the run. (lines, steps)."""
        live = self._live(run_id)
        lines = [raw for raw in body.splitlines() if raw.strip()]
        s = self.settings
        if len(lines) > s.max_live_lines:
            raise ApiError(
                413, "too_many_lines", "body", f"over {s.max_live_lines} lines (PAGEDVIZ_MAX_LIVE_LINES)"
            )
        if live.nbytes + len(body) > s.max_live_bytes:
            raise ApiError(
                413,
                "run_too_large",
                "body",
                f"the live run passed {s.max_live_bytes >> 20} MB (PAGEDVIZ_MAX_LIVE_MB)",
            )
        steps = []
        for i, raw in enumerate(lines):
            expected = live.steps + i + 1
            try:
                steps.append(check_line(raw, expected + 1, expected, self.imports.line_limit))
            except RecordingError as e:
                raise ApiError(422, "invalid_recording", f"line {e.line}", e.message) from None
        if lines:
            data = b"\n".join(lines) + b"\n"
            statements: list[tuple[str, tuple[object, ...]]] = [
                (
                    "INSERT INTO live_lines VALUES "
                    "(?, (SELECT ifnull(max(seq), 0) + 1 FROM live_lines WHERE run_id=?), ?)",
                    (run_id, run_id, data),
                ),
                (
                    "UPDATE live_runs SET steps=steps+?, bytes=bytes+? WHERE run_id=?",
                    (len(lines), len(data), run_id),
                ),
            ]
            await asyncio.to_thread(self._sql, statements)
            live.nbytes += len(data)
            for step in steps:
                add_step(live.summary, step)
                live.feed.put(step)
            live.steps += len(steps)
            live.job.total = live.steps
        live.last = time.monotonic()
        if end:
            await self.close(run_id, cut=False)
        elif lines and time.monotonic() - live.scenario_at > 2:
            live.scenario_at = time.monotonic()
            scenario = replace(scenario_from(live.header, live.summary), notes=(LIVE_NOTE,))
            await asyncio.to_thread(self.db.replace_scenario, run_id, scenario_bytes(scenario))
            self.imports.scenarios.pop(run_id)
        return len(lines), live.steps

    async def close(self, run_id: str, cut: bool) -> None:
        """The run ends: no more lines; once its replay has stored what arrived, it becomes the
        import of its recording (cut: as a file whose last line was cut)."""
        live = self.open_runs.get(run_id)
        if live is None or live.closing:
            return
        live.closing = True
        if cut:
            live.summary.cut = Cut(live.steps + 2, live.steps)
            log.info(
                "pagedviz live run %s closed as cut after %d quiet seconds", run_id, self.settings.live_idle_s
            )
        live.feed.put(None)

    async def _run(self, live: Live) -> None:
        job, db = live.job, self.db
        try:
            await asyncio.to_thread(db.claim_recording, live.run_id, OWNER)
            await asyncio.to_thread(replay_live, db, live, self.imports.max_bytes)
            if not job.cancel.is_set() and live.steps:
                await asyncio.to_thread(self._finish, live)
        except asyncio.CancelledError:
            job.cancel.set()
            raise
        except (RecordingError, ReplayError, RunTooLargeError, OSError, ValueError) as e:
            log.warning("pagedviz live run %s stopped: %s", live.run_id, e)
            problem = (
                f"too_large:{e.steps_done}"
                if isinstance(e, RunTooLargeError)
                else f"failed:{type(e).__name__}: {e}"
            )
            with contextlib.suppress(Exception):
                db.set_recording_problem(live.run_id, problem)
        except Exception:
            log.exception("pagedviz live run %s failed", live.run_id)
        finally:
            self.open_runs.pop(live.run_id, None)
            if self.imports.jobs.get(live.run_id) is job:
                del self.imports.jobs[live.run_id]
            self.imports.scenarios.pop(live.run_id)
            if not job.done.done():
                job.done.set_result(None)

    def _finish(self, live: Live) -> None:
        """The closed run as the import of its recording (in a worker thread)."""
        run_id, db = live.run_id, self.db
        fd, name = tempfile.mkstemp(prefix="pagedviz-live-", suffix=".jsonl")
        path = Path(name)
        try:
            header = self._row(run_id)
            batches = self._sql([("SELECT body FROM live_lines WHERE run_id=? ORDER BY seq", (run_id,))])[0]
            with os.fdopen(fd, "wb") as f:
                f.write(bytes(header[0] if header else b"") + b"\n")
                for (body,) in batches:
                    f.write(bytes(body))
            db.put_live_recording(run_id, path)
            job = ImportJob(run_id, live.steps, time.monotonic(), live.job.done, started=time.monotonic())
            job.cancel = live.job.cancel  # the server's stop stops this replay too
            replay_into(db, job, path, self.imports.line_limit, live.summary, self.imports.max_bytes)
            self._sql(
                [
                    ("UPDATE live_runs SET closed=1 WHERE run_id=?", (run_id,)),
                    ("DELETE FROM live_lines WHERE run_id=?", (run_id,)),
                ]
            )
        finally:
            path.unlink(missing_ok=True)

    async def _watch_idle(self) -> None:
        """Close, as cut, each live run quiet for PAGEDVIZ_LIVE_IDLE_S seconds."""
        while self.open_runs:
            await asyncio.sleep(min(1.0, self.settings.live_idle_s / 4))
            now = time.monotonic()
            for run_id, live in list(self.open_runs.items()):
                if not live.closing and now - live.last > self.settings.live_idle_s:
                    await self.close(run_id, cut=True)

    async def start(self) -> None:
        """At the server's start: every open live run of the store resumes (and closes when quiet)."""
        if not self.on:
            return
        rows = await asyncio.to_thread(self._sql, [("SELECT run_id FROM live_runs WHERE closed=0", ())])
        for (run_id,) in rows[0]:
            with contextlib.suppress(Exception):
                self.resume(str(run_id))

    def shutdown(self) -> None:
        for live in self.open_runs.values():
            live.job.cancel.set()
