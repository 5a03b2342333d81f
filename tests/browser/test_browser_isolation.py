"""Tests at one window size share a browser context (tests/support/browser.py): what one test's
page leaves behind must not reach the next test's page."""

from __future__ import annotations

from typing import Any

from tests.support.browser import watched_page


def test_a_page_of_the_shared_context_starts_without_what_the_last_test_stored(
    browser: Any, base_url: str
) -> None:
    first = watched_page(browser, base_url, 1000, 700)
    page = next(first)
    page.goto(f"{base_url}/?lang=zh")
    page.wait_for_selector("body[data-ready='1']")
    page.evaluate(
        "() => { localStorage.setItem('left-behind', '1'); sessionStorage.setItem('left-behind', '1'); }"
    )
    stored = page.evaluate("() => Object.keys(localStorage)")
    assert "left-behind" in stored and len(stored) >= 2  # the language the page remembered, too
    next(first, None)  # the first test's teardown
    second = watched_page(browser, base_url, 1000, 700)
    again = next(second)
    assert again.context is page.context and page.is_closed()  # the same context, a new page
    again.goto(f"{base_url}/")
    again.wait_for_selector("body[data-ready='1']")
    assert again.evaluate("() => [Object.keys(localStorage), Object.keys(sessionStorage)]") == [[], []]
    assert again.get_attribute("html", "lang") == "en"
    next(second, None)
