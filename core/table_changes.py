"""What a runner wrote to one persistent table since the step before was captured: `TableChanges`.

Every write to a tracked table also tells its `TableChanges` which row and columns it wrote
(`wrote`, `wrote_rows`, `wrote_entries`: kept as made, a list append), which row it cleared
(`reset`) and which row it moved (`move`, V1's condense). When a row is cleared or moved, the
writes so far are folded into per-row state: where the row's content came from at the last capture
(`origin`: the same row, another row, or -1 for zeros) and the span of columns written since
(`lo`, `hi`). `capture()` then records the table as a `TableVersion` (core/table_versions.py): the
moved rows, and the entries written with their current values, on the version captured before; a
snapshot every MAX_DEPTH captures, or when the deltas since the last snapshot have written as many
entries as the table holds. A decode step writes one entry a row, so capturing it costs a gather
of those entries, not a copy of the table.

Values are read from the table when the step is captured, not when written, so a span may cover
more than was written: an entry that did not change is recorded with its own value. A table small
as a whole (SMALL_TABLE entries at most) is copied at every capture and keeps no record (`quiet`:
it never has a captured version, so what follows holds for it at every step).

While no version has been captured since the record started afresh (`last` is None: an engine with
capture off, a small table copied whole, a runner restored from a checkpoint), the next capture is
a snapshot whatever was written, so nothing is recorded: a write only marks the record `stale` (its
per-row state is rebuilt by that snapshot). A replay's cheap steps (core/replay_seek.py) pay nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core.table_versions import EMPTY, MAX_DEPTH, TableVersion, new_chain, segment_index

EMPTY_INDEX = np.zeros(0, dtype=np.int64)
# when a step's table is copied whole rather than found by change, in entries the copy moves
# (measured on a 2-core machine: a copy moves 13,000-23,000 int32 entries a microsecond; finding
# the change costs 2-3 us, and 10-15 us when rows were cleared or moved). A decode step's one
# entry a row is found by change whenever the table is not small (its copy is what grows a run):
SMALL_TABLE = 1 << 14  # the rows shown hold at most this many entries (64 KB of int32)
STRUCTURAL_COPY = 1 << 17  # rows were cleared or moved, and the rows shown hold at most this many
DELTA_FIXED = 1 << 16  # finding the change otherwise costs as much as copying this many, plus:
COST_PER_ENTRY = 4  # an entry told written costs as much as copying this many
COST_PER_SPAN = 2048  # a single-row span told (a range of its own) costs as much as this
FEW_SPANS = 8  # past this many single-row spans, they are converted at once (a fixed cost)
MAX_TOLD, MAX_TOLD_SPANS = 16, 4096  # records kept as told before they are folded (capture off)
SPANS_FIXED = 1 << 15


def span_cost(k: int) -> int:
    """What finding k single-row spans costs, in entries copied."""
    return COST_PER_SPAN * k if k <= FEW_SPANS else SPANS_FIXED + 256 * k


class TableChanges:
    """The writes to `table` ([rows, columns]) since the last capture."""

    __slots__ = (
        "table",
        "flat",
        "all_rows",
        "columns",
        "shape",
        "small_rows",
        "copy_rows",
        "quiet",
        "chain",
        "count",
        "rows",
        "fresh",
        "spans_state",
        "origin",
        "lo",
        "hi",
        "structural",
        "entries",
        "spans",
        "scalars",
        "lengths",
        "prev_len",
        "appended",
        "pending",
        "stale",
        "last",
    )

    def __init__(self, table: np.ndarray, lengths: np.ndarray | None = None) -> None:
        self.table = table
        # a table whose rows grow by appending (block tables): each row's written length, whose
        # growth since the last capture is read from it (`grew` says that some row grew)
        self.lengths = lengths
        self.flat = table.reshape(-1)  # a view: the table is contiguous
        self._limits()
        self.chain = new_chain()
        self.count = 0
        self.rows = np.arange(table.shape[0], dtype=np.int64)
        self._clear()

    def _limits(self) -> None:
        """The row counts below which a capture copies (SMALL_TABLE, DELTA_FIXED), once."""
        R, C = self.table.shape
        self.all_rows, self.columns = R, C
        self.shape = (R, C)
        self.small_rows = SMALL_TABLE // max(C, 1)
        self.copy_rows = DELTA_FIXED // max(C, 1)
        # a table small as a whole is copied at every capture: its writes need not be told
        self.quiet = self.small_rows >= R

    def _clear(self) -> None:
        R, C = self.table.shape
        # origin, lo and hi in one array, brought back to `fresh` (no row moved, none written) at once
        self.fresh = np.stack([self.rows, np.full(R, C, dtype=np.int64), np.zeros(R, dtype=np.int64)])
        self.spans_state = self.fresh.copy()
        self.origin, self.lo, self.hi = self.spans_state
        # the writes since the last capture, as made: (rows, cols) entries, (rows, lo, hi) spans
        # and single-row spans; folded into origin / lo / hi when a row is cleared or moved
        self.structural = False
        self.entries: list[tuple[np.ndarray, np.ndarray | None]] = []  # (flat indices, None) too
        self.spans: list[tuple[np.ndarray, Any, Any]] = []
        self.scalars: tuple[list[int], list[int], list[int]] = ([], [], [])  # rows, starts, stops
        self.prev_len = None if self.lengths is None else self.lengths.copy()
        self.appended = False
        self.pending = 0  # entries told written since the last capture (a span's columns, an entry)
        self.stale = False  # copied into a plain array last: origin, lo, hi and prev_len unkept
        self.last: TableVersion | None = None

    # ------------------------------------------------------------------ what was written
    def wrote(self, row: int, lo: int, hi: int) -> None:
        """Columns [lo, hi) of one row were written."""
        if self.last is None:  # the next capture is a snapshot (or a quiet table's copy): nothing to record
            self.stale = True
            return
        if hi > lo:
            rows, starts, stops = self.scalars
            rows.append(row)
            starts.append(lo)
            stops.append(hi)
            self.pending += hi - lo
            if len(rows) > MAX_TOLD_SPANS:
                self._bound()

    def wrote_rows(self, rows: np.ndarray, lo: Any, hi: Any) -> None:
        """Columns [lo, hi) (arrays or numbers) of each of `rows` were written."""
        if self.last is None:  # the next capture is a snapshot (or a quiet table's copy): nothing to record
            self.stale = True
            return
        self.spans.append((rows, lo, hi))
        self.pending += len(rows)
        self._bound()

    def rewrote(self, row: int, n: int) -> None:
        """A row of a table with `lengths` was written from column 0 and its length set to n
        (what lay past n stays as it was)."""
        if self.last is None:  # the next capture is a snapshot (or a quiet table's copy): nothing to record
            self.stale = True
            return
        self.wrote(row, 0, n)
        if self.prev_len is not None:
            self.prev_len[row] = n

    def grew(self) -> None:
        """Some row's length grew by appending (a table with `lengths`)."""
        if self.last is None:  # the next capture is a snapshot (or a quiet table's copy): nothing to record
            self.stale = True
            return
        self.appended = True

    def wrote_flat(self, index: np.ndarray) -> None:
        """The entries at these flat indices (row * columns + column) were written: a writer that
        scatters through the flat table tells the same indices."""
        if self.last is None:  # the next capture is a snapshot (or a quiet table's copy): nothing to record
            self.stale = True
            return
        self.entries.append((index, None))
        self.pending += len(index)
        self._bound()

    def wrote_entries(self, rows: np.ndarray, cols: np.ndarray) -> None:
        """The entries (rows[i], cols[i]) were written."""
        if self.last is None:  # the next capture is a snapshot (or a quiet table's copy): nothing to record
            self.stale = True
            return
        self.entries.append((rows, cols))
        self.pending += len(rows)
        self._bound()

    def _bound(self) -> None:
        """Steps that are not captured (an engine with capture off) keep telling: past a few
        records, they are folded into each row's span, which is bounded by the rows."""
        if len(self.entries) + len(self.spans) > MAX_TOLD or len(self.scalars[0]) > MAX_TOLD_SPANS:
            self._fold()
            self.structural = True

    def reset(self, row: int) -> None:
        """The row is cleared (zeros): what was written to it before no longer counts. With
        `lengths`, told before the row and its length are cleared."""
        if self.last is None:  # the next capture is a snapshot (or a quiet table's copy): nothing to record
            self.stale = True
            return
        if self.lengths is None and row >= self.last.n_rows and self.origin[row] == row:
            # zero when last captured (rows past those shown are), and no other row moved here
            # since: cleared, it is as it was then, and what is written to it next is told
            self.lo[row] = self.columns
            self.hi[row] = 0
            return
        self._fold()
        self.structural = True
        self.origin[row] = -1
        self.lo[row] = self.table.shape[1]
        self.hi[row] = 0
        if self.prev_len is not None:
            self.prev_len[row] = 0
            self.appended = True  # the row's new length, if it gets one, is read from lengths

    def move(self, src: int, dst: int) -> None:
        """Row src is copied to row dst, then cleared. With `lengths`, told before the rows and
        their lengths are moved."""
        if self.last is None:  # the next capture is a snapshot (or a quiet table's copy): nothing to record
            self.stale = True
            return
        self._fold()
        self.structural = True
        self.origin[dst] = self.origin[src]
        self.lo[dst] = self.lo[src]
        self.hi[dst] = self.hi[src]
        if self.prev_len is not None:
            self.prev_len[dst] = self.prev_len[src]
        self.reset(src)

    def _grown(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None:
        """The rows whose length changed since it was last read, the columns between the two
        lengths (within the table), and whether that is one column a row; None when none
        changed."""
        lengths, prev_len = self.lengths, self.prev_len
        if not self.appended or lengths is None or prev_len is None:
            return None
        self.appended = False
        rows = np.flatnonzero(lengths != prev_len)
        if not rows.size:
            return None
        a, b = prev_len[rows], lengths[rows]
        prev_len[rows] = b
        if ((b - a) == 1).all():  # one entry appended a row (a block): the usual case
            return rows, a, b, True
        return rows, np.minimum(a, b), np.minimum(np.maximum(a, b), self.table.shape[1]), False

    def _fold(self) -> None:
        """The writes so far into each row's span (lo, hi), before a row is cleared or moved."""
        grown = self._grown()
        if grown is not None:
            rows, lo, hi, _ = grown
            self.lo[rows] = np.minimum(self.lo[rows], lo)
            self.hi[rows] = np.maximum(self.hi[rows], hi)
        C = self.table.shape[1]
        for rows, cols in self.entries:
            if cols is None:  # flat indices
                rows, cols = np.divmod(rows, C)
            np.minimum.at(self.lo, rows, cols)
            np.maximum.at(self.hi, rows, np.asarray(cols) + 1)
        for rows, lo, hi in self.spans:
            np.minimum.at(self.lo, rows, lo)
            np.maximum.at(self.hi, rows, hi)
        if self.scalars[0]:
            rows, lo, hi = (np.array(x, dtype=np.int64) for x in self.scalars)
            np.minimum.at(self.lo, rows, lo)
            np.maximum.at(self.hi, rows, hi)
        self._drop_told()

    def _drop_told(self) -> None:
        if self.entries:
            self.entries.clear()
        if self.spans:
            self.spans.clear()
        if self.scalars[0]:
            for x in self.scalars:
                x.clear()

    def _written_index(self) -> np.ndarray:
        """Flat indices covering every entry written since the last capture (none cleared or
        moved meanwhile); an entry may repeat."""
        C = self.table.shape[1]
        parts = [rows if cols is None else rows * C + cols for rows, cols in self.entries]
        grown = self._grown()
        if grown is not None:
            rows, lo, hi, unit = grown
            parts.append(rows * C + lo if unit else segment_index(rows, lo, hi, C))
        for rows, lo, hi in self.spans:
            n = len(rows)
            parts.append(segment_index(rows, np.broadcast_to(lo, n), np.broadcast_to(hi, n), C))
        told_rows, told_lo, told_hi = self.scalars
        if len(told_rows) <= FEW_SPANS:  # a new request or two: a range each
            parts += [np.arange(r * C + a, r * C + b) for r, a, b in zip(told_rows, told_lo, told_hi)]
        else:
            rows, starts, stops = (np.array(x, dtype=np.int64) for x in self.scalars)
            parts.append(segment_index(rows, starts, stops, C))
        self._drop_told()
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else EMPTY_INDEX

    # ------------------------------------------------------------------ capture
    def capture(self, n_rows: int | None = None) -> TableVersion | np.ndarray:
        """The table now, as a version whose first `n_rows` rows (all when None) the trace shows;
        rows past n_rows must be zero when n_rows is given. Starts the next step's record. A
        small table (SMALL_TABLE entries shown at most) is copied into a plain array, as before
        capture by change. Otherwise the version is a snapshot where a copy costs less than
        finding what changed (rows cleared or moved in a table of moderate size, many entries
        written), and after MAX_DEPTH deltas or as many entries as the table holds (the bound on
        a read)."""
        if self.quiet:  # copied as before: no record kept
            return self.table.copy() if n_rows is None else self.table[:n_rows].copy()
        n = self.all_rows if n_rows is None else n_rows
        if n <= self.small_rows:  # copied as before: a copy costs less than the bookkeeping
            if self.pending:
                self._drop_told()  # the rest is brought up to date by the next snapshot (_forget)
                self.pending = 0
            self.appended = False
            self.stale = True
            self.last = None
            return self.table[:n].copy()
        table = self.table
        R, C = shape = self.shape
        dtype = table.dtype
        key = (self.chain, self.count)
        self.count += 1
        prev = self.last
        pending, self.pending = self.pending, 0
        if prev is None or prev.depth >= MAX_DEPTH:  # the next read is bounded so
            self._forget()
            version = TableVersion(key, None, n, shape, dtype, self._copy(n))
            self.last = version
            return version
        told = self.entries
        if (  # the usual decode step: one entry a row, told at once, nothing else
            len(told) == 1
            and not (self.structural or self.appended or self.spans or self.scalars[0])
            and n * C > prev.entries + COST_PER_ENTRY * pending
        ):
            rows, cols = told.pop()
            if cols is None:
                index = rows
            else:
                index = rows * C
                index += cols
            version = TableVersion(
                key, prev, n, shape, dtype, None, EMPTY, EMPTY, index, self.flat.take(index)
            )
            self.last = version
            return version
        if (
            n <= self.copy_rows
            or (self.structural and n * C <= STRUCTURAL_COPY)
            or DELTA_FIXED + COST_PER_ENTRY * pending + span_cost(len(self.scalars[0])) >= n * C
        ):  # a copy costs less than finding what changed (or the next read is bounded so)
            self._forget()
            version = TableVersion(key, None, n, shape, dtype, snapshot=self._copy(n))
            self.last = version
            return version
        if self.structural:  # rows cleared or moved: from each row's origin and span
            moved = np.flatnonzero(self.origin != self.rows)
            if prev.entries + moved.size * C >= n * C:  # most rows are new: a copy costs less
                self._forget()
                version = TableVersion(key, None, n, shape, dtype, snapshot=self._copy(n))
                self.last = version
                return version
            self._fold()
            moved_from = self.origin[moved]
            dirty = np.flatnonzero(self.hi > self.lo)
            index = segment_index(dirty, self.lo[dirty], self.hi[dirty], C)
            self.origin[moved] = moved
            self.lo[dirty] = C
            self.hi[dirty] = 0
            self.structural = False
        else:
            moved = moved_from = EMPTY
            index = self._written_index()
        if index is EMPTY_INDEX and not moved.size:
            version = TableVersion(key, prev, n, shape, dtype)  # nothing written
        elif prev.entries + len(index) + moved.size * C >= n * C:
            version = TableVersion(key, None, n, shape, dtype, snapshot=self._copy(n))
        else:
            values = self.flat.take(index)
            version = TableVersion(key, prev, n, shape, dtype, None, moved, moved_from, index, values)
        self.last = version
        return version

    def _copy(self, n: int) -> np.ndarray:
        """The table's first n rows, copied."""
        return self.table.copy() if n == self.all_rows else self.table[:n].copy()

    def _forget(self) -> None:
        """Drop the record of what was written (the table is captured whole)."""
        self._drop_told()
        self.pending = 0
        if self.structural or self.stale:
            np.copyto(self.spans_state, self.fresh)
            self.structural = False
        if (self.appended or self.stale) and self.prev_len is not None and self.lengths is not None:
            np.copyto(self.prev_len, self.lengths)
            self.appended = False
        self.stale = False

    def __getstate__(self) -> dict[str, Any]:
        """Copied or pickled, the record starts afresh: the next capture is a snapshot."""
        return {
            "table": self.table,
            "lengths": self.lengths,
            "chain": new_chain(),
            "count": 0,
            "rows": self.rows,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)
        self.flat = self.table.reshape(-1)
        self._limits()
        self._clear()
