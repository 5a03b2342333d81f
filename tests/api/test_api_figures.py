"""GET /api/runs/{id}/figures/{name}: pagedviz.plots' run-level figures as plotly JSON for the run
page, in its theme and language; unknown names and bad parameters named."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.plots import resolve, series


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings(max_runs=4, compute_in="thread")))


@pytest.fixture(scope="module")
def run_id(client: TestClient) -> str:
    r = client.post("/api/runs", json={"preset": "demo-preemption"})
    assert r.status_code == 201
    return r.json()["run_id"]


def ys(trace: dict) -> list[int]:
    y = trace["y"]
    if isinstance(y, dict):  # a typed array
        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=np.dtype(y["dtype"])).tolist()
    return list(y)


def test_run_metrics_figure_holds_the_runs_series(client: TestClient, run_id: str) -> None:
    r = client.get(f"/api/runs/{run_id}/figures/run_metrics")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    fig = r.json()
    want = series(resolve("demo-preemption").steps)
    by_name = {d["name"]: d for d in fig["data"]}
    assert ys(by_name["tokens scheduled"]) == want["tokens"]
    assert ys(by_name["preempted"]) == want["preempted"] and sum(want["preempted"]) > 0
    assert fig["layout"]["dragmode"] is False  # the page takes the clicks


def test_figures_take_the_pages_theme_and_language(client: TestClient, run_id: str) -> None:
    fig = client.get(f"/api/runs/{run_id}/figures/timeline?theme=dark&lang=zh").json()
    assert fig["layout"]["paper_bgcolor"] == "#121212"
    assert fig["layout"]["title"]["text"] == "每个请求的生命周期"


def test_unknown_figure_and_bad_parameters_are_named(client: TestClient, run_id: str) -> None:
    r = client.get(f"/api/runs/{run_id}/figures/heatmap")
    assert r.status_code == 404 and r.json()["detail"][0]["field"] == "name"
    assert "run_metrics, timeline" in r.json()["detail"][0]["message"]
    r = client.get(f"/api/runs/{run_id}/figures/timeline?theme=blue")
    assert r.status_code == 422 and "theme" in str(r.json()["detail"])
    r = client.get("/api/runs/nope/figures/timeline")
    assert r.status_code == 404 and r.json()["detail"][0]["field"] == "run_id"
