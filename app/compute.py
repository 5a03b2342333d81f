"""Runs compute in worker processes, not in the server's: a run's engine work (scheduling, the
model, measuring its trace) then never holds the interpreter lock that the server needs to answer
readers, so cached steps stay fast while new runs compute.

A worker is a long-lived process (started with `spawn`, so CUDA works in it and nothing of the
server's threads is forked) that imports the engine once and then computes the runs it is given,
several at a time: each turn it computes one step of the run that has used the least time so far,
so a new run's first steps come at once instead of after the runs before it have finished (a
small run overtakes a big one), and every step goes back to the server as soon as it is made
(pickled: the trace's arrays travel in binary form). Each run's time bound counts only its own
steps. A worker runs at a lower CPU priority (nice), so on a busy machine answering readers comes
first; it ignores Ctrl-C (the server stops it) and ends when the server's end of its pipe closes,
so a server that dies leaves no worker behind.

In the server, each worker has a reader thread that appends each step to its run's list of steps
as it arrives (readers see step 1 while later steps compute) and completes the run's future. It
keeps a watchdog too: a worker with runs that says nothing for longer than their time bound and
a grace is killed (a step that hangs cannot hold runs for ever), and a worker that dies (killed
for memory, say) fails only its own runs, with a message; the next run starts a fresh worker. A
run whose caller goes away (`cancel`) is dropped by its worker before its next step.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pagedviz.app.store import Progress, Run
    from pagedviz.core import Scenario
    from pagedviz.core.trace import StepTrace

NICE = 5  # workers' CPU priority below the server's: readers are answered first on a busy machine
START_TIMEOUT_S = 120.0  # a worker that has not imported the engine by then is broken
WATCHDOG_GRACE_S = 10.0  # silence past the runs' time bound plus this kills their worker
POLL_S = 0.5  # how often a reader thread looks at its watchdog


class WorkerError(RuntimeError):
    """A computing process stopped or failed; the message says how."""


class CancelledRunError(WorkerError):
    """The run was dropped because nobody waits for it any more."""


# --- in the worker process ------------------------------------------------------------------


@dataclass
class _Computing:
    steps: Iterator[tuple[StepTrace, int]]
    engine: Any
    used: float = 0.0  # seconds of its own steps so far


def _worker_main(conn: Connection, threads: int) -> None:
    """A worker's life: import the engine, say ready, then compute runs until the pipe closes.
    Messages in: ("run", job, scenario, max_seconds, max_bytes, paused), ("pause", job),
    ("resume", job), ("stop", job), None (end).
    Out: ("ready", pid), ("took", job) as a run is read, ("step", job, trace), then one of
    ("done", job, truncated, device), ("too_long", job, steps), ("too_large", job, steps),
    ("failed", job, message), ("stopped", job)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the server, which stops us
    with contextlib.suppress(AttributeError, OSError):  # not here, or not allowed: same priority
        os.nice(NICE)
    import torch

    from pagedviz.app.store import RunTooLargeError, measured_steps
    from pagedviz.core import make_engine
    from pagedviz.core.engine import RunTooLongError

    # the processes share the cores: more threads than that would spin against each other
    torch.set_num_threads(threads)
    _warm_up()

    runs: dict[int, _Computing] = {}
    paused: set[int] = set()
    try:
        conn.send(("ready", os.getpid()))
        while True:
            # take every message waiting; wait for one while no run may step
            while not runs.keys() - paused or conn.poll():
                msg = conn.recv()
                if msg is None:
                    return
                kind, job = msg[0], msg[1]
                if kind == "pause":
                    paused.add(job)
                elif kind == "resume":
                    paused.discard(job)
                elif kind == "stop":
                    paused.discard(job)
                    if runs.pop(job, None) is not None:
                        conn.send(("stopped", job))
                    # (a stop that crossed the end of its run is answered by that end)
                else:
                    _, job, scenario, max_seconds, max_bytes, start_paused = msg
                    conn.send(("took", job))  # from here, this process's end is the run's end too
                    try:
                        engine = make_engine(scenario)
                    except Exception as e:  # noqa: BLE001 - reported to the server, which fails the run
                        conn.send(("failed", job, f"{type(e).__name__}: {e}"[:500]))
                        continue
                    runs[job] = _Computing(measured_steps(engine, max_seconds, max_bytes), engine)
                    if start_paused:
                        paused.add(job)
            # the run that has had the least time, of those that may step
            job = min(runs.keys() - paused, key=lambda j: runs[j].used)
            run = runs[job]
            start = time.monotonic()
            try:
                t, _ = next(run.steps)  # (measured here for the bound; the server measures its copy)
            except StopIteration:
                reply: tuple[Any, ...] = ("done", job, run.engine.truncated, str(run.engine.device))
            except RunTooLongError as e:
                reply = ("too_long", job, e.steps_done)
            except RunTooLargeError as e:
                reply = ("too_large", job, e.steps_done)
            except Exception as e:  # noqa: BLE001 - reported to the server, which fails the run
                reply = ("failed", job, f"{type(e).__name__}: {e}"[:500])
            else:
                run.used += time.monotonic() - start
                conn.send(("step", job, t))
                del t
                continue
            del runs[job], run  # the run's engine and its memory go now
            conn.send(reply)
    except (EOFError, OSError):
        return  # the server went away


