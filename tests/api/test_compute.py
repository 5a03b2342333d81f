"""Runs computed in worker processes (app/compute.py): the same traces as in the server's own
process, steps streamed as they are made, runs sharing a worker by least time used, and every way
a worker can fail or be left: killed, silent, cancelled."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from pagedviz.app import compute_watchdog
from pagedviz.app.compute import ComputePool, compute_pool, worker_threads
from pagedviz.app.compute_stream import CancelledRunError, WorkerError
from pagedviz.app.main import create_app
from pagedviz.app.run import Progress, RunTooLargeError, compute, measured_bytes
from pagedviz.app.settings import Settings
from pagedviz.core import Scenario, load_preset, make_engine
from pagedviz.core.engine import RunTooLongError
from pagedviz.core.limits import SettingError
from pagedviz.core.presets import preset_dict
from tests.support.hostile_cases import worst_scenarios
from tests.support.scenarios import LONG_RUN

# the tiny model over many steps: seconds of computing on a small machine
HEAVY = {**LONG_RUN, "name": "heavy", "max_steps": 400}
# a HEAVY run that tests wait out to its end: a sixth of its steps, still a couple of seconds on a
# small machine (about 25 ms a step alone on 2 cores, several times that beside the other tiers)
HEAVY_TO_THE_END = {**HEAVY, "max_steps": 60}
# the time budget of a HEAVY run where the budget is not what a test is about: generous, since the
# pool's workers run niced (app/compute_worker.py) and under pytest-xdist share the cores with the
# other tiers' servers and browsers
BUDGET_S = 400


@pytest.fixture(scope="module")
def pool() -> Iterator[ComputePool]:
    """A pool of one worker of its own, so that runs given to it share that worker."""
    p = ComputePool()
    p.warm(1)
    yield p
    p.close()


@contextlib.contextmanager
def own_pool(memory_budget: int) -> Iterator[ComputePool]:
    """A pool of one worker of its own that keeps the runs in flight under `memory_budget` bytes."""
    pool = ComputePool()
    try:
        pool.warm(1, memory_budget=memory_budget)
        yield pool
    finally:
        pool.close()


def without_timings(t: Any) -> str:
    d = t.to_dict()
    d.pop("timing_us")
    return json.dumps(d, sort_keys=True)


def wait_for(predicate: Any, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.005)


@pytest.mark.parametrize(
    "preset",
    [
        "seed-001",
        "demo-prefix-cache",
        "demo-ngram-spec-decode",
        "nanovllm-prefix-cache",
        "ascend-spec-decoding",
    ],
)
def test_a_run_computed_in_a_worker_is_the_run_computed_here(pool: ComputePool, preset: str) -> None:
    scenario = load_preset(preset)
    there = pool.compute("x", scenario, 60)
    # computed here with as many torch threads as the pool gives its workers (app/compute.py: the
    # cores shared out among them, no more than OMP_NUM_THREADS), since each step's
    # paged_vs_dense_max_abs_diff, a float error, depends on the count (tests/conftest.py gives test
    # processes one)
    threads = torch.get_num_threads()
    torch.set_num_threads(worker_threads(pool.max_workers))
    try:
        here = compute("x", scenario, 60)
    finally:
        torch.set_num_threads(threads)
    assert [without_timings(t) for t in there.steps] == [without_timings(t) for t in here.steps]
    assert (there.truncated, there.device) == (here.truncated, here.device)
    # the server's copy (unpickled, measured here) holds about what the run computed here holds:
    # a little more for a tiny run, whose dict keys are each step's own once unpickled
    assert 0.8 < there.nbytes / here.nbytes < 1.5


def test_a_big_kv_pool_costs_the_server_what_it_costs_in_process(pool: ComputePool) -> None:
    # one entry a block in the free queue and the ref counts: kept as arrays, not as Python ints
    # that unpickling would make one object each
    scenario = Scenario.from_dict({**worst_scenarios()["KV pool (no model)"], "max_steps": 4})
    there = pool.compute("x", scenario, 60)
    here = compute("x", scenario, 60)
    assert scenario.config.num_kv_blocks > 100_000
    assert 0.8 < there.nbytes / here.nbytes < 1.25
    assert there.nbytes < 12 * scenario.config.num_kv_blocks * len(there.steps)  # bytes a block a step
    # the server's count, made as each step arrived, is what it holds now, within 0.1%: a scalar
    # counted only where no other object holds it (measured_bytes) can change sides as later steps
    # come to share it (core/shared_values.py), by a few objects either way
    assert measured_bytes(there.steps) <= there.nbytes * 1.001


def test_the_server_holds_a_run_to_max_run_bytes_by_its_own_measure(pool: ComputePool) -> None:
    scenario = Scenario.from_dict({**worst_scenarios()["KV pool (no model)"], "max_steps": 40})
    with pytest.raises(RunTooLargeError) as refused:
        pool.compute("x", scenario, 60, None, 8 << 20)
    assert 1 <= refused.value.steps_done < 40


def test_steps_arrive_while_later_steps_compute(pool: ComputePool) -> None:
    steps: list[Any] = []
    job = pool.submit("heavy", Scenario.from_dict(HEAVY_TO_THE_END), BUDGET_S, None, None, steps)
    wait_for(lambda: len(steps) >= 1)
    assert not job.future.done()  # step 1 is readable while the run goes on
    run = job.future.result(400)
    assert run.steps is steps and [t.step for t in steps] == list(range(1, len(steps) + 1))
    assert len(steps) == HEAVY_TO_THE_END["max_steps"]  # every step came, to the last


def test_a_new_run_overtakes_a_long_one_in_the_same_worker(pool: ComputePool) -> None:
    long = pool.submit("heavy", Scenario.from_dict(HEAVY), BUDGET_S)
    wait_for(lambda: len(long.steps) >= 3)
    small = pool.submit("small", load_preset("seed-001"), 60)
    run = small.future.result(60)
    # the small run had the least time, so it ran to its end before the long one went on much
    assert not long.future.done()
    assert len(run.steps) == len(compute("small", load_preset("seed-001")).steps)
    pool.cancel(long)
    with pytest.raises(CancelledRunError):
        long.future.result(60)


def test_a_cancelled_run_stops_and_its_worker_computes_the_next(pool: ComputePool) -> None:
    started = pool.started
    job = pool.submit("heavy", Scenario.from_dict(HEAVY), BUDGET_S)
    wait_for(lambda: len(job.steps) >= 1)
    pool.cancel(job)
    with pytest.raises(CancelledRunError):
        job.future.result(60)
    stopped_at = len(job.steps)
    assert stopped_at < HEAVY["max_steps"]
    assert len(pool.compute("next", load_preset("seed-001"), 60).steps) > 0
    assert pool.started == started  # the same worker
    assert len(job.steps) == stopped_at  # nothing more came for the dropped run


def test_a_killed_worker_fails_only_its_runs_and_a_fresh_one_takes_the_next(pool: ComputePool) -> None:
    job = pool.submit("heavy", Scenario.from_dict(HEAVY), BUDGET_S)
    wait_for(lambda: len(job.steps) >= 1)
    (pid,) = pool.pids()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerError, match="SIGKILL"):
        job.future.result(30)
    started = pool.started
    assert len(pool.compute("next", load_preset("seed-001"), 60).steps) > 0
    assert pool.started == started + 1 and pool.pids() != [pid]


def test_a_run_given_to_a_worker_that_dies_before_taking_it_goes_to_a_fresh_one(pool: ComputePool) -> None:
    pool.compute("warm", load_preset("seed-001"), 60)  # a worker that is ready
    (pid,) = pool.pids()
    os.kill(pid, signal.SIGSTOP)  # it cannot read the run given to it ...
    job = pool.submit("late", load_preset("seed-002"), 60)
    os.kill(pid, signal.SIGKILL)  # ... and dies: as if killed an instant before the run came
    run = job.future.result(60)
    assert len(run.steps) == len(compute("late", load_preset("seed-002")).steps) > 0
    assert pool.pids() != [pid]
    # one that nobody waits for any more is not given again
    (pid,) = pool.pids()
    os.kill(pid, signal.SIGSTOP)
    job = pool.submit("dropped", load_preset("seed-002"), 60)
    pool.cancel(job)
    moved = pool.moved
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(CancelledRunError):
        job.future.result(60)
    assert pool.moved == moved


def test_a_worker_silent_past_the_time_bound_is_killed(pool: ComputePool, monkeypatch: Any) -> None:
    monkeypatch.setattr(compute_watchdog, "WATCHDOG_GRACE_S", 0.5)
    pool.compute("warm", load_preset("seed-001"), 60)  # a worker that is ready
    (pid,) = pool.pids()
    job = pool.submit("heavy", Scenario.from_dict(HEAVY), 1)
    wait_for(lambda: len(job.steps) >= 1)
    os.kill(pid, signal.SIGSTOP)  # as if a step hung
    try:
        with pytest.raises(WorkerError, match="stopped answering"):
            job.future.result(30)
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed, as it should be
            os.kill(pid, signal.SIGCONT)
    assert len(pool.compute("next", load_preset("seed-001"), 60).steps) > 0


def test_a_run_over_its_time_bound_is_refused_with_its_steps(pool: ComputePool) -> None:
    with pytest.raises(RunTooLongError) as refused:
        pool.compute("heavy", Scenario.from_dict(HEAVY), 0.3)
    assert 0 < refused.value.steps_done < HEAVY["max_steps"]


def test_the_time_bound_counts_only_the_runs_own_steps() -> None:
    list(make_engine(load_preset("seed-001")).run())  # warm
    engine = make_engine(load_preset("seed-001"))
    steps = 0
    for _ in engine.run(budget=0.5):  # paused 0.3 s after each step: 1.5 s in all, far past 0.5
        steps += 1
        time.sleep(0.3)
    assert steps == len(list(make_engine(load_preset("seed-001")).run())) >= 5
    engine = make_engine(load_preset("seed-001"))
    engine.before_forward = lambda _: time.sleep(0.3)
    with pytest.raises(RunTooLongError):
        list(engine.run(budget=0.5))


def test_the_server_computes_in_workers_and_says_when_one_dies() -> None:
    client = TestClient(create_app(Settings()), raise_server_exceptions=False)
    assert client.app.state.store.pool is compute_pool()
    r = client.post("/api/runs", json=preset_dict("seed-001"))
    assert r.status_code == 201 and r.json()["num_steps"] > 0
    assert client.get(f"/api/runs/{r.json()['run_id']}/steps/1").json()["step"] == 1
    # a worker that dies mid-run fails that run with a message; the run can be asked for again
    with TestClient(create_app(Settings())) as c:  # one event loop: the run computes across requests
        store = c.app.state.store
        r = c.post("/api/runs?wait=first", json=HEAVY)
        assert r.status_code == 202
        rid = r.json()["run_id"]
        for pid in compute_pool().pids():
            os.kill(pid, signal.SIGKILL)
        r = c.get(f"/api/runs/{rid}")
        assert r.status_code == 500 and r.json()["error"] == "compute_failed"
        assert "SIGKILL" in r.json()["detail"][0]["message"]
        assert store.status(rid)["state"] == "waiting"  # not remembered as refused
    assert client.post("/api/runs", json=preset_dict("seed-002")).status_code == 201


def test_compute_in_threads_is_a_setting(monkeypatch: Any) -> None:
    monkeypatch.setenv("PAGEDVIZ_COMPUTE_IN", "thread")
    settings = Settings.from_env()
    assert settings.compute_in == "thread"
    client = TestClient(create_app(settings))
    assert client.app.state.store.pool is None
    assert client.post("/api/runs", json=preset_dict("seed-001")).status_code == 201
    monkeypatch.setenv("PAGEDVIZ_COMPUTE_IN", "gpu")
    with pytest.raises(SettingError, match="PAGEDVIZ_COMPUTE_IN"):
        Settings.from_env()


def test_past_the_memory_budget_only_the_oldest_run_goes_on() -> None:
    with own_pool(1) as pool:  # any run in flight passes it
        first = pool.submit("heavy", Scenario.from_dict(HEAVY_TO_THE_END), BUDGET_S)
        wait_for(lambda: len(first.steps) >= 1)
        progress = Progress(max_steps=60, queued=time.monotonic())
        second = pool.submit("small", load_preset("seed-001"), 60, progress)
        assert second.paused and progress.paused  # started paused: the first holds more than the budget
        # the worker goes on with the first for ten more steps, and gives the second none, though
        # the second has had the least time (not paused, it would have had the next step): a
        # count of steps, not a time, so that a fast machine cannot end the first meanwhile
        seen = len(first.steps)
        wait_for(lambda: len(first.steps) >= seen + 10)
        assert not second.steps and not first.future.done()
        first.future.result(400)
        run = second.future.result(60)  # the first's bytes left: the second went on
        assert not progress.paused
        assert len(run.steps) == len(compute("small", load_preset("seed-001")).steps)
        assert pool.pauses >= 1 and pool.bytes_in_flight() == 0


def test_under_the_memory_budget_runs_go_side_by_side() -> None:
    with own_pool(1 << 30) as pool:
        first = pool.submit("heavy", Scenario.from_dict(HEAVY), BUDGET_S)
        wait_for(lambda: len(first.steps) >= 1)
        second = pool.submit("small", load_preset("seed-001"), 60)
        second.future.result(60)
        assert not second.paused and not first.future.done() and pool.pauses == 0
        pool.cancel(first)


def test_a_run_paused_for_memory_on_a_worker_that_dies_goes_on_in_a_fresh_one() -> None:
    with own_pool(1) as pool:  # any run in flight passes it
        first = pool.submit("heavy", Scenario.from_dict(HEAVY), BUDGET_S)
        wait_for(lambda: len(first.steps) >= 1)
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGSTOP)
        progress = Progress(max_steps=60, queued=time.monotonic())
        second = pool.submit("small", load_preset("seed-001"), 60, progress)
        assert second.paused and progress.paused  # behind the first, on the same worker
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(WorkerError, match="SIGKILL"):
            first.future.result(30)  # it had begun: it fails with its worker
        run = second.future.result(60)  # it had not: it went to a fresh worker, and on
        assert not progress.paused and pool.moved == 1
        assert len(run.steps) == len(compute("small", load_preset("seed-001")).steps)


def test_a_workers_torch_threads_share_out_the_cores_and_keep_to_omp_num_threads(monkeypatch: Any) -> None:
    cores = os.cpu_count() or 1
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert worker_threads(1) == cores and worker_threads(cores + 1) == 1
    for value, want in (("1", 1), (str(cores + 5), cores), ("0", cores), ("x", cores), ("", cores)):
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        assert worker_threads(1) == want, value


def test_the_workers_niceness_comes_from_the_environment_when_it_is_a_whole_number_up_to_19(
    monkeypatch: Any,
) -> None:
    from pagedviz.app.compute_worker import NICE, NICE_ENV, niceness

    cases = (("0", 0), ("12", 12), ("19", 19), ("20", NICE), ("-3", NICE), ("x", NICE), ("", NICE))
    for value, want in cases:
        monkeypatch.setenv(NICE_ENV, value)
        assert niceness() == want, value
    monkeypatch.delenv(NICE_ENV)
    assert niceness() == NICE == 5
