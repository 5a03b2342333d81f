"""The stage panel shows the engine's own stage text, served at GET /api/stages/text, in English and
简体中文, for V1 and Model Runner V2, from the page's first paint on."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pagedviz.app.serve import running_server

CHROMIUM = os.environ.get("PAGEDVIZ_CHROMIUM", "/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed (apt-get install chromium)"
    ),
]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, dict[str, Any]]]:
    with running_server() as s, urllib.request.urlopen(f"{s.url}/api/stages/text", timeout=30) as r:
        yield s.url, {t["key"]: t for t in json.load(r)["stages"]}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(
    ("query", "key"),
    [
        ("preset=seed-001&step=2&stage=req_indices", "req_indices"),
        ("preset=demo-v2-slots&step=2", "v2:idx_mapping"),
    ],
)
def test_the_stage_panel_shows_the_served_text_at_first_paint(
    browser: Any, server: tuple[str, dict[str, Any]], query: str, key: str, lang: str
) -> None:
    url, texts = server
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
