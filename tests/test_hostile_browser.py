"""Issue 14 in a real Chromium: under the strict Content-Security-Policy (no inline script, no
eval) the pages work, the canvas heatmaps are drawn, and nothing the policy forbids is attempted."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pagedviz.app.serve import running_server

CHROMIUM = os.environ.get("PAGEDVIZ_CHROMIUM", "/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]
# every violation of the policy, recorded by the page itself before any of its scripts run
RECORD = (
    "window.__csp = []; document.addEventListener('securitypolicyviolation', e => "
    "window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
)


def test_pages_and_canvas_heatmaps_work_under_the_strict_csp() -> None:
    from playwright.sync_api import sync_playwright

    with running_server() as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.add_init_script(RECORD)
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        response = page.goto(f"{server.url}/run?preset=seed-001-ascend&step=2")
        assert response is not None and "script-src 'self';" in response.headers["content-security-policy"]
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        # polled from here: Playwright's wait_for_function would evaluate a string, which the CSP forbids
        drawn = "['hm-kv', 'hm-attn_mask'].every(id => Boolean(document.getElementById(id)?.data))"
        deadline = time.monotonic() + 30
        while not page.evaluate(drawn):
            assert time.monotonic() < deadline, "the heatmaps were not drawn"
            page.wait_for_timeout(100)
        assert page.locator("#hm-kv canvas.cm-cells").count() == 1
        assert page.evaluate("window.__csp") == []
        page.goto(f"{server.url}/")
        page.wait_for_selector("#btn-run", timeout=30_000)
        page.wait_for_timeout(500)  # the editor validates through the API
        assert page.evaluate("window.__csp") == []
        assert errors == []
        browser.close()
