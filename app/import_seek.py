"""The steps of an imported run computed on demand (issue 40): step n is the replay's state
rolled forward cheaply from the store's last checkpoint at or before n - 1, then step n in full
(core/replay_seek.py), read from the recording kept in the store's database. Checkpoints passed
on the way are kept (so a second visit anywhere costs at most CHECKPOINT_EVERY cheap steps), and
the step, encoded, is kept as a computed run's steps are (app/db.py's `steps`: dropped first past
PAGEDVIZ_STORE_MB, computed again when asked for).

`StoredSteps` is an imported run's steps as a sequence for the whole-run readers (metrics, figures,
narration, compare): one step is computed (or read back) as above; iterated, the steps are
replayed in full one after another from the start, never held.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import overload

from pagedviz.app.cache import BoundedCache
from pagedviz.app.db import RunDB
from pagedviz.app.encoding import encode_step
from pagedviz.core import Scenario
from pagedviz.core.recording import Header, parse_header
from pagedviz.core.replay_seek import Checkpoint, Seeker, header_end
from pagedviz.core.trace import StepTrace

# the replay keeps its state every this many steps: a step is then at most this many cheap steps
# (about 0.2 ms each on a 2-core machine) from a checkpoint
CHECKPOINT_EVERY = 500
DECODED_CACHE = 4  # steps computed or read back and decoded, kept per run for the next reader


class StepNotKeptError(LookupError):
    """A step of an imported run that the database cannot give (its recording is gone)."""


class RunSeeker:
    """Steps of one imported run computed from its recording and checkpoints in the store."""

    def __init__(self, db: RunDB, run_id: str, scenario: Scenario, total: int) -> None:
        self.db, self.run_id, self.scenario, self.total = db, run_id, scenario, total

    def _nearest(self, n: int) -> Checkpoint | None:
        kept = self.db.checkpoint(self.run_id, n)
        return None if kept is None else Checkpoint(*kept)

    def _keep(self, cp: Checkpoint) -> None:
        self.db.put_checkpoint(self.run_id, cp.n, cp.offset, cp.body)

    def _seeker(self) -> tuple[Seeker, object]:
        reader = self.db.recording_reader(self.run_id)
        if reader is None:
            raise StepNotKeptError(f"the recording of {self.run_id} is no longer kept")
        header: Header = parse_header(reader.read_at(0, header_end(reader)), 1 << 62)
        seeker = Seeker(
            header, self.scenario, reader, self.total, CHECKPOINT_EVERY, self._nearest, self._keep
        )
        return seeker, reader

    def trace(self, n: int) -> StepTrace:
        """Step n in full (1 <= n <= total)."""
        seeker, reader = self._seeker()
        try:
            return seeker.step(n)
        finally:
            reader.close()  # type: ignore[attr-defined]

    def encoded(self, n: int) -> tuple[bytes, bytes | None, str]:
        """Step n encoded (body, gzipped, ETag): read back, or computed and kept."""
        kept = self.db.rec_step(self.run_id, n)
        if kept is not None:
            return kept
        e = encode_step(self.trace(n))
        self.db.put_step(self.run_id, n, e.body, e.gzipped, e.etag)
        return e.body, e.gzipped, e.etag

    def run_from(self, n: int) -> Iterator[StepTrace]:
        """Steps n .. total in full, one after another."""
        seeker, reader = self._seeker()
        try:
            yield from seeker.run_from(n)
        finally:
            reader.close()  # type: ignore[attr-defined]


class StoredSteps(Sequence[StepTrace]):
    """An imported run's steps, read back or computed as they are asked for (the last few decoded
    are kept): whole-run readers iterate it without holding it."""

    def __init__(self, db: RunDB, run_id: str, num_steps: int, scenario: Scenario) -> None:
        self.db, self.run_id, self.num_steps = db, run_id, num_steps
        self.seeker = RunSeeker(db, run_id, scenario, num_steps)
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
            t = StepTrace.from_dict(json.loads(kept[0])) if kept is not None else self.seeker.trace(i + 1)
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
        yield from self.seeker.run_from(1)
