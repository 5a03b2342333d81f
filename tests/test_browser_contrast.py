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
import test_browser as tb

pytestmark = tb.pytestmark
base_url = tb.base_url
browser = tb.browser

LOW_CONTRAST = """() => {
  const parse = (s) => { const m = /rgba?\\(([^)]+)\\)/.exec(s); if (!m) return null;
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const lin = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
  const lum = ([r, g, b]) => 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
  const over = (t, u) => [0, 1, 2].map((i) => t[i] * t[3] + u[i] * (1 - t[3])).concat([1]);
  const page = parse(getComputedStyle(document.body).backgroundColor);
  // the colours that may lie under e: one, or one per stop of a gradient under it
  const under = (e) => {
    const layers = [];
    for (let n = e; n; n = n.parentElement) {
      const st = getComputedStyle(n);
      const c = parse(st.backgroundColor);
      if (st.backgroundImage.includes('gradient')) {
        const stops = [...st.backgroundImage.matchAll(/rgba?\\([^)]+\\)/g)]
          .map((m) => parse(m[0])).filter((g) => g[3] >= 1);
        if (stops.length) return stops.map((s) => layers.reduceRight((acc, l) => over(l, acc), s));
      }
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    const base = layers.length && layers[layers.length - 1][3] >= 1 ? layers.pop() : page;
    return [layers.reduceRight((acc, l) => over(l, acc), base)];
  };
  const out = [];
  const seen = new Set();
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const e = walk.currentNode.parentElement;
    if (!e || !walk.currentNode.textContent.trim() || seen.has(e)) continue;
    seen.add(e);
    if (e.closest('script, style, svg, .concealed, .js-plotly-plot')) continue;
    if (!e.checkVisibility({ visibilityProperty: true, opacityProperty: true })) continue;
    const r = e.getBoundingClientRect();
    if (!r.width || !r.height) continue;
    const fg0 = parse(getComputedStyle(e).color);
    if (!fg0 || fg0[3] === 0) continue;
    let op = 1;
    for (let m = e; m; m = m.parentElement) op *= Number(getComputedStyle(m).opacity);
    for (const bg of under(e)) {
      const fg = over([fg0[0], fg0[1], fg0[2], fg0[3] * op], bg);
      const a = lum(fg), b = lum(bg);
      const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
      if (ratio < 4.5) {
        const text = walk.currentNode.textContent.trim().slice(0, 24);
        const pair = `${getComputedStyle(e).color} on rgb(${bg.slice(0, 3).map(Math.round)})`;
        out.push(`${ratio.toFixed(2)} ${e.tagName}.${e.className} "${text}" ${pair}`);
        break;
      }
    }
  }
  return out;
}"""

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
    themed_page.wait_for_timeout(500)  # the narration and the lesson fill in after the step
    low = themed_page.evaluate(LOW_CONTRAST)
    assert low == [], low
