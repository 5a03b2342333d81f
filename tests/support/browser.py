"""What the browser tier (tests/browser) shares: where Chromium is, how it is launched, a page that
fails its test on a console error, opening a run, screenshots under test-artifacts/, and the
scripts that read a page's contrast and its English phrases. The server and the browser themselves
are tests/browser/conftest.py's fixtures (one of each per pytest worker)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Debian's Chromium headless shell (scripts/setup.sh --test installs it): the same Blink without the
# desktop browser around it, about a third less CPU for the tier than /usr/bin/chromium (the CI
# machine's two cores are the run's limit). The full browser where only it is installed;
# PAGEDVIZ_CHROMIUM names another.
HEADLESS_SHELL = "/usr/bin/chromium-headless-shell"
CHROMIUM = os.environ.get("PAGEDVIZ_CHROMIUM") or next(
    (p for p in (HEADLESS_SHELL, "/usr/bin/chromium") if Path(p).exists()), HEADLESS_SHELL
)
MISSING = f"Chromium not found at {CHROMIUM} (apt-get install -y chromium-headless-shell)"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts"


# The browser contexts that watched_page shares, one per browser and window size: a test's page
# opens in a context that earlier tests used, so that the page's scripts (plotly.js's 4.8 MB among
# them) come from the context's HTTP cache, compiled code and all. A fresh context per test cost
# the tier about 15% more CPU (benchmarks/README.md). What a page keeps is cleared between tests:
# the pages are closed and the storage of each origin they were on is emptied (the page keeps the
# reader's language in localStorage; nothing else).
# Keyed by the browser itself, not its id: a browser closed and another made could share an id.
_CONTEXTS: dict[tuple[Any, int, int], Any] = {}


def _shared_context(key: tuple[Any, int, int]) -> Any:
    context = _CONTEXTS.get(key)
    if context is None:
        browser, width, height = key
        viewport = {"width": width, "height": height}
        context = _CONTEXTS[key] = browser.new_context(viewport=viewport, bypass_csp=True)
    return context


def _leave_clean(key: tuple[Any, int, int]) -> None:
    """Closes the context's pages, emptying the storage of the origin each was on; a context whose
    page will not say (crashed, closed) is closed and dropped, and the next test gets a new one."""
    context = _CONTEXTS[key]
    try:
        for pg in list(context.pages):
            if pg.url.startswith("http"):
                pg.evaluate("() => { localStorage.clear(); sessionStorage.clear(); }")
            pg.close()
    except Exception:  # noqa: BLE001 (any failure: the context is not reused)
        del _CONTEXTS[key]
        context.close()


def watched_page(browser: Any, base_url: str, width: int, height: int, timeout_ms: int = 0) -> Iterator[Any]:
    """A page at width × height, with `page.base` the server's URL, in the browser context that the
    tests at that size share (_CONTEXTS); it fails the test that used it on any console error or
    uncaught page error. Playwright's wait_for_function evaluates strings in the page, which the
    pages' CSP forbids, so the CSP is bypassed here (test_hostile_browser.py checks the CSP itself)."""
    key = (browser, width, height)
    pg = _shared_context(key).new_page()
    if timeout_ms:
        pg.set_default_timeout(timeout_ms)
    problems: list[str] = []
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.base = base_url
    yield pg
    _leave_clean(key)
    assert problems == [], problems  # no console errors on any page


def open_run(page: Any, query: str, timeout_ms: int = 60_000) -> None:
    """The run page for `query`, once it says it is ready (body[data-ready='1'])."""
    page.goto(f"{page.base}/run?{query}")
    page.wait_for_selector("body[data-ready='1']", timeout=timeout_ms)


# The page's readiness flags (data-* on <body>) that tests wait on instead of time:
#   data-ready="1"       the page is built (run.js, landing.js)
#   data-step / data-painted="N"   step N is shown / painted
#   data-narrated="N"    step N's narration is on the page ("" while it is fetched; narration.js)
#   data-put-off="0"     every job put off to after the frame or to an idle period has run: the late
#                        table cells, the heatmaps out of view, the narration written later (canvasmap.js)
#   data-checking=""     the landing form's latest edit is checked (landing.js)
#   data-lesson-ready, data-lesson-section, data-predict   the lesson's section and checkpoint (lesson.js)
SETTLED = "body:not([data-put-off]), body[data-put-off='0']"


def settle(page: Any, timeout_ms: int = 30_000) -> None:
    """Waits until the run page is still: the step shown has its narration, and nothing the page put
    off (late cells, heatmaps out of view, sentences written later) is left to draw. Selectors
    only, so it also works under the pages' CSP."""
    step = page.get_attribute("body", "data-step")
    if step:
        page.wait_for_selector(f"body[data-narrated='{step}']", state="attached", timeout=timeout_ms)
    page.wait_for_selector(SETTLED, state="attached", timeout=timeout_ms)


