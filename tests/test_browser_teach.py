"""The teaching side of the pages (issue 15) in a real Chromium against a real uvicorn: narration,
stage-by-stage playback, lessons, predict-then-reveal, what-if and compare. Screenshots at
1280x720 in English and 中文 land in test-artifacts/."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pagedviz.app.serve import running_server

CHROMIUM = os.environ.get("PAGEDVIZ_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
HAN = re.compile(r"[\u4e00-\u9fff]")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed (apt-get install chromium)"
    ),
]


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with running_server() as server:
        yield server.url


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
        )
        yield b
        b.close()


@pytest.fixture()
def page(browser: object, base_url: str) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1280, "height": 720})  # type: ignore[attr-defined]
    pg = context.new_page()
    pg.set_default_timeout(20_000)
    problems: list[str] = []
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.base = base_url
    yield pg
    context.close()
    assert problems == [], problems  # no console errors on any page


def open_run(page: object, query: str) -> None:
    page.goto(f"{page.base}/run?{query}")
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)


def shot(page: object, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000
    return path


def classes(page: object, selector: str) -> list[str]:
    return (page.locator(selector).get_attribute("class") or "").split()


# ------------------------------------------------------------------ 1. narration
def test_narration_follows_step_and_stage_and_its_names_light_up_the_views(page: object) -> None:
    open_run(page, "preset=seed-001&step=2&stage=slot_mapping")
    stage = page.locator("#narr-stage")
    page.wait_for_function("document.getElementById('narr-stage').textContent.includes('slot_mapping[2]')")
    # token 2 of step 2 is written to slot 13 = block 6 * 2 + 1 (the same slot the tables show)
    assert "= 13" in stage.inner_text()
    assert page.locator("#token-table tr[data-array='slot_mapping'] td[data-t='2']").inner_text() == "13"
    # the step's own sentences: step 2 opens blocks 7 and 8 (the changes chip says the same)
    assert "new blocks: 1 → [7], 2 → [8]" in page.locator("#changes").inner_text()
    grow = page.locator("#narr-step li[data-key='grow']")
    assert "7" in grow.inner_text() and "8" in grow.inner_text()
    # hovering "block 6" lights block 6 in the block table, and nothing else there
    page.hover("#narr-stage .ref[data-kind='block'][data-id='6']")
    lit = page.locator("#table-block_table td.hl").all_inner_texts()
    assert lit and set(lit) == {"6"}
    # focusing a request name (keyboard) lights its row of the request table
    page.focus("#narr-stage .ref[data-kind='request'][data-id='2']")
    assert page.locator("#request-table tr.hl").get_attribute("data-r") == "2"
    page.click("#narr-stage .ref[data-kind='request'][data-id='2']")
    assert page.locator("#selection").inner_text().startswith("request 2")
    shot(page, "teach-narration.png")
    # the stage below: the narration follows it
    page.focus("#btn-next")
    page.keyboard.press("Escape")
    page.locator("body").press("ArrowDown")
    page.wait_for_function("document.getElementById('narr-stage').textContent.includes('query_start_loc')")
    # another step: its own sentences
    page.click("#timeline [data-step='1']")
    page.wait_for_function("document.getElementById('narr-h').textContent.includes('1')")
    page.wait_for_selector("#narr-step li[data-key='chunk:2']")
    assert "chunked" in page.locator("#narr-step li[data-key='chunk:2']").inner_text()
    # and in Chinese
    page.click("[data-lang='zh']")
    page.wait_for_function("document.getElementById('narr-h').textContent.includes('发生了什么')")
    assert HAN.search(page.locator("#narr-step li[data-key='chunk:2']").inner_text())
    assert HAN.search(page.locator("#narr-stage").inner_text())
    shot(page, "teach-narration-zh.png")
