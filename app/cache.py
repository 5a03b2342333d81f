"""One bounded cache for the app's memory: an LRU map bounded by how many entries it holds and by
the bytes they hold (each entry's size is given when it is put), safe to use from several threads.

The run store keeps four of them (computed runs, their scenarios, runs refused for a bound, steps
served encoded: app/store.py); the imports keep the scenarios of imported runs and a few decoded
steps, and the figures route the figures made lately.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """An LRU map of at most `max_items` entries holding at most `max_bytes` (None: no bound).

    `put` keeps the entry and drops the least recently used ones while a bound is passed; with
    `keep_newest` (the default) it never drops the entry just put, so one entry over the byte
    bound alone is still kept (until the next put). `get` counts as a use, `peek` and `[key]` do
    not. `shed(bound)` drops the least recently used entries until the rest hold at most `bound`
    bytes, the newest too if need be. Every method holds the cache's lock: readers in worker
    threads and the event loop may share one cache."""

    def __init__(
        self, max_items: int | None = None, max_bytes: int | None = None, *, keep_newest: bool = True
    ) -> None:
        self.max_items, self.max_bytes, self.keep_newest = max_items, max_bytes, keep_newest
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.RLock()
        self._nbytes = 0

    @property
    def nbytes(self) -> int:
        """The bytes the entries hold (as given to `put`)."""
        return self._nbytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __getitem__(self, key: K) -> V:
        """The entry (KeyError when absent), without counting a use."""
        with self._lock:
            return self._entries[key][0]

    def peek(self, key: K) -> V | None:
        """The entry or None, without counting a use."""
        with self._lock:
            kept = self._entries.get(key)
            return None if kept is None else kept[0]

    def get(self, key: K) -> V | None:
        """The entry or None; a use (it becomes the most recently used)."""
        with self._lock:
            kept = self._entries.get(key)
            if kept is None:
                return None
            self._entries.move_to_end(key)
            return kept[0]

    def touch(self, key: K) -> bool:
        """Count a use of the entry; whether it is kept."""
        with self._lock:
            if key not in self._entries:
                return False
            self._entries.move_to_end(key)
            return True

    def keys(self) -> list[K]:
        """The keys, least recently used first (a copy)."""
        with self._lock:
            return list(self._entries)

    def values(self) -> list[V]:
        """The entries, least recently used first (a copy)."""
        with self._lock:
            return [v for v, _ in self._entries.values()]

    def items(self) -> list[tuple[K, V]]:
        """(key, entry) pairs, least recently used first (a copy)."""
        with self._lock:
            return [(k, v) for k, (v, _) in self._entries.items()]

    def put(self, key: K, value: V, nbytes: int = 0) -> None:
        """Keep the entry (replacing one under the same key) as the most recently used, then drop
        the least recently used while a bound is passed."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._nbytes -= old[1]
            self._entries[key] = (value, nbytes)
            self._nbytes += nbytes
            least = 1 if self.keep_newest else 0
            while len(self._entries) > least and self._over():
                self._drop_oldest()

    def pop(self, key: K) -> V | None:
        """Remove the entry; it, or None when absent."""
        with self._lock:
            kept = self._entries.pop(key, None)
            if kept is None:
                return None
            self._nbytes -= kept[1]
            return kept[0]

    def shed(self, bound: int) -> None:
        """Drop the least recently used entries until the rest hold at most `bound` bytes."""
        with self._lock:
            while self._entries and self._nbytes > bound:
                self._drop_oldest()

    def _over(self) -> bool:
        return (self.max_items is not None and len(self._entries) > self.max_items) or (
            self.max_bytes is not None and self._nbytes > self.max_bytes
        )

    def _drop_oldest(self) -> None:
        _, (_, size) = self._entries.popitem(last=False)
        self._nbytes -= size
