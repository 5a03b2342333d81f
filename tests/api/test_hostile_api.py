"""Issue 14, defect by defect, through the real app (FastAPI's TestClient): every size is bounded
before work starts, errors are 4xx naming the field, the store is bounded in measured bytes and
admits a bounded number of computations, the run store's folder trusts only its own database, and
pages carry security headers."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.app.db import DB_NAME, StoreError
from pagedviz.app.links import pack
from pagedviz.app.main import create_app
from pagedviz.app.run import BusyError, compute, measured_bytes
from pagedviz.app.settings import Settings
from pagedviz.app.store import RunStore
from pagedviz.core import Limits, Scenario, ScenarioError, load_preset, make_engine
from pagedviz.core.engine import RunTooLongError
from pagedviz.core.limits import SettingError
from tests.support.aio import run as run_to_end
from tests.support.hostile_cases import assert_refusal_names_its_governor, worst_scenarios
from tests.support.scenarios import LONG_RUN

CLIENT = TestClient(create_app(Settings(max_runs=4)), raise_server_exceptions=False)


def fields(r: Any) -> dict[str, str]:
    return {d["field"]: d["message"] for d in r.json()["detail"]}


def small(**config: Any) -> dict[str, Any]:
    return {
        "name": "x",
        "config": {"block_size": 16, "max_model_len": 64, "num_kv_blocks": 16, **config},
        "requests": [{"id": "a", "prompt_len": 8, "max_tokens": 2}],
    }


# 1, 11: lone surrogates and control characters
@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"requests": [{"id": "a", "prompt": "x\\ud800"}]}', "requests[0].prompt"),
        (b'{"requests": [{"id": "\\ud800", "prompt_len": 2}]}', "requests[0].id"),
        (b'{"name": "\\udfff", "requests": [{"id": "a", "prompt_len": 2}]}', "scenario.name"),
        (b'{"\\ud800": 1, "requests": [{"id": "a", "prompt_len": 2}]}', "\\ud800"),
    ],
)
def test_lone_surrogates_are_a_422_naming_the_field(body: bytes, field: str) -> None:
    r = CLIENT.post("/api/runs", content=body)
    assert r.status_code == 422, r.text
    assert field in fields(r)
    v = CLIENT.post("/api/scenarios/validate", content=body)
    assert v.status_code == 200 and v.json()["valid"] is False
    assert field in {d["field"] for d in v.json()["detail"]}


@pytest.mark.parametrize("bad", ["a\x00b", "\x1b[31mred", "bell\x07", "two\nlines", "del\x7f", "c1\x85"])
def test_control_characters_in_ids_and_names_are_refused(bad: str) -> None:
    d = small()
    d["requests"][0]["id"] = bad
    r = CLIENT.post("/api/runs", json=d)
    assert r.status_code == 422 and "control character" in fields(r)["requests[0].id"]
    d = small()
    d["name"] = bad
    assert "control character" in fields(CLIENT.post("/api/runs", json=d))["scenario.name"]


def test_prompts_keep_newlines_and_summaries_keep_paragraphs() -> None:
    d = small()
    d["requests"][0] = {"id": "a", "prompt": "line one\nline two\t!", "max_tokens": 2}
    d["config"]["max_model_len"] = 128
    d["summary"] = "first paragraph\n\nsecond"
    assert CLIENT.post("/api/runs", json=d).status_code == 201


# 8: an empty integer field is its default
def test_an_empty_max_steps_is_the_default() -> None:
    d = small()
    d["max_steps"] = ""
    d["seed"] = " "
    d["config"]["block_size"] = ""
    r = CLIENT.post("/api/runs", json=d)
    assert r.status_code == 201, r.text
    sc = CLIENT.get(f"/api/runs/{r.json()['run_id']}").json()["scenario"]
    assert (sc["max_steps"], sc["seed"], sc["config"]["block_size"]) == (256, 0, 16)
    d["max_steps"] = "ten"
    assert "max_steps" in fields(CLIENT.post("/api/runs", json=d))["scenario.max_steps"] + "max_steps"


# 2, 3: the cost model, before any work starts
@pytest.mark.parametrize(
    ("scenario", "field", "setting"),
    [
        (small(cudagraph_capture_sizes=[10**18]), "config.cudagraph_capture_sizes", "MAX_TOKENS_PER_STEP"),
        (
            small(cudagraph_capture_sizes=[10_000_000]),
            "config.cudagraph_capture_sizes",
            "MAX_TOKENS_PER_STEP",
        ),
        (small(max_num_batched_tokens=100_000), "config.max_num_batched_tokens", "MAX_TOKENS_PER_STEP"),
        (
            {
                "config": {"max_model_len": 8200, "max_num_batched_tokens": 8192, "num_kv_blocks": 600},
                "requests": [{"id": "a", "prompt_len": 8190, "max_tokens": 2}],
            },
            "config.model",
            "MAX_ATTENTION_SCORES",
        ),
        (
            {
                "config": {
                    "max_model_len": 150_008,
                    "max_num_reqs": 1,
                    "max_num_batched_tokens": 16384,
                    "num_kv_blocks": 9500,
                },
                "requests": [{"id": "a", "prompt_len": 150_000, "max_tokens": 8}],
            },
            "config.model",
            "MAX_CONTEXT_TOKENS",
        ),
        (
            {
                "flavor": "ascend",
                "config": {
                    "max_model_len": 40_008,
                    "max_num_reqs": 1,
                    "max_num_batched_tokens": 16384,
                    "num_kv_blocks": 2600,
                    "model": None,
                },
                "requests": [{"id": "a", "prompt_len": 40_000, "max_tokens": 8}],
            },
            "config",
            "MAX_MASK_CELLS",
        ),
        (
            small(
                model={"num_layers": 8, "num_heads": 8, "num_kv_heads": 8, "head_size": 32},
                max_model_len=2048,
                num_kv_blocks=200,
            )
            | {"requests": [{"id": "a", "prompt_len": 2000, "max_tokens": 8}]},
            "config.model",
            "MAX_STEP_MFLOP",
        ),
        (small(num_kv_blocks=900_000, model=None), "config", "MAX_STEP_TRACE_KB"),
    ],
)
def test_sizes_over_the_cost_model_are_a_quick_413_naming_field_limit_and_setting(
    scenario: dict[str, Any], field: str, setting: str
) -> None:
    before = CLIENT.app.state.store.computations
    r = CLIENT.post("/api/runs", json=scenario)
    assert r.status_code == 413, r.text
    assert CLIENT.app.state.store.computations == before  # refused before any work
    msgs = [d["message"] for d in r.json()["detail"] if d["field"] == field]
    # over a field's own bound (max_num_batched_tokens): "must be <= N"; the cost model: "over the limit N"
    said = re.compile(r"(over the limit|must be <=) \d+")
    assert any(f"PAGEDVIZ_{setting}" in m and said.search(m) for m in msgs), msgs


def test_every_limit_is_a_setting_and_raising_it_lets_the_scenario_through() -> None:
    d = small(cudagraph_capture_sizes=[20000], model=None)
    with pytest.raises(ScenarioError):
        Scenario.from_dict(d, Limits())
    assert Scenario.from_dict(d, Limits(max_tokens_per_step=20000)).config.cudagraph_capture_sizes == (20000,)


# issue 32: every 413 names the exact field, the limit, and what raises it (or that nothing does)
def tiny_scenario(**config: Any) -> dict[str, Any]:
    return {
        "name": "s",
        "config": {"block_size": 2, "max_model_len": 16, "num_kv_blocks": 16, "model": None, **config},
        "requests": [{"id": "a", "prompt_len": 8, "max_tokens": 4}],
    }


def with_request(**fields: Any) -> dict[str, Any]:
    return tiny_scenario() | {"requests": [{"id": "a", "prompt_len": 8, "max_tokens": 4, **fields}]}


@pytest.mark.parametrize(
    ("scenario", "field", "limit", "governor"),
    [
        (
            with_request(max_tokens=18446744073709551625),
            "requests[0].max_tokens",
            "200000",
            "MAX_TOTAL_TOKENS",
        ),
        (with_request(prompt_len=2**40), "requests[0].prompt_len", "200000", "MAX_TOTAL_TOKENS"),
        (tiny_scenario(block_size=5000), "config.block_size", "<= 4096", "MAX_BLOCK_SIZE"),
        (tiny_scenario() | {"max_steps": 5000}, "scenario.max_steps", "<= 4096", "MAX_STEPS"),
        (with_request(arrival_step=5000), "requests[0].arrival_step", "<= 4096", "MAX_STEPS"),
        (tiny_scenario(num_kv_blocks=2_000_000), "config.num_kv_blocks", "<= 1000000", "MAX_NUM_KV_BLOCKS"),
        (tiny_scenario(max_model_len=2**21), "config.max_model_len", "<= 1048576", None),
        (tiny_scenario() | {"seed": 2**33}, "scenario.seed", "<= 4294967295", None),
        (tiny_scenario() | {"name": "x" * 300}, "scenario.name", "at most 200", None),
        (
            tiny_scenario(cudagraph_capture_sizes=list(range(1, 1100))),
            "config.cudagraph_capture_sizes",
            "1024",
            None,
        ),
        (tiny_scenario() | {"notes": ["x" * 500]}, "notes", "400", None),
        (
            tiny_scenario()
            | {"requests": [{"id": str(i), "prompt_len": 2, "max_tokens": 1} for i in range(257)]},
            "requests",
            "at most 256",
            "MAX_REQUESTS",
        ),
        (tiny_scenario(max_num_reqs=4096, max_model_len=2000), "config", "4000000", "MAX_CELLS"),
        (with_request(prompt_len=20), "requests[0].prompt_len", "<= 16", "MAX_CELLS"),
        (
            tiny_scenario(model={"num_layers": 8, "num_heads": 64, "num_kv_heads": 64, "head_size": 256}),
            "config.model",
            "16777216",
            "MAX_MODEL_CELLS",
        ),
    ],
)
def test_every_413_names_its_exact_field_its_limit_and_what_raises_it(
    scenario: dict[str, Any], field: str, limit: str, governor: str | None
) -> None:
    r = CLIENT.post("/api/runs", json=scenario)
    assert_refusal_names_its_governor(r)
    message = fields(r)[field]
    assert limit in message
    assert (f"PAGEDVIZ_{governor} raises it" if governor else "a fixed bound of the engine") in message


def test_the_hostile_suites_worst_scenarios_one_size_past_their_limits_are_governed_413s() -> None:
    """Each of the hostile suite's costliest allowed scenarios, made larger: refused before any
    work, and if refused for a size, every bound it states names its setting."""
    for name, d in worst_scenarios().items():
        bigger = json.loads(json.dumps(d))
        bigger["config"]["max_model_len"] *= 4
        bigger["config"]["num_kv_blocks"] *= 4
        for r in bigger["requests"]:
            r["prompt_len"] *= 4
        posted = CLIENT.post("/api/runs", json=bigger)
        assert posted.status_code == 413, (name, posted.text)
        assert_refusal_names_its_governor(posted)


# 4: a link is checked before its prompts are drawn
def test_a_link_with_huge_prompts_is_refused_before_drawing_them() -> None:
    huge = {
        "config": {"max_model_len": 1 << 20, "max_num_reqs": 1, "model": None},
        "requests": [{"id": str(i), "prompt_len": (1 << 20) - 8, "max_tokens": 8} for i in range(256)],
    }
    tracemalloc.start()
    r = CLIENT.get("/api/runs/from-link", params={"s": pack(huge)})
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # the first field that alone passes the limit is named
    assert r.status_code == 413 and "PAGEDVIZ_MAX_TOTAL_TOKENS" in fields(r)["requests[0].prompt_len"]
    assert peak < 16 << 20  # drawing the prompts would take 2 GB


# 3: a step that would pass the time limit is not started
def test_a_step_that_would_end_past_the_deadline_is_not_started() -> None:
    # every step of demo-preemption (tiny) takes at least 0.3 s (the engine's own hook, before
    # each forward). With 0.45 s the first step runs; the second, which would end at ~0.6 s, is
    # not started (checking only whether the deadline had passed, it would be)
    list(make_engine(load_preset("demo-preemption")).run())  # warm: torch's first calls are slow
    engine = make_engine(load_preset("demo-preemption"))
    engine.before_forward = lambda _: time.sleep(0.3)
    done = 0
    with pytest.raises(RunTooLongError) as refused:
        for _ in engine.run(time.monotonic() + 0.45):
            done += 1
    assert done == 1 and refused.value.steps_done == 1


# 5: the store is bounded in measured bytes and plateaus
def test_measured_bytes_match_what_python_allocated() -> None:
    for scenario in (
        load_preset("seed-000"),
        Scenario.from_dict({**LONG_RUN, "config": {**LONG_RUN["config"], "model": None}}),
    ):
        compute("warm", scenario)
        tracemalloc.start()
        run = compute("x", scenario)
        allocated, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert 0.8 < run.nbytes / allocated < 1.25, (run.nbytes, allocated)
    assert measured_bytes(["".join(["x"] * 1000)]) > 1000  # held by the list alone: counted
    shared = "".join(["x"] * 1000)
    assert measured_bytes([shared, shared]) < 100  # held elsewhere too: not the list's


def test_store_bytes_stay_under_their_bounds_however_many_runs_arrive() -> None:
    client = TestClient(
        create_app(Settings(max_runs=1000, max_store_bytes=2 << 20, max_scenario_bytes=1 << 20))
    )
    store = client.app.state.store
    for seed in range(12):
        d = {**LONG_RUN, "seed": seed, "config": {**LONG_RUN["config"], "model": None}}
        assert client.post("/api/runs", json=d).status_code == 201
        assert store.runs.nbytes <= 2 << 20 or len(store.runs) == 1
        assert store.scenarios.nbytes <= 1 << 20
        assert store.runs.nbytes == sum(r.nbytes for r in store.runs.values())
    assert 0 < len(store.runs) < 12


def test_a_run_whose_trace_passes_max_run_mb_is_a_413_remembered() -> None:
    client = TestClient(create_app(Settings(max_run_bytes=1 << 20)))
    d = {**LONG_RUN, "config": {**LONG_RUN["config"], "model": None}}
    r = client.post("/api/runs", json=d)
    assert r.status_code == 413 and r.json()["error"] == "run_too_large"
    assert "PAGEDVIZ_MAX_RUN_MB" in r.json()["detail"][0]["message"]
    assert client.post("/api/runs", json=d).status_code == 413
    assert client.app.state.store.computations == 1


# 7: admission control; refusals are remembered
def test_over_budget_runs_are_remembered_not_recomputed() -> None:
    client = TestClient(create_app(Settings(max_run_seconds=1)))
    # about 300 steps, several seconds, well past the 1 s bound on a fast machine too
    long = {**LONG_RUN, "max_steps": 400}
    first = client.post("/api/runs", json=long)
    assert first.status_code == 413 and first.json()["error"] == "run_too_long"
    rid = client.post("/api/scenarios/validate", json=long).json()["run_id"]
    for _ in range(3):
        r = client.get(f"/api/runs/{rid}")
        assert r.status_code == 413 and r.json() == first.json()
    assert client.app.state.store.computations == 1
    assert client.get(f"/api/runs/{rid}/progress").json()["state"] == "refused"


def test_at_most_max_in_progress_runs_compute_the_rest_queue_then_get_busy() -> None:
    async def go() -> tuple[list[Any], list[dict | None], int]:
        store = RunStore(8, 1 << 30, 64, max_in_progress=1, max_queued=1)
        # about 1 s each: the first still computes 0.3 s in, on a fast machine too
        runs = [Scenario.from_dict({**LONG_RUN, "seed": s, "max_steps": 120}) for s in range(3)]
        ids = [store.remember(r) for r in runs]
        tasks = [asyncio.create_task(store.get(i)) for i in ids]
        await asyncio.sleep(0.3)
        states = [store.status(i) for i in ids]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return results, states, store.computations

    results, states, computations = run_to_end(go())
    assert [s["state"] if s else None for s in states[:2]] == ["computing", "queued"]
    assert states[1] is not None and states[1]["queue_ahead"] == 0
    assert isinstance(results[2], BusyError) and results[2].retry_after >= 1
    assert computations == 2 and all(not isinstance(r, Exception) for r in results[:2])


def test_busy_is_a_503_with_retry_after() -> None:
    client = TestClient(create_app(Settings(max_in_progress=1, max_queued=1)), raise_server_exceptions=False)
    store = client.app.state.store
    store.in_flight.update({"a": None, "b": None})  # two runs already hold every place
    r = client.post("/api/runs", json=small())
    assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
    assert "PAGEDVIZ_MAX_IN_PROGRESS" in r.json()["detail"][0]["message"]
    store.in_flight.clear()
    assert client.post("/api/runs", json=small()).status_code == 201


# 6: the run store's folder: only its own database is touched, and nothing read back is trusted
def test_the_store_ignores_and_keeps_foreign_files_in_its_folder(tmp_path: Path) -> None:
    (tmp_path / "foreign.json").write_text('{"name": "not ours"}')
    (tmp_path / "notes.json").write_text("my notes")
    (tmp_path / "x.json").mkdir()
    (tmp_path / f"{'a' * 20}.scenario.json").write_text("[" * 100_000)  # the old shared folder's name
    a = TestClient(
        create_app(Settings(store_dir=str(tmp_path), max_scenarios=2)), raise_server_exceptions=False
    )
    b = TestClient(
        create_app(Settings(store_dir=str(tmp_path), max_scenarios=2)), raise_server_exceptions=False
    )
    ids = [a.post("/api/runs", json=small() | {"seed": s}).json()["run_id"] for s in range(5)]
    assert (tmp_path / "foreign.json").read_text() == '{"name": "not ours"}'
    assert (tmp_path / "notes.json").exists() and (tmp_path / "x.json").is_dir()
    assert {p.name for p in tmp_path.iterdir()} <= {
        "foreign.json",
        "notes.json",
        "x.json",
        f"{'a' * 20}.scenario.json",
        *(DB_NAME + x for x in ("", "-wal", "-shm")),
    }
    for rid in ids:  # past this worker's 2 scenarios in memory, every run id still answers, on either worker
        assert b.get(f"/api/runs/{rid}/steps/1").status_code == 200
    for junk in ("a" * 20, "../" + DB_NAME):
        assert b.get(f"/api/runs/{junk}").status_code == 404
        assert b.get(f"/api/runs/{junk}/progress").status_code == 404


def test_a_forged_scenario_in_the_database_is_not_read(tmp_path: Path) -> None:
    a = TestClient(create_app(Settings(store_dir=str(tmp_path))))
    rid = a.post("/api/runs", json=small()).json()["run_id"]
    db = sqlite3.connect(tmp_path / DB_NAME)
    other = json.dumps(small() | {"seed": 7}, sort_keys=True, separators=(",", ":")).encode()
    with db:  # a valid scenario, but not this run's
        db.execute("UPDATE scenarios SET body=? WHERE run_id=?", (other, rid))
        db.execute("INSERT INTO scenarios VALUES (?, ?, 0)", ("b" * 20, b"[" * 100_000))
    db.close()
    b = TestClient(create_app(Settings(store_dir=str(tmp_path))))
    assert b.get(f"/api/runs/{rid}").status_code == 404
    assert b.get(f"/api/runs/{'b' * 20}").status_code == 404


def test_a_store_replaced_while_serving_is_a_503_and_healthz_says_not_ready(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    client = TestClient(create_app(Settings(store_dir=str(folder))), raise_server_exceptions=False)
    assert client.app.state.store.pool.wait_ready()
    assert client.get("/healthz").status_code == 200
    (folder / DB_NAME).rename(tmp_path / "moved-away.sqlite3")
    r = client.post("/api/runs", json=small())
    assert r.status_code == 503 and r.json()["error"] == "store_unwritable"
    assert r.json()["detail"][0]["field"] == "store" and r.headers["retry-after"] == "30"
    h = client.get("/healthz")
    assert h.status_code == 503 and "gone" in h.json()["detail"][0]["message"]


def test_an_unusable_store_stops_the_app_at_start_naming_store(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(StoreError, match=r"^--store .*a-file.* cannot be used: it is a file"):
        create_app(Settings(store_dir=str(tmp_path / "a-file")))
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / DB_NAME).write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError, match="--store .* cannot be used: file is not a database"):
        create_app(Settings(store_dir=str(tmp_path / "junk")))


# 10: security headers
def test_pages_send_a_strict_csp_and_security_headers() -> None:
    for path in ("/", "/run?preset=seed-001", "/api/presets", "/static/run.js"):
        h = CLIENT.get(path).headers
        assert h["x-content-type-options"] == "nosniff"
        assert h["referrer-policy"] == "same-origin" and h["x-frame-options"] == "DENY"
        csp = dict(p.strip().split(" ", 1) for p in h["content-security-policy"].split(";"))
        assert csp["script-src"] == "'self'" and csp["frame-ancestors"] == "'none'"
        assert csp["object-src"] == "'none'" and "unsafe-eval" not in h["content-security-policy"]


def test_templates_hold_no_inline_script() -> None:
    root = Path(__file__).resolve().parents[2] / "templates"
    for page in root.glob("*.html"):
        text = page.read_text()
        for tag, body in re.findall(r"(<script\b[^>]*>)(.*?)</script>", text, flags=re.S):
            if "src=" in tag:
                continue
            # the one kind of script without src: a JSON data block, never run (the palette, the
            # stage texts), whose body is one value through Jinja's tojson, which escapes < > & '
            assert 'type="application/json"' in tag, (page.name, tag)
            assert re.fullmatch(r"\{\{ [\w.]+ \| tojson \}\}", body), (page.name, body)
        assert not re.search(r"\son[a-z]+\s*=", text), page.name  # no inline event handlers


# 12: a bad setting stops the program
@pytest.mark.parametrize(
    ("var", "value"),
    [("PAGEDVIZ_MAX_RUNS", "abc"), ("PAGEDVIZ_MAX_TOTAL_TOKENS", "-1"), ("PAGEDVIZ_MAX_STEP_MFLOP", "0")],
)
def test_a_bad_setting_raises_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingError, match=var):
        Settings.from_env()
    monkeypatch.setenv(var, "5")
    assert Settings.from_env() is not None


# everything at once: no input gives a 5xx
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.sampled_from(["name", "max_steps", "seed", "flavor", "title", "summary"]),
        st.text(alphabet=st.characters(exclude_categories=()), max_size=12)
        | st.integers(-3, 5000)
        | st.just(""),
    ),
    st.text(max_size=12),
    st.lists(st.integers(-(2**70), 2**70), max_size=3),
)
def test_hostile_text_and_sizes_never_get_a_5xx(top: dict[str, Any], rid: str, sizes: list[int]) -> None:
    d = small(cudagraph_capture_sizes=sizes or None) | top
    d["requests"][0]["id"] = rid
    body = json.dumps(d).encode()  # lone surrogates go as \\udXXX escapes, as a browser may send them
    r = CLIENT.post("/api/runs", content=body)
    assert r.status_code in (201, 413, 422), r.text
    if r.status_code == 413:
        assert_refusal_names_its_governor(r)
    assert CLIENT.post("/api/scenarios/validate", content=body).status_code == 200
