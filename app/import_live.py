"""Live runs: a recording posted as a vLLM server makes it (pagedviz.record with
PAGEDVIZ_RECORD=http://HOST:PORT, record/sink.py), replayed step by step as its lines arrive.

A live run is an imported run (`rec-…` id) whose recording grows: `open` checks the header as an
import's is checked and keeps it; `append` checks each line as an import checks it (a bad one is
refused naming its line, nothing of the batch kept) and keeps the batch in the database (table
`live_lines`: any worker takes a batch, in order, checked against the count kept in `live_runs`;
a restart keeps what arrived). One worker holds the run (`live_runs.owner`, with a beat every
BEAT_S seconds; another takes it on once its holder is gone): its replay (app/live_replay.py)
reads the batches as they are kept and stores each step as an import's replay does, so every
reader of imports (steps, overview, progress, metrics), in any worker, reads a live run as it
reads an import in flight; the run's scenario (its requests so far) is rewritten as it grows.

The run ends when the recorder says so (its last batch, `end`) or, cut, after
PAGEDVIZ_LIVE_IDLE_S seconds without a batch (a quiet server's recorder sends an empty one now and
then); then it becomes the import of its recording: the recording is kept as an import's and
replayed once more as a posted file is (app/import_replay.py `replay_into`, keeping the steps
already stored), which gives the scenario and the agreement a file import gives, and a cut adds
the note a cut last line does.

Bounds (app/settings.py): live runs not yet imported (PAGEDVIZ_MAX_LIVE_RUNS), lines per batch
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
import socket
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pagedviz.app.cache import BoundedCache
from pagedviz.app.db import RunDB
from pagedviz.app.errors import ApiError
from pagedviz.app.import_replay import ImportJob, replay_into, scenario_bytes
from pagedviz.app.import_runs import OWNER, Imports
from pagedviz.app.live_replay import CLOSED, CUT, ENDED, OPEN, Live, check_line, replay_live
from pagedviz.app.run import RunTooLargeError
from pagedviz.core import __version__
from pagedviz.core.recording import Cut, Header, RecordingError, parse_header
from pagedviz.core.replay import ReplayError, Summary, replay_problem, scenario_from

log = logging.getLogger("pagedviz")
LIVE_NOTE = "live: the recording is still arriving from the server; the agreement is said once it closes"
# a live run's scenario bounds its steps by this until it ends (then by its steps, as an import's)
LIVE_MAX_STEPS = 10**9
ROW_S = 0.05  # how old a live run's row the readers' hooks take
HELD_S = 30  # a live run's holder that has not said it is alive for this long may be replaced
TABLES = [
    (
        "CREATE TABLE IF NOT EXISTS live_runs(run_id TEXT PRIMARY KEY, header BLOB NOT NULL, "
        "steps INTEGER NOT NULL, bytes INTEGER NOT NULL, state INTEGER NOT NULL, last REAL NOT NULL, "
        "owner TEXT, beat REAL)",
        (),
    ),
    (
        "CREATE TABLE IF NOT EXISTS live_lines(run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
        "body BLOB NOT NULL, PRIMARY KEY(run_id, seq))",
        (),
    ),
]
APPEND = [
    "UPDATE live_runs SET steps=steps+?, bytes=bytes+?, last=?, state=? "
    "WHERE run_id=? AND steps=? AND state=0",
    "SELECT changes()",
    "INSERT INTO live_lines SELECT ?, (SELECT ifnull(max(seq), 0) + 1 FROM live_lines WHERE run_id=?), ? "
    "WHERE changes()=1",
]


def _gone(owner: str) -> bool:
    """Whether the process `owner` (host:pid) is known to have ended (on this host only)."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError):
        return True
    except PermissionError:
        return False
    return False


