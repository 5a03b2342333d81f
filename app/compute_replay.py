"""An imported recording's replay as a compute worker's job (issue 40): the pool's processes
(app/compute.py) take it beside the runs they compute, so the replay never holds the interpreter
lock of the server that answers readers. The worker opens the run store's database itself (SQLite
shares it between processes) and replays the recording into it (app/import_replay.py's
`replay_steps`), one step a turn: the pool pauses it between two steps while a reader computes a
step of the run (app/import_runs.py), resumes it, or drops it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pagedviz.app.db import RunDB
from pagedviz.app.import_replay import replay_steps
from pagedviz.core.replay import Summary


@dataclass(frozen=True)
class ReplaySpec:
    """What a worker needs to replay a recording into the store: the store's folder and bounds,
    the run, the recording's temporary copy, its line bound, its summary (None: read it again)
    and the replay's byte bound (PAGEDVIZ_STORE_MB)."""

    folder: str
    max_db_bytes: int
    max_db_total_bytes: int
    run_id: str
    path: str
    line_limit: int
    summary: Summary | None
    max_bytes: int


def replay_progress(spec: ReplaySpec) -> Iterator[int]:
    """The replay, one step a next(): how many steps are stored after it."""
    db = RunDB(Path(spec.folder), spec.max_db_bytes, spec.max_db_total_bytes)
    try:
        for _, stored in replay_steps(
            db, spec.run_id, Path(spec.path), spec.line_limit, spec.summary, spec.max_bytes
        ):
            yield stored
    finally:
        db.close()
