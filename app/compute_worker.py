"""A compute process's life (app/compute.py starts them): it imports the engine once, then computes
the runs it is given, several at a time, and sends each step back as soon as it is made.

Its scheduling: each turn it computes one step of the run that has used the least time so far, so
a new run's first steps come at once instead of after the runs before it have finished (a small
run overtakes a big one). Each run's time bound counts only its own steps. A run may be paused
(the pool keeps memory in bounds so), resumed or dropped between two steps. The process runs at a
lower CPU priority (nice), so on a busy machine answering readers comes first; it ignores Ctrl-C
(the server stops it) and ends when the server's end of its pipe closes, so a server that dies
leaves no worker behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import torch

from pagedviz.app.compute_replay import replay_progress
from pagedviz.app.run import RunTooLargeError, measured_steps
from pagedviz.core import Scenario, make_engine
from pagedviz.core.engine import RunTooLongError

NICE = 5  # workers' CPU priority below the server's: readers are answered first on a busy machine
# the test suite sets it to 0 (tests/conftest.py): under pytest-xdist the workers of its compute
# pools share the cores with the other tiers' servers and browsers, and niced they starved
NICE_ENV = "PAGEDVIZ_COMPUTE_NICE"


def niceness() -> int:
    """The workers' niceness: PAGEDVIZ_COMPUTE_NICE when it is a whole number 0-19, else NICE."""
    value = os.environ.get(NICE_ENV, "")
    return int(value) if value.isdigit() and int(value) <= 19 else NICE


WARM_UP = {  # three small steps (a prefill, then decodes beside a prefill), without the model (milliseconds)
    "name": "warm-up",
    "config": {"block_size": 4, "max_model_len": 32, "num_kv_blocks": 32, "max_num_reqs": 4, "model": None},
    "requests": [
        {"id": "0", "prompt_len": 9, "max_tokens": 3},
        {"id": "1", "prompt_len": 5, "max_tokens": 2, "arrival_step": 2},
    ],
    "max_steps": 3,
}


@dataclass
class Computing:
    """A run in the worker: its steps to come, its engine, and the time its steps have taken."""

    steps: Iterator[Any]  # (trace, bytes) per step of a run; steps stored per step of a replay
    engine: Any
    used: float = 0.0  # seconds of its own steps so far
    replay: bool = False  # an imported recording's replay (app/compute_replay.py): no steps sent
    stored: int = 0  # the replay's steps stored in the database, as last said


def worker_main(conn: Connection, threads: int) -> None:
    """A worker's life: say ready, then compute runs until the pipe closes.
    Messages in: ("run", job, scenario, max_seconds, max_bytes, paused), ("replay", job, spec,
    paused), ("pause", job), ("resume", job), ("stop", job), None (end).
    Out: ("ready", pid), ("took", job) as a run is read, ("step", job, trace) (a replay:
    ("progress", job, steps stored)), then one of
    ("done", job, truncated, device), ("too_long", job, steps), ("too_large", job, steps),
    ("failed", job, message), ("stopped", job)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the server, which stops us
    with contextlib.suppress(AttributeError, OSError):  # not here, or not allowed: same priority
        os.nice(niceness())
    # the processes share the cores: more threads than that would spin against each other
    torch.set_num_threads(threads)
    warm_up()

    runs: dict[int, Computing] = {}
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
                elif kind == "replay":
                    conn.send(("took", job))
                    runs[job] = Computing(replay_progress(msg[2]), None, replay=True)
                    if msg[3]:
                        paused.add(job)
                else:
                    _, job, scenario, max_seconds, max_bytes, start_paused = msg
                    conn.send(("took", job))  # from here, this process's end is the run's end too
                    try:
                        engine = make_engine(scenario)
                    except Exception as e:  # noqa: BLE001 - reported to the server, which fails the run
                        conn.send(("failed", job, f"{type(e).__name__}: {e}"[:500]))
                        continue
                    runs[job] = Computing(measured_steps(engine, max_seconds, max_bytes), engine)
                    if start_paused:
                        paused.add(job)
            # the run that has had the least time, of those that may step
            job = min(runs.keys() - paused, key=lambda j: runs[j].used)
            run = runs[job]
            start = time.monotonic()
            try:
                if run.replay:
                    stored = next(run.steps)
                    run.used += time.monotonic() - start
                    if stored != run.stored:
                        run.stored = stored
                        conn.send(("progress", job, stored))
                    continue
                t, _ = next(run.steps)  # (measured here for the bound; the server measures its copy)
            except StopIteration:
                reply: tuple[Any, ...] = (
                    ("done", job, False, "cpu")
                    if run.replay
                    else ("done", job, run.engine.truncated, str(run.engine.device))
                )
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


def warm_up() -> None:
    """Compute a tiny run before saying ready: the engine's lazy imports and numpy's and torch's
    first calls are then paid at start, not by the first run a reader waits for (about 50 ms of
    its first step on a fresh server). Without the model: a few milliseconds, however many
    compute processes start at once."""
    with contextlib.suppress(Exception):  # a warm-up that fails costs only the time it saves
        for _ in measured_steps(make_engine(Scenario.from_dict(WARM_UP))):
            pass
