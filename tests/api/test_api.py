"""Every REST route, through FastAPI, on the real engine."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from pagedviz.app.compute import ComputePool, compute_pool
from pagedviz.app.links import pack
from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Limits
from pagedviz.core.presets import preset_dict
from tests.support.aio import run as run_to_end


@pytest.fixture()
def client() -> TestClient:
    c = TestClient(create_app(Settings(max_runs=4)))
    assert compute_pool().wait_ready(), "the compute processes did not start"  # /healthz is 200 then
    return c


def post(client: TestClient, scenario: Any) -> Any:
    return client.post("/api/runs", json=scenario)


def test_healthz_reports_status_version_and_device(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok" and r.json()["device"] in ("cpu", "cuda:0", "npu:0")


def test_healthz_is_not_ready_while_the_compute_processes_start() -> None:
    client = TestClient(create_app(Settings()))
    pool = client.app.state.store.pool = ComputePool()  # a pool of its own, just started
    try:
        pool.warm(1)
        r = client.get("/healthz")
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["detail"][0]["field"] == "compute"
        assert "starting" in r.json()["detail"][0]["message"]
        assert pool.wait_ready()
        ok = client.get("/healthz")
        assert ok.status_code == 200 and ok.json()["compute"] == "1 of 1 ready"
    finally:
        pool.close()


def test_presets_list_and_detail(client: TestClient) -> None:
    ids = [p["id"] for p in client.get("/api/presets").json()]
    assert {"seed-000", "seed-001", "seed-001-ascend", "seed-004"} <= set(ids)
    d = client.get("/api/presets/seed-001").json()
    assert d["document"] == "001_8a4008a8117428f7.txt" and d["scenario"]["config"]["block_size"] == 2
    r = client.get("/api/presets/nope")
    assert r.status_code == 404 and r.json()["detail"][0]["field"] == "preset_id"


def test_post_run_is_content_addressed_and_computes_once(client: TestClient) -> None:
    r1 = post(client, preset_dict("seed-001"))
    r2 = post(client, preset_dict("seed-001"))
    assert r1.status_code == r2.status_code == 201
    body = r1.json()
    assert body["run_id"] == r2.json()["run_id"]
    assert body["num_steps"] == 5 and body["flavor"] == "vllm" and body["url"].startswith("/run?s=")
    assert r1.headers["location"] == f"/api/runs/{body['run_id']}"
    assert client.app.state.store.computations == 1
    other = preset_dict("seed-001")
    other["seed"] = 2
    assert post(client, other).json()["run_id"] != body["run_id"]


def test_run_overview_lists_step_kinds(client: TestClient) -> None:
    rid = post(client, preset_dict("seed-000")).json()["run_id"]
    ov = client.get(f"/api/runs/{rid}").json()
    assert ov["scenario"]["name"] == "seed-000" and ov["num_steps"] == len(ov["steps"])
    kinds = [s["kind"] for s in ov["steps"]]
    assert kinds[:3] == ["prefill", "mixed", "mixed"]
    assert ov["steps"][1]["new_req_ids"] == ["2", "3", "4"] and ov["steps"][1]["num_tokens"] == 200


def test_step_follows_the_trace_contract(client: TestClient) -> None:
    rid = post(client, preset_dict("seed-001")).json()["run_id"]
    s = client.get(f"/api/runs/{rid}/steps/2").json()
    assert s["step"] == 2 and s["idle"] is False
    assert s["arrays"]["slot_mapping"]["data"] == [5, 14, 13, 16, 17]
    assert s["arrays"]["slot_mapping"]["level"] == "token"
    assert s["arrays"]["block_table"]["level"] == "system" and s["arrays"]["block_table"]["shape"] == [4, 6]
    assert s["scheduler"]["new_block_ids"] == {"1": [7], "2": [8]}
    assert s["scalars"]["num_reqs"] == 3
    assert client.get(f"/api/runs/{rid}/steps/0").status_code == 404
    assert client.get(f"/api/runs/{rid}/steps/99").status_code == 404
    assert client.get("/api/runs/deadbeef/steps/1").status_code == 404


def test_array_formats_json_csv_npy(client: TestClient) -> None:
    rid = post(client, preset_dict("seed-001")).json()["run_id"]
    base = f"/api/runs/{rid}/steps/2/arrays"
    j = client.get(f"{base}/slot_mapping?format=json").json()
    assert j["name"] == "slot_mapping" and j["data"] == [5, 14, 13, 16, 17] and j["dtype"] == "int64"
    r = client.get(f"{base}/slot_mapping?format=npy")
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["content-disposition"].endswith('-step2-slot_mapping.npy"')
    assert np.load(io.BytesIO(r.content)).tolist() == [5, 14, 13, 16, 17]
    r = client.get(f"{base}/block_table?format=csv")
    assert r.headers["content-type"].startswith("text/csv")
    assert r.headers["content-disposition"].endswith('-step2-block_table.csv"')
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0][:3] == ["row", "col0", "col1"] and rows[2] == ["1", "3", "7", "0", "0", "0", "0"]
    rows = list(csv.reader(io.StringIO(client.get(f"{base}/positions?format=csv").text)))
    assert rows == [["index", "positions"], ["0", "3"], ["1", "2"], ["2", "5"], ["3", "6"], ["4", "7"]]
    assert client.get(f"{base}/nope").status_code == 404
    assert client.get(f"{base}/slot_mapping?format=xml").status_code == 422


def test_links_reopen_a_run_without_the_cache() -> None:
    a = TestClient(create_app())
    b = TestClient(create_app())  # another server that never saw the scenario
    created = a.post("/api/runs", json=preset_dict("seed-004")).json()
    r = b.get("/api/runs/from-link", params={"s": created["link"]})
    assert r.status_code == 200 and r.json()["run_id"] == created["run_id"]
    assert b.get("/api/runs/from-link", params={"s": "!!notbase64"}).status_code == 422
    bomb = pack({"x": "a" * 5_000_000})
    assert b.get("/api/runs/from-link", params={"s": bomb}).status_code == 422


def test_evicted_runs_are_recomputed_from_their_scenario() -> None:
    # the database keeps no step (each is over its cap): the evicted run's steps are not there to
    # be served (a complete run's first steps are encoded, and stored, in the background)
    client = TestClient(create_app(Settings(max_runs=1, max_db_bytes=1)))
    first = client.post("/api/runs", json=preset_dict("seed-001")).json()["run_id"]
    client.post("/api/runs", json=preset_dict("seed-004"))
    store = client.app.state.store
    assert first not in store.runs and store.knows(first)
    s = client.get(f"/api/runs/{first}/steps/2").json()
    assert s["arrays"]["slot_mapping"]["data"] == [5, 14, 13, 16, 17]
    assert store.computations == 3


def test_errors_name_the_field_with_the_right_status(client: TestClient) -> None:
    bad = preset_dict("seed-001")
    bad["config"]["block_size"] = 0
    r = post(client, bad)
    assert r.status_code == 422
    assert r.json() == {
        "error": "invalid_scenario",
        "detail": [{"field": "config.block_size", "message": "must be >= 1 (got 0)"}],
    }
    assert client.post("/api/runs", content=b"{oops").status_code == 422
    huge = preset_dict("seed-001")
    huge["config"]["num_kv_blocks"] = 10**9
    assert post(client, huge).status_code == 413
    small = TestClient(create_app(Settings(max_body_bytes=100)))
    r = small.post("/api/runs", json=preset_dict("seed-001"))
    assert r.status_code == 413 and r.json()["detail"][0]["field"] == "body"


def test_limits_are_configurable() -> None:
    client = TestClient(create_app(Settings(limits=Limits(max_requests=2))))
    r = client.post("/api/runs", json=preset_dict("seed-001"))
    assert r.status_code == 413 and "at most 2 requests" in r.json()["detail"][0]["message"]


def test_validate_checks_without_running(client: TestClient) -> None:
    r = client.post("/api/scenarios/validate", json=preset_dict("seed-001"))
    assert r.status_code == 200 and r.json()["valid"] is True
    assert client.app.state.store.computations == 0
    r = client.post("/api/scenarios/validate", json={"name": "x", "requests": [{"id": "a"}]})
    assert r.status_code == 200 and r.json()["valid"] is False and r.json()["error"] == "invalid_scenario"
    assert r.json()["detail"] == [
        {"field": "requests[0]", "message": "give exactly one of prompt_token_ids, prompt, prompt_len"}
    ]
    assert client.post("/api/scenarios/validate", content=b"{").status_code == 422


def test_a_device_this_server_lacks_is_refused_before_running(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    scenario = preset_dict("seed-001")
    scenario["config"]["device"] = "cuda"
    want = [{"field": "config.device", "message": "cuda was asked for but torch sees no CUDA GPU"}]
    # the editor's live validation says so while the user types
    r = client.post("/api/scenarios/validate", json=scenario)
    assert r.status_code == 200 and r.json()["valid"] is False
    assert r.json()["error"] == "device_unavailable" and r.json()["detail"] == want
    # and a run is a 422 that stores and computes nothing
    r = post(client, scenario)
    assert r.status_code == 422 and r.json() == {"error": "device_unavailable", "detail": want}
    r = client.get("/api/runs/from-link", params={"s": pack(scenario)})
    assert r.status_code == 422 and r.json()["detail"] == want
    assert client.app.state.store.computations == 0


def test_stages_carry_the_engines_own_source(client: TestClient) -> None:
    stages = client.get("/api/stages?flavor=vllm").json()
    names = [s["name"] for s in stages]
    assert names[0] == "update_states" and names.index("positions") < names.index("slot_mapping")
    slot = next(s for s in stages if s["name"] == "slot_mapping")
    assert "def _slot_mapping(self)" in slot["source"] and "block_offsets" in slot["source"]
    assert client.get("/api/stages?flavor=nanovllm").json()[0]["name"] == "positions"
    assert client.get("/api/stages?flavor=tpu").status_code == 422


def test_large_responses_are_gzipped(client: TestClient) -> None:
    rid = post(client, preset_dict("seed-000")).json()["run_id"]
    r = client.get(f"/api/runs/{rid}/steps/2", headers={"Accept-Encoding": "gzip"})
    assert r.headers.get("content-encoding") == "gzip"
    assert json.loads(r.text)["arrays"]["seq_lens"]["data"] == [55, 146, 93, 75, 30]


def test_openapi_documents_every_route(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for path in (
        "/api/presets",
        "/api/presets/{preset_id}",
        "/api/runs",
        "/api/runs/{run_id}",
        "/api/runs/{run_id}/steps/{n}",
        "/api/runs/{run_id}/steps/{n}/arrays/{name}",
        "/api/runs/from-link",
        "/api/runs/{run_id}/progress",
        "/healthz",
    ):
        assert path in spec["paths"], path
    schema = spec["paths"]["/api/runs/{run_id}/steps/{n}"]["get"]["responses"]["200"]["content"]
    assert schema["application/json"]["schema"]["$ref"].endswith("/StepOut")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_api_docs_pages_load_their_scripts_from_this_server(client: TestClient, page: str) -> None:
    import re

    html = client.get(page).text
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and all(a.startswith("/vendor/docs/") for a in assets), assets
    assert "//cdn" not in html and "https://" not in html
    for a in assets:
        r = client.get(a)
        assert r.status_code == 200 and len(r.content) > 1000, a


def test_concurrent_requests_for_one_run_compute_once() -> None:
    import asyncio

    from pagedviz.app.store import RunStore
    from pagedviz.core import load_preset

    async def go() -> tuple[set[str], int]:
        store = RunStore(4, 1 << 30, 16)
        rid = store.remember(load_preset("seed-000"))
        runs = await asyncio.gather(*(store.get(rid) for _ in range(6)))
        return {r.run_id for r in runs if r is not None}, store.computations

    ids, computations = run_to_end(go())
    assert len(ids) == 1 and computations == 1


def test_pages_and_their_scripts_are_served_locally(client: TestClient) -> None:
    landing = client.get("/")
    assert landing.status_code == 200 and "pagedviz" in landing.text and "cdn" not in landing.text.lower()
    run = client.get("/run?preset=seed-001")
    # the run page draws its heatmaps on canvases (static/canvasmap.js): the page itself names no
    # Plotly and no CDN
    assert run.status_code == 200 and "plotly" not in run.text.lower() and "cdn" not in run.text.lower()
    assert client.get("/static/canvasmap.js").status_code == 200
    # the run-level charts (static/runcharts.js) load plotly.js later, from the app itself: the
    # installed plotly package's own file
    from pathlib import Path

    import plotly

    js = client.get("/vendor/plotly.min.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert js.content == (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()
    assert "/vendor/plotly.min.js" in client.get("/static/runcharts.js").text
    assert client.get("/static/run.js").status_code == 200


def test_the_run_page_preloads_every_module_it_imports(client: TestClient) -> None:
    # static/ is ES modules with no build step: each import level would be one more round trip
    import re
    from pathlib import Path

    static = Path(__file__).resolve().parents[2] / "static"
    imported: set[str] = set()
    todo = ["run.js", "embed.js"]
    while todo:
        name = todo.pop()
        for dep in re.findall(r'(?:from|import) "\./([\w-]+\.js)"', (static / name).read_text()):
            if dep not in imported:
                imported.add(dep)
                todo.append(dep)
    page = client.get("/run?preset=seed-001").text
    preloaded = set(re.findall(r'<link rel="modulepreload" href="/static/([\w-]+\.js)">', page))
    assert imported and preloaded == imported - {"run.js", "embed.js"}
    for name in preloaded:
        assert client.get(f"/static/{name}").status_code == 200


def test_a_run_over_its_time_budget_is_refused_with_413() -> None:
    client = TestClient(create_app(Settings(max_run_seconds=0)))
    r = client.post("/api/runs", json=preset_dict("seed-000"))
    assert r.status_code == 413
    assert r.json()["error"] == "run_too_long" and "model" in r.json()["detail"][0]["message"]
    # nothing half-done was kept: the same scenario still answers the same way
    assert client.post("/api/runs", json=preset_dict("seed-000")).status_code == 413


def test_preset_titles_in_chinese(client: TestClient) -> None:
    zh = {p["id"]: p for p in client.get("/api/presets?lang=zh").json()}
    assert zh["seed-001"]["title"].startswith("准备模型输入")
    assert "块大小" in zh["seed-000"]["title"] and zh["seed-004"]["document"] == "004_bb1918dda1248f63.txt"
    assert client.get("/api/presets/seed-001?lang=zh").json()["title"] == zh["seed-001"]["title"]
    assert client.get("/api/presets?lang=fr").status_code == 422


def test_workers_sharing_a_store_answer_for_each_others_runs(tmp_path) -> None:
    a = TestClient(create_app(Settings(store_dir=str(tmp_path))))
    b = TestClient(create_app(Settings(store_dir=str(tmp_path))))  # another worker, its own cache
    rid = a.post("/api/runs", json=preset_dict("seed-001")).json()["run_id"]
    s = b.get(f"/api/runs/{rid}/steps/2").json()
    assert s["arrays"]["slot_mapping"]["data"] == [5, 14, 13, 16, 17]
    assert b.get("/api/runs/..%2Fetc/steps/1").status_code == 404
    alone = TestClient(create_app())
    assert alone.get(f"/api/runs/{rid}").status_code == 404


def test_health_and_run_overview_name_the_upstream_the_engine_mirrors(client: TestClient) -> None:
    health = client.get("/healthz").json()["upstream"]
    assert "vLLM 0.33.0" in health and "nano-vllm bb823b3" in health and "vllm-ascend 182b75e" in health
    assert "Model Runner V2 (vllm/v1/worker/gpu/) by default" in health
    for preset, want in (
        ("seed-001", "vLLM 0.33.0 · V1 runner (gpu_model_runner.py)"),
        ("demo-v2-slots", "vLLM 0.33.0 · Model Runner V2 (vllm/v1/worker/gpu/)"),
        ("seed-004", "nano-vllm bb823b3"),
    ):
        run_id = client.post("/api/runs", json={"preset": preset}).json()["run_id"]
        assert client.get(f"/api/runs/{run_id}").json()["upstream"] == want


def test_a_created_run_names_what_it_mirrors_as_its_overview_does(client: TestClient) -> None:
    """The run page's header is filled from POST /api/runs's answer (a streaming run's overview
    comes later): it says the same upstream as the overview, vLLM's runner included, and the
    ascend flavour names vLLM's V1 runner it prepares its inputs with."""
    for body, want in (
        ({"preset": "seed-001"}, "vLLM 0.33.0 · V1 runner (gpu_model_runner.py)"),
        ({"preset": "demo-v2-slots"}, "vLLM 0.33.0 · Model Runner V2 (vllm/v1/worker/gpu/)"),
        ({"preset": "seed-004"}, "nano-vllm bb823b3"),
        (
            {**preset_dict("seed-001"), "flavor": "ascend"},
            "vLLM 0.33.0 · V1 runner (gpu_model_runner.py) · vllm-ascend 182b75e",
        ),
    ):
        created = client.post("/api/runs", json=body).json()
        assert created["upstream"] == want
        assert client.get(f"/api/runs/{created['run_id']}").json()["upstream"] == want


def test_run_overview_carries_pool_occupancy_and_prefix_cache_hits_per_step(client: TestClient) -> None:
    rid = post(client, preset_dict("demo-prefix-cache")).json()["run_id"]
    ov = client.get(f"/api/runs/{rid}").json()
    num_blocks = ov["scenario"]["config"]["num_kv_blocks"]
    hits = {}
    for s in ov["steps"]:
        step = client.get(f"/api/runs/{rid}/steps/{s['step']}").json()
        # blocks in use: those some request still holds (the owners map), never more than the pool
        assert s["kv_blocks_in_use"] == len(step["kv_cache"].get("owners", {})) <= num_blocks
        for req, n in s["num_cached_tokens"].items():
            assert req in s["new_req_ids"] + s["resumed_req_ids"]
            assert n % ov["scenario"]["config"]["block_size"] == 0  # a hit is whole blocks
            hits[req] = n
    assert any(n > 0 for n in hits.values())  # the demo's second request reuses the shared prefix
    assert set(hits) == {str(r["id"]) for r in ov["scenario"]["requests"]}