def shot(page: Any, name: str, full_page: bool = True) -> Path:
    """A screenshot of the page (the whole page, or the window with full_page=False) at
    test-artifacts/NAME; each test names its own file, so parallel workers never share one."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 10_000
    return path


def view_shot(page: Any, name: str) -> Path:
    """A screenshot of the window only (what a projector shows)."""
    return shot(page, name, full_page=False)


def classes(page: Any, selector: str) -> list[str]:
    return (page.locator(selector).get_attribute("class") or "").split()


# Every visible text of the page whose contrast against what lies under it is below 4.5:1
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

# The page's text a reader meets, one chunk per block of text, with where it is: text nodes that
# are visible (not in [hidden], not display:none or visibility:hidden), outside code (code, pre,
# kbd, samp, formulas, the JSON editor), each block's text joined and a skipped code element
# replaced by a mark that is no word; then the tooltips, aria-labels, placeholders and alt texts,
# and the document's title. Text marked lang="en" is the server's own lines quoted in an error box
# (the page says so in Chinese before them: "服务器的说明（英文）").
PAGE_TEXT = """(rootSel) => {
  const root = (rootSel && document.querySelector(rootSel)) || document.body;
  const CODE = 'code, pre, kbd, samp, var, script, style, noscript, textarea, svg, .formula, [lang="en"]';
  const BLOCK = 'p, li, pre, td, th, h1, h2, h3, h4, h5, div, section, label, button, summary, dt, dd, a, '
    + 'option, legend, caption, figcaption, span.chip, span.badge';
  const where = (e) => {
    const parts = [];
    for (let x = e; x && x !== document.body && parts.length < 3; x = x.parentElement) {
      const tag = x.id ? '#' + x.id : x.classList.length ? '.' + x.classList[0] : '';
      parts.unshift(x.tagName.toLowerCase() + tag);
    }
    return parts.join(' > ');
  };
  const shown = (e) => !e.closest('[hidden]') && e.checkVisibility({ visibilityProperty: true });
  const chunks = new Map();
  const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT | NodeFilter.SHOW_ELEMENT);
  while (walk.nextNode()) {
    const n = walk.currentNode;
    const e = n.nodeType === 1 ? n : n.parentElement;
    if (!e) continue;
    const b = e.closest(BLOCK) || document.body;
    if (n.nodeType === 1) {
      // a code element inside a block breaks its words: "request <code>x</code> waits" is not a run
      if (e.matches('code, kbd, samp, var') && b !== e) chunks.set(b, (chunks.get(b) || '') + ' ⟨⟩ ');
      continue;
    }
    if (!n.textContent.trim() || e.closest(CODE) || !shown(e)) continue;
    chunks.set(b, (chunks.get(b) || '') + n.textContent);
  }
  const out = [...chunks].map(([b, text]) => [where(b), text]);
  for (const e of root.querySelectorAll('[title], [aria-label], [placeholder], [alt]')) {
    if (e.closest('script, style, [lang="en"]') || !shown(e)) continue;  // no tooltip on what is not shown
    for (const a of ['title', 'aria-label', 'placeholder', 'alt']) {
      const v = e.getAttribute(a);
      if (v && v.trim() && !e.closest('code, pre')) out.push([`${where(e)} @${a}`, v]);
    }
  }
  if (root === document.body) out.push(['<title>', document.title]);
  return out;
}"""

# A word: letters only (an apostrophe or hyphen inside), two or more, with quotes, brackets and
# punctuation around it. Array names (slot_mapping), files (gpu_model_runner.py), numbers, request
# ids of one letter, anything with a digit (V2, 0.33.0) and the values of arrays and settings
# (true, false, null, None) are no words.
WORD = re.compile(
    r"^[\"'“‘(\[（]*(?!(?:true|false|null|None)\W*$)[A-Za-z]{2,}(?:[-'’][A-Za-z]+)*[\"'”’)\]）.,;:!?…]*$"
)
# Names that stay as they are in 中文, taken out before the words are counted: a name neither counts
# nor breaks a run ("Your own vLLM server" is three words of English around a name).
NAMES = re.compile(r"Model Runner V2|nano-vllm|vllm-ascend|vLLM|FlashAttention|REST API|CUDA Graphs?")
# Phrases allowed in 中文, each with its reason; keep this short.
ALLOWED: dict[str, str] = {}


def english_phrases(text: str) -> list[str]:
    """Every run of three or more English words in `text` (outside the names above)."""
    runs: list[str] = []
    cur: list[str] = []
    for tok in NAMES.sub(" ", text).split():
        if WORD.match(tok):
            cur.append(tok)
            continue
        if len(cur) >= 3:
            runs.append(" ".join(cur))
        cur = []
    if len(cur) >= 3:
        runs.append(" ".join(cur))
    return [r for r in runs if r not in ALLOWED]
