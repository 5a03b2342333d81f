"""Issue 32: run ids are never forgotten. However small the in-memory caps, every run id handed
out answers with the same content after hundreds of later runs; with `--store DIR` that holds
across a restart of a real server and from two workers; the database's own caps drop steps
before scenarios, and a scenario only past the total cap (logged); an unusable store stops
`pagedviz serve` at start with one line naming --store."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from pagedviz.app.db import DB_NAME, RunDB
from pagedviz.app.main import create_app
from pagedviz.app.serve import free_port, running_server
from pagedviz.app.settings import Settings
from pagedviz.core.presets import preset_dict


def tiny(seed: int) -> dict[str, Any]:
    return {
        "name": f"tiny-{seed}",
        "seed": seed,
        "max_steps": 12,
        "config": {"block_size": 2, "max_model_len": 16, "num_kv_blocks": 16, "model": None},
        "requests": [
            {"id": "0", "prompt_len": 3 + seed % 5, "max_tokens": 3},
            {"id": "1", "prompt_len": 4, "max_tokens": 2, "arrival_step": 1 + seed % 3},
        ],
    }


def content(step: dict[str, Any]) -> dict[str, Any]:
    """A step without its timings (the only part that differs when a run is recomputed)."""
    return {k: v for k, v in step.items() if k != "timing_us"}


def snapshot(get: Any, rid: str) -> tuple[Any, ...]:
    ov = get(f"/api/runs/{rid}")
    assert ov.status_code == 200, ov.text
    steps = [content(get(f"/api/runs/{rid}/steps/{n}").json()) for n in (1, ov.json()["num_steps"])]
    return ov.json(), steps


def test_every_run_id_answers_the_same_after_hundreds_of_later_runs_however_small_the_caps() -> None:
    caps = Settings(max_runs=1, max_store_bytes=1 << 16, max_scenarios=1, max_scenario_bytes=1)
    with TestClient(create_app(caps)) as client:
        early = [client.post("/api/runs", json=tiny(s)).json()["run_id"] for s in range(8)]
        before = {rid: snapshot(client.get, rid) for rid in early}
        for s in range(8, 308):  # 300 later runs, each evicting everything before it from memory
            assert client.post("/api/runs", json=tiny(s)).status_code == 201
        store = client.app.state.store
        assert len(store.scenarios) == 1 and len(store.runs) <= 1
        for rid in early:
            assert snapshot(client.get, rid) == before[rid]


def test_an_evicted_runs_steps_are_served_from_the_database_without_recomputing() -> None:
    with TestClient(create_app(Settings(max_runs=1))) as client:
        rid = client.post("/api/runs", json=preset_dict("seed-001")).json()["run_id"]
        first = client.get(f"/api/runs/{rid}/steps/2")
        client.post("/api/runs", json=preset_dict("seed-000"))  # evicts seed-001's run
        store = client.app.state.store
        computed = store.computations
        again = client.get(f"/api/runs/{rid}/steps/2", headers={"Accept-Encoding": "gzip"})
        assert store.computations == computed and rid not in store.runs
        assert again.content == first.content and again.headers["etag"] == first.headers["etag"]
        assert again.headers["cache-control"] == first.headers["cache-control"]  # a complete run's


def test_the_database_drops_steps_before_scenarios_and_a_scenario_only_past_the_total_cap(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = RunDB(tmp_path, max_bytes=10_000, max_total_bytes=20_000)
    for i in range(5):
        db.put_scenario(f"{i:020x}", b"s" * 1000)
        for n in range(1, 4):
            db.put_step(f"{i:020x}", n, b"b" * 1000, None, f'W/"{i}-{n}"')
    scen, steps = db.totals()
    assert scen == 5000 and scen + steps <= 10_000  # the oldest steps went, every scenario stayed
    assert db.step(f"{4:020x}", 3) is not None and db.step(f"{0:020x}", 1) is None
    with caplog.at_level(logging.WARNING, logger="pagedviz"):
        for i in range(5, 19):  # scenarios alone now pass the step cap: only steps go
            db.put_scenario(f"{i:020x}", b"s" * 1000)
        assert db.totals() == (19_000, 0) and db.dropped_scenarios == 0 and not caplog.records
        for i in range(19, 25):  # past the total cap: the least recently used scenarios go, logged
            db.put_scenario(f"{i:020x}", b"s" * 1000)
    assert db.totals()[0] <= 20_000 and db.dropped_scenarios == 5
    assert db.scenario(f"{0:020x}") is None and db.scenario(f"{24:020x}") is not None
    assert len(caplog.records) == 5 and "PAGEDVIZ_STORE_MAX_MB" in caplog.records[0].getMessage()
    # the totals it keeps are the rows' bytes (another worker sharing the file counts the same)
    again = RunDB(tmp_path, max_bytes=10_000, max_total_bytes=20_000)
    rows = again.conn.execute("SELECT sum(length(body)) FROM scenarios").fetchone()[0]
    assert again.totals() == (rows, 0)


def test_with_store_run_ids_answer_across_a_restart_and_from_two_workers(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {"PAGEDVIZ_MAX_RUNS": "1", "PAGEDVIZ_MAX_SCENARIOS": "1"}
    with running_server("--store", str(store), env=env) as server, httpx.Client(base_url=server.url) as c:
        ids = [c.post("/api/runs", json=tiny(s)).json()["run_id"] for s in range(3)]
        ids.append(c.post("/api/runs", json=preset_dict("seed-001")).json()["run_id"])
        before = {rid: snapshot(c.get, rid) for rid in ids}
    assert (store / DB_NAME).is_file()
    with running_server("--store", str(store), "--workers", "2", env=env) as server:
        for rid in ids:
            for _ in range(3):  # new connections spread over both workers
                with httpx.Client(base_url=server.url, timeout=60) as c:
                    assert snapshot(c.get, rid) == before[rid]
        with httpx.Client(base_url=server.url, timeout=60) as c:  # posted to one worker, read from any
            new = c.post("/api/runs", json=tiny(99)).json()["run_id"]
        for _ in range(4):
            with httpx.Client(base_url=server.url, timeout=60) as c:
                assert c.get(f"/api/runs/{new}/steps/2").status_code == 200


def serve_fails(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pagedviz.app.cli", "serve", "--port", str(free_port()), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_an_unusable_store_stops_serve_at_start_with_one_line_naming_store(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / DB_NAME).write_bytes(b"junk" * 1000)
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / DB_NAME).mkdir()  # where the database would be, a folder
    for folder in ("a-file", "a-file/below", "junk", "locked"):
        r = serve_fails("--store", str(tmp_path / folder))
        assert r.returncode == 2, (folder, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "--store" in lines[0] and "cannot be used" in lines[0], (folder, lines)
    r = serve_fails(env={"PAGEDVIZ_STORE": str(tmp_path / "a-file")})  # the variable, named as the flag
    assert r.returncode == 2 and "--store" in r.stderr and len(r.stderr.strip().splitlines()) == 1
