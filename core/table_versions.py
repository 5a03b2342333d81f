"""A persistent table as each step saw it, kept by change: `TableVersion`.

The runners' persistent tables (V1's `token_ids_cpu` and `block_table`, Model Runner V2's per-slot
`all_token_ids` and `block_tables`) change a few entries a step, but a trace shows each step's whole
table. A version is either a snapshot (a copy of the table's leading rows; the rows past them are
zero) or a delta on the version before it: the rows whose content came from another row or was
cleared (`moved`), and the entries written (flat indices) with their values.
At most MAX_DEPTH (128) deltas follow a snapshot, so reading a version costs one copy and a bounded
number of small scatters. `read()` materialises the step's table, read-only; the last few materialised
tables are kept (bounded in bytes) so that reading a run's steps in order applies one delta each.

A version pickles as its own payload and its parent's key: the compute processes send a run's
steps in order, one message each, and the receiving process finds the parent among the versions it
already holds (`_LIVE`). core/table_changes.py makes versions from the runners' writes.
"""

from __future__ import annotations

import sys
import threading
import uuid
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

# deltas after a snapshot before the next snapshot (the bound on a read's work)
MAX_DEPTH = 128
# the materialised tables kept for the next read (bytes, all tables together)
CACHE_BYTES = 64 << 20
CACHE_ENTRIES = 16
EMPTY = np.zeros(0, dtype=np.int32)


class TableVersion:
    """One step's view of a persistent table of `full_shape` (rows, columns): its first `n_rows`
    rows are what the trace shows (`shape`)."""

    __slots__ = (
        "key",
        "parent",
        "depth",
        "entries",
        "n_rows",
        "full_shape",
        "dtype",
        "snapshot",
        "moved",
        "moved_from",
        "index",
        "values",
        "__weakref__",
    )

    def __init__(
        self,
        key: tuple[str, int],
        parent: TableVersion | None,
        n_rows: int,
        full_shape: tuple[int, int],
        dtype: np.dtype[Any],
        snapshot: np.ndarray | None = None,
        moved: np.ndarray = EMPTY,
        moved_from: np.ndarray = EMPTY,
        index: np.ndarray = EMPTY,
        values: np.ndarray | None = None,
    ) -> None:
        self.key = key
        self.parent = parent
        self.n_rows = n_rows
        self.full_shape = full_shape
        self.dtype = dtype
        self.snapshot = snapshot
        self.moved, self.moved_from = moved, moved_from
        self.index = index  # the entries written: flat indices (one may repeat)
        self.values = values  # None: nothing written
        # deltas since the snapshot, and the entries they write (moved rows count whole)
        if snapshot is not None:
            self.depth, self.entries = 0, 0
        elif parent is None:  # an orphan (unpickled without its parent): never read, never extended
            self.depth, self.entries = MAX_DEPTH, 0
        else:
            self.depth = parent.depth + 1
            written = 0 if values is None else len(values)
            self.entries = parent.entries + written + moved.size * full_shape[1]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, self.full_shape[1])

    def read(self) -> np.ndarray:
        """The table's first n_rows rows at this step: read-only when the whole table, else a copy
        of its leading rows (an array of its own either way)."""
        table = materialise(self)
        return table if self.n_rows == len(table) else table[: self.n_rows].copy()

    def own_nbytes(self) -> int:
        """What this version alone holds (its payload; not its parent's)."""
        arrays = (self.snapshot, self.moved, self.moved_from, self.index, self.values)
        # an array that owns its data counts it in getsizeof; a view adds its nbytes
        return sys.getsizeof(self) + sum(
            sys.getsizeof(a) + (a.nbytes if a.base is not None else 0)
            for a in arrays
            if a is not None and a is not EMPTY
        )

    def apply(self, base: np.ndarray) -> None:
        """Turn the parent's full table `base` into this version's, in place."""
        if self.moved.size:
            src = self.moved_from
            rows = base[np.maximum(src, 0)]  # gathered first: every move reads the parent's rows
            rows[src < 0] = 0
            base[self.moved] = rows
        if self.values is not None and self.values.size:
            base.reshape(-1)[self.index] = self.values

    def __reduce__(self) -> tuple[Any, ...]:
        # unpickled in this process, the version (or a child of it) finds this one by its key
        _LIVE[self.key] = self
        if self.parent is not None:
            _LIVE[self.parent.key] = self.parent
        parent_key = self.parent.key if self.parent is not None else None
        payload = (self.snapshot, self.moved, self.moved_from, self.index, self.values)
        return (_restore, (self.key, parent_key, self.n_rows, self.full_shape, self.dtype.str, payload))

    def __repr__(self) -> str:
        kind = "snapshot" if self.snapshot is not None else f"delta {self.depth}"
        return f"TableVersion({self.key[1]}, {kind}, shape={self.shape})"


