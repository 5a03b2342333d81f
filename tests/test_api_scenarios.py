"""The scenario format over REST and the CLI: GET /api/schema/scenario and `pagedviz schema`
serve the generated JSON Schema with the server's limits."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema
import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Limits, Scenario
from pagedviz.core.config import scenario_schema
from pagedviz.core.presets import preset_dict


@pytest.fixture
def client() -> TestClient:
    return TestClient(create_app(Settings(max_runs=4, limits=Limits(max_requests=5))))


def test_schema_route_serves_the_format_with_the_servers_limits(client: TestClient) -> None:
    r = client.get("/api/schema/scenario")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    schema = r.json()
    assert schema == scenario_schema(Limits(max_requests=5))
    assert schema["properties"]["requests"]["maxItems"] == 5
    jsonschema.Draft202012Validator(schema).validate(preset_dict("seed-000"))
    assert "/api/schema/scenario" in client.get("/openapi.json").json()["paths"]


def test_pagedviz_schema_prints_the_same_schema() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pagedviz.app.cli", "schema"],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("PAGEDVIZ_")},
            "PAGEDVIZ_MAX_REQUESTS": "7",
        },
    )
    assert r.returncode == 0, r.stderr
    schema = json.loads(r.stdout)
    assert schema == scenario_schema(Limits(max_requests=7))


def test_a_preset_runs_by_its_id(client: TestClient) -> None:
    r = client.post("/api/runs", json={"preset": "seed-001"})
    assert r.status_code == 201, r.text
    same = client.post("/api/runs", json=preset_dict("seed-001")).json()
    assert r.json()["run_id"] == same["run_id"]
    step2 = client.get(f"/api/runs/{same['run_id']}/steps/2/arrays/slot_mapping").json()
    assert step2["data"] == [5, 14, 13, 16, 17]


def test_overrides_deep_merge_into_the_preset(client: TestClient) -> None:
    body = {"preset": "seed-001", "overrides": {"config": {"block_size": 4}, "seed": 3}}
    r = client.post("/api/runs", json=body)
    assert r.status_code == 201, r.text
    scenario = client.get(f"/api/runs/{r.json()['run_id']}").json()["scenario"]
    expected = preset_dict("seed-001")
    expected["config"]["block_size"] = 4
    expected["seed"] = 3
    # the rest of the preset is kept: only block_size and the seed changed
    assert scenario == Scenario.from_dict(expected).to_dict()
    assert scenario["config"]["max_model_len"] == preset_dict("seed-001")["config"]["max_model_len"]


def test_overrides_that_break_a_rule_name_the_field(client: TestClient) -> None:
    r = client.post("/api/runs", json={"preset": "seed-001", "overrides": {"config": {"block_sise": 4}}})
    assert r.status_code == 422
    assert r.json()["detail"] == [
        {"field": "config.block_sise", "message": "unknown field; did you mean 'block_size'?"}
    ]
    r = client.post("/api/runs", json={"preset": "seed-001", "overrides": {"config": {"block_size": 0}}})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "config.block_size"


def test_unknown_preset_lists_the_presets(client: TestClient) -> None:
    r = client.post("/api/runs", json={"preset": "seed-999"})
    assert r.status_code == 404
    (item,) = r.json()["detail"]
    assert item["field"] == "preset" and "seed-999" in item["message"] and "seed-001" in item["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"preset": 1}, "preset"),
        ({"preset": "seed-001", "overrides": [1]}, "overrides"),
        ({"preset": "seed-001", "config": {}}, "config"),
    ],
)
def test_malformed_preset_bodies_name_the_field(client: TestClient, body: dict, field: str) -> None:
    r = client.post("/api/runs", json=body)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == field


def test_validate_takes_the_preset_form_too(client: TestClient) -> None:
    r = client.post("/api/scenarios/validate", json={"preset": "seed-000", "overrides": {"max_steps": 0}})
    assert r.status_code == 200
    assert r.json()["valid"] is False and r.json()["detail"][0]["field"] == "scenario.max_steps"
