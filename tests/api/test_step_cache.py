"""A step is encoded once and served from its bytes: ETag and If-None-Match (304), gzip when
asked, Cache-Control immutable for a complete run's steps and no-cache while the run computes,
and the encoded steps stay within the store's byte budget."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from pagedviz.app import step_cache as step_cache_module
from pagedviz.app.main import create_app
from pagedviz.app.routes import steps as steps_route
from pagedviz.app.settings import Settings
from pagedviz.core import Scenario
from pagedviz.core.presets import preset_dict
from tests.support.aio import run as run_to_end
from tests.support.scenarios import LONG_RUN


@pytest.fixture()
def client() -> Any:
    with TestClient(create_app(Settings(max_runs=4))) as c:  # one event loop for every request
        yield c


def created(client: TestClient, preset: str) -> tuple[str, int]:
    body = client.post("/api/runs", json=preset_dict(preset)).json()
    return body["run_id"], body["num_steps"]


def test_a_step_is_the_trace_as_json_with_an_etag_and_answers_304_to_it(client: TestClient) -> None:
    run_id, _ = created(client, "seed-001")
    r = client.get(f"/api/runs/{run_id}/steps/2", headers={"Accept-Encoding": "identity"})
    assert r.status_code == 200 and "content-encoding" not in r.headers
    trace = client.app.state.store.runs[run_id].steps[1]
    assert r.content == json.dumps(trace.to_dict(), separators=(",", ":")).encode()
    etag = r.headers["etag"]
    assert etag.startswith('W/"') and r.headers["cache-control"] == steps_route.IMMUTABLE
    for match in (etag, etag.removeprefix("W/"), f'"other", {etag}', "*"):
        again = client.get(f"/api/runs/{run_id}/steps/2", headers={"If-None-Match": match})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    fresh = client.get(f"/api/runs/{run_id}/steps/2", headers={"If-None-Match": '"other"'})
    assert fresh.status_code == 200 and fresh.json() == r.json()
    other = client.get(f"/api/runs/{run_id}/steps/3")
    assert other.headers["etag"] != etag


def test_gzip_is_sent_when_asked_and_is_the_same_body(client: TestClient) -> None:
    run_id, _ = created(client, "seed-000")
    plain = client.get(f"/api/runs/{run_id}/steps/1", headers={"Accept-Encoding": "identity"})
    assert len(plain.content) >= 1024
    raw = client.get(f"/api/runs/{run_id}/steps/1", headers={"Accept-Encoding": "gzip"})
    assert raw.headers["content-encoding"] == "gzip" and raw.headers["vary"] == "Accept-Encoding"
    assert raw.content == plain.content  # the client decompressed it
    enc = client.app.state.store.step_cache.encoded[(run_id, 1)]
    assert gzip.decompress(enc.gzipped) == plain.content and len(enc.gzipped) < len(plain.content)


def counted_encodes(monkeypatch: Any) -> list[int]:
    """The steps encoded from now on, by step number (the real encoder still encodes them)."""
    calls: list[int] = []
    encode = step_cache_module.encode_step

    def counting(t: Any) -> Any:
        calls.append(t.step)
        return encode(t)

    monkeypatch.setattr(step_cache_module, "encode_step", counting)
    return calls


def test_a_step_is_encoded_once_however_often_it_is_read(client: TestClient, monkeypatch: Any) -> None:
    calls = counted_encodes(monkeypatch)
    run_id, num_steps = created(client, "seed-001")
    bodies = [client.get(f"/api/runs/{run_id}/steps/{n}").content for n in range(1, num_steps + 1)]
    again = [client.get(f"/api/runs/{run_id}/steps/{n}").content for n in range(1, num_steps + 1)]
    assert bodies == again and sorted(calls) == list(range(1, num_steps + 1))


def test_readers_asking_for_a_step_at_once_share_one_encoding(monkeypatch: Any) -> None:
    calls = counted_encodes(monkeypatch)
    app = create_app(Settings())

    async def readers() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            run_id = (await c.post("/api/runs", json=preset_dict("seed-000"))).json()["run_id"]
            return await asyncio.gather(*(c.get(f"/api/runs/{run_id}/steps/2") for _ in range(16)))

    answers = run_to_end(readers())
    assert all(r.status_code == 200 for r in answers) and len({r.content for r in answers}) == 1
    # step 2 is encoded once: by its first reader or by the pre-encoding of a completed run
    assert calls.count(2) == 1


def test_a_recomputed_run_is_encoded_afresh() -> None:
    # the database keeps no step (each is over its cap), so an evicted run is recomputed
    with TestClient(create_app(Settings(max_runs=1, max_db_bytes=1))) as client:
        run_id, _ = created(client, "seed-001")
        first = client.get(f"/api/runs/{run_id}/steps/1")
        created(client, "seed-000")  # evicts seed-001's run (max_runs=1)
        store = client.app.state.store
        assert run_id not in store.runs and (run_id, 1) in store.step_cache.encoded
        second = client.get(f"/api/runs/{run_id}/steps/1")  # recomputed: new traces
        client.get(f"/api/runs/{run_id}")  # waits for the whole run
        assert store.step_cache.cached_step(run_id, 1, store.runs[run_id].steps[0]) is not None
        assert second.json()["arrays"] == first.json()["arrays"]


def test_a_step_of_a_run_still_computing_revalidates() -> None:
    with TestClient(create_app(Settings())) as client:
        store = client.app.state.store
        run_id = store.remember(Scenario.from_dict(LONG_RUN))  # ~2 s: still computing after step 1
        first = client.get(f"/api/runs/{run_id}/steps/1")
        assert first.status_code == 200 and first.headers["cache-control"] == "no-cache"
        assert store.status(run_id)["state"] == "computing"
        client.get(f"/api/runs/{run_id}")  # waits for the whole run
        done = client.get(f"/api/runs/{run_id}/steps/1", headers={"If-None-Match": first.headers["etag"]})
        assert done.status_code == 304 and done.headers["cache-control"] == steps_route.IMMUTABLE


def test_encoded_steps_stay_within_the_store_byte_budget() -> None:
    budget = 400_000
    with TestClient(create_app(Settings(max_store_bytes=budget))) as client:
        store = client.app.state.store
        for preset in ("seed-000", "seed-001", "seed-004"):
            run_id, num_steps = created(client, preset)
            for n in range(1, num_steps + 1):
                assert client.get(f"/api/runs/{run_id}/steps/{n}").status_code == 200
                encoded = store.step_cache.encoded
                assert encoded.nbytes <= budget // 4
                assert encoded.nbytes == sum(e.nbytes for e in encoded.values())
                assert store.runs.nbytes + encoded.nbytes <= max(budget, store.runs.nbytes)
        assert store.step_cache.encoded  # something is kept