def segment_index(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, columns: int) -> np.ndarray:
    """Flat indices of the entries [lo, hi) of each row (vectorised)."""
    lengths = (hi - lo).astype(np.int64)
    total = int(lengths.sum())
    starts = rows.astype(np.int64) * columns + lo
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(total, dtype=np.int64)


# the versions alive in this process, by key: a pickled delta names its parent by key
_LIVE: weakref.WeakValueDictionary[tuple[str, int], TableVersion] = weakref.WeakValueDictionary()


def _restore(
    key: tuple[str, int],
    parent_key: tuple[str, int] | None,
    n_rows: int,
    full_shape: tuple[int, int],
    dtype: str,
    payload: tuple[Any, ...],
) -> TableVersion:
    """A version unpickled: the one this process already holds under its key, else a new one on
    the parent this process holds (an orphan, which cannot be read, when it holds none)."""
    have = _LIVE.get(key)
    if have is not None:
        return have
    snapshot, moved, moved_from, index, values = payload
    parent = _LIVE.get(parent_key) if parent_key is not None else None
    dt = np.dtype(dtype)
    version = TableVersion(key, parent, n_rows, full_shape, dt, snapshot, moved, moved_from, index, values)
    _LIVE[key] = version
    return version


def new_chain() -> str:
    """A fresh key for one table's versions."""
    return uuid.uuid4().hex


class _Materialised:
    """The last tables materialised (full, read-only), by version key, within CACHE_BYTES."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tables: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        self.nbytes = 0

    def get(self, key: tuple[str, int]) -> np.ndarray | None:
        with self.lock:
            table = self.tables.get(key)
            if table is not None:
                self.tables.move_to_end(key)
            return table

    def put(self, key: tuple[str, int], table: np.ndarray) -> None:
        if table.nbytes > CACHE_BYTES // 4:
            return
        with self.lock:
            if key in self.tables:
                return
            self.tables[key] = table
            self.nbytes += table.nbytes
            while self.nbytes > CACHE_BYTES or len(self.tables) > CACHE_ENTRIES:
                _, old = self.tables.popitem(last=False)
                self.nbytes -= old.nbytes


_CACHE = _Materialised()


def forget_materialised() -> None:
    """Drop the materialised tables kept for the next read (the next read rebuilds from the
    snapshot before it)."""
    with _CACHE.lock:
        _CACHE.tables.clear()
        _CACHE.nbytes = 0


def materialise(version: TableVersion) -> np.ndarray:
    """The whole table (full_shape) at `version`: from the nearest materialised or snapshot
    version before it, with the deltas after that applied in order."""
    got = _CACHE.get(version.key)
    if got is not None:
        return got
    chain: list[TableVersion] = []
    v: TableVersion | None = version
    while True:
        if v is None or (v.snapshot is None and v.parent is None):
            raise RuntimeError(
                "a step's table was read without the steps before it (a delta whose parent this "
                "process never received)"
            )
        cached = _CACHE.get(v.key) if v is not version else None
        if cached is not None:
            base = cached.copy()
            break
        if v.snapshot is not None:
            base = np.zeros(v.full_shape, dtype=v.dtype)
            base[: len(v.snapshot)] = v.snapshot
            break
        chain.append(v)
        v = v.parent
    for d in reversed(chain):
        d.apply(base)
    base.flags.writeable = False
    _CACHE.put(version.key, base)
    return base
