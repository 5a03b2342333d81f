"""The run-level charts under the run page (static/runcharts.js), read as a person sees them at
1280×720: both plotly figures painted (plotly.js from the app itself, under the page's CSP), in
the page's colours, light and dark, English and Chinese; the step marker follows the step; a click
on a figure opens the step under it; plotly.js is fetched only when the reader comes near them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import browser as tb

DRAWN = "body[data-first-paint='1'] #run-charts[data-drawn='2']"
# per figure: how many bars / points plotly painted, the marker's step and its centre on screen,
# and where on screen a step's centre is (from the figure's own x axis)
READ = """() => [...document.querySelectorAll('#run-charts .rc-figure')].map((f) => {
  const gd = f.firstChild, m = f.lastChild, fl = gd._fullLayout, box = gd.getBoundingClientRect();
  const mb = m.getBoundingClientRect();
  return {
    name: f.dataset.figure,
    painted: gd.querySelectorAll('.point, .trace.scatter path.js-line').length,
    bg: fl.paper_bgcolor,
    title: fl.title.text,
    marker: Number(m.dataset.step),
    markerX: mb.left + mb.width / 2,
    x: [1, 2, 3, 4, 5, 6, 7, 8].map((n) => box.left + fl._size.l + fl.xaxis.l2p(n)),
    top: box.top + fl._size.t + fl._size.h / 2,
  };
})"""

WHY = """() => ({body: {...document.body.dataset}, url: location.href,
  charts: (document.getElementById('run-charts') || {outerHTML: 'none'}).outerHTML.slice(0, 600),
  status: (document.getElementById('status') || {textContent: ''}).textContent,
  plotly: typeof window.Plotly,
  phase: (document.getElementById('run-charts') || {dataset: {}}).dataset.phase,
  scripts: [...document.scripts].map((s) => s.src.split('/').pop()),
  idle: typeof requestIdleCallback, visibility: document.visibilityState})"""


@pytest.fixture()
def small(browser: Any, base_url: str) -> Iterator[Any]:
    yield from tb.watched_page(browser, base_url, 1280, 720)


def charts(page: Any) -> list[dict[str, Any]]:
    """The charts as drawn once the reader scrolls to them (they load when within a screen)."""
    try:
        page.locator("#run-charts").scroll_into_view_if_needed(timeout=60_000)
        page.wait_for_selector(DRAWN, state="attached", timeout=60_000)
    except Exception as exc:  # what the page shows, to tell why the charts are not drawn
        raise AssertionError(f"run charts not drawn: {page.evaluate(WHY)}") from exc
    return page.evaluate(READ)


def test_plotly_is_fetched_only_when_the_reader_comes_near_the_charts(small: Any) -> None:
    """A reader who stays at the top of the page never fetches plotly.js (4.8 MB) nor the figures:
    the charts wait for the reader to come within a screen of them, then draw."""
    asked: list[str] = []
    small.on("request", lambda r: asked.append(r.url) if "plotly" in r.url or "/figures/" in r.url else None)
    tb.open_run(small, "preset=seed-000&step=2")
    tb.settle(small)
    small.wait_for_selector("#run-charts[data-phase='near']", state="attached", timeout=60_000)
    assert small.evaluate("typeof window.Plotly") == "undefined"
    assert asked == []
    assert [g["marker"] for g in charts(small)] == [2, 2]
    assert any("plotly.min.js" in u for u in asked) and sum("/figures/" in u for u in asked) == 2


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_both_run_charts_are_painted_in_theme_and_language(small: Any, scheme: str, lang: str) -> None:
    small.emulate_media(color_scheme=scheme)
    tb.open_run(small, f"preset=seed-000&step=3&lang={lang}")
    got = charts(small)
    assert [g["name"] for g in got] == ["run_metrics", "timeline"]
    for g in got:
        assert g["painted"] > 8, g  # the bars and points are on the page, not just the axes
        assert g["bg"] == ("#121212" if scheme == "dark" else "#fff")
        assert g["marker"] == 3
    titles = [g["title"] for g in got]
    en = ["How the run evolves", "Each request's life"]
    want = ["运行的变化", "每个请求的生命周期"] if lang == "zh" else en
    assert titles == want
    # the timeline's bars carry the requests' colours, as the page's tables do
    colours = small.evaluate(
        "import('/static/context.js').then(m => m.S.overview.scenario.requests.map(r => m.reqColor(r.id)))"
    )
    fills = small.evaluate(
        "[...document.querySelectorAll('[data-figure=timeline] .trace.bars .point path')]"
        ".map(p => getComputedStyle(p).fill)"
    )
    rgb = {f"rgb({int(c[1:3], 16)}, {int(c[3:5], 16)}, {int(c[5:7], 16)})" for c in colours}
    assert rgb <= set(fills)
    tb.shot(small, f"runcharts-{scheme}-{lang}.png")


def test_the_marker_follows_the_step_and_a_click_opens_a_step(small: Any) -> None:
    tb.open_run(small, "preset=seed-000&step=2")
    got = charts(small)
    for g in got:
        assert abs(g["markerX"] - g["x"][1]) < 2, g  # over step 2
    small.keyboard.press("ArrowRight")
    small.wait_for_selector("body[data-painted='3']", state="attached")
    moved = small.evaluate(READ)
    for after in moved:
        assert after["marker"] == 3
        assert abs(after["markerX"] - after["x"][2]) < 2
    # the figures were not drawn again: plotly's own nodes are the same ones
    small.locator("#run-charts").scroll_into_view_if_needed()
    g = small.evaluate(READ)[0]
    small.mouse.click(g["x"][5], g["top"])
    small.wait_for_selector("body[data-painted='6']", state="attached")
    assert small.evaluate("new URLSearchParams(location.search).get('step')") == "6"
    assert [m["marker"] for m in small.evaluate(READ)] == [6, 6]
    tb.shot(small, "runcharts-step6.png")


def test_plotly_loads_from_the_app_under_the_strict_csp(browser: Any, base_url: str) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    hosts: set[str] = set()
    page.on("request", lambda r: hosts.add(r.url.split("/")[2]))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{base_url}/run?preset=seed-000")
    try:
        page.locator("#run-charts").scroll_into_view_if_needed(timeout=60_000)
        page.wait_for_selector(DRAWN, state="attached", timeout=60_000)
    except Exception as exc:  # what the page shows, to tell why the charts are not drawn
        seen = page.evaluate(WHY)
        raise AssertionError(f"run charts not drawn: {seen}; page errors: {errors}") from exc
    assert errors == []
    assert violations == []
    assert hosts == {base_url.split("/")[2]}  # nothing from a CDN
    context.close()


def test_a_figure_the_server_refuses_is_said_in_the_charts_box_under_its_heading(
    browser: Any, base_url: str
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/figures/timeline*", lambda route: route.fulfill(status=503, body="{}"))
    page.goto(f"{base_url}/run?preset=seed-000&step=2")
    page.wait_for_selector("body[data-first-paint='1']", state="attached", timeout=60_000)
    page.locator("#run-charts").scroll_into_view_if_needed()
    said = page.wait_for_selector("#run-charts .error-text", timeout=60_000)
    assert said.inner_text().endswith(": timeline: HTTP 503")
    assert page.locator("#run-charts h2").is_visible()  # the heading stays over what is said
    assert page.evaluate("document.getElementById('run-charts').dataset.drawn") is None
    assert errors == []  # said on the page, not thrown
    context.close()


def test_the_charts_are_drawn_when_their_script_comes_after_the_run_has_loaded(
    browser: Any, base_url: str
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 720}, bypass_csp=True)
    page = context.new_page()
    held: list[Any] = []
    page.route("**/static/runcharts.js*", lambda route: held.append(route))
    page.goto(f"{base_url}/run?preset=seed-000&step=2", wait_until="commit")  # "load" waits for it
    page.wait_for_selector("body[data-first-paint='1']", state="attached", timeout=60_000)
    assert len(held) == 1  # the run is on the page, its charts' script still on its way
    held[0].continue_()
    page.locator("#run-charts").scroll_into_view_if_needed(timeout=60_000)
    page.wait_for_selector(DRAWN, state="attached", timeout=60_000)
    assert page.evaluate(READ)[0]["marker"] == 2
    context.close()


# the pool as each view shows it: the queue bar's text, the step button's tooltip and the run
# chart's pool line and blocks-in-use point at the step (plotly's own data on the page)
POOL_VIEWS = """(n) => {
  const q = document.querySelector('#queue .qbar.pool .qbar-text').textContent;
  const tip = document.querySelector(`#timeline .tl-step[data-step='${n}'] .tl-pool`).title;
  const gd = document.querySelector("[data-figure='run_metrics']").firstChild;
  // the blocks row's two traces: the blocks in use, and the pool's dashed line
  const row = gd.data.filter((d) => d.yaxis === 'y2');
  const line = row.find((d) => d.line && d.line.dash === 'dash'), blocks = row.find((d) => d !== line);
  const at = (d) => Array.from(d.y)[Array.from(d.x).indexOf(n)];
  return {queue: q, tooltip: tip, line: [...new Set(Array.from(line.y))], name: line.name, used: at(blocks)};
}"""


def test_the_queue_bar_the_step_tooltip_and_the_run_chart_show_one_pool_size(small: Any) -> None:
    """seed-001 said "KV pool 6 / 15", "6 / 16" and a pool line at 16; demo-v2-slots drew its line
    at 9 beside "8 / 8 blocks in use" (step 5, full before step 6's preemption). One number now:
    num_kv_blocks less the null block."""
    for preset, n, pool in (("seed-001", 1, 15), ("demo-v2-slots", 5, 8)):
        tb.open_run(small, f"preset={preset}&step={n}")
        charts(small)
        got = small.evaluate(POOL_VIEWS, n)
        used, of = map(int, re.search(r"(\d+) / (\d+)", got["queue"]).groups())
        assert of == pool, got
        assert got["tooltip"].endswith(f": {used} / {pool}"), got
        assert got["line"] == [pool] and got["used"] == used, got
        if preset == "demo-v2-slots":
            assert used == pool  # the pool is full: no free block drawn that does not exist
    tb.shot(small, "runcharts-pool-demo-v2-slots.png")
