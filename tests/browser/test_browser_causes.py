"""The words about why a request waits, as a reader sees them (issue 37): the landing page's
"Chunked prefill on vs off" contrast at step 2, in English and 中文, in a real Chromium against a
real uvicorn at 1280x720. The compare line's why and the run's own narration say that request 4
waits for the token budget (120 tokens needed, 70 left), never the old guess about free blocks.
Screenshots land in test-artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import browser as tb

CHUNKED = "preset=seed-000&vs=enable_chunked_prefill%3Afalse%2Cmax_num_batched_tokens%3A240"
WORDS = {
    "en": ("Request 4 waits for the token budget: it needs 120 tokens and 70 are left", "free blocks"),
    "zh": ("请求 4 在等 token 预算：它需要 120 个 token，预算只剩 70 个", "空闲块放不下"),
}


@pytest.fixture()
def page(browser: Any, base_url: str) -> Iterator[Any]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=60_000)


def test_chunked_prefill_off_step_2_says_request_4_waits_for_the_token_budget(page: Any) -> None:
    for lang, (says, never) in WORDS.items():
        page.goto(page.base + f"/run?{CHUNKED}&step=2" + ("&lang=zh" if lang == "zh" else ""))
        page.wait_for_selector("body[data-ready='1']")
        page.wait_for_selector("#cmp-view:not([hidden]) .cp-pane[data-side='b']")
        page.wait_for_selector("body[data-compare='2']")
        why = page.locator("#cmp-why")
        why.filter(has_text=says).wait_for()
        assert "B:" in why.inner_text() and never not in why.inner_text()
        tb.ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(tb.ARTIFACTS / f"causes-chunked-step2-{lang}.png"))
