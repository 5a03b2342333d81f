"""Malformed and hostile scenarios never get a 5xx (hypothesis)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core.presets import preset_dict
from tests.support.hostile_cases import assert_refusal_names_its_governor

CLIENT = TestClient(create_app(Settings(max_runs=8)), raise_server_exceptions=False)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
hostile_text = st.sampled_from(
    ["<script>alert(1)</script>", "\u202e\u0000", "👩‍💻" * 20, "' OR 1=1 --", "&lt;b&gt;", "a" * 300]
)
numbers = st.one_of(st.integers(-(10**12), 10**12), st.sampled_from([0, -1, 2**63, True, "3", 1.5, None]))
CONFIG_KEYS = [
    "block_size",
    "max_model_len",
    "max_num_reqs",
    "max_num_batched_tokens",
    "num_kv_blocks",
    "long_prefill_token_threshold",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "cudagraph_capture_sizes",
    "device",
    "model",
]


@st.composite
def mutated_scenarios(draw: st.DrawFn) -> Any:
    d = preset_dict(draw(st.sampled_from(["seed-001", "seed-004", "seed-001-ascend"])))
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.integers(0, 5))
        if what == 0:
            d["config"][draw(st.sampled_from(CONFIG_KEYS))] = draw(numbers | json_values)
        elif what == 1:
            req = d["requests"][0]
            req[
                draw(
                    st.sampled_from(
                        ["id", "prompt_len", "max_tokens", "arrival_step", "prompt", "prompt_token_ids"]
                    )
                )
            ] = draw(numbers | hostile_text | json_values)
        elif what == 2:
            d["name"] = draw(hostile_text | json_values)
        elif what == 3:
            d["requests"].append(dict(d["requests"][0]))  # duplicate id
        elif what == 4:  # replaces a whole top-level field, so it comes last
            d[draw(st.sampled_from(["flavor", "seed", "max_steps", "requests", "config"]))] = draw(
                json_values
            )
            break
        else:
            d["requests"][0]["prompt"] = draw(hostile_text)
            d["requests"][0].pop("prompt_len", None)
            d["requests"][0].pop("prompt_token_ids", None)
    return d


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_scenarios())
def test_mutated_scenarios_never_get_a_5xx(scenario: Any) -> None:
    r = CLIENT.post("/api/runs", json=scenario)
    assert r.status_code in (201, 413, 422), r.text
    if r.status_code != 201:
        detail = r.json()["detail"]
        assert detail and all(item["field"] and item["message"] for item in detail)
    if r.status_code == 413:
        assert_refusal_names_its_governor(r)


@settings(max_examples=60, deadline=None)
@given(json_values)
def test_arbitrary_json_bodies_never_get_a_5xx(body: Any) -> None:
    r = CLIENT.post("/api/runs", content=json.dumps(body).encode())
    assert r.status_code in (201, 413, 422)
    if r.status_code == 413:
        assert_refusal_names_its_governor(r)


def test_deep_and_huge_json_are_refused_cleanly() -> None:
    deep = '{"a":' * 50_000 + "1" + "}" * 50_000
    r = CLIENT.post("/api/runs", content=deep.encode())
    assert r.status_code in (413, 422)
    r = CLIENT.post("/api/runs", content=b"[" + b"1," * 2_000_000 + b"1]")
    assert_refusal_names_its_governor(r)
    assert r.json()["detail"][0]["field"] == "body" and "PAGEDVIZ_MAX_BODY_KB" in r.text
    r = CLIENT.post(
        "/api/runs",
        content=b'{"name": NaN, "seed": Infinity, "requests": [{"id": "a", "prompt_len": -Infinity}]}',
    )
    assert r.status_code == 422
    nested = {
        "name": "x",
        "requests": [{"id": "a", "prompt_len": 2, "max_tokens": 1}],
        "config": {"model": {"num_layers": [[[[[[[[[[1]]]]]]]]]]}},
    }
    assert CLIENT.post("/api/runs", json=nested).status_code == 422


def test_html_in_names_and_prompts_round_trips_as_data() -> None:
    d = preset_dict("seed-001")
    d["name"] = "<img src=x onerror=alert(1)>"
    d["requests"][0]["prompt"] = "<i>"
    r = CLIENT.post("/api/runs", json=d)
    assert r.status_code == 201
    ov = CLIENT.get(f"/api/runs/{r.json()['run_id']}").json()
    assert ov["scenario"]["name"] == "<img src=x onerror=alert(1)>"
    assert r.headers["content-type"] == "application/json"


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=200), st.integers(-5, 10**9), st.text(max_size=40))
def test_hostile_links_steps_and_array_names_never_get_a_5xx(s: str, n: int, name: str) -> None:
    assert CLIENT.get("/api/runs/from-link", params={"s": s}).status_code in (413, 422)
    rid = CLIENT.post("/api/runs", json=preset_dict("seed-001")).json()["run_id"]
    assert CLIENT.get(f"/api/runs/{rid}/steps/{n}").status_code in (200, 404)
    r = CLIENT.get(f"/api/runs/{rid}/steps/1/arrays/{quote(name, safe='')}", params={"format": "csv"})
    assert r.status_code < 500
