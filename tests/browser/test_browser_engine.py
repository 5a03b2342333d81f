"""The run page of a scenario with `"engine": "vllm"` in a real Chromium against a real uvicorn whose
compute processes run vLLM 0.33.0's own code (core/vllm_engine): each step says it was computed by
vLLM's own code and what of it is vLLM's, in English and Chinese; a run of pagedviz's own engine
says nothing of the kind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pagedviz.core.presets import preset_dict
from pagedviz.core.vllm_engine import installed_vllm
from tests.support import browser as tb

pytestmark = [
    pytest.mark.fidelity,
    pytest.mark.skipif(installed_vllm() is None, reason="the vLLM 0.33.0 wheel is not installed"),
]


@pytest.fixture()
def page(browser: Any, base_url: str) -> Iterator[Any]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=120_000)


def test_the_run_page_says_a_step_was_computed_by_vllms_own_code(page: Any) -> None:
    d = preset_dict("demo-preemption")
    d["config"]["model"] = None
    live = httpx.post(f"{page.base}/api/runs", json={**d, "engine": "vllm"}, timeout=120).json()
    own = httpx.post(f"{page.base}/api/runs", json=d, timeout=120).json()
    step = httpx.get(f"{page.base}/api/runs/{live['run_id']}/steps/2", timeout=120).json()
    page.goto(f"{page.base}{live['url']}&step=2&lang=en")
    page.wait_for_selector("body[data-ready='1']")
    mark = page.locator("#engine-mark")
    mark.wait_for(state="visible")
    text = mark.inner_text()
    version = step["forward"]["engine"].split(" ")[1]
    assert f"Computed by vLLM {version}'s own code." in text and "slot_mapping" in text
    assert page.locator("#engine-mark .engine-diff").count() == 0  # no difference from pagedviz's replay
    page.locator("button[data-lang='zh']").click()
    page.wait_for_function("document.querySelector('#engine-mark').innerText.includes('自己的代码')")
    page.goto(f"{page.base}{own['url']}&step=2&lang=en")
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("#engine-mark").is_hidden()


def test_the_scenario_editor_chooses_the_engine_and_leaves_the_default_out(page: Any) -> None:
    page.goto(f"{page.base}/?lang=en")
    page.wait_for_selector("#validation.ok", timeout=60_000)
    assert page.eval_on_selector_all("#f-engine option", "os => os.map(o => o.value)") == ["pagedviz", "vllm"]
    assert page.input_value("#f-engine") == "pagedviz"
    with page.expect_download() as own:
        page.click("#btn-download")
    assert "engine" not in json.loads(Path(own.value.path()).read_text())  # the default stays out
    page.select_option("#f-engine", "vllm")
    page.wait_for_selector("#validation.ok", timeout=60_000)
    with page.expect_download() as live:
        page.click("#btn-download")
    assert json.loads(Path(live.value.path()).read_text())["engine"] == "vllm"
