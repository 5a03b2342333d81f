"""The what-if applies a change as it is made (issue 29, item 12), in a real Chromium against a real
uvicorn at 1280x720: a choice reruns at once, a slider once it rests (one rerun for a burst of
moves), with no "Rerun here" press; the preset's notes, which a changed setting may make false, are
marked as the baseline's; the longer title leaves the "?" button on the title line; and comparing
with the chosen settings compares the baseline with them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import browser as tb

open_run = tb.open_run


@pytest.fixture()
def page(browser: object, base_url: str) -> Iterator[object]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=30_000)


def test_a_choice_applies_at_once_and_the_notes_turn_into_the_baselines(page: Any) -> None:
    open_run(page, "preset=seed-001&step=2&stage=slot_mapping")
    page.wait_for_selector("#wi-delta-table")
    assert page.locator("#preset-notes li.note-baseline").count() == 0
    page.select_option("#wi-block_size", "4")  # no button pressed
    page.wait_for_function(
        "document.getElementById('run-title').textContent.includes('what if: block_size 4')"
    )
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("body").get_attribute("data-step") == "2"
    notes = page.locator("#preset-notes li")
    assert notes.count() >= 1 and page.locator("#preset-notes li.note-baseline").count() == notes.count()
    assert "(baseline)" in notes.first.inner_text()
    assert "may not hold" in (notes.first.get_attribute("title") or "")
    # the buttons of the title line keep their own line height (none wraps)
    for sel in ("[data-lang='zh']", "#btn-copy", "#btn-present"):
        assert page.locator(sel).bounding_box()["height"] < 40, sel
    # the knob keeps its value and says the baseline's
    assert page.locator("#wi-block_size").input_value() == "4"
    assert "(baseline 2)" in page.locator(".wi-knob[data-key='block_size']").inner_text()
    # the "?" stays on the title line, right of the (cut) title
    title, help_ = (page.locator(s).bounding_box() for s in ("#run-title", "#btn-help"))
    assert (
        title and help_ and abs((title["y"] + title["height"] / 2) - (help_["y"] + help_["height"] / 2)) < 12
    )
    assert title["x"] + title["width"] <= help_["x"]
    page.screenshot(path=str(tb.ARTIFACTS / "whatif-live.png"))
    # back to the baseline: the notes are the preset's own again
    page.click("#whatif-reset")
    page.wait_for_function("!document.getElementById('run-title').textContent.includes('what if')")
    page.wait_for_function("document.querySelectorAll('#preset-notes li.note-baseline').length === 0")
    assert page.locator("#wi-block_size").input_value() == "2"


def test_a_slider_reruns_once_when_it_rests(page: Any) -> None:
    open_run(page, "preset=seed-001&step=2")
    page.wait_for_selector("#wi-delta-table")
    posted: list[str] = []
    page.on(
        "request",
        lambda r: posted.append(r.url) if r.method == "POST" and r.url.endswith("/api/runs") else None,
    )
    # a burst of moves, as a drag makes: each an input event, 60 ms apart (the drag's own pace,
    # kept by the page's clock)
    page.evaluate(
        """async (vs) => { const s = document.getElementById('wi-num_kv_blocks');
          for (const v of vs) { s.value = v; s.dispatchEvent(new Event('input', { bubbles: true }));
            await new Promise((r) => setTimeout(r, 60)); } }""",
        [11, 12, 13, 14],
    )
    page.wait_for_function("document.getElementById('run-title').textContent.includes('num_kv_blocks 14')")
    # the rerun is over (its button is enabled again): one queued behind it would have started already
    page.wait_for_selector("#whatif-run:not([disabled])", state="attached")
    assert len(posted) == 1, posted  # one rerun, for the value it rested on
    assert page.locator("#wi-num_kv_blocks").input_value() == "14"
