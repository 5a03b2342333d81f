"""Async scheduling through the REST API: the engine core's record of each step survives the
compute process, the store and the step endpoint (trace contract: `engine_core`)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from pagedviz.app.compute import compute_pool
from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import preset_dict


def test_every_step_served_carries_the_engine_core_record_the_engine_made() -> None:
    client = TestClient(create_app(Settings(max_runs=2)))
    assert compute_pool().wait_ready(), "the compute processes did not start"
    d = preset_dict("demo-async-scheduling")
    body = client.post("/api/runs", json=d).json()
    local = [t.engine_core for t in make_engine(Scenario.from_dict(d)).run()]
    assert body["num_steps"] == len(local)
    served = [client.get(f"/api/runs/{body['run_id']}/steps/{n}").json() for n in range(1, len(local) + 1)]
    assert [s["engine_core"] for s in served] == local
    # the last step only drains the batch queue; a synchronous run has no record at all
    assert served[-1]["engine_core"]["scheduled"] is False and served[-1]["engine_core"]["batch_queue"] == []
    sync = client.post("/api/runs", json=preset_dict("seed-001")).json()
    assert "engine_core" not in client.get(f"/api/runs/{sync['run_id']}/steps/1").json()
