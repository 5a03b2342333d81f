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
from pagedviz.core import Limits
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
