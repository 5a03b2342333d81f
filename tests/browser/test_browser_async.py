"""The step bar's engine-core box (static/enginecore.js) in a real Chromium against a real uvicorn:
with async scheduling it says whose output each step's update_from_output took, as the trace's
`engine_core` record does, in English and Chinese; a synchronous run shows no box."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support import browser as tb


@pytest.fixture()
def page(browser: Any, base_url: str) -> Iterator[Any]:
    yield from tb.watched_page(browser, base_url, 1280, 720)


def records(page: Any, preset: str) -> list[Any]:
    scenario = httpx.get(f"{page.base}/api/presets/{preset}", timeout=30).json()["scenario"]
    run = httpx.post(f"{page.base}/api/runs", json=scenario, timeout=120).json()
    return [
        httpx.get(f"{page.base}/api/runs/{run['run_id']}/steps/{n}", timeout=30).json().get("engine_core")
        for n in range(1, run["num_steps"] + 1)
    ]


def test_the_step_bar_says_whose_output_update_from_output_took_at_every_step(page: Any) -> None:
    recs = records(page, "demo-async-scheduling")
    page.goto(f"{page.base}/run?preset=demo-async-scheduling&step=1&lang=en")
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    for n, ec in enumerate(recs, start=1):
        want = (
            "update_from_output waits"
            if ec["consumed_step"] is None
            else f"update_from_output ← step {ec['consumed_step']}"
        )
        if n > 1:
            page.locator("#btn-next").click()
        # every step consumes a different step's output, so the text itself says the step changed
        page.wait_for_function(f"document.getElementById('ec-consumed').textContent === {want!r}")
        queue = ", ".join(map(str, ec["batch_queue"]))
        assert page.locator("#ec-queue").inner_text() == f"batch queue: [{queue}] / {ec['batch_queue_size']}"
    page.locator("button[data-lang='zh']").click()
    k = recs[-1]["consumed_step"]
    zh = f"update_from_output ← 第 {k} 步"
    page.wait_for_function(f"document.getElementById('ec-consumed').textContent === {zh!r}")
    assert "只排空队列" in page.locator("#engine-core").inner_text()  # the last step only drains


def test_a_synchronous_run_shows_no_engine_core_box(page: Any) -> None:
    page.goto(f"{page.base}/run?preset=seed-001&step=2&lang=en")
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    assert page.locator("#engine-core").is_hidden()
