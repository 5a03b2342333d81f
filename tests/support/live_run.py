"""A live run made by vLLM 0.33's real Scheduler (tests/fidelity, tests/browser): the recorder on
the V1 side (tests/support/vllm_record.py) with PAGEDVIZ_RECORD=http://HOST:PORT sends its lines to
a real `pagedviz serve --live-token T`; `compare_with_file` records the same scenario to a file,
imports it into the same server and asserts that the two runs are equal, step for step.

Callers check first that vLLM is installed (tests.support.fidelity_env.require_vllm).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from pagedviz.core import Scenario, make_engine
from tests.support.vllm_record import record, recording_side


def record_live(
    scenario: Scenario,
    url: str,
    token: str,
    monkeypatch: pytest.MonkeyPatch,
    pause_s: float = 0.0,
    on_step: Callable[[int, str | None], None] | None = None,
) -> str:
    """Drive vLLM's Scheduler under the recorder, sending to the pagedviz at `url` (a pause after
    each step, so that a reader sees the steps arrive); shut down at the end (the recorder closes
    the run); `on_step(n, run id or None)` after each step. The live run's id."""
    side = recording_side(scenario, url, monkeypatch, PAGEDVIZ_RECORD_TOKEN=token)  # type: ignore[arg-type]
    sink = side.scheduler._pagedviz.file
    for n, t in enumerate(make_engine(scenario).run(), start=1):
        if scenario.config.async_scheduling:
            side.async_step(t.sampled_token_ids)
        else:
            side.step(t.sampled_token_ids)
        if on_step is not None:
            on_step(n, sink.run_id)  # the run id, once pagedviz has answered the header
        if pause_s:
            time.sleep(pause_s)
    side.scheduler.shutdown()  # the last batch says the recording ended
    assert sink.run_id is not None and not sink.stopped, "the recorder could not send to pagedviz"
    return str(sink.run_id)


def done(c: httpx.Client, run_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (p := c.get(f"/api/runs/{run_id}/progress").json())["state"] != "done":
        assert time.monotonic() < deadline, p
        time.sleep(0.05)
    return p  # type: ignore[no-any-return]


def without_timing(body: bytes) -> dict[str, Any]:
    d = json.loads(body)
    d.pop("timing_us", None)  # wall-clock timings: never equal between two replays
    return d  # type: ignore[no-any-return]


def compare_with_file(
    url: str, run_id: str, scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> int:
    """The live run, once closed, equals the same scenario recorded to a file and imported, step
    for step (`GET /api/runs/{id}/steps/{n}`) and in its scenario; the number of steps."""
    path = tmp_path / "same.jsonl"
    record(scenario, path, monkeypatch)
    with httpx.Client(base_url=url, timeout=60) as c:
        r = c.post(
            "/api/runs/import", content=path.read_bytes(), headers={"Content-Type": "application/x-ndjson"}
        )
        assert r.status_code in (201, 202), r.text
        file_id = r.json()["run_id"]
        n = done(c, run_id)["steps_done"]
        assert done(c, file_id)["steps_done"] == n == len(path.read_text().splitlines()) - 1
        live, file = (c.get(f"/api/runs/{rid}").json() for rid in (run_id, file_id))
        assert live["live"] is False and live["complete"] is True
        assert live["scenario"] == file["scenario"]
        for step in range(1, n + 1):
            a, b = (c.get(f"/api/runs/{rid}/steps/{step}").content for rid in (run_id, file_id))
            assert without_timing(a) == without_timing(b), f"step {step}"
    return n
