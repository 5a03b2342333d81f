"""POST /api/runs/import (issue 30): a recording replays into a run the page reads like any other,
answered like POST /api/runs; bad recordings are a 4xx naming their line; the server stays up.
Real FastAPI app, no vLLM."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings

from recording_cases import EXAMPLE, NUM_STEPS, cases

LINE_LIMIT = 1 << 20
CLIENT = TestClient(
    create_app(
        Settings(max_runs=8, max_import_bytes=4 << 20, max_record_line_bytes=LINE_LIMIT, compute_in="thread")
    ),
    raise_server_exceptions=False,
)
NDJSON = {"Content-Type": "application/x-ndjson"}


def test_a_recording_imports_into_a_run_with_one_step_per_recorded_step() -> None:
    r = CLIENT.post("/api/runs/import", content=EXAMPLE, headers=NDJSON)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["run_id"].startswith("rec-") and created["num_steps"] == NUM_STEPS
    assert created["url"] == f"/run?run={created['run_id']}"
    ov = CLIENT.get(f"/api/runs/{created['run_id']}").json()
    assert ov["num_steps"] == NUM_STEPS
    assert any("agrees with the recording up to step" in n for n in ov["scenario"]["notes"])
    recorded = [json.loads(x) for x in EXAMPLE.splitlines()[1:]]
    for n, rec in enumerate(recorded, start=1):
        step = CLIENT.get(f"/api/runs/{created['run_id']}/steps/{n}").json()
        assert step["scheduler"]["num_scheduled_tokens"] == rec["num_scheduled_tokens"]
        new_blocks = {x["id"]: x["block_ids"][0] for x in rec["new"]}
        new_blocks.update(
            {
                c["id"]: c["new_block_ids"][0]
                for c in rec["cached"]
                if c["new_block_ids"] and c["new_block_ids"][0]
            }
        )
        assert step["scheduler"]["new_block_ids"] == {k: v for k, v in new_blocks.items() if v}


def test_the_same_recording_as_text_plain_is_the_same_run() -> None:
    a = CLIENT.post("/api/runs/import", content=EXAMPLE, headers=NDJSON).json()
    b = CLIENT.post("/api/runs/import", content=EXAMPLE, headers={"Content-Type": "text/plain"}).json()
    assert a["run_id"] == b["run_id"]


def test_the_shipped_example_imports_by_name_and_is_listed() -> None:
    listed = CLIENT.get("/api/recordings").json()
    assert [x["id"] for x in listed] == ["real-vllm-preemption"]
    r = CLIENT.post("/api/runs/import?example=real-vllm-preemption")
    assert r.status_code == 201 and r.json()["num_steps"] == NUM_STEPS
    assert CLIENT.post("/api/runs/import?example=nope").status_code == 404


@pytest.mark.parametrize("name", list(cases(LINE_LIMIT)))
def test_a_bad_recording_is_a_422_naming_its_line_and_the_server_stays_up(name: str) -> None:
    body, says = cases(LINE_LIMIT)[name]
    r = CLIENT.post("/api/runs/import", content=body, headers=NDJSON)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert r.json()["error"] == "invalid_recording"
    line, _, message = says.partition(": ")
    assert detail["field"] == line and message in detail["message"], detail
    assert CLIENT.get("/healthz").status_code == 200
    assert CLIENT.post("/api/runs/import", content=EXAMPLE, headers=NDJSON).status_code == 201


def test_a_body_over_the_import_limit_is_a_413_naming_the_setting() -> None:
    app = create_app(Settings(max_import_bytes=1 << 20, compute_in="thread"))
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/api/runs/import", content=EXAMPLE * 400, headers=NDJSON)
    assert r.status_code == 413
    assert "PAGEDVIZ_MAX_IMPORT_MB" in r.json()["detail"][0]["message"]


def test_json_or_another_media_type_is_a_415() -> None:
    r = CLIENT.post("/api/runs/import", content=EXAMPLE, headers={"Content-Type": "application/json"})
    assert r.status_code == 415 and "application/x-ndjson" in r.json()["detail"][0]["message"]


def test_the_import_route_is_in_the_openapi_document() -> None:
    doc = CLIENT.get("/openapi.json").json()
    op = doc["paths"]["/api/runs/import"]["post"]
    assert set(op["requestBody"]["content"]) == {"application/x-ndjson", "text/plain"}
    assert {"201", "413", "422"} <= set(op["responses"])


def test_a_recording_whose_replay_outgrows_the_run_bound_is_a_413_naming_the_setting() -> None:
    app = create_app(Settings(max_run_bytes=1 << 10, compute_in="thread"))
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/api/runs/import", content=EXAMPLE, headers=NDJSON)
        assert r.status_code == 413 and "PAGEDVIZ_MAX_RUN_MB" in r.json()["detail"][0]["message"]
        assert client.get("/healthz").status_code == 200
