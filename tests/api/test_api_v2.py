"""The REST API's Model Runner V2 stage list (GET /api/stages?runner=v2): the page reads each V2
stage's engine source and formula from it, in the order a V2 step runs them."""

from __future__ import annotations

from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import load_preset, make_engine


def _client() -> TestClient:
    return TestClient(create_app(Settings(max_runs=2)))


def test_v2_stages_come_in_a_v2_steps_order_with_their_own_sources() -> None:
    with _client() as client:
        stages = client.get("/api/stages?flavor=vllm&runner=v2").json()
    step = next(iter(make_engine(load_preset("demo-v2-slots")).run()))
    # every V2 stage, in order; num_logits runs only with speculative decoding
    names = [s["name"] for s in stages]
    assert names.index("num_logits") == names.index("cudagraph_dispatch") + 1
    assert [n for n in names if n != "num_logits"] == [s.name for s in step.stages]
    by = {s["name"]: s for s in stages}
    assert "def update_states(" in by["finish_and_add"]["source"]
    assert "free_indices.pop()" in by["finish_and_add"]["source"]
    # names V1 has too are V2's own code, not V1's
    assert "def _positions(self)" in by["positions"]["source"]
    assert "idx_mapping" in by["positions"]["source"] and "idx_mapping" in by["positions"]["formula"]
    assert "def _gather_block_tables(self)" in by["gather_block_tables"]["source"]


def test_the_v1_stage_list_is_unchanged_by_runner_v1() -> None:
    with _client() as client:
        plain = client.get("/api/stages?flavor=vllm").json()
        v1 = client.get("/api/stages?flavor=vllm&runner=v1").json()
    assert plain == v1 and plain[0]["name"] == "update_states"


def test_runner_v2_outside_the_vllm_flavour_or_an_unknown_runner_is_refused_naming_runner() -> None:
    with _client() as client:
        r = client.get("/api/stages?flavor=nanovllm&runner=v2")
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "runner"
        assert "vllm" in r.json()["detail"][0]["message"]
        bad = client.get("/api/stages?flavor=vllm&runner=v3")
        assert bad.status_code == 422 and "runner" in str(bad.json()["detail"])
