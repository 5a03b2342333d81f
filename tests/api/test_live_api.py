"""POST /api/runs/live and POST /api/runs/{id}/lines (issue 40 item 2): a recording posted as the
server makes it, read as it grows like any imported run. Off without a token, 401 with a wrong
one; each line checked as an import checks it; bounded; `live: true` in the overview until the
recorder closes the run or it has been quiet for PAGEDVIZ_LIVE_IDLE_S (then cut, nothing lost); a
restart keeps what arrived. Once closed, the run equals the same recording imported from a file.
Real FastAPI app (TestClient), no vLLM."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from tests.support.recording_cases import EXAMPLE, LINES, NUM_STEPS

TOKEN = "s3cret"
AUTH = {"Content-Type": "application/x-ndjson", "Authorization": f"Bearer {TOKEN}"}
NDJSON = {"Content-Type": "application/x-ndjson"}
SETTINGS = Settings(
    max_runs=8, compute_in="thread", live_token=TOKEN, max_live_runs=3, max_live_lines=6, live_idle_s=300
)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """One app and one event loop for the module (the live replays run as its tasks)."""
    with TestClient(create_app(SETTINGS), raise_server_exceptions=False) as c:
        yield c


def until(what: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := what()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def opened(c: TestClient) -> str:
    r = c.post("/api/runs/live", content=LINES[0], headers=AUTH)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["run_id"].startswith("rec-") and body["lines"] == f"/api/runs/{body['run_id']}/lines"
    return str(body["run_id"])


def post(c: TestClient, rid: str, lines: list[bytes], end: bool = False) -> Any:
    return c.post(f"/api/runs/{rid}/lines", params={"end": end}, content=b"".join(lines), headers=AUTH)


def without_timing(body: bytes) -> dict[str, Any]:
    d = json.loads(body)
    d.pop("timing_us", None)  # wall-clock timings: never equal between two replays
    return d


def done(c: TestClient, rid: str) -> dict[str, Any]:
    return until(lambda: (p := c.get(f"/api/runs/{rid}/progress").json())["state"] == "done" and p)  # type: ignore[no-any-return]


def test_live_runs_are_off_without_a_token_and_say_how_to_turn_them_on() -> None:
    with TestClient(create_app(Settings(compute_in="thread")), raise_server_exceptions=False) as c:
        r = c.post("/api/runs/live", content=LINES[0], headers=AUTH)
        assert r.status_code == 404
        assert "--live-token" in r.json()["detail"][0]["message"]
        assert (
            c.post("/api/runs/rec-0123456789abcdef/lines", content=LINES[1], headers=AUTH).status_code == 404
        )


def test_a_missing_or_wrong_token_is_a_401(client: TestClient) -> None:
    for headers in (NDJSON, {**NDJSON, "Authorization": "Bearer nope"}, {**NDJSON, "Authorization": TOKEN}):
        r = client.post("/api/runs/live", content=LINES[0], headers=headers)
        assert r.status_code == 401 and r.json()["detail"][0]["field"] == "authorization"


def test_both_endpoints_are_in_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "post" in paths["/api/runs/live"] and "post" in paths["/api/runs/{run_id}/lines"]


def test_a_live_run_grows_then_closes_and_equals_the_file_import(client: TestClient) -> None:
    rid = opened(client)
    assert post(client, rid, LINES[1:4]).json() == {"run_id": rid, "accepted": 3, "steps": 3, "live": True}
    ov = until(lambda: (o := client.get(f"/api/runs/{rid}").json())["num_steps"] == 3 and o)
    assert ov["live"] is True and ov["complete"] is False
    assert client.get(f"/api/runs/{rid}/steps/3").json()["step"] == 3
    assert client.get(f"/api/runs/{rid}/steps/5").status_code == 404  # not arrived: answered at once
    assert post(client, rid, []).json()["accepted"] == 0  # a quiet server's keep-alive
    # the whole-run readers answer at once with the steps so far (they would wait for its end)
    assert client.get(f"/api/runs/{rid}/steps/3/narration").json()["step"] == 3
    assert client.get(f"/api/runs/{rid}/metrics").json()["totals"]["steps"] == 3
    r = post(client, rid, LINES[4:], end=True)
    assert r.json()["live"] is False and r.json()["steps"] == NUM_STEPS
    assert done(client, rid)["steps_done"] == NUM_STEPS
    ov = client.get(f"/api/runs/{rid}").json()
    assert ov["live"] is False and ov["complete"] is True and ov["num_steps"] == NUM_STEPS
    file = client.post("/api/runs/import", content=EXAMPLE, headers=NDJSON).json()["run_id"]
    done(client, file)
    assert client.get(f"/api/runs/{file}").json()["scenario"] == ov["scenario"]  # the agreement included
    for n in range(1, NUM_STEPS + 1):
        a, b = (client.get(f"/api/runs/{r}/steps/{n}").content for r in (rid, file))
        assert without_timing(a) == without_timing(b), f"step {n}"
    assert "live" not in client.get(f"/api/runs/{file}").json()  # a file import's overview is unchanged
    assert post(client, rid, []).status_code == 409  # closed


def test_a_bad_line_is_a_422_naming_it_and_nothing_of_its_batch_is_kept(client: TestClient) -> None:
    rid = opened(client)
    r = post(client, rid, [LINES[1], b"{not json\n"])
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "line 3"
    r = post(client, rid, [LINES[2]])  # step 2 before step 1
    assert r.status_code == 422 and "step 2 where step 1 was expected" in r.json()["detail"][0]["message"]
    assert post(client, rid, [LINES[1]]).json()["steps"] == 1
    bad = client.post("/api/runs/live", content=b'{"pagedviz_recording": 99}\n', headers=AUTH)
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "line 1"
    post(client, rid, [], end=True)
    assert done(client, rid)["steps_done"] == 1


def test_the_limits_are_answered_naming_their_setting(client: TestClient) -> None:
    rid = opened(client)
    r = post(client, rid, LINES[1:] * 2)  # over PAGEDVIZ_MAX_LIVE_LINES
    assert r.status_code == 413 and "PAGEDVIZ_MAX_LIVE_LINES" in r.json()["detail"][0]["message"]
    assert (
        client.post(
            f"/api/runs/{rid}/lines", content=b"{}", headers={**AUTH, "Content-Type": "x/y"}
        ).status_code
        == 415
    )
    others = [opened(client) for _ in range(SETTINGS.max_live_runs - 1)]
    r = client.post("/api/runs/live", content=LINES[0], headers=AUTH)
    assert r.status_code == 503 and "PAGEDVIZ_MAX_LIVE_RUNS" in r.json()["detail"][0]["message"]
    for run in [rid, *others]:
        post(client, run, LINES[1:3], end=True)
    until(lambda: client.post("/api/runs/live", content=LINES[0], headers=AUTH).status_code == 201)


def test_a_batch_or_header_over_its_limit_is_a_413_naming_its_setting_and_the_run_goes_on() -> None:
    settings = Settings(compute_in="thread", live_token=TOKEN, max_live_body_bytes=1 << 20)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        rid = opened(c)
        r = c.post(f"/api/runs/{rid}/lines", content=b"x" * ((1 << 20) + 1), headers=AUTH)
        assert r.status_code == 413, r.text
        said = r.json()["detail"][0]
        assert said["field"] == "body" and "over 1 MB (PAGEDVIZ_MAX_LIVE_BODY_MB)" in said["message"]
        assert post(c, rid, LINES[1:], end=True).status_code == 200  # nothing of the refused batch was kept
        assert done(c, rid)["state"] == "done"
    # a header (one line) is bound by the per-line limit where that is the smaller, and says so
    settings = Settings(
        compute_in="thread", live_token=TOKEN, max_record_line_bytes=1 << 20, max_live_body_bytes=4 << 20
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = c.post("/api/runs/live", content=b"x" * (2 << 20), headers=AUTH)
        assert r.status_code == 413, r.text
        said = r.json()["detail"][0]["message"]
        assert f"per-line limit of {1 << 20} bytes (PAGEDVIZ_MAX_RECORD_LINE_MB)" in said, said


def test_a_quiet_run_closes_as_cut_with_nothing_lost() -> None:
    settings = Settings(compute_in="thread", live_token=TOKEN, live_idle_s=1)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        rid = opened(c)
        post(c, rid, LINES[1:4])
        assert done(c, rid)["steps_done"] == 3
        ov = c.get(f"/api/runs/{rid}").json()
        assert ov["live"] is False and ov["num_steps"] == 3
        assert "the last line (5) was cut: the recording stops at step 3" in ov["scenario"]["notes"]


def test_a_restart_keeps_what_arrived_and_the_run_goes_on(tmp_path: Path) -> None:
    settings = Settings(compute_in="thread", live_token=TOKEN, store_dir=str(tmp_path / "store"))
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        rid = opened(c)
        post(c, rid, LINES[1:4])
        until(lambda: c.get(f"/api/runs/{rid}").json()["num_steps"] == 3)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        ov = until(lambda: (o := c.get(f"/api/runs/{rid}").json())["num_steps"] == 3 and o)
        assert ov["live"] is True
        assert post(c, rid, LINES[4:], end=True).json()["steps"] == NUM_STEPS
        assert done(c, rid)["steps_done"] == NUM_STEPS
        assert c.get(f"/api/runs/{rid}").json()["live"] is False


def test_two_workers_take_a_live_runs_lines_in_turn_and_one_replays_them(tmp_path: Path) -> None:
    """A real server with two workers: each batch on a new connection (either worker takes it),
    every step readable from either, and the ended run equals the file import."""
    import httpx

    from pagedviz.app.serve import running_server

    env = {"PAGEDVIZ_COMPUTE_IN": "thread"}  # no compute processes: a live run replays in the server
    with running_server("--workers", "2", "--live-token", TOKEN, env=env, timeout=120) as server:

        def call(method: str, path: str, **kw: Any) -> httpx.Response:
            with httpx.Client(base_url=server.url, timeout=120) as c:  # a new connection each time
                return c.request(method, path, **kw)

        rid = call("POST", "/api/runs/live", content=LINES[0], headers=AUTH).json()["run_id"]
        for n, line in enumerate(LINES[1:], start=1):
            end = n == NUM_STEPS
            r = call("POST", f"/api/runs/{rid}/lines", params={"end": end}, content=line, headers=AUTH)
            assert r.status_code == 200 and r.json()["steps"] == n, r.text
        until(lambda: call("GET", f"/api/runs/{rid}/progress").json()["state"] == "done", 120)
        file = call("POST", "/api/runs/import", content=EXAMPLE, headers=NDJSON).json()["run_id"]
        until(lambda: call("GET", f"/api/runs/{file}/progress").json()["state"] == "done", 120)
        for n in range(1, NUM_STEPS + 1):
            a, b = (call("GET", f"/api/runs/{r}/steps/{n}").content for r in (rid, file))
            assert without_timing(a) == without_timing(b), f"step {n}"
        assert call("GET", f"/api/runs/{rid}").json()["live"] is False


def test_the_cli_refuses_an_empty_token_and_a_bad_idle_setting_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pagedviz.app.cli import main

    assert main(["serve", "--live-token", " "]) == 2
    assert "--live-token" in capsys.readouterr().err.strip()
    monkeypatch.setenv("PAGEDVIZ_LIVE_IDLE_S", "soon")
    assert main(["serve", "--port", "1"]) == 2  # stops before listening
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "PAGEDVIZ_LIVE_IDLE_S" in said[0]
