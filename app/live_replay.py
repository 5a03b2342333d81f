"""The replay of a live run's growing recording (app/import_live.py), in a worker thread of the
worker that holds the run: its lines are read from the database as they are kept there (by any
worker: table `live_lines`), and the recorded scheduler (core/replay_scheduler.py) reads the next
step only when the engine asks whether one is left, waiting for it to arrive, so each step is
replayed and stored as soon as it has arrived. Each line is checked as an import checks it
(`check_line`), and the summary kept as a first pass keeps it (core/replay.py's `add_step`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from pydantic import ValidationError

from pagedviz.app.db import RunDB
from pagedviz.app.encoding import encode_step
from pagedviz.app.import_replay import ImportJob
from pagedviz.app.run import RunTooLargeError
from pagedviz.app.summaries import step_summary
from pagedviz.core.recording import Header, RecordingError, Step
from pagedviz.core.replay import ReplayEngine, ReplayError, Summary, add_step, scenario_from
from pagedviz.core.replay_scheduler import RecordedScheduler

POLL_S = 0.05  # how often the replay looks for new lines while none has come
BEAT_S = 2.0  # how often the holder of a live run says it is alive (and writes its scenario)
OPEN, ENDED, CUT, CLOSED = 0, 1, 2, 3  # live_runs.state: taking lines; ended by the recorder; quiet; imported


class _LiveScheduler(RecordedScheduler):
    """The recorded scheduler of a growing recording: it reads the next step when the engine asks
    whether one is left (waiting for it to arrive), not when it schedules the one before."""

    _next: Step | None

    def __init__(self, header: Header, source: Iterator[Step], vocab: int) -> None:
        super().__init__(header, iter(()), vocab)
        self._source: Iterator[Step] | None = source

    def _pull(self) -> None:
        if self._next is None and self._source is not None:
            self._next = next(self._source, None)
            if self._next is None:
                self._source = None

    @property
    def has_unfinished(self) -> bool:
        self._pull()
        return self._next is not None

    def next_drafts(self) -> dict[str, list[int]]:
        self._pull()  # the drafts the next step schedules: that step is waited for
        return super().next_drafts()


class _LiveEngine(ReplayEngine):
    def __init__(self, header: Header, source: Iterator[Step]) -> None:
        self._source = source
        scenario = replace(scenario_from(header, Summary()), max_steps=1 << 62)
        super().__init__(scenario, header, iter(()))

    def _setup(self) -> None:
        super()._setup()
        self.scheduler = _LiveScheduler(self._header, self._source, self.scenario.config.vocab_size)  # type: ignore[assignment]


@dataclass
class Live:
    """A live run held (replayed) by this worker."""

    run_id: str
    header: Header
    job: ImportJob
    summary: Summary = field(default_factory=Summary)
    state: int = OPEN  # as last read: how it ended, once it has
    scenario_steps: int = 0  # the steps its scenario was last written for
    scenario_requests: int = 0  # the requests it held
    scenario_next: float = 0.0  # when it may be written again (time.monotonic())
    ended: threading.Event = field(default_factory=threading.Event)  # no more lines will come


def steps_of(db: RunDB, live: Live, beat: Callable[[], None]) -> Iterator[Step]:
    """The run's steps as they are kept, from the first; ends once the run has ended (by the
    recorder or quiet) and every line kept before that is read. `beat` every BEAT_S seconds."""
    seq, last_beat = 0, time.monotonic()
    while not live.job.cancel.is_set():
        if time.monotonic() - last_beat > BEAT_S:
            beat()
            last_beat = time.monotonic()
        # the state first: a batch kept before the run ended is then among the batches read after
        state = db.live_read("SELECT state FROM live_runs WHERE run_id=?", (live.run_id,))
        rows = db.live_read(
            "SELECT seq, body FROM live_lines WHERE run_id=? AND seq>? ORDER BY seq LIMIT 16",
            (live.run_id, seq),
        )
        for n, body in rows:
            steps = [Step.model_validate_json(raw) for raw in bytes(body).splitlines() if raw.strip()]
            for step in steps:
                add_step(live.summary, step)
            if steps and not live.scenario_steps:
                beat()  # the run's first requests: its scenario is written before its first step
            for step in steps:
                live.job.total = step.step
                yield step
            seq = n
        if rows:
            continue
        live.state = int(state[0][0]) if state else CUT
        if live.state != OPEN:
            live.ended.set()
            return
        time.sleep(POLL_S)


def replay_live(db: RunDB, live: Live, max_bytes: int, beat: Callable[[], None]) -> None:
    """Replay the run's steps as they arrive (in a worker thread), storing each one at once."""
    job = live.job
    engine = _LiveEngine(live.header, steps_of(db, live, beat))
    nbytes = 0
    for t in engine.run():
        if job.cancel.is_set():
            return
        e = encode_step(t)
        line = json.dumps(step_summary(t), separators=(",", ":")).encode()
        nbytes += len(e.gzipped or e.body) + len(line)
        if nbytes > max_bytes:
            raise RunTooLargeError(t.step, max_bytes)
        row = (t.step, b"" if e.gzipped else e.body, e.gzipped, e.etag, line)
        if not db.put_rec_steps(job.run_id, [row]):
            raise ReplayError("the recording was dropped from the store (PAGEDVIZ_STORE_MAX_MB)")
        job.steps_done = t.step


def check_line(raw: bytes, n: int, expected: int, line_limit: int) -> Step:
    """One line of a live run checked as an import checks it: `n` its line in the recording."""
    if len(raw) > line_limit:
        raise RecordingError(
            n, f"longer than the per-line limit of {line_limit} bytes (PAGEDVIZ_MAX_RECORD_LINE_MB)"
        )
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RecordingError(n, f"not JSON ({e})") from None
    if not isinstance(value, dict):
        raise RecordingError(n, f"a JSON object was expected, not {type(value).__name__}")
    try:
        step = Step.model_validate(value)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the line"
        raise RecordingError(n, f"{where}: {err['msg']}") from None
    if step.step != expected:
        raise RecordingError(n, f"step {step.step} where step {expected} was expected")
    return step
