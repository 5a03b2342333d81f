"""The run store's database: SQLite through the standard library, in WAL mode, one file
(`pagedviz.sqlite3`) in the store's folder. It holds every scenario the server handed a run id
for, the encoded steps served so far and, for each completed run, its step count, so a run id
answers for as long as the database lives: past the in-memory caps (the scenario is read back
and the run recomputed), across restarts and from any of several workers (`--store DIR`,
`PAGEDVIZ_STORE`). Without a named store the database lives in a temporary folder of its own,
removed when the server ends.

Bounds (content bytes: scenario bodies and encoded steps): past `max_bytes` (PAGEDVIZ_STORE_MB)
the oldest steps go first, and scenarios never go for that cap; only past `max_total_bytes`
(PAGEDVIZ_STORE_MAX_MB), with no step left to drop, is the least recently used scenario dropped,
and that is logged. Every write is one `BEGIN IMMEDIATE` transaction that keeps the byte totals
(table `totals`) in step with the rows, so several workers share one database safely (SQLite's
own locking; a writer waits up to BUSY_TIMEOUT_S for another).

An imported recording (run id `rec-…`, app/import_runs.py) is kept whole (table `recordings`;
its replay's state, which changes, in `rec_state`) with its replay's overview lines (`rec_steps`,
in step order; a store of an older pagedviz holds each step's encoding there too) and the replay's
checkpoints (`rec_checkpoints`: the replay's state after every K-th step, from which any step is
computed at once, core/replay_seek.py): they count with the scenarios (never dropped for
PAGEDVIZ_STORE_MB) and go with their scenario past the total cap. The steps of an imported run
computed on demand are kept as a computed run's (`steps`): dropped first past PAGEDVIZ_STORE_MB,
computed again when asked for.

Nothing read back is trusted blindly: the store checks that a scenario read back is valid and
hashes to its run id, and only this file and SQLite's own -wal/-shm files are touched in the
folder; anything else there is left alone.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from pagedviz.app.db_recordings import BUSY_TIMEOUT_S, RecordingTables, StoreError, reason

log = logging.getLogger("pagedviz")

DB_NAME = "pagedviz.sqlite3"
SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS scenarios(run_id TEXT PRIMARY KEY, body BLOB NOT NULL, used INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS scenarios_used ON scenarios(used);
CREATE TABLE IF NOT EXISTS runs(run_id TEXT PRIMARY KEY, num_steps INTEGER NOT NULL,
                                truncated INTEGER NOT NULL, device TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS steps(run_id TEXT NOT NULL, n INTEGER NOT NULL, body BLOB NOT NULL,
                                 gz BLOB, etag TEXT NOT NULL, PRIMARY KEY(run_id, n));
CREATE TABLE IF NOT EXISTS recordings(run_id TEXT PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS rec_state(run_id TEXT PRIMARY KEY, total INTEGER NOT NULL, problem TEXT,
                                     owner TEXT, beat INTEGER);
CREATE TABLE IF NOT EXISTS rec_steps(run_id TEXT NOT NULL, n INTEGER NOT NULL, body BLOB NOT NULL, gz BLOB,
                                     etag TEXT NOT NULL, summary BLOB NOT NULL, PRIMARY KEY(run_id, n));
CREATE TABLE IF NOT EXISTS rec_checkpoints(run_id TEXT NOT NULL, n INTEGER NOT NULL, line_offset INTEGER,
                                           body BLOB NOT NULL, PRIMARY KEY(run_id, n));
CREATE TABLE IF NOT EXISTS totals(k TEXT PRIMARY KEY, v INTEGER NOT NULL);
INSERT OR IGNORE INTO totals VALUES ('scenarios', 0), ('steps', 0);
"""


