"""Parallel sampling and priority scheduling as a reader sees them (issue 38, points 5 and 6), in a
real Chromium against a real uvicorn at 1280x720, in English and 中文: the n = 4 preset's children
get their own identity (KV legend, request table) and step 1 says that vLLM V1 shares their prompt
blocks only through prefix-cache hits, without copy-on-write; the priority preset's step 6 says
that b, the lowest priority, was preempted for c. Screenshots land in test-artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import browser as tb

CHILDREN = ["0_a", "1_a", "2_a", "3_a"]
WORDS = {
    "en": {"children": "does not copy on write", "priority": "the lowest-priority running request"},
    "zh": {"children": "不做写时复制", "priority": "优先级最低"},
}


@pytest.fixture()
def page(browser: Any, base_url: str) -> Iterator[Any]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=60_000)


def test_children_and_priority_preemption_are_shown_and_said_in_both_languages(page: Any) -> None:
    tb.ARTIFACTS.mkdir(exist_ok=True)
    for lang, words in WORDS.items():
        page.goto(f"{page.base}/run?preset=demo-parallel-sampling&step=1&lang={lang}")
        page.wait_for_selector("body[data-ready='1']")
        # each child is a request of its own: its row and its colour in the KV legend
        assert page.locator("#request-table td.req-cell").all_inner_texts() == CHILDREN
        page.wait_for_function("document.getElementById('hm-kv') && document.getElementById('hm-kv').data")
        legend = page.evaluate("document.getElementById('hm-kv').layout.legend")
        assert legend[: len(CHILDREN)] == CHILDREN
        said = page.locator("#narr-step li[data-key='children:a']")
        said.filter(has_text=words["children"]).wait_for()
        assert "1–4" in said.inner_text()  # the shared prompt blocks, from the trace
        page.screenshot(path=str(tb.ARTIFACTS / f"parallel-sampling-step1-{lang}.png"))

        page.goto(f"{page.base}/run?preset=demo-priority&step=6&lang={lang}")
        page.wait_for_selector("body[data-ready='1']")
        said = page.locator("#narr-step li[data-key='preempt:b']")
        said.filter(has_text=words["priority"]).wait_for()
        assert "priority" in said.inner_text()
        page.screenshot(path=str(tb.ARTIFACTS / f"priority-step6-{lang}.png"))


def test_the_landing_form_keeps_n_and_priority_it_has_no_input_for(page: Any) -> None:
    import re

    page.goto(f"{page.base}/?lang=en")
    page.locator("article[data-preset='demo-parallel-sampling'] button").click()
    page.wait_for_function("document.getElementById('f-name').value === 'demo-parallel-sampling'")
    page.locator("#req-rows tr").nth(0).locator(".r-max").fill("3")  # an edit, then a run of the form
    page.wait_for_selector("#validation.ok", timeout=30_000)
    page.click("#btn-run")
    page.wait_for_url(re.compile(r"/run\?s="), timeout=60_000)
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    # still four children (n = 4 went back with the row), now for 3 tokens each
    assert page.locator("#request-table td.req-cell").all_inner_texts() == CHILDREN
    assert page.locator("#step-label").inner_text().endswith("/ 3")  # 3 tokens: 3 steps, not 6
