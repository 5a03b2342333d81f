"""The browser tier: real Chromium (Debian's, driven by Playwright) against a real uvicorn.

One server (`pagedviz serve` on 127.0.0.1, on a port the OS gives) and one Chromium per session,
that is per pytest-xdist worker; each test gets a page of its own (`page`, or a module's own `page`
fixture at another size, built with tests.support.browser.watched_page) in the browser context that
the worker's tests at that window size share, its storage emptied between tests. Tests that need a
server or a context configured otherwise (tighter limits, a colour scheme, ...) make their own and
say why.

Every test here is marked `browser`; where Chromium is missing each one is skipped, saying so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pagedviz.app.serve import running_server
from tests.support.browser import CHROMIUM, LAUNCH_ARGS, MISSING, watched_page

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chromium = Path(CHROMIUM).exists()
    for item in items:
        if HERE not in Path(item.path).resolve().parents:
            continue
        item.add_marker(pytest.mark.browser)
        if not chromium:
            item.add_marker(pytest.mark.skip(reason=MISSING))


@pytest.fixture(scope="session")
def base_url() -> Iterator[str]:
    """The tier's one server: its runs and caches are shared by every test of the worker."""
    with running_server() as server:
        yield server.url


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """The tier's one Chromium; tests isolate themselves in browser contexts of their own."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield b
        b.close()


@pytest.fixture()
def page(browser: Any, base_url: str) -> Iterator[Any]:
    """A page at 1400 × 1000 that fails its test on a console error."""
    yield from watched_page(browser, base_url, 1400, 1000)
