"""The compute processes' watchdog (app/compute_stream.py's reader thread keeps one per worker): a
worker that has not started in time, or that has runs which may step and says nothing for longer
than their time bound and a grace, is given up on (killed: a step that hangs cannot hold runs for
ever), and `how_it_ended` says in words how a worker process ended (killed for memory, say), for
the message that fails its runs.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterable
from multiprocessing.process import BaseProcess

START_TIMEOUT_S = 120.0  # a worker that has not imported the engine by then is broken
WATCHDOG_GRACE_S = 10.0  # silence past the runs' time bound plus this kills their worker
POLL_S = 0.5  # how often a reader thread looks at its watchdog


class Watchdog:
    """When a worker last said something (or was given work while idle), and whether its silence
    has gone on too long for the runs that may step."""

    def __init__(self) -> None:
        self.heard = time.monotonic()

    def hear(self) -> None:
        """The worker said something, or its silence starts counting now (it was given work)."""
        self.heard = time.monotonic()

    def silent_too_long(self, bounds: Iterable[float | None]) -> bool:
        """Whether the silence has passed the longest time bound of the runs that may step (their
        `bounds`; none: silence is expected) plus WATCHDOG_GRACE_S. A run with no bound never
        makes its worker silent for too long."""
        bounds = list(bounds)
        if not bounds:
            return False  # nothing may step: silence is expected
        if any(b is None for b in bounds):
            return False
        return time.monotonic() - self.heard > max(b or 0.0 for b in bounds) + WATCHDOG_GRACE_S


def how_it_ended(proc: BaseProcess) -> str:
    """How the worker process ended, in words: its exit code, or the signal that stopped it."""
    proc.join(1)
    code = proc.exitcode
    if code is None:
        return "stopped answering"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        killed = -code == getattr(signal, "SIGKILL", 9)
        return f"was stopped by {name}" + (" (out of memory?)" if killed else "")
    return f"exited with code {code}"
