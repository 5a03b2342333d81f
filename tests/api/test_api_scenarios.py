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
from pagedviz.core.presets import preset_dict
from pagedviz.core.schema import scenario_schema


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


def _numbers(schema: dict) -> list[tuple[str, dict]]:
    """The scenario's number fields a form shows (top level and config), with their schema."""
    top = schema["properties"]
    out = [(k, p) for k, p in top.items() if p.get("type") in ("integer", "number")]
    cfg = top["config"]["properties"]
    return out + [(f"config.{k}", p) for k, p in cfg.items() if p.get("type") in ("integer", "number")]


def _with(path: str, value: object) -> dict:
    d = preset_dict("seed-001")
    d["config"]["model"] = None
    where, key = (d["config"], path[len("config.") :]) if path.startswith("config.") else (d, path)
    where[key] = value
    return d


def test_each_number_fields_published_maximum_is_the_bound_the_validator_enforces() -> None:
    """The form's help shows the schema's bounds: each number field's maximum is accepted for that
    field and one more is refused naming it (max_num_batched_tokens was published as 1048576 while
    the server refused anything over its 16384 tokens per step)."""
    limits = Limits(max_tokens_per_step=4096)  # a server's own limit, not the default
    with TestClient(create_app(Settings(max_runs=4, limits=limits))) as c:
        schema = c.get("/api/schema/scenario").json()
        fields = _numbers(schema)
        assert {"config.max_num_batched_tokens", "config.block_size", "max_steps"} <= {f for f, _ in fields}
        assert dict(fields)["config.max_num_batched_tokens"]["maximum"] == 4096
        for field, prop in fields:
            if "maximum" not in prop:
                # bounded by another field: the description says which
                assert "at most config." in prop["description"], field
                continue
            top = prop["maximum"]
            at = c.post("/api/scenarios/validate", json=_with(field, top)).json()
            assert not [d for d in at["detail"] if d["field"] in (field, f"scenario.{field}")], (field, at)
            over = c.post("/api/scenarios/validate", json=_with(field, top + 1)).json()
            assert over["valid"] is False and over["detail"][0]["field"] in (field, f"scenario.{field}"), over
            assert str(top) in over["detail"][0]["message"], (field, over)


def test_the_validator_publishes_the_largest_value_it_accepts_where_other_fields_bound_it(
    client: TestClient,
) -> None:
    """num_kv_blocks' own bound (1000000) is not what the server accepts: with the defaults the
    step-trace size refuses anything above about 279,000. The validator's answer gives, for such
    fields, the largest value accepted with the other fields as they are (the form's help shows it):
    that value is accepted and one more is refused, naming the rule's setting."""
    base = _with("config.num_kv_blocks", 64)
    base["config"]["max_model_len"] = 64
    maxima = client.post("/api/scenarios/validate", json=base).json()["maxima"]
    assert set(maxima) == {"config.num_kv_blocks", "config.max_model_len"}, maxima
    own = client.get("/api/schema/scenario").json()["properties"]["config"]["properties"]
    assert maxima["config.num_kv_blocks"] < own["num_kv_blocks"]["maximum"], maxima
    for field, setting in (
        ("config.num_kv_blocks", "PAGEDVIZ_MAX_STEP_TRACE_KB"),
        ("config.max_model_len", "max_model_len"),
    ):
        top = maxima[field]
        at = dict(base, config={**base["config"], field.split(".")[1]: top})
        assert client.post("/api/scenarios/validate", json=at).json()["valid"] is True, (field, top)
        at["config"][field.split(".")[1]] = top + 1
        over = client.post("/api/scenarios/validate", json=at).json()
        assert over["valid"] is False and setting in " ".join(d["message"] for d in over["detail"]), over
    # max_num_reqs x max_model_len <= max_cells binds max_model_len when the pool is large enough
    wide_config = {"num_kv_blocks": 200_000, "max_num_reqs": 64, "max_num_batched_tokens": 64}
    wide = dict(base, config={**base["config"], **wide_config})
    assert client.post("/api/scenarios/validate", json=wide).json()["maxima"]["config.max_model_len"] == min(
        4_000_000 // 64, (200_000 - 1) * base["config"]["block_size"]
    )


def test_the_editors_validator_names_the_field_and_a_body_that_is_not_json_is_a_422(
    client: TestClient,
) -> None:
    bad = client.post("/api/scenarios/validate", json=_with("config.block_size", 0)).json()
    assert bad["valid"] is False and bad["detail"][0]["field"] == "config.block_size"
    good = client.post("/api/scenarios/validate", json=_with("config.block_size", 4)).json()
    assert good == {**good, "valid": True, "detail": []} and good["run_id"]
    r = client.post(
        "/api/scenarios/validate", content=b'{"name": "x",', headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 422 and r.json()["detail"][0]["field"]
    assert "/api/scenarios/validate" in client.get("/openapi.json").json()["paths"]
