"""The stage panel shows the engine's own stage text, served at GET /api/stages/text, in English and
简体中文, for V1 and Model Runner V2, from the page's first paint on."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

# the real server and Chromium are the tier's (tests/browser/conftest.py: base_url, browser)


@pytest.fixture(scope="module")
def texts(base_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base_url}/api/stages/text", timeout=60) as r:
        return {t["key"]: t for t in json.load(r)["stages"]}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(
    ("query", "key"),
    [
        ("preset=seed-001&step=2&stage=req_indices", "req_indices"),
        ("preset=demo-v2-slots&step=2", "v2:idx_mapping"),
    ],
)
def test_the_stage_panel_shows_the_served_text_at_first_paint(
    browser: Any, base_url: str, texts: dict[str, Any], query: str, key: str, lang: str
) -> None:
    url = base_url
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{url}/run?{query}&lang={lang}")
        page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        # at first paint (nothing clicked) the panel already holds the stage's served text
        name = key.split(":")[-1]
        if "stage=" not in query:
            page.click(f".stage-btn[data-stage='{name}']")
        want = texts[key]
        assert page.locator("#stage-expl").inner_text() == want["why"][lang]
        assert page.locator("#stage-title").inner_text().endswith(f". {want['title'][lang]}")
        button = page.locator(f".stage-btn[data-stage='{name}'] .stage-title")
        assert button.inner_text() == want["title"][lang]
    finally:
        page.close()