class LiveRuns:
    """The live runs of a run store (its imports and database). Any worker takes a live run's
    lines (they are kept in the database); one, its holder, replays them."""

    def __init__(self, imports: Imports, settings: Any) -> None:
        self.imports, self.settings = imports, settings
        self.db: RunDB = imports.store.db
        self.held: dict[str, Live] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._watch: asyncio.Task[None] | None = None
        self._ready = False
        self._rows: BoundedCache[str, tuple[float, tuple]] = BoundedCache(64)
        self._not_live: BoundedCache[str, bool] = BoundedCache(4096)
        imports.live = self  # the imports' hooks: handles(), resume(), received(), flag()

    @property
    def on(self) -> bool:
        return bool(self.settings.live_token)

    def _sql(self, statements: list[tuple[str, tuple[object, ...]]]) -> list[list[tuple]]:
        self._tables()
        return self.db.live_exec(statements)

    def _tables(self) -> None:
        if not self._ready:
            self.db.live_exec(TABLES)
            self._ready = True

    def _row(self, run_id: str, fresh: bool = False) -> tuple | None:
        """(header, steps, bytes, state, last, owner, beat) of a live run, or None. The readers'
        hooks (asked every few milliseconds while a reader waits) take it up to ROW_S old, and
        know at once a run that is not live (a live run's row is kept before its id is told)."""
        if self._not_live.peek(run_id):
            return None
        hit = None if fresh else self._rows.peek(run_id)
        if hit is not None and time.monotonic() - hit[0] < ROW_S:
            return hit[1]
        self._tables()
        rows = self.db.live_read(
            "SELECT header, steps, bytes, state, last, owner, beat FROM live_runs WHERE run_id=?", (run_id,)
        )
        if fresh:  # (from any thread: the caches are the event loop's)
            return rows[0] if rows else None
        if not rows:
            self._not_live.put(run_id, True)
            return None
        self._rows.put(run_id, (time.monotonic(), rows[0]))
        return rows[0]  # type: ignore[no-any-return]

    # --- the hooks app/import_runs.py calls ------------------------------------------------

    def flag(self, run_id: str) -> bool | None:
        """True while the run takes lines, False once a live run ended, None for another run."""
        row = self._row(run_id)
        return None if row is None else row[3] == OPEN

    def handles(self, run_id: str) -> bool:
        """Whether the run is a live run not yet imported whole (this module replays it)."""
        row = self._row(run_id)
        return row is not None and row[3] != CLOSED

    def received(self, run_id: str) -> int | None:
        """How many steps of a live run taking lines have arrived (None: not such a run)."""
        row = self._row(run_id)
        return None if row is None or row[3] != OPEN else int(row[1])

    def resume(self, run_id: str) -> ImportJob | None:
        """The replay of a live run, held here: taken on where its holder is gone (a restart, a
        worker that ended) or quiet for HELD_S seconds; None where another worker holds it."""
        if run_id in self.held:
            return self.held[run_id].job
        row = self._row(run_id, fresh=True)
        if row is None or row[3] == CLOSED:
            return None
        # alive: its beat, or a step stored (its end replays the whole recording without a beat)
        owner, beat = row[5], max(float(row[6] or 0), float(self.db.recording_owner(run_id)[1]))
        now = time.time()
        if owner is not None and owner != OWNER and now - beat < HELD_S and not _gone(owner):
            return None
        claim = "UPDATE live_runs SET owner=?, beat=? WHERE run_id=? AND (owner IS ? OR owner=?)"
        won = self._sql([(claim, (OWNER, now, run_id, owner, owner)), ("SELECT changes()", ())])[1]
        if not won or not won[0][0]:
            return None
        live = self._start(run_id, parse_header(bytes(row[0]), self.imports.line_limit))
        log.info("pagedviz live run %s taken on at step %d", run_id, int(row[1]))
        return live.job

    # --- opening, appending ----------------------------------------------------------------

    def _start(self, run_id: str, header: Header) -> Live:
        loop = asyncio.get_running_loop()
        job = ImportJob(run_id, 0, time.monotonic(), loop.create_future(), started=time.monotonic())
        live = Live(run_id, header, job)
        self.held[run_id] = live
        self.imports.jobs[run_id] = job
        task = loop.create_task(self._run(live, loop))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self._watch is None or self._watch.done():
            self._watch = loop.create_task(self._watch_idle())
        return live

    async def open(self, raw: bytes) -> str:
        """A new live run from its header line; its run id."""
        s = self.settings
        taking = await asyncio.to_thread(self._sql, [("SELECT count(*) FROM live_runs WHERE state<3", ())])
        if taking[0][0][0] >= s.max_live_runs:
            raise ApiError(
                503, "busy", "live", f"{s.max_live_runs} live runs are open (PAGEDVIZ_MAX_LIVE_RUNS)"
            )
        try:
            header = parse_header(raw.strip(), self.imports.line_limit)
        except RecordingError as e:
            raise ApiError(422, "invalid_recording", "line 1", e.message) from None
        problem = replay_problem(header)
        if problem:
            raise ApiError(422, "invalid_recording", "recording", f"line 1: {problem}")
        salt = f"pagedviz {__version__} live\n".encode() + secrets.token_bytes(16)
        run_id = "rec-" + hashlib.sha256(salt + raw).hexdigest()[:16]
        scenario = replace(scenario_from(header, Summary()), notes=(LIVE_NOTE,), max_steps=LIVE_MAX_STEPS)
        # the live row first: a reader that knows the run id finds it live
        row = (run_id, raw.strip(), len(raw), time.time(), OWNER, time.time())
        await asyncio.to_thread(self._sql, [("INSERT INTO live_runs VALUES (?, ?, 0, ?, 0, ?, ?, ?)", row)])
        fd, name = tempfile.mkstemp(prefix="pagedviz-live-", suffix=".jsonl")
        path = Path(name)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw.strip() + b"\n")
            await asyncio.to_thread(self.db.put_recording, run_id, scenario_bytes(scenario), path, 0)
        except BaseException:
            await asyncio.to_thread(self._sql, [("DELETE FROM live_runs WHERE run_id=?", (run_id,))])
            raise
        finally:
            path.unlink(missing_ok=True)
        self._start(run_id, header)
        log.info("pagedviz live run %s opened (%s)", run_id, header.scheduler)
        return run_id

    async def append(self, run_id: str, body: bytes, end: bool) -> tuple[int, int]:
        """Keep a batch of lines (each checked first: a bad one refuses the batch, naming its line);
        `end`: the recorder closes the run. (lines of the batch, the run's steps)."""
        row = await asyncio.to_thread(self._row, run_id, True)
        if row is None:
            raise ApiError(
                404, "not_found", "run_id", f"no live run {run_id[:40]!r} (POST /api/runs/live opens one)"
            )
        if row[3] != OPEN:
            raise ApiError(409, "closed", "run_id", f"the live run {run_id} has ended: open another one")
        steps, nbytes = int(row[1]), int(row[2])
        lines = [raw for raw in body.splitlines() if raw.strip()]
        s = self.settings
        if len(lines) > s.max_live_lines:
            raise ApiError(
                413, "too_many_lines", "body", f"over {s.max_live_lines} lines (PAGEDVIZ_MAX_LIVE_LINES)"
            )
        if nbytes + len(body) > s.max_live_bytes:
            raise ApiError(
                413,
                "run_too_large",
                "body",
                f"the live run passed {s.max_live_bytes >> 20} MB (PAGEDVIZ_MAX_LIVE_MB)",
            )
        for i, raw in enumerate(lines):
            try:
                check_line(raw, steps + i + 2, steps + i + 1, self.imports.line_limit)
            except RecordingError as e:
                raise ApiError(422, "invalid_recording", f"line {e.line}", e.message) from None
        data = b"".join(raw + b"\n" for raw in lines)
        update = (len(lines), len(data), time.time(), ENDED if end else OPEN, run_id, steps)
        statements = [(APPEND[0], update), (APPEND[1], ())]
        if lines:
            statements.append((APPEND[2], (run_id, run_id, data)))
        done = await asyncio.to_thread(self._sql, statements)
        if not done[1][0][0]:  # another batch came first: lines are taken in order only
            raise ApiError(
                409, "out_of_order", "body", f"the live run no longer has {steps} steps: send in order"
            )
        if run_id not in self.held:
            self.resume(run_id)  # its holder is gone: taken on here
        return len(lines), steps + len(lines)

    # --- the replay, and its end -------------------------------------------------------------

    def _beat(self, live: Live, loop: asyncio.AbstractEventLoop) -> None:
        """The holder is alive (in the replay's thread): said in the database, with the scenario
        of the steps so far (its requests), which readers then read afresh."""
        self.db.claim_recording(live.run_id, OWNER)
        self._sql(
            [("UPDATE live_runs SET beat=? WHERE run_id=? AND owner=?", (time.time(), live.run_id, OWNER))]
        )
        s = live.summary
        grew = not live.scenario_steps or len(s.arrivals) > live.scenario_requests
        if s.num_steps and grew and time.monotonic() >= live.scenario_next:
            start = time.monotonic()
            live.scenario_steps, live.scenario_requests = s.num_steps, len(s.arrivals)
            scenario = replace(scenario_from(live.header, s), notes=(LIVE_NOTE,), max_steps=LIVE_MAX_STEPS)
            self.db.replace_scenario(live.run_id, scenario_bytes(scenario))
            loop.call_soon_threadsafe(self.imports.scenarios.pop, live.run_id)
            # a big scenario (every prompt so far) is written at most a twentieth of the time
            live.scenario_next = time.monotonic() + 20 * (time.monotonic() - start)

    async def _run(self, live: Live, loop: asyncio.AbstractEventLoop) -> None:
        job, db = live.job, self.db
        try:
            await asyncio.to_thread(db.claim_recording, live.run_id, OWNER)
            await asyncio.to_thread(
                replay_live, db, live, self.imports.max_bytes, lambda: self._beat(live, loop)
            )
            if not job.cancel.is_set() and live.ended.is_set():
                await asyncio.to_thread(self._finish, live)
        except asyncio.CancelledError:
            job.cancel.set()
            raise
        except (RecordingError, ReplayError, RunTooLargeError, OSError, ValueError, ValidationError) as e:
            log.warning("pagedviz live run %s stopped: %s", live.run_id, e)
            problem = (
                f"too_large:{e.steps_done}"
                if isinstance(e, RunTooLargeError)
                else f"failed:{type(e).__name__}: {e}"
            )
            with contextlib.suppress(Exception):
                db.set_recording_problem(live.run_id, problem)
                self._sql([("UPDATE live_runs SET state=3 WHERE run_id=?", (live.run_id,))])
        except Exception:
            log.exception("pagedviz live run %s failed", live.run_id)
        finally:
            self.held.pop(live.run_id, None)
            if self.imports.jobs.get(live.run_id) is job:
                del self.imports.jobs[live.run_id]
            self.imports.scenarios.pop(live.run_id)
            if not job.done.done():
                job.done.set_result(None)

    def _finish(self, live: Live) -> None:
        """The ended run as the import of its recording (in a worker thread): kept as an import's
        recording and replayed as a posted file is (the steps already stored are kept)."""
        run_id, db, steps = live.run_id, self.db, live.summary.num_steps
        closed: list[tuple[str, tuple[object, ...]]] = [
            ("UPDATE live_runs SET state=3 WHERE run_id=?", (run_id,)),
            ("DELETE FROM live_lines WHERE run_id=?", (run_id,)),
        ]
        if not steps:
            db.set_recording_problem(run_id, "failed:the live run ended before its first step")
            self._sql(closed)
            return
        if live.state == CUT:
            live.summary.cut = Cut(steps + 2, steps)
            log.info("pagedviz live run %s closed as cut at step %d (quiet)", run_id, steps)
        fd, name = tempfile.mkstemp(prefix="pagedviz-live-", suffix=".jsonl")
        path = Path(name)
        try:
            row = self._row(run_id, fresh=True)
            batches = db.live_read("SELECT body FROM live_lines WHERE run_id=? ORDER BY seq", (run_id,))
            with os.fdopen(fd, "wb") as f:
                f.write(bytes(row[0] if row else b"") + b"\n")
                for (body,) in batches:
                    f.write(bytes(body))
            db.put_live_recording(run_id, path)
            job = ImportJob(run_id, steps, time.monotonic(), live.job.done, started=time.monotonic())
            job.cancel = live.job.cancel  # the server's stop stops this replay too
            replay_into(db, job, path, self.imports.line_limit, live.summary, self.imports.max_bytes)
            if not job.cancel.is_set():
                self._sql(closed)
        finally:
            path.unlink(missing_ok=True)

    async def _watch_idle(self) -> None:
        """End, as cut, each live run held here and quiet for PAGEDVIZ_LIVE_IDLE_S seconds."""
        idle = self.settings.live_idle_s
        while self.held:
            await asyncio.sleep(min(1.0, idle / 4))
            for run_id in list(self.held):
                quiet = "UPDATE live_runs SET state=2 WHERE run_id=? AND state=0 AND last<?"
                await asyncio.to_thread(self._sql, [(quiet, (run_id, time.time() - idle))])

    async def start(self) -> None:
        """At the server's start: each live run not imported yet is taken on (if no other worker
        holds it), and ends when quiet."""
        if not self.on:
            return
        rows = await asyncio.to_thread(self._sql, [("SELECT run_id FROM live_runs WHERE state<3", ())])
        for (run_id,) in rows[0]:
            try:
                self.resume(str(run_id))
            except Exception as e:  # noqa: BLE001 (one run's problem stops no server)
                log.warning("pagedviz live run %s cannot be taken on: %s", run_id, e)

    def shutdown(self) -> None:
        """The server stops: the replays stop, and the runs held here may be taken on at once."""
        for live in self.held.values():
            live.job.cancel.set()
        if self.held:
            with contextlib.suppress(Exception):
                self._sql([("UPDATE live_runs SET owner=NULL WHERE owner=?", (OWNER,))])
