"""The server's end of a compute process (app/compute_worker.py): runs go to it down a pipe, and
their steps stream back.

Each worker has a sender thread (no caller, the event loop or a reader thread, ever waits on the
pipe) and a reader thread that appends each step to its run's list of steps as it arrives
(pickled: the trace's arrays travel in binary form), so readers see step 1 while later steps
compute, and completes the run's future when it ends. The reader thread keeps the worker's
watchdog too (app/compute_watchdog.py): a worker that dies or is given up on fails only the runs
it had taken, with a message, and leaves the pool (app/compute.py), which gives the runs it never
read to another worker. A run whose caller goes away is dropped by its worker before its next
step.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from pagedviz.app.compute_watchdog import POLL_S, START_TIMEOUT_S, Watchdog, how_it_ended
from pagedviz.app.compute_worker import worker_main
from pagedviz.app.run import Progress, Run, RunTooLargeError, measured_bytes
from pagedviz.core import Scenario
from pagedviz.core.engine import RunTooLongError
from pagedviz.core.trace import StepTrace


class WorkerError(RuntimeError):
    """A computing process stopped or failed; the message says how."""


class CancelledRunError(WorkerError):
    """The run was dropped because nobody waits for it any more."""


@dataclass
class Job:
    """A run given to a worker: its steps so far (appended as they arrive) and its future."""

    run_id: str
    scenario: Scenario
    max_seconds: float | None
    max_bytes: int | None
    progress: Progress | None
    steps: list[StepTrace]
    future: Future[Run] = field(default_factory=Future)
    nbytes: int = 0  # what this process holds of its steps
    engine_bytes: int = 0  # what its engine is estimated to hold in the worker
    worker: Worker | None = None
    key: int = 0  # in the order runs were given: the oldest goes on when memory is short
    paused: bool = False
    taken: bool = False  # its worker has read it (a worker that dies before that is not its end)
    moves: int = 0  # times it went to another worker because its own died before taking it
    cancelled: bool = False  # nobody waits for it any more
    replay: Any = None  # an imported recording's replay (app/compute_replay.py's ReplaySpec)
    on_progress: Callable[[int], None] | None = None  # a replay's steps stored, as they are


class Worker:
    """One computing process, the server's end of its pipe, and the threads reading and writing
    it. `on_end(worker, orphans, error)` is told when it ends, with the runs it never read;
    `on_change()` whenever the bytes of its runs in flight change."""

    def __init__(
        self,
        ctx: Any,
        on_end: Callable[[Worker, list[Job], str], None],
        threads: int,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=worker_main, args=(child, threads), name="pagedviz-compute", daemon=True
        )
        self.proc.start()
        child.close()
        self.jobs: dict[int, Job] = {}
        self.lock = threading.Lock()  # the jobs table (the reader thread takes it too)
        # messages to the process, in order, sent by a thread of their own: no caller (the event
        # loop, a reader thread) ever waits on the pipe
        self.outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.watchdog = Watchdog()
        self.ready = False  # it has imported the engine and said so
        self.ended = False
        self._on_end = on_end
        self._on_change = on_change or (lambda: None)  # a run's bytes in flight changed
        threading.Thread(target=self._read, name="pagedviz-compute-reader", daemon=True).start()
        threading.Thread(target=self._send, name="pagedviz-compute-sender", daemon=True).start()

    def load(self) -> int:
        return len(self.jobs)

    def submit(self, job: Job) -> None:
        with self.lock:
            if self.ended:
                raise WorkerError("the computing process has ended")
            if all(j.paused for j in self.jobs.values()):
                self.watchdog.hear()  # (the watchdog counts silence while runs may step)
            self.jobs[job.key] = job
            job.worker = self
            msg: tuple[Any, ...] = (
                ("replay", job.key, job.replay, job.paused)
                if job.replay is not None
                else ("run", job.key, job.scenario, job.max_seconds, job.max_bytes, job.paused)
            )
            self.outbox.put(msg)

    def tell(self, kind: str, job: Job) -> None:
        """("stop" | "pause" | "resume") the run, before its next step."""
        if not self.ended:
            if kind == "resume":
                self.watchdog.hear()  # (the watchdog counts silence while runs may step)
            self.outbox.put((kind, job.key))

    def _send(self) -> None:
        while True:
            msg = self.outbox.get()
            try:
                self.conn.send(msg)
            except (OSError, ValueError):
                return  # the process is gone: the reader thread fails its runs
            if msg is None:
                return

    def _silent_too_long(self) -> bool:
        with self.lock:
            bounds = [j.max_seconds for j in self.jobs.values() if not j.paused]
        return self.watchdog.silent_too_long(bounds)

    def _read(self) -> None:
        why = "ended"
        try:
            if not self.conn.poll(START_TIMEOUT_S):
                why = f"did not start within {START_TIMEOUT_S:.0f} s"
                return
            if self.conn.recv()[0] != "ready":
                why = "did not say it was ready"
                return
            self.ready = True
            while True:
                if not self.conn.poll(POLL_S):
                    if self._silent_too_long():
                        why = "stopped answering (a step ran far past the run's time bound)"
                        return
                    continue
                self.watchdog.hear()
                self._handle(self.conn.recv())
        except (EOFError, OSError):
            why = how_it_ended(self.proc)
        finally:
            self._end(why)

    def _handle(self, msg: tuple[Any, ...]) -> None:
        kind, key = msg[0], msg[1]
        with self.lock:
            job = self.jobs.get(key) if kind in ("step", "took", "progress") else self.jobs.pop(key, None)
        if job is None:
            return
        if kind == "took":
            job.taken = True
            return
        if kind == "progress":
            if job.on_progress is not None:
                job.on_progress(msg[2])
            return
        if kind == "step":
            job.nbytes += measured_bytes(msg[2])  # what this process holds of it (under 1 ms a step)
            if job.max_bytes is not None and job.nbytes > job.max_bytes:
                # the bound holds for what this process keeps (the worker checks its own copy too)
                with self.lock:
                    self.jobs.pop(key, None)
                self.tell("stop", job)
                job.future.set_exception(RunTooLargeError(len(job.steps) + 1, job.max_bytes))
                self._on_change()
                return
            job.steps.append(msg[2])
            if job.progress is not None:
                job.progress.steps_done = len(job.steps)
            self._on_change()
            return
        self._on_change()  # the run's bytes leave those in flight
        if kind == "done" and job.replay is not None:
            job.future.set_result(None)  # type: ignore[arg-type]
            return
        if kind == "done":
            run = Run(job.run_id, job.scenario, job.steps, msg[2], msg[3], job.nbytes)
            job.future.set_result(run)
            return
        error: BaseException
        if kind == "too_long":
            error = RunTooLongError(msg[2])
        elif kind == "too_large":
            error = RunTooLargeError(msg[2], job.max_bytes or 0)
        elif kind == "stopped":
            error = CancelledRunError("cancelled")
        else:
            said = msg[2] if kind == "failed" else f"an unknown answer {kind!r}"
            error = WorkerError(f"the run failed: {said}")
        job.future.set_exception(error)

    def _end(self, why: str) -> None:
        """The process is gone or given up on: kill it, fail the runs it had taken, leave the
        pool, which gives the runs it never read to another worker (once: a worker that cannot
        start fails them the second time)."""
        with self.lock:
            self.ended = True
            jobs, self.jobs = list(self.jobs.values()), {}
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()
        error = f"the process computing the run {why}"
        orphans = [j for j in jobs if not j.taken and j.moves == 0]
        for job in jobs:
            if job not in orphans:
                job.future.set_exception(WorkerError(error))
        self.outbox.put(None)  # the sender thread ends too
        self._on_end(self, orphans, error)

    def close(self) -> None:
        """Ask the process to end; the reader thread then fails any run it still had."""
        self.outbox.put(None)
        self.proc.join(2)
        if self.proc.is_alive():
            self.proc.kill()
