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
    Messages in: ("run", job, scenario, max_seconds, max_bytes), ("stop", job), None (end).
    Out: ("ready", pid), ("step", job, trace), then one of ("done", job, truncated,
    device), ("too_long", job, steps), ("too_large", job, steps), ("failed", job, message),
    ("stopped", job)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the server, which stops us
    with contextlib.suppress(AttributeError, OSError):  # not here, or not allowed: same priority
        os.nice(NICE)
    import torch

    from pagedviz.app.store import RunTooLargeError, measured_steps
    from pagedviz.core import make_engine
    from pagedviz.core.engine import RunTooLongError

    # the processes share the cores: more threads than that would spin against each other
    torch.set_num_threads(threads)

    runs: dict[int, _Computing] = {}
    try:
        conn.send(("ready", os.getpid()))
        while True:
            while not runs or conn.poll():  # take every message waiting; wait for one when idle
                msg = conn.recv()
                if msg is None:
                    return
                if msg[0] == "stop":
                    if runs.pop(msg[1], None) is not None:
                        conn.send(("stopped", msg[1]))
                    continue  # a stop that crossed the end of its run is answered by that end
                _, job, scenario, max_seconds, max_bytes = msg
                try:
                    engine = make_engine(scenario)
                except Exception as e:  # noqa: BLE001 - reported to the server, which fails the run
                    conn.send(("failed", job, f"{type(e).__name__}: {e}"[:500]))
                    continue
                runs[job] = _Computing(measured_steps(engine, max_seconds, max_bytes), engine)
            job = min(runs, key=lambda j: runs[j].used)  # the run that has had the least time
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
    nbytes: int = 0
    worker: Worker | None = None
    key: int = 0


class Worker:
    """One computing process, the server's end of its pipe, and the thread reading it."""

    def __init__(self, ctx: Any, on_end: Any, threads: int) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker_main, args=(child, threads), name="pagedviz-compute", daemon=True
        )
        self.proc.start()
        child.close()
        self.jobs: dict[int, Job] = {}
        self.lock = threading.Lock()  # the jobs table (the reader thread takes it too)
        self.send_lock = threading.Lock()  # one message at a time into the pipe
        self.heard = time.monotonic()  # when it last said something (or was given work while idle)
        self.ready = False  # it has imported the engine and said so
        self.ended = False
        self._on_end = on_end
        threading.Thread(target=self._read, name="pagedviz-compute-reader", daemon=True).start()

    def load(self) -> int:
        return len(self.jobs)

    def submit(self, job: Job) -> None:
        with self.lock:
            if self.ended:
                raise WorkerError("the computing process has ended")
            if not self.jobs:
                self.heard = time.monotonic()
            self.jobs[job.key] = job
            job.worker = self
        # not under `lock`: a send may wait for the worker, which may wait for the reader thread
        try:
            with self.send_lock:
                self.conn.send(("run", job.key, job.scenario, job.max_seconds, job.max_bytes))
        except (OSError, ValueError):
            pass  # the process is gone: the reader thread fails the job

    def stop(self, job: Job) -> None:
        """Tell the worker to drop the run before its next step (from a thread of its own: the
        caller, the event loop or this worker's reader, never waits on the pipe)."""
        if not self.ended:
            threading.Thread(target=self._send, args=(("stop", job.key),), daemon=True).start()

    def _send(self, msg: Any) -> None:
        with self.send_lock, contextlib.suppress(OSError, ValueError):
            self.conn.send(msg)

    def _silent_too_long(self) -> bool:
        with self.lock:
            if not self.jobs:
                return False
            bounds = [j.max_seconds for j in self.jobs.values()]
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
            job = self.jobs.get(key) if kind == "step" else self.jobs.pop(key, None)
        if job is None:
            return
        if kind == "step":
            job.nbytes += measured_bytes(msg[2])  # what this process holds of it (under 1 ms a step)
            if job.max_bytes is not None and job.nbytes > job.max_bytes:
                # the bound holds for what this process keeps (the worker checks its own copy too)
                with self.lock:
                    self.jobs.pop(key, None)
                self.stop(job)
                job.future.set_exception(RunTooLargeError(len(job.steps) + 1, job.max_bytes))
                return
            job.steps.append(msg[2])
            if job.progress is not None:
                job.progress.steps_done = len(job.steps)
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

    def how_it_ended(self) -> str:
        self.proc.join(1)
        code = self.proc.exitcode
        if code is None:
            return "stopped answering"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            return f"was stopped by {name}" + (" (out of memory?)" if -code == signal.SIGKILL else "")
        return f"exited with code {code}"

    def _end(self, why: str) -> None:
        """The process is gone or given up on: kill it, fail its runs, leave the pool."""
        with self.lock:
            self.ended = True
            jobs, self.jobs = list(self.jobs.values()), {}
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()
        for job in jobs:
            job.future.set_exception(WorkerError(f"the process computing the run {why}"))
        self._on_end(self)

    def close(self) -> None:
        """Ask the process to end; the reader thread then fails any run it still had."""
        with self.send_lock, contextlib.suppress(OSError, ValueError):
            self.conn.send(None)
        self.proc.join(2)
        if self.proc.is_alive():
            self.proc.kill()


class ComputePool:
    """Worker processes that compute runs, shared by every app of this server process. A run goes
    to the worker with the fewest runs; a new worker is started while all are busy and there are
    fewer than `max_workers` (the most any app of this process asked for)."""

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self._lock = threading.Lock()
        self.workers: list[Worker] = []
        self.max_workers = 1
        self.started = 0  # workers started over the pool's life
        self._keys = itertools.count(1)

    def _spawn(self) -> Worker:
        # torch's threads: the cores shared out among the processes there may be
        threads = max(1, (os.cpu_count() or 1) // self.max_workers)
        w = Worker(self._ctx, self._forget, threads)
        self.workers.append(w)
        self.started += 1
        return w

    def _forget(self, w: Worker) -> None:
        with self._lock:
            if w in self.workers:
                self.workers.remove(w)

    def warm(self, n: int) -> None:
        """Allow `n` workers and start them now (without waiting for them to be ready), so the
        first runs do not wait for a worker to import the engine."""
        with self._lock:
            self.max_workers = max(self.max_workers, n)
            while len(self.workers) < n:
                self._spawn()

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
        job.key = next(self._keys)
        with self._lock:
            live = [w for w in self.workers if not w.ended]
            idlest = min(live, key=Worker.load, default=None)
            if idlest is None or (idlest.load() > 0 and len(live) < self.max_workers):
                idlest = self._spawn()
        idlest.submit(job)
        return job

    def cancel(self, job: Job) -> None:
        """Nobody waits for the run any more: its worker drops it before its next step."""
        if job.worker is not None:
            job.worker.stop(job)

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
