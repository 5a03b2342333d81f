"""Issue 14 in a real Chromium: under the strict Content-Security-Policy (no inline script, no
eval) the pages work, the canvas heatmaps are drawn, and nothing the policy forbids is attempted."""

from __future__ import annotations

from typing import Any

# every violation of the policy, recorded by the page itself before any of its scripts run
RECORD = (
    "window.__csp = []; document.addEventListener('securitypolicyviolation', e => "
    "window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
)


def test_pages_and_canvas_heatmaps_work_under_the_strict_csp(browser: Any, base_url: str) -> None:
    # a context of its own that keeps the CSP (watched_page bypasses it)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.add_init_script(RECORD)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    response = page.goto(f"{base_url}/run?preset=seed-001-ascend&step=2")
    assert response is not None and "script-src 'self';" in response.headers["content-security-policy"]
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    # waited on with selectors: Playwright's wait_for_function would evaluate a string, which the
    # CSP forbids; each heatmap's canvas is there once it is drawn, and then its data is too
    for hm in ("hm-kv", "hm-attn_mask"):
        page.wait_for_selector(f"#{hm} canvas.cm-cells", state="attached", timeout=30_000)
    drawn = "['hm-kv', 'hm-attn_mask'].every(id => Boolean(document.getElementById(id)?.data))"
    assert page.evaluate(drawn), "the heatmaps were not drawn"
    assert page.locator("#hm-kv canvas.cm-cells").count() == 1
    assert page.evaluate("window.__csp") == []
    page.goto(f"{base_url}/")
    page.wait_for_selector("#btn-run", timeout=30_000)
    # the editor validates the scenario through the API, then marks the form valid
    page.wait_for_selector("#validation.ok", timeout=30_000)
    assert page.evaluate("window.__csp") == []
    assert errors == []
    context.close()
