"""The run store: computed runs in an LRU bounded by count and bytes, the scenarios behind them in
a larger LRU, so an evicted run is recomputed on demand. Engine work runs in a worker thread;
concurrent requests for one run share one computation."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from pagedviz.core import Scenario, __version__, make_engine
from pagedviz.core.trace import StepTrace


def run_id_of(scenario: Scenario) -> str:
    """Content hash of the canonical scenario and the engine version."""
    canon = json.dumps(scenario.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"pagedviz {__version__}\n{canon}".encode()).hexdigest()[:20]


@dataclass
class Run:
    run_id: str
    scenario: Scenario
    steps: list[StepTrace]
    truncated: bool
    device: str
    nbytes: int
    overview: dict | None = None  # the overview response, built once


@dataclass
class Progress:
    """How far a computation in flight has come (written by the worker thread, read by routes)."""

    max_steps: int
    started: float
    steps_done: int = 0


def compute(
    run_id: str, scenario: Scenario, max_seconds: float | None = None, progress: Progress | None = None
) -> Run:
    engine = make_engine(scenario)
    steps = []
    for t in engine.run(None if max_seconds is None else time.monotonic() + max_seconds):
        steps.append(t)
        if progress is not None:
            progress.steps_done = len(steps)
    nbytes = 0
    for t in steps:
        nbytes += 2048 + sum(a.data.nbytes for a in t.array_entries.values())
        nbytes += 16 * len(t.kv_cache.get("ref_cnt", ()))
    return Run(run_id, scenario, steps, engine.truncated, str(engine.device), nbytes)


class RunStore:
    def __init__(
        self,
        max_runs: int,
        max_bytes: int,
        max_scenarios: int,
        max_seconds: float | None = None,
        shared_dir: Path | None = None,
    ) -> None:
        self.max_runs, self.max_bytes, self.max_scenarios = max_runs, max_bytes, max_scenarios
        self.max_seconds = max_seconds
        # with several workers, scenarios are also written here so any worker can recompute a run
        self.shared_dir = shared_dir
        self.runs: OrderedDict[str, Run] = OrderedDict()
        self.scenarios: OrderedDict[str, Scenario] = OrderedDict()
        self.in_flight: dict[str, asyncio.Future[Run]] = {}
        self.progress: dict[str, Progress] = {}
        self.bytes = 0
        self.computations = 0

    def remember(self, scenario: Scenario) -> str:
        run_id = run_id_of(scenario)
        self.scenarios[run_id] = scenario
        self.scenarios.move_to_end(run_id)
        while len(self.scenarios) > self.max_scenarios:
            self.scenarios.popitem(last=False)
        if self.shared_dir is not None:
            self._share(run_id, scenario)
        return run_id

    def _share(self, run_id: str, scenario: Scenario) -> None:
        path = self.shared_dir / f"{run_id}.json"  # type: ignore[operator]
        if not path.exists():
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(scenario.to_dict()), encoding="utf-8")
            tmp.replace(path)
        files = sorted(self.shared_dir.glob("*.json"), key=lambda p: p.stat().st_mtime)  # type: ignore[union-attr]
        for old in files[: max(0, len(files) - self.max_scenarios)]:
            old.unlink(missing_ok=True)

    def _shared(self, run_id: str) -> Scenario | None:
        """A scenario another worker remembered (run ids are hex, so the name is safe)."""
        if self.shared_dir is None or not run_id.isalnum():
            return None
        try:
            return Scenario.from_dict(
                json.loads((self.shared_dir / f"{run_id}.json").read_text(encoding="utf-8"))
            )
        except (OSError, ValueError):
            return None

    def knows(self, run_id: str) -> bool:
        return run_id in self.runs or run_id in self.scenarios

    async def get(self, run_id: str) -> Run | None:
        """The computed run, computing (once) from the remembered scenario if needed."""
        run = self.runs.get(run_id)
        if run is not None:
            self.runs.move_to_end(run_id)
            return run
        if run_id in self.in_flight:
            return await asyncio.shield(self.in_flight[run_id])
        scenario = self.scenarios.get(run_id) or self._shared(run_id)
        if scenario is None:
            return None
        self.scenarios[run_id] = scenario
        fut: asyncio.Future[Run] = asyncio.get_running_loop().create_future()
        self.in_flight[run_id] = fut
        progress = self.progress[run_id] = Progress(scenario.max_steps, time.monotonic())
        try:
            self.computations += 1
            run = await asyncio.to_thread(compute, run_id, scenario, self.max_seconds, progress)
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            self.in_flight.pop(run_id, None)
            self.progress.pop(run_id, None)
        fut.set_result(run)
        self._put(run)
        return run

    def status(self, run_id: str) -> dict | None:
        """done (with its steps), computing (steps so far, seconds), waiting (known, not computed:
        the next read computes it), or None for a run this server does not know."""
        run = self.runs.get(run_id)
        if run is not None:
            return {"state": "done", "steps_done": len(run.steps), "max_steps": run.scenario.max_steps}
        p = self.progress.get(run_id)
        if p is not None:
            elapsed = round(time.monotonic() - p.started, 2)
            return {
                "state": "computing",
                "steps_done": p.steps_done,
                "max_steps": p.max_steps,
                "elapsed_s": elapsed,
            }
        scenario = self.scenarios.get(run_id) or self._shared(run_id)
        if scenario is not None:
            return {"state": "waiting", "steps_done": 0, "max_steps": scenario.max_steps}
        return None

    def _put(self, run: Run) -> None:
        self.runs[run.run_id] = run
        self.bytes += run.nbytes
        while self.runs and (len(self.runs) > self.max_runs or self.bytes > self.max_bytes):
            if len(self.runs) == 1:
                break  # always keep the newest run, whatever its size
            _, old = self.runs.popitem(last=False)
            self.bytes -= old.nbytes
