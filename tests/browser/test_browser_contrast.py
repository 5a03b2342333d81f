"""No visible text under 4.5:1 against what lies under it (issue 29, item 13), in both themes, in a
real Chromium against a real uvicorn at 1280x720: the landing page, a run (normal and present
mode), a V2 run, a preemption, the compare view and a lesson. The page computes each visible text's
colour (its opacity and its ancestors' opacity folded in) against its background: the nearest
opaque background colour with the translucent ones above it blended in, or each colour stop of a
gradient (a hatch) that lies under it, and the WCAG contrast ratio of the pair."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.browser import LOW_CONTRAST, settle

PAGES = [
    "/",
    "/run?preset=seed-001&step=2",
    "/run?preset=seed-001&step=2&present=1",
    "/run?preset=demo-preemption&step=6",
    "/run?preset=demo-v2-slots&step=3",
    "/run?preset=demo-prefix-cache&vs=enable_prefix_caching:false",
    "/run?lesson=paged-attention-50&sec=3&lang=zh",
]


@pytest.fixture(params=["light", "dark"])
def themed_page(request: Any, browser: Any, base_url: str) -> Iterator[Any]:
    context = browser.new_context(
        viewport={"width": 1280, "height": 720}, color_scheme=request.param, reduced_motion="reduce"
    )
    pg = context.new_page()
    pg.base = base_url
    yield pg
    context.close()


@pytest.mark.parametrize("path", PAGES)
def test_no_visible_text_is_under_4_5_to_1_in_either_theme(themed_page: Any, path: str) -> None:
    themed_page.goto(themed_page.base + path)
    ready = "#main" if path == "/" else "body[data-ready='1']"
    themed_page.wait_for_selector(ready, timeout=60_000)
    if "vs=" in path:
        themed_page.wait_for_selector("#cmp-view:not([hidden]) .cp-pane")
    # the narration and the lesson fill in after the step: wait for them (by selectors only: this
    # page keeps its CSP, under which wait_for_function cannot run)
    if path == "/":
        themed_page.wait_for_selector("body[data-ready='1']:not([data-checking='1'])", state="attached")
    else:
        settle(themed_page)
    if "lesson=" in path:
        themed_page.wait_for_selector("body[data-lesson-ready='1']", state="attached")
    low = themed_page.evaluate(LOW_CONTRAST)
    assert low == [], low
