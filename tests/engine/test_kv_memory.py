"""The memory a sliding window saves, from the traces (core/metrics.py `layer_blocks_used`, the
compare's per-step `memory`): the same requests once with a sliding window beside full attention
and once with every layer full attention, through FastAPI on the real engine.

A block serves the layers of the KV cache group whose table holds it: one group of every layer
when all layers are full attention, one group's layers with several (vLLM sizes a block to one
group's layers and shares the pool among the groups). So the two runs are compared in blocks of
one layer: blocks times the layers each holds."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Scenario, make_engine
from pagedviz.core.metrics import layer_blocks, run_metrics
from pagedviz.core.presets import preset_dict
from pagedviz.core.trace import StepTrace

PRESET = "demo-gpt-oss-sliding-window"


def _full(d: dict[str, Any]) -> dict[str, Any]:
    """The same scenario with every layer full attention (the landing contrast's B side)."""
    d = {**d, "config": dict(d["config"])}
    d["config"]["layer_types"] = ["full_attention"] * len(d["config"]["layer_types"])
    del d["config"]["sliding_window"]
    return d


@cache
def _steps(full: bool) -> list[StepTrace]:
    d = preset_dict(PRESET)
    # with the tiny model, whose layers the KV cache holds (a run without one has no KV to count)
    return list(make_engine(Scenario.from_dict(_full(d) if full else d)).run())


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings(max_runs=8)))


def test_a_block_counts_once_per_layer_of_the_group_that_holds_it() -> None:
    hybrid, full = _steps(False)[0], _steps(True)[0]
    # every layer full attention: one group, each block holds both layers
    assert "kv_cache_groups" not in full.kv_cache
    assert layer_blocks(full.kv_cache) == len(full.kv_cache["owners"]) * full.kv_cache["num_layers"] > 0
    # a sliding window beside full attention: two groups of one layer, each block holds one layer
    groups = hybrid.kv_cache["kv_cache_groups"]
    assert [g["kind"] for g in groups] == ["sliding_attention", "full_attention"]
    assert [len(g["layers"]) for g in groups] == [1, 1]
    assert layer_blocks(hybrid.kv_cache) == len(hybrid.kv_cache["owners"])
    # a group of two layers counts each of its blocks twice
    kv = {**hybrid.kv_cache, "kv_cache_groups": [{**groups[0], "layers": [0, 2]}, groups[1]]}
    in_first = sum(1 for b in hybrid.kv_cache["owners"] if hybrid.kv_cache["block_group"][b] == 0)
    assert layer_blocks(kv) == len(hybrid.kv_cache["owners"]) + in_first


def test_the_compare_of_full_attention_and_sliding_window_says_each_sides_memory_per_step(
    client: TestClient,
) -> None:
    d = preset_dict(PRESET)
    ids = []
    for sc in (d, _full(d)):
        r = client.post("/api/runs", json=sc)
        assert r.status_code == 201, r.text
        ids.append(r.json()["run_id"])
    c = client.get("/api/compare", params={"a": ids[0], "b": ids[1]}).json()
    per = [run_metrics(_steps(False))["steps"], run_metrics(_steps(True))["steps"]]
    for k, entry in enumerate(c["steps"]):
        if not (entry["in_a"] and entry["in_b"]):
            continue
        for side in (0, 1):
            assert entry["memory"]["blocks_used"][side] == per[side][k]["blocks_used"]
            assert entry["memory"]["layer_blocks_used"][side] == per[side][k]["layer_blocks_used"]
    peaks = [t["peak_layer_blocks_used"] for t in c["totals"]]
    assert peaks == [max(m["layer_blocks_used"] for m in p) for p in per]
    assert c["totals_delta"]["peak_layer_blocks_used"] == peaks[1] - peaks[0]


def test_the_sliding_window_holds_less_than_full_attention_once_it_drops_blocks() -> None:
    hybrid, full = run_metrics(_steps(False)), run_metrics(_steps(True))
    drops = [t.step for t in _steps(False) if t.scheduler.get("window_drops")]
    assert drops, "the window never dropped a block"
    k = drops[0]
    # from the first drop on, the hybrid run holds fewer one-layer blocks at every step
    for a, b in zip(hybrid["steps"][k - 1 :], full["steps"][k - 1 :]):
        assert a["layer_blocks_used"] < b["layer_blocks_used"], (a, b)
    assert hybrid["totals"]["peak_layer_blocks_used"] < full["totals"]["peak_layer_blocks_used"]
