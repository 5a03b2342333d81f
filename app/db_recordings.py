"""The run store's tables of imported recordings (app/db.py's RunDB has them): the recording kept
whole (`recordings`, copied in and out in chunks, or read at any offset by `RecordingReader`), its
replay's state (`rec_state`: total, why it stopped, who replays it), its overview lines in step
order (`rec_steps`) and its checkpoints (`rec_checkpoints`, core/replay_seek.py). Every write is
one transaction of RunDB's, which keeps the byte totals and the bounds (`_shed`)."""

from __future__ import annotations

import contextlib
import gzip
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUSY_TIMEOUT_S = 30.0  # a writer waits this long for another


class StoreError(OSError):
    """The store cannot be used; the message says why and names --store."""


def reason(e: BaseException) -> str:
    """An error's message as the store says it."""
    return (e.strerror if isinstance(e, OSError) and e.strerror else str(e)) or type(e).__name__


class RecordingTables:
    """The imported recordings' reads and writes (a mixin of RunDB: its connection, lock,
    transactions and bounds)."""

    conn: sqlite3.Connection
    path: Path
    _lock: threading.Lock
    _write: Callable[[], Any]
    _read: Callable[[str, tuple[object, ...]], tuple | None]
    _shed: Callable[[sqlite3.Connection, str], None]
    step: Callable[[str, int], tuple[bytes, bytes | None, str] | None]

    # --- imported recordings --------------------------------------------------------------

    def put_recording(self, run_id: str, scenario: bytes, path: Path, total: int) -> None:
        """Keep an imported recording (the file at `path`, copied in chunks) with the scenario it
        amounts to and its number of steps, then keep the bounds."""
        size = path.stat().st_size
        try:
            with self._write() as c:
                if c.execute("SELECT 1 FROM rec_state WHERE run_id=?", (run_id,)).fetchone() is not None:
                    return
                now = time.time_ns()
                c.execute("INSERT OR REPLACE INTO scenarios VALUES (?, ?, ?)", (run_id, scenario, now))
                c.execute("INSERT INTO rec_state VALUES (?, ?, NULL, NULL, NULL)", (run_id, total))
                # the blob is its row's last column (SQLite then writes the zeroblob's pages without
                # making it in memory) and the row is never updated (that would rewrite it whole:
                # what changes is in rec_state); the file is copied into it in chunks
                cur = c.execute("INSERT INTO recordings VALUES (?, zeroblob(?))", (run_id, size))
                rowid = cur.lastrowid
                assert rowid is not None
                with c.blobopen("recordings", "body", rowid) as blob, open(path, "rb") as f:
                    while chunk := f.read(1 << 20):
                        blob.write(chunk)
                c.execute("UPDATE totals SET v=v+? WHERE k='scenarios'", (len(scenario) + size,))
                self._shed(c, run_id)
        except sqlite3.Error as e:
            raise StoreError(f"the store cannot be written: {reason(e)}") from None

    def recording(self, run_id: str) -> tuple[int, str | None] | None:
        """(number of steps, why its replay stopped or None) of a kept recording, or None."""
        row = self._read("SELECT total, problem FROM rec_state WHERE run_id=?", (run_id,))
        return None if row is None else (int(row[0]), row[1])

    def copy_recording(self, run_id: str, path: Path) -> bool:
        """Write the kept recording to `path` (in chunks); False when it is not kept."""
        with self._lock:
            row = self.conn.execute("SELECT rowid FROM recordings WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                return False
            with (
                self.conn.blobopen("recordings", "body", row[0], readonly=True) as blob,
                open(path, "wb") as f,
            ):
                while chunk := blob.read(1 << 20):
                    f.write(chunk)
        return True

    def claim_recording(self, run_id: str, owner: str) -> None:
        """Note that `owner` (host:pid) replays the recording now (other workers then wait for it)."""
        with self._write() as c:
            c.execute(
                "UPDATE rec_state SET owner=?, beat=? WHERE run_id=?", (owner, int(time.time()), run_id)
            )

    def recording_owner(self, run_id: str) -> tuple[str | None, int]:
        """Who last replayed the recording (host:pid, or None) and when it last stored a step."""
        row = self._read("SELECT owner, beat FROM rec_state WHERE run_id=?", (run_id,))
        return (None, 0) if row is None else (row[0], int(row[1] or 0))

    def set_recording_problem(self, run_id: str, problem: str | None) -> None:
        """Why the recording's replay stopped (None: it may be replayed again)."""
        with self._write() as c:
            c.execute("UPDATE rec_state SET problem=? WHERE run_id=?", (problem and problem[:500], run_id))

    def replace_scenario(self, run_id: str, body: bytes) -> None:
        """The imported run's scenario once its replay ends (with the agreement in its notes)."""
        with self._write() as c:
            old = c.execute("SELECT length(body) FROM scenarios WHERE run_id=?", (run_id,)).fetchone()
            if old is None:
                return
            c.execute("UPDATE scenarios SET body=? WHERE run_id=?", (body, run_id))
            c.execute("UPDATE totals SET v=v+? WHERE k='scenarios'", (len(body) - int(old[0]),))

    def put_rec_steps(self, run_id: str, rows: list[tuple[int, bytes, bytes | None, str, bytes]]) -> bool:
        """Keep replayed steps of an imported run: (n, body, gzipped, ETag, overview line) each.
        False when its recording is no longer kept (dropped past the total cap)."""
        with self._write() as c:
            if c.execute("SELECT 1 FROM rec_state WHERE run_id=?", (run_id,)).fetchone() is None:
                return False
            added = 0
            for n, body, gz, etag, summary in rows:
                cur = c.execute(
                    "INSERT OR IGNORE INTO rec_steps VALUES (?, ?, ?, ?, ?, ?)",
                    (run_id, n, body, gz, etag, summary),
                )
                if cur.rowcount:
                    added += len(body) + len(gz or b"") + len(summary)
            c.execute("UPDATE totals SET v=v+? WHERE k='scenarios'", (added,))
            c.execute("UPDATE rec_state SET beat=? WHERE run_id=?", (int(time.time()), run_id))
            self._shed(c, run_id)
        return True

    def rec_step(self, run_id: str, n: int) -> tuple[bytes, bytes | None, str] | None:
        """Step n of an imported run: (body, gzipped, ETag); a step kept gzipped only (its body
        empty) is inflated here."""
        row = self._read("SELECT body, gz, etag FROM rec_steps WHERE run_id=? AND n=?", (run_id, n))
        if row is None or not row[2]:  # an overview line alone: the step is computed on demand
            return self.step(run_id, n)
        gz = None if row[1] is None else bytes(row[1])
        body = bytes(row[0]) if row[0] or gz is None else gzip.decompress(gz)
        return body, gz, str(row[2])

    def put_checkpoint(self, run_id: str, n: int, offset: int | None, body: bytes) -> bool:
        """Keep the replay's state after step n (`offset`: the byte offset of step n + 1's line
        in the recording). False when the recording is no longer kept."""
        with self._write() as c:
            if c.execute("SELECT 1 FROM rec_state WHERE run_id=?", (run_id,)).fetchone() is None:
                return False
            cur = c.execute(
                "INSERT OR IGNORE INTO rec_checkpoints VALUES (?, ?, ?, ?)", (run_id, n, offset, body)
            )
            if cur.rowcount:
                c.execute("UPDATE totals SET v=v+? WHERE k='scenarios'", (len(body),))
                self._shed(c, run_id)
        return True

    def checkpoint(self, run_id: str, n: int) -> tuple[int, int | None, bytes] | None:
        """The replay's last checkpoint at or before step n: (its step, offset, body), or None."""
        row = self._read(
            "SELECT n, line_offset, body FROM rec_checkpoints WHERE run_id=? AND n<=? "
            "ORDER BY n DESC LIMIT 1",
            (run_id, n),
        )
        return None if row is None else (int(row[0]), None if row[1] is None else int(row[1]), bytes(row[2]))

    def checkpoint_bytes(self, run_id: str) -> tuple[int, int]:
        """(number, bytes) of the replay's checkpoints kept for the run."""
        row = self._read(
            "SELECT count(*), ifnull(sum(length(body)), 0) FROM rec_checkpoints WHERE run_id=?", (run_id,)
        )
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def recording_reader(self, run_id: str) -> RecordingReader | None:
        """Random access to the kept recording's bytes, on a connection of its own (close it)."""
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        row = conn.execute("SELECT rowid FROM recordings WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            conn.close()
            return None
        return RecordingReader(conn, conn.blobopen("recordings", "body", row[0], readonly=True))

    def rec_steps_kept(self, run_id: str) -> int:
        """How many leading steps of the imported run are kept (steps are kept in order)."""
        row = self._read("SELECT ifnull(max(n), 0) FROM rec_steps WHERE run_id=?", (run_id,))
        return int(row[0]) if row else 0

    def rec_summaries(self, run_id: str, start: int, count: int) -> list[bytes]:
        """The overview lines of steps start .. start + count - 1 of an imported run."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT summary FROM rec_steps WHERE run_id=? AND n>=? AND n<? ORDER BY n",
                (run_id, start, start + count),
            ).fetchall()
        return [bytes(r[0]) for r in rows]

    @staticmethod
    def _recording_bytes(c: sqlite3.Connection, run_id: str) -> int:
        rec = c.execute(
            "SELECT ifnull(sum(length(body)), 0) FROM recordings WHERE run_id=?", (run_id,)
        ).fetchone()[0]
        steps = c.execute(
            "SELECT ifnull(sum(length(body) + ifnull(length(gz), 0) + length(summary)), 0) FROM rec_steps "
            "WHERE run_id=?",
            (run_id,),
        ).fetchone()[0]
        cps = c.execute(
            "SELECT ifnull(sum(length(body)), 0) FROM rec_checkpoints WHERE run_id=?", (run_id,)
        ).fetchone()[0]
        return int(rec) + int(steps) + int(cps)


class RecordingReader:
    """A kept recording's bytes read at any offset (core/replay_seek.py's Source)."""

    def __init__(self, conn: sqlite3.Connection, blob: sqlite3.Blob) -> None:
        self.conn, self.blob = conn, blob

    def read_at(self, offset: int, size: int) -> bytes:
        if offset >= len(self.blob):
            return b""
        self.blob.seek(offset)
        return self.blob.read(size)

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.blob.close()
            self.conn.close()