WARM_UP = {  # three small steps (a prefill, then decodes beside a prefill), without the model (milliseconds)
    "name": "warm-up",
    "config": {"block_size": 4, "max_model_len": 32, "num_kv_blocks": 32, "max_num_reqs": 4, "model": None},
    "requests": [
        {"id": "0", "prompt_len": 9, "max_tokens": 3},
        {"id": "1", "prompt_len": 5, "max_tokens": 2, "arrival_step": 2},
    ],
    "max_steps": 3,
}


def _warm_up() -> None:
    """Compute a tiny run before saying ready: the engine's lazy imports and numpy's and torch's
    first calls are then paid at start, not by the first run a reader waits for (about 50 ms of
    its first step on a fresh server). Without the model: a few milliseconds, however many
    compute processes start at once."""
    from pagedviz.app.store import measured_steps
    from pagedviz.core import Scenario, make_engine

    with contextlib.suppress(Exception):  # a warm-up that fails costs only the time it saves
        for _ in measured_steps(make_engine(Scenario.from_dict(WARM_UP))):
            pass


# --- in the server --------------------------------------------------------------------------


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


class Worker:
    """One computing process, the server's end of its pipe, and the thread reading it."""

    def __init__(self, ctx: Any, on_end: Any, threads: int, on_change: Any = None) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker_main, args=(child, threads), name="pagedviz-compute", daemon=True
        )
        self.proc.start()
        child.close()
        self.jobs: dict[int, Job] = {}
        self.lock = threading.Lock()  # the jobs table (the reader thread takes it too)
        # messages to the process, in order, sent by a thread of their own: no caller (the event
        # loop, a reader thread) ever waits on the pipe
        self.outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.heard = time.monotonic()  # when it last said something (or was given work while idle)
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
                self.heard = time.monotonic()  # (the watchdog counts silence while runs may step)
            self.jobs[job.key] = job
            job.worker = self
            msg = ("run", job.key, job.scenario, job.max_seconds, job.max_bytes, job.paused)
            self.outbox.put(msg)

    def tell(self, kind: str, job: Job) -> None:
        """("stop" | "pause" | "resume") the run, before its next step."""
        if not self.ended:
            if kind == "resume":
                self.heard = time.monotonic()  # (the watchdog counts silence while runs may step)
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
        if not bounds:
            return False  # nothing may step: silence is expected
        if any(b is None for b in bounds):
            return False
        return time.monotonic() - self.heard > max(b or 0.0 for b in bounds) + WATCHDOG_GRACE_S

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
                self.heard = time.monotonic()
                self._handle(self.conn.recv())
        except (EOFError, OSError):
            why = self.how_it_ended()
        finally:
            self._end(why)

    def _handle(self, msg: tuple[Any, ...]) -> None:
        from pagedviz.app.store import Run, RunTooLargeError, measured_bytes
        from pagedviz.core.engine import RunTooLongError

        kind, key = msg[0], msg[1]
        with self.lock:
            job = self.jobs.get(key) if kind in ("step", "took") else self.jobs.pop(key, None)
        if job is None:
            return
        if kind == "took":
            job.taken = True
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

    def how_it_ended(self) -> str:
        self.proc.join(1)
        code = self.proc.exitcode
        if code is None:
            return "stopped answering"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            killed = -code == getattr(signal, "SIGKILL", 9)
            return f"was stopped by {name}" + (" (out of memory?)" if killed else "")
        return f"exited with code {code}"

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


