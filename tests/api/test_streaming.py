"""Runs stream: a step is answered as soon as the engine has made it, while the run's later steps
still compute (GET /api/runs/{id}/steps/{n}, POST /api/runs?wait=first)."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Scenario
from tests.support.scenarios import LONG_RUN


def test_step_one_is_answered_while_later_steps_compute() -> None:
    with TestClient(create_app(Settings())) as client:  # one event loop for every request
        store = client.app.state.store
        run_id = store.remember(Scenario.from_dict(LONG_RUN))
        first = client.get(f"/api/runs/{run_id}/steps/1")
        assert first.status_code == 200 and first.json()["step"] == 1
        status = store.status(run_id)
        assert status["state"] == "computing" and status["steps_done"] < LONG_RUN["max_steps"]
        overview = client.get(f"/api/runs/{run_id}").json()  # waits for the whole run
        assert store.status(run_id)["state"] == "done"
        assert first.json() == client.get(f"/api/runs/{run_id}/steps/1").json()
        past = client.get(f"/api/runs/{run_id}/steps/{overview['num_steps'] + 1}")
        assert past.status_code == 404 and past.json()["detail"][0]["field"] == "n"


def test_post_with_wait_first_answers_202_before_the_run_is_complete() -> None:
    with TestClient(create_app(Settings())) as client:
        r = client.post("/api/runs?wait=first", json={**LONG_RUN, "seed": 7})
        assert r.status_code == 202, r.text
        body = r.json()
        assert body["complete"] is False and 1 <= body["num_steps"] < LONG_RUN["max_steps"]
        assert client.get(f"/api/runs/{body['run_id']}/steps/2").json()["step"] == 2
        num_steps = client.get(f"/api/runs/{body['run_id']}").json()["num_steps"]  # waits for all
        done = client.post("/api/runs?wait=first", json={**LONG_RUN, "seed": 7})
        assert done.status_code == 201 and done.json()["complete"] is True
        assert done.json()["num_steps"] == num_steps
        small = client.post("/api/runs?wait=first", json={"preset": "seed-001"})
        assert small.status_code in (201, 202) and small.json()["run_id"]
        bad = client.post("/api/runs?wait=soon", json={"preset": "seed-001"})
        assert bad.status_code == 422 and "wait" in bad.text


def test_a_streaming_runs_first_step_is_encoded_as_its_202_goes_back() -> None:
    """The page asks for step 1 right after the 202: its encoding has started by then (the read
    finds it kept, or shares the encoding under way) and the bytes are those of the step."""
    with TestClient(create_app(Settings())) as client:
        store = client.app.state.store
        r = client.post("/api/runs?wait=first", json={**LONG_RUN, "seed": 11})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        deadline = time.monotonic() + 2
        while not ((run_id, 1) in store.step_cache.encoding or (run_id, 1) in store.step_cache.encoded):
            assert time.monotonic() < deadline, "step 1's encoding was not started"
            time.sleep(0.005)
        step = client.get(f"/api/runs/{run_id}/steps/1")
        assert step.status_code == 200 and step.json()["step"] == 1
        assert (run_id, 1) in store.step_cache.encoded
        assert step.content == store.step_cache.encoded[(run_id, 1)].body


def test_step_zero_of_a_run_still_computing_answers_404_at_once() -> None:
    """Steps are numbered from 1: step 0 (or below) is refused, naming `n`, without waiting for a
    run that is still computing; an unknown run is still named as such."""
    with TestClient(create_app(Settings())) as client:
        store = client.app.state.store
        r = client.post("/api/runs?wait=first", json={**LONG_RUN, "seed": 13})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        for path in (f"/api/runs/{run_id}/steps/0", f"/api/runs/{run_id}/steps/-1/arrays/slot_mapping"):
            zero = client.get(path)
            assert zero.status_code == 404, path
            detail = zero.json()["detail"][0]
            assert detail["field"] == "n" and "numbered from 1" in detail["message"]
        assert store.status(run_id)["state"] == "computing"  # answered before the run ended
        unknown = client.get("/api/runs/deadbeef/steps/0")
        assert unknown.status_code == 404 and unknown.json()["detail"][0]["field"] == "run_id"
