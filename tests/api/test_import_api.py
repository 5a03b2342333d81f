"""POST /api/runs/import (issue 30): a recording replays into a run the page reads like any other,
answered at once with its run id (202 while the replay goes on in the background, its steps and
progress readable meanwhile); bad recordings are a 4xx naming their line; the server stays up; the
imported run outlives eviction (its steps are kept in the store's database). Real FastAPI app, no
vLLM."""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import __version__
from pagedviz.core.presets import preset_dict
from pagedviz.core.recordings import example_bytes
from tests.support.recording_cases import (
    CUT,
    CUT_SAYS,
    EXAMPLE,
    LINES,
    NUM_STEPS,
    cases,
    scenario,
    write_recording,
)

LINE_LIMIT = 1 << 20
SETTINGS = Settings(
    max_runs=8, max_import_bytes=4 << 20, max_record_line_bytes=LINE_LIMIT, compute_in="thread"
)
NDJSON = {"Content-Type": "application/x-ndjson"}
CLIENT: Any = None


@pytest.fixture(scope="module", autouse=True)
def client() -> Iterator[TestClient]:
    """One app and one event loop for the module (the replays run as its tasks)."""
    global CLIENT
    with TestClient(create_app(SETTINGS), raise_server_exceptions=False) as c:
        CLIENT = c
        yield c


def finished(client: TestClient, run_id: str, timeout: float = 60) -> dict[str, Any]:
    """The run's progress once its replay has ended."""
    deadline = time.monotonic() + timeout
    while True:
        p = client.get(f"/api/runs/{run_id}/progress").json()
        if p["state"] not in ("computing", "queued") or time.monotonic() > deadline:
            return p
        time.sleep(0.05)