def engine_bytes(scenario: Scenario) -> int:
    """What a run's engine is estimated to hold in its worker while it computes: the KV cache
    tensor, the persistent batch's token table, the block pool's Python objects."""
    from pagedviz.core.limits import step_costs

    c = scenario.config
    return (
        4 * step_costs(scenario).get("kv", 0) + 8 * c.max_num_reqs * c.max_model_len + 200 * c.num_kv_blocks
    )


class ComputePool:
    """Worker processes that compute runs, shared by every app of this server process. A run goes
    to the ready worker with the fewest runs (one still starting comes last); a new worker is
    started while all are busy and there are fewer than `max_workers` (the most any app of this
    process asked for).

    Memory: the runs in flight hold their steps so far here and their engines in the workers.
    While those bytes (measured steps, estimated engines) pass `memory_budget`, only the oldest
    run goes on and the others pause between two steps (new ones start paused); when runs end and
    the bytes fall back under the budget, they go on. So many small runs compute side by side,
    while big ones take their turn, as if only a few computed at once."""

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self._lock = threading.Lock()
        self.workers: list[Worker] = []
        self.max_workers = 1
        self.memory_budget: int | None = None  # bytes in flight past which runs pause
        self.started = 0  # workers started over the pool's life
        self.pauses = 0  # runs paused for memory over the pool's life
        self.moved = 0  # runs given again because their worker died before reading them
        self.closed = False
        self._keys = itertools.count(1)

    def _spawn(self) -> Worker:
        # torch's threads: the cores shared out among the processes there may be
        threads = max(1, (os.cpu_count() or 1) // self.max_workers)
        w = Worker(self._ctx, self._forget, threads, self._balance)
        self.workers.append(w)
        self.started += 1
        return w

    def _forget(self, w: Worker, orphans: list[Job], error: str) -> None:
        """A worker ended: drop it, and give the runs it never read to another."""
        with self._lock:
            if w in self.workers:
                self.workers.remove(w)
            closed = self.closed
        for job in orphans:
            if job.cancelled:
                job.future.set_exception(CancelledRunError("cancelled"))
            elif closed:
                job.future.set_exception(WorkerError(error))
            else:
                job.moves += 1
                self.moved += 1
                try:
                    self._place(job)
                except WorkerError as e:  # the next one ended too, in between
                    job.future.set_exception(e)
        self._balance()

    def warm(self, n: int, memory_budget: int | None = None) -> None:
        """Allow `n` workers and start them now (without waiting for them to be ready), so the
        first runs do not wait for a worker to import the engine; keep the runs in flight under
        `memory_budget` bytes (the largest any app of this process asked for)."""
        with self._lock:
            self.max_workers = max(self.max_workers, n)
            if memory_budget is not None:
                self.memory_budget = max(self.memory_budget or 0, memory_budget)
            while len(self.workers) < n:
                self._spawn()

    def jobs(self) -> list[Job]:
        """The runs in flight, oldest first."""
        with self._lock:
            workers = list(self.workers)
        jobs: list[Job] = []
        for w in workers:
            with w.lock:
                jobs.extend(w.jobs.values())
        return sorted(jobs, key=lambda j: j.key)

    def bytes_in_flight(self) -> int:
        return sum(j.nbytes + j.engine_bytes for j in self.jobs())

    def _balance(self) -> None:
        """Pause all but the oldest run while the runs in flight pass the memory budget; let
        them go on once they are back under it."""
        budget = self.memory_budget
        if budget is None:
            return
        with self._lock:  # one balance at a time (reader threads call it after every step)
            jobs: list[Job] = []
            for w in self.workers:
                with w.lock:
                    jobs.extend(w.jobs.values())
            jobs.sort(key=lambda j: j.key)
            over = sum(j.nbytes + j.engine_bytes for j in jobs) > budget
            for i, job in enumerate(jobs):
                pause = over and i > 0
                if job.paused != pause and job.worker is not None:
                    job.paused = pause
                    self.pauses += pause
                    if job.progress is not None:
                        job.progress.paused = pause
                    job.worker.tell("pause" if pause else "resume", job)

    def submit(
        self,
        run_id: str,
        scenario: Scenario,
        max_seconds: float | None = None,
        progress: Progress | None = None,
        max_bytes: int | None = None,
        steps: list[StepTrace] | None = None,
    ) -> Job:
        """Give the run to a worker; its steps are appended to `steps` as they arrive, and the
        job's future ends with the Run, RunTooLongError / RunTooLargeError past the bounds, or
        WorkerError when its worker fails."""
        job = Job(run_id, scenario, max_seconds, max_bytes, progress, [] if steps is None else steps)
        job.future.set_running_or_notify_cancel()  # only its worker ends it
        job.engine_bytes = engine_bytes(scenario)
        with self._lock:
            job.key = next(self._keys)
        self._place(job)
        return job

    def _place(self, job: Job) -> None:
        """Give the run to the ready worker with the fewest runs, or to a new one (see the class)."""
        progress = job.progress
        with self._lock:
            live = [w for w in self.workers if not w.ended]
            # a worker still importing the engine (just started) comes last: a run given to it
            # would wait seconds for its first step, while a ready worker interleaves it at once
            idlest = min(live, key=lambda w: (not w.ready, w.load()), default=None)
            if idlest is None or (idlest.load() > 0 and len(live) < self.max_workers):
                idlest = self._spawn()
            job.paused = False  # (a run moved from a worker that died may have been paused there)
            if self.memory_budget is not None and live:
                in_flight = sum(j.nbytes + j.engine_bytes for w in live for j in list(w.jobs.values()))
                job.paused = in_flight + job.engine_bytes > self.memory_budget and in_flight > 0
                self.pauses += job.paused
            if progress is not None:
                progress.paused = job.paused
        idlest.submit(job)

    def cancel(self, job: Job) -> None:
        """Nobody waits for the run any more: its worker drops it before its next step."""
        job.cancelled = True
        if job.worker is not None:
            job.worker.tell("stop", job)

    def compute(self, *args: Any, **kwargs: Any) -> Run:
        """submit(...) and wait for the run (for callers outside an event loop)."""
        return self.submit(*args, **kwargs).future.result()

    def starting(self) -> bool:
        """Whether the pool cannot compute at once yet: no worker is ready and one is starting
        (importing the engine takes a second or two). A pool with no worker at all is not
        starting: the next run starts one."""
        with self._lock:
            live = [w for w in self.workers if not w.ended]
        return bool(live) and not any(w.ready for w in live)

    def readiness(self) -> tuple[int, int]:
        """(workers ready, workers alive): /healthz says it, so that a benchmark can wait for
        every worker (one still importing the engine takes a core from the first runs)."""
        with self._lock:
            live = [w for w in self.workers if not w.ended]
        return sum(w.ready for w in live), len(live)

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> bool:
        """Wait until the pool is not starting (see `starting`); whether it got there in time."""
        deadline = time.monotonic() + timeout
        while self.starting():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def pids(self) -> list[int]:
        with self._lock:
            return [w.proc.pid for w in self.workers if w.proc.pid is not None]

    def close(self) -> None:
        with self._lock:
            self.closed = True
            workers, self.workers = list(self.workers), []
        for w in workers:
            w.close()


_POOL: ComputePool | None = None
_POOL_LOCK = threading.Lock()


def compute_pool() -> ComputePool:
    """This server process's pool (made on first use, closed when the process exits)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ComputePool()
            atexit.register(_POOL.close)
        return _POOL