class RunDB(RecordingTables):
    """One connection to the store's database (shared by this process's threads under a lock)."""

    def __init__(
        self, folder: Path, max_bytes: int, max_total_bytes: int, *, temporary: bool = False
    ) -> None:
        self.folder, self.path = folder, folder / DB_NAME
        self.max_bytes, self.max_total_bytes = max_bytes, max(max_bytes, max_total_bytes)
        self.temporary = temporary
        self.dropped_scenarios = 0  # scenarios dropped past the total cap by this process
        self._lock = threading.Lock()
        where = "the temporary store" if temporary else f"--store {str(folder)[:200]!r}"
        try:
            if folder.exists() and not folder.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "it is a file, not a folder")
            folder.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            mode = self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"WAL mode is not available there (journal mode {mode})")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise sqlite3.DatabaseError(f"{DB_NAME} is of another pagedviz version ({version})")
            with self._write():
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        self.conn.execute(statement)
                self.conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            st = os.stat(self.path)
            self._identity = (st.st_dev, st.st_ino)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"{where} cannot be used: {reason(e)}") from None

    # --- transactions ---------------------------------------------------------------------

    class _Tx:
        def __init__(self, db: RunDB) -> None:
            self.db = db

        def __enter__(self) -> sqlite3.Connection:
            self.db._lock.acquire()
            try:
                self.db.conn.execute("BEGIN IMMEDIATE")
            except BaseException:
                self.db._lock.release()
                raise
            return self.db.conn

        def __exit__(self, kind: object, *_: object) -> None:
            try:
                self.db.conn.execute("ROLLBACK" if kind is not None else "COMMIT")
            finally:
                self.db._lock.release()

    def _write(self) -> RunDB._Tx:
        return RunDB._Tx(self)

    def _read(self, sql: str, args: tuple[object, ...]) -> tuple | None:
        with self._lock:
            return self.conn.execute(sql, args).fetchone()

    # --- scenarios ------------------------------------------------------------------------

    def put_scenario(self, run_id: str, body: bytes) -> None:
        """Keep the scenario of `run_id` (or mark it recently used), then keep the bounds."""
        try:
            with self._write() as c:
                now = time.time_ns()
                if c.execute("UPDATE scenarios SET used=? WHERE run_id=?", (now, run_id)).rowcount:
                    return
                c.execute("INSERT INTO scenarios VALUES (?, ?, ?)", (run_id, body, now))
                c.execute("UPDATE totals SET v=v+? WHERE k='scenarios'", (len(body),))
                self._shed(c, keep=run_id)
        except sqlite3.Error as e:
            raise StoreError(f"the store cannot be written: {reason(e)}") from None

    def scenario(self, run_id: str) -> bytes | None:
        """The body kept for `run_id`, or None."""
        row = self._read("SELECT body FROM scenarios WHERE run_id=?", (run_id,))
        return None if row is None else bytes(row[0])

    # --- runs and steps -------------------------------------------------------------------

    def put_run(self, run_id: str, num_steps: int, truncated: bool, device: str) -> None:
        """A run completed: its step count (steps past it answer 404 without recomputing)."""
        with self._write() as c:
            if c.execute("SELECT 1 FROM scenarios WHERE run_id=?", (run_id,)).fetchone() is not None:
                c.execute(
                    "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?)", (run_id, num_steps, truncated, device)
                )

    def run(self, run_id: str) -> tuple[int, bool, str] | None:
        row = self._read("SELECT num_steps, truncated, device FROM runs WHERE run_id=?", (run_id,))
        return None if row is None else (int(row[0]), bool(row[1]), str(row[2]))

    def put_step(self, run_id: str, n: int, body: bytes, gz: bytes | None, etag: str) -> None:
        """Keep an encoded step of a remembered run (a step too big for the cap is not kept)."""
        size = len(body) + len(gz or b"")
        if size > self.max_bytes // 4:
            return
        with self._write() as c:
            if c.execute("SELECT 1 FROM scenarios WHERE run_id=?", (run_id,)).fetchone() is None:
                return  # its scenario was dropped meanwhile
            old = c.execute(
                "SELECT length(body) + ifnull(length(gz), 0) FROM steps WHERE run_id=? AND n=?", (run_id, n)
            ).fetchone()
            if old is not None:
                return  # kept already (by another worker, say)
            c.execute("INSERT INTO steps VALUES (?, ?, ?, ?, ?)", (run_id, n, body, gz, etag))
            c.execute("UPDATE totals SET v=v+? WHERE k='steps'", (size,))
            self._shed(c, keep=run_id)

    def step(self, run_id: str, n: int) -> tuple[bytes, bytes | None, str] | None:
        """Step n of the run as it was encoded, or None."""
        row = self._read("SELECT body, gz, etag FROM steps WHERE run_id=? AND n=?", (run_id, n))
        if row is None:
            return None
        return bytes(row[0]), (None if row[1] is None else bytes(row[1])), str(row[2])

    # --- bounds ---------------------------------------------------------------------------

    def totals(self) -> tuple[int, int]:
        """(scenario bytes, step bytes) kept."""
        with self._lock:
            rows = dict(self.conn.execute("SELECT k, v FROM totals").fetchall())
        return int(rows.get("scenarios", 0)), int(rows.get("steps", 0))

    def _shed(self, c: sqlite3.Connection, keep: str) -> None:
        """Within the write transaction: the oldest steps go while the total passes max_bytes; then,
        while it passes max_total_bytes, the least recently used scenarios (never `keep`), logged."""
        kept = dict(c.execute("SELECT k, v FROM totals").fetchall())
        scen, steps = int(kept["scenarios"]), int(kept["steps"])
        while steps > 0 and scen + steps > self.max_bytes:
            rows = c.execute(
                "SELECT rowid, length(body) + ifnull(length(gz), 0) FROM steps ORDER BY rowid LIMIT 64"
            ).fetchall()
            if not rows:
                steps = 0
                break
            for rowid, size in rows:
                if scen + steps <= self.max_bytes:
                    break
                c.execute("DELETE FROM steps WHERE rowid=?", (rowid,))
                steps -= size
        c.execute("UPDATE totals SET v=? WHERE k='steps'", (steps,))
        while scen + steps > self.max_total_bytes:
            row = c.execute(
                "SELECT run_id, length(body) FROM scenarios WHERE run_id != ? ORDER BY used LIMIT 1", (keep,)
            ).fetchone()
            if row is None:
                break
            run_id, size = row
            freed = c.execute(
                "SELECT ifnull(sum(length(body) + ifnull(length(gz), 0)), 0) FROM steps WHERE run_id=?",
                (run_id,),
            ).fetchone()[0]
            pinned = self._recording_bytes(c, run_id)
            tables = ("scenarios", "runs", "steps", "recordings", "rec_state", "rec_steps", "rec_checkpoints")
            for table in tables:
                c.execute(f"DELETE FROM {table} WHERE run_id=?", (run_id,))  # noqa: S608 - fixed names
            scen, steps = scen - size - pinned, steps - int(freed)
            self.dropped_scenarios += 1
            log.warning(
                "pagedviz store: dropped the scenario of run %s (its id now answers 404): the store passed "
                "its total cap of %d MB (PAGEDVIZ_STORE_MAX_MB)",
                run_id,
                self.max_total_bytes >> 20,
            )
        c.execute("UPDATE totals SET v=? WHERE k='scenarios'", (scen,))
        c.execute("UPDATE totals SET v=? WHERE k='steps'", (steps,))

    # --- health ---------------------------------------------------------------------------

    def replaced(self) -> str | None:
        """Why the file this connection writes is no longer the store's (removed or replaced
        while the server ran: what it would keep would be lost), or None."""
        try:
            st = os.stat(self.path)
        except OSError as e:
            return f"the store's database {DB_NAME} is gone: {reason(e)}"
        if (st.st_dev, st.st_ino) != self._identity:
            return f"the store's database {DB_NAME} was replaced while the server ran"
        return None

    def problem(self) -> str | None:
        """Why the store cannot take a new run now (for /healthz), or None: its file is gone or
        replaced, or a write cannot start."""
        replaced = self.replaced()
        if replaced is not None:
            return replaced
        try:
            with self._write():
                pass
        except sqlite3.Error as e:
            return f"the store cannot be written: {reason(e)}"
        return None

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    # --- live recordings (app/import_live.py: its own tables, and the recording once closed) --

    def live_exec(self, statements: list[tuple[str, tuple[object, ...]]]) -> list[list[tuple]]:
        """Statements on the live tables in one write transaction; each one's rows."""
        with self._write() as c:
            return [c.execute(sql, args).fetchall() for sql, args in statements]

    def live_read(self, sql: str, args: tuple[object, ...]) -> list[tuple]:
        """The rows of one read of the live tables."""
        with self._lock:
            return self.conn.execute(sql, args).fetchall()

    def put_live_recording(self, run_id: str, path: Path) -> None:
        """Keep a closed live run's recording (the file at `path`) as an import's, in chunks."""
        size = path.stat().st_size
        with self._write() as c:
            old = c.execute("SELECT ifnull(sum(length(body)), 0) FROM recordings WHERE run_id=?", (run_id,))
            size_before = int(old.fetchone()[0])
            c.execute("DELETE FROM recordings WHERE run_id=?", (run_id,))
            rowid = c.execute("INSERT INTO recordings VALUES (?, zeroblob(?))", (run_id, size)).lastrowid
            assert rowid is not None
            with c.blobopen("recordings", "body", rowid) as blob, open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    blob.write(chunk)
            c.execute("UPDATE totals SET v=v+? WHERE k='scenarios'", (size - size_before,))


def check_store(folder: str) -> None:
    """Open (creating) the named store once, or raise StoreError saying why it cannot be used:
    `pagedviz serve` calls it before starting, so a bad --store stops the server at once."""
    RunDB(Path(folder), 1 << 20, 1 << 20).close()


def temporary_db(max_bytes: int, max_total_bytes: int) -> RunDB:
    """A database in a fresh temporary folder, removed with `cleanup_temporary`."""
    folder = Path(tempfile.mkdtemp(prefix="pagedviz-store-"))
    try:
        return RunDB(folder, max_bytes, max_total_bytes, temporary=True)
    except StoreError:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def cleanup_temporary(db: RunDB) -> None:
    """Close a temporary database and remove its folder."""
    with contextlib.suppress(sqlite3.Error):
        db.close()
    shutil.rmtree(db.folder, ignore_errors=True)