@pytest.fixture(scope="module")
def long_recording(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A synthetic recording long enough that its replay is still going when the import answers."""
    path = tmp_path_factory.mktemp("rec") / "long.jsonl"
    write_recording(scenario(2000, 50, 120), path)
    return path.read_bytes()


def test_a_recording_imports_into_a_run_with_one_step_per_recorded_step() -> None:
    r = CLIENT.post("/api/runs/import", content=EXAMPLE, headers=NDJSON)
    assert r.status_code in (201, 202), r.text
    created = r.json()
    assert created["run_id"].startswith("rec-") and created["num_steps"] >= 1
    assert created["url"] == f"/run?run={created['run_id']}"
    assert finished(CLIENT, created["run_id"])["state"] == "done"
    ov = CLIENT.get(f"/api/runs/{created['run_id']}").json()
    assert ov["num_steps"] == NUM_STEPS and ov["complete"] is True
    assert created["upstream"] == ov["upstream"] and ov["upstream"].startswith("vLLM 0.33.0")  # the header's
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
    assert [x["id"] for x in listed] == ["real-vllm-preemption", "real-vllm-hybrid"]
    # in 中文 the same list, titled in Chinese
    zh = CLIENT.get("/api/recordings?lang=zh").json()
    assert [x["id"] for x in zh] == [x["id"] for x in listed]
    for a, b in zip(listed, zh):
        assert b["title"] != a["title"] and re.search(r"[\u4e00-\u9fff]", b["title"]) and b["url"] == a["url"]
    r = CLIENT.post("/api/runs/import?example=real-vllm-preemption")
    assert r.status_code in (201, 202)
    assert finished(CLIENT, r.json()["run_id"]) == {
        **finished(CLIENT, r.json()["run_id"]),
        "steps_done": NUM_STEPS,
    }
    assert CLIENT.post("/api/runs/import?example=nope").status_code == 404


def test_the_shipped_hybrid_example_imports_by_name_with_every_groups_blocks_per_step() -> None:
    """The recording of vLLM's hybrid KV cache manager (issue 38, point 7): each step's blocks per
    KV cache group, the null block where the sliding window dropped, the pool's free count."""
    recorded = [json.loads(x) for x in example_bytes("real-vllm-hybrid").splitlines()]
    r = CLIENT.post("/api/runs/import?example=real-vllm-hybrid")
    assert r.status_code in (201, 202), r.text
    run_id = r.json()["run_id"]
    assert finished(CLIENT, run_id)["state"] == "done"
    ov = CLIENT.get(f"/api/runs/{run_id}").json()
    assert ov["num_steps"] == len(recorded) - 1
    cfg = ov["scenario"]["config"]
    assert cfg["layer_types"] == ["full_attention", "sliding_attention"] and cfg["sliding_window"] == 8
    assert f"agrees with the recording up to step {len(recorded) - 1}" in ov["scenario"]["notes"][0]
    step2 = CLIENT.get(f"/api/runs/{run_id}/steps/2").json()
    assert {r: step2["scheduler"]["block_ids"][r] for r in "ab"} == {
        "a": [[1, 2, 3, 4, 5, 7], [0, 0, 0, 9, 10, 6]],
        "b": [[11, 12, 13, 17], [0, 15, 16, 18]],
    }
    assert {r: step2["scheduler"]["new_block_ids"][r] for r in "ab"} == {"a": [[7], [6]], "b": [[17], [18]]}
    for n in (1, 2, len(recorded) - 1):
        kv = CLIENT.get(f"/api/runs/{run_id}/steps/{n}").json()["kv_cache"]
        assert kv["num_free_blocks"] == recorded[n]["num_free_blocks"] == len(kv["free_block_queue"])
        assert [g["kind"] for g in kv["kv_cache_groups"]] == ["full_attention", "sliding_attention"]


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
    assert CLIENT.post("/api/runs/import", content=EXAMPLE, headers=NDJSON).status_code in (201, 202)


def test_a_recording_whose_last_line_was_cut_imports_every_whole_line_and_says_where_it_stops() -> None:
    r = CLIENT.post("/api/runs/import", content=CUT, headers=NDJSON)
    assert r.status_code in (201, 202), r.text
    cut = r.json()["cut"]
    assert cut["line"] == 5 and cut["step"] == 3
    assert cut["text"]["en"] == CUT_SAYS
    assert cut["text"]["zh"] == "最后一行（第 5 行）被截断：记录止于第 3 步"
    run_id = r.json()["run_id"]
    assert finished(CLIENT, run_id)["state"] == "done"
    ov = CLIENT.get(f"/api/runs/{run_id}").json()
    assert ov["num_steps"] == 3 and ov["complete"] is True
    assert CUT_SAYS in ov["scenario"]["notes"]
    recorded = [json.loads(x) for x in LINES[1:4]]
    for n, rec in enumerate(recorded, start=1):
        step = CLIENT.get(f"/api/runs/{run_id}/steps/{n}").json()
        assert step["scheduler"]["num_scheduled_tokens"] == rec["num_scheduled_tokens"]
    # posted again, the same run says the same
    again = CLIENT.post("/api/runs/import", content=CUT, headers=NDJSON).json()
    assert again["run_id"] == run_id and again["cut"] == cut
    # a whole recording has no cut
    assert CLIENT.post("/api/runs/import", content=EXAMPLE, headers=NDJSON).json()["cut"] is None
    assert "cut" in json.dumps(CLIENT.get("/openapi.json").json()["components"]["schemas"]["ImportCreated"])


def test_a_line_that_is_not_json_names_one_line_number_the_files() -> None:
    # the bad character is at column 151 of the file's line 5
    prefix = b'{"step": 4, "arrivals": ['
    bad = prefix + b" " * (150 - len(prefix)) + b"x]}\n"
    assert bad.index(b"x") == 150
    body = b"".join(LINES[:4]) + bad + b"".join(LINES[5:])
    r = CLIENT.post("/api/runs/import", content=body, headers=NDJSON)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["field"] == "line 5"
    assert detail["message"].startswith("not JSON at column 151 (")
    assert "line" not in detail["message"], detail  # the decoder's own "line 1" is not the file's
    # a cut line in the middle of the file is not the last: still an error, naming it
    body, says = cases(LINE_LIMIT)["a line cut in the middle of the file"]
    r = CLIENT.post("/api/runs/import", content=body, headers=NDJSON)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "line 5"


def test_a_body_over_the_import_limit_is_a_413_naming_the_setting_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the app (in this process: compute_in="thread") spools the body into the temp directory,
    # here the test's own, which no other test (nor xdist worker) writes to
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    app = create_app(Settings(max_import_bytes=1 << 20, compute_in="thread"))
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/api/runs/import", content=EXAMPLE * 400, headers=NDJSON)
    assert r.status_code == 413
    assert "PAGEDVIZ_MAX_IMPORT_MB" in r.json()["detail"][0]["message"]
    assert not list(tmp_path.glob("pagedviz-import-*"))


def test_json_or_another_media_type_is_a_415() -> None:
    r = CLIENT.post("/api/runs/import", content=EXAMPLE, headers={"Content-Type": "application/json"})
    assert r.status_code == 415 and "application/x-ndjson" in r.json()["detail"][0]["message"]


def test_the_import_route_is_in_the_openapi_document() -> None:
    doc = CLIENT.get("/openapi.json").json()
    op = doc["paths"]["/api/runs/import"]["post"]
    assert set(op["requestBody"]["content"]) == {"application/x-ndjson", "text/plain"}
    assert {"201", "413", "422"} <= set(op["responses"])


def test_an_import_past_the_store_bound_is_a_413_naming_the_setting_and_posting_it_again_retries() -> None:
    app = create_app(Settings(max_db_bytes=1 << 10, compute_in="thread"))
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/api/runs/import", content=EXAMPLE, headers=NDJSON)
        assert r.status_code == 413 and "PAGEDVIZ_STORE_MB" in r.json()["detail"][0]["message"]
        rid = "rec-" + hashlib.sha256(f"pagedviz {__version__}\n".encode() + EXAMPLE).hexdigest()[:16]
        p = client.get(f"/api/runs/{rid}/progress").json()
        assert p["state"] == "refused" and "PAGEDVIZ_STORE_MB" in p["reason"]
        again = client.get(f"/api/runs/{rid}")
        assert again.status_code == 413 and "PAGEDVIZ_STORE_MB" in again.json()["detail"][0]["message"]
        assert client.get("/healthz").status_code == 200
        # posted again once the bound is raised: replayed again, to its end
        client.app.state.store.max_db_bytes = 1 << 30  # type: ignore[attr-defined]
        assert client.post("/api/runs/import", content=EXAMPLE, headers=NDJSON).status_code in (201, 202)
        assert finished(client, rid)["state"] == "done"


def test_the_import_answers_at_once_and_its_steps_and_progress_are_readable_while_it_replays(
    long_recording: bytes,
) -> None:
    r = CLIENT.post("/api/runs/import", content=long_recording, headers=NDJSON)
    assert r.status_code == 202, r.text
    created = r.json()
    rid, total = created["run_id"], len(long_recording.splitlines()) - 1
    assert created["complete"] is False and 1 <= created["num_steps"] < total
    p = CLIENT.get(f"/api/runs/{rid}/progress").json()
    assert p["state"] == "computing" and p["max_steps"] == total and 1 <= p["steps_done"] < total
    step = CLIENT.get(f"/api/runs/{rid}/steps/1")
    assert step.status_code == 200 and step.json()["step"] == 1
    assert step.headers["cache-control"] == "no-cache"  # the run is not complete yet
    ov = CLIENT.get(f"/api/runs/{rid}").json()
    assert ov["complete"] is False and len(ov["steps"]) == ov["num_steps"] < total
    last = CLIENT.get(f"/api/runs/{rid}/steps/{total}")  # waits for the replay to reach it
    assert last.status_code == 200 and last.json()["step"] == total
    assert finished(CLIENT, rid)["state"] == "done"
    ov = CLIENT.get(f"/api/runs/{rid}").json()
    assert ov["complete"] is True and [s["step"] for s in ov["steps"]] == list(range(1, total + 1))
    assert ov["scenario"]["notes"][0] == f"pagedviz's scheduler agrees with the recording up to step {total}"
    assert CLIENT.get(f"/api/runs/{rid}/steps/{total + 1}").status_code == 404


def test_an_overview_lists_the_steps_it_counts_though_the_replay_stored_more_meanwhile() -> None:
    """The overview's head says how many steps it lists (`num_steps`, taken when it was asked);
    lines the replay stores while it is written are not listed past that count (a CI run caught
    500 lines under num_steps 1)."""
    rid = CLIENT.post("/api/runs/import", content=EXAMPLE, headers=NDJSON).json()["run_id"]
    assert finished(CLIENT, rid)["state"] == "done"
    imports = CLIENT.app.state.store.imports
    for count in (1, 2, NUM_STEPS):
        ov = json.loads(b"".join(imports.overview_chunks(rid, {"num_steps": count}, count)))
        assert [s["step"] for s in ov["steps"]] == list(range(1, count + 1))


def test_an_imported_run_outlives_eviction_from_memory_with_the_same_content() -> None:
    caps = Settings(
        max_runs=1, max_store_bytes=1 << 16, max_scenarios=1, max_scenario_bytes=1, compute_in="thread"
    )
    with TestClient(create_app(caps), raise_server_exceptions=False) as client:
        rid = client.post("/api/runs/import", content=EXAMPLE, headers=NDJSON).json()["run_id"]
        assert finished(client, rid)["state"] == "done"
        before = [client.get(f"/api/runs/{rid}/steps/{n}").content for n in (1, NUM_STEPS)]
        narration = client.get(f"/api/runs/{rid}/steps/2/narration").json()
        for seed in range(3):  # later runs evict everything before them from memory
            sc = preset_dict("seed-001") | {"seed": seed}
            assert client.post("/api/runs", json=sc).status_code == 201
        after = [client.get(f"/api/runs/{rid}/steps/{n}").content for n in (1, NUM_STEPS)]
        assert after == before
        assert client.get(f"/api/runs/{rid}/steps/2/narration").json() == narration
        arr = client.get(f"/api/runs/{rid}/steps/1/arrays/slot_mapping").json()
        assert arr["data"] == json.loads(before[0])["arrays"]["slot_mapping"]["data"]
        assert client.get(f"/api/runs/{rid}/metrics").json()["run_id"] == rid


def test_an_import_stopped_by_a_restart_resumes_from_the_store_and_answers_the_same(
    tmp_path: Path, long_recording: bytes
) -> None:
    """A real server with --store: stopped while the import replays, the next one (two workers)
    finds the recording kept, replays it to the end and serves every step from either worker."""
    import httpx

    from pagedviz.app.serve import running_server

    store, spool = tmp_path / "store", tmp_path / "tmp"
    spool.mkdir()
    env = {"TMPDIR": str(spool)}  # where the server spools the body: nothing may be left there
    with (
        running_server("--store", str(store), env=env) as server,
        httpx.Client(base_url=server.url, timeout=60) as c,
    ):
        r = c.post("/api/runs/import", content=long_recording, headers=NDJSON)
        assert r.status_code == 202, r.text
        rid = r.json()["run_id"]
        first = c.get(f"/api/runs/{rid}/steps/1").content
        assert c.get(f"/api/runs/{rid}/progress").json()["state"] == "computing"
    assert not list(spool.glob("pagedviz-import-*"))  # stopped mid-replay: its copy is gone
    total = len(long_recording.splitlines()) - 1
    # two workers sharing the store: one resumes the replay, the other reads its steps as they come
    with (
        running_server("--store", str(store), "--workers", "2", env=env) as server,
        httpx.Client(base_url=server.url, timeout=60) as c,
    ):
        assert c.get(f"/api/runs/{rid}/progress").json()["state"] in ("queued", "computing", "done")
        assert c.get(f"/api/runs/{rid}/steps/{total}").json()["step"] == total  # waits for the replay
        assert c.get(f"/api/runs/{rid}/steps/1").content == first
        deadline = time.monotonic() + 60
        while c.get(f"/api/runs/{rid}/progress").json()["state"] != "done" and time.monotonic() < deadline:
            time.sleep(0.1)
        for _ in range(4):  # new connections spread over both workers
            with httpx.Client(base_url=server.url, timeout=60) as c:
                ov = c.get(f"/api/runs/{rid}").json()
                assert ov["num_steps"] == total and ov["scenario"]["notes"][0].endswith(f"up to step {total}")
                assert c.get(f"/api/runs/{rid}/steps/{total // 2}").status_code == 200
    assert not list(spool.glob("pagedviz-import-*"))


def test_an_imported_runs_whole_run_readers_read_its_stored_steps_as_the_replay_made_them() -> None:
    """Metrics, narration and arrays of the stored run (each step read back from the database)
    equal those of the same recording replayed in memory (core/replay.py, as `pagedviz import`)."""
    from pagedviz.core.metrics import run_metrics
    from pagedviz.core.narrate import narrate
    from pagedviz.core.recording import read_recording
    from pagedviz.core.replay import import_recording

    imported = import_recording(*read_recording(EXAMPLE.splitlines(keepends=True)))
    traces, cfg = imported.traces, imported.scenario.config
    rid = CLIENT.post("/api/runs/import", content=EXAMPLE, headers=NDJSON).json()["run_id"]
    assert finished(CLIENT, rid)["state"] == "done"
    metrics = CLIENT.get(f"/api/runs/{rid}/metrics").json()
    assert json.loads(json.dumps(run_metrics(traces))) == {k: v for k, v in metrics.items() if k != "run_id"}
    for n in (1, 2, NUM_STEPS):
        items = CLIENT.get(f"/api/runs/{rid}/steps/{n}/narration").json()["items"]
        want = narrate(traces[n - 1], traces[n - 2] if n > 1 else None, cfg, n == NUM_STEPS)
        assert items == json.loads(json.dumps(want)), f"step {n}"
        arr = CLIENT.get(f"/api/runs/{rid}/steps/{n}/arrays/block_table").json()
        assert arr["data"] == traces[n - 1].arrays["block_table"].tolist()


def test_any_step_is_read_at_once_before_the_replay_reaches_it_and_equals_the_full_replay(
    tmp_path: Path,
) -> None:
    """Issue 40: a step past the replay is computed on demand (from the nearest checkpoint,
    rolled forward cheaply) and is the step a full replay makes; the replay keeps checkpoints."""
    from pagedviz.core.recording import read_recording
    from pagedviz.core.replay import import_recording

    path = tmp_path / "seek.jsonl"
    total = write_recording(scenario(1200, 40, 100), path)
    body = path.read_bytes()
    r = CLIENT.post("/api/runs/import", content=body, headers=NDJSON)
    assert r.status_code == 202, r.text
    rid = r.json()["run_id"]
    picked = (total, total // 2 + 3, 2)
    got = {n: CLIENT.get(f"/api/runs/{rid}/steps/{n}") for n in picked}
    # the last step came before the replay had stored it
    assert CLIENT.get(f"/api/runs/{rid}/progress").json()["steps_done"] < total
    assert finished(CLIENT, rid)["state"] == "done"
    full = import_recording(*read_recording(body.splitlines(keepends=True))).traces
    for n, step in got.items():
        assert step.status_code == 200, step.text
        d, want = step.json(), json.loads(json.dumps(full[n - 1].to_dict()))
        assert d.pop("timing_us") and want.pop("timing_us")
        assert d == want, f"step {n}"
    count, size = CLIENT.app.state.store.db.checkpoint_bytes(rid)
    assert count == total // 500 and size > 0  # CHECKPOINT_EVERY
    # the overview's lines are the full replay's step summaries
    from pagedviz.app.summaries import step_summary

    lines = CLIENT.get(f"/api/runs/{rid}").json()["steps"]
    assert [json.loads(json.dumps(step_summary(t))) for t in full] == [
        {k: s[k] for k in step_summary(full[0])} for s in lines
    ]
