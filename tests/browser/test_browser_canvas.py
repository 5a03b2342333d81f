"""The canvas heatmaps (static/canvasmap.js) in a real Chromium: the pixels carry the request
colours, hover shows user text as text, a click or the keyboard alone selects a cell, the PNG
button saves the drawn figure, and the dark theme draws on a dark background."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import browser as tb

open_run = tb.open_run

HOSTILE_ID = "<img src=x onerror=window.__pwned=1>"

# the centre of cell (r, c) of heatmap `id` (scrolled into view), in viewport coordinates, from the
# geometry it was drawn with
CELL_XY = """([id, r, c]) => {
  const div = document.getElementById(id);
  div.scrollIntoView({ block: 'center' });
  const g = div._cm.geo, box = div._cm.over.getBoundingClientRect();
  return [box.left + g.l + (c + 0.5) * g.cw, box.top + g.t + (r + 0.5) * g.ch];
}"""

# the RGB of the cells' canvas near the top-left corner of cell (r, c) (its number sits at the
# centre), read back from the canvas's backing store
CELL_RGB = """([id, r, c]) => {
  const div = document.getElementById(id), g = div._cm.geo, cv = div._cm.cells;
  const k = cv.width / g.W;
  const x = Math.floor((g.l + (c + 0.15) * g.cw) * k), y = Math.floor((g.t + (r + 0.15) * g.ch) * k);
  const px = cv.getContext('2d').getImageData(x, y, 1, 1).data;
  return [px[0], px[1], px[2]];
}"""


def hex_rgb(h: str) -> list[int]:
    return [int(h[i : i + 2], 16) for i in (1, 3, 5)]


def close(a: list[int], b: list[int], tol: int = 3) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def test_token_id_cells_are_painted_in_their_request_tint(page: Any) -> None:
    open_run(page, "preset=seed-001&step=2")
    rows = page.evaluate("document.getElementById('hm-token_ids_cpu').data[0].z.length")
    tints = page.evaluate(
        "import('/static/context.js').then(m => m.S.trace.batch.req_ids.map(r => m.reqTint(r)))"
    )
    assert rows >= 3 and len(tints) >= 3
    # two different requests, two different colours, each its own tint
    for r in range(3):
        assert close(page.evaluate(CELL_RGB, ["hm-token_ids_cpu", r, 0]), hex_rgb(tints[r])), r
    assert hex_rgb(tints[0]) != hex_rgb(tints[1])
    # the canvas is sized for the screen's pixel ratio
    ratio = page.evaluate(
        "(d => d._cm.cells.width / d._cm.geo.W)(document.getElementById('hm-token_ids_cpu'))"
    )
    assert ratio == page.evaluate("window.devicePixelRatio")


@pytest.fixture()
def hostile_page(page: Any) -> Iterator[Any]:
    scenario = {
        "name": "hostile ids",
        "config": {
            "block_size": 2,
            "max_model_len": 16,
            "max_num_reqs": 4,
            "max_num_batched_tokens": 32,
            "num_kv_blocks": 12,
        },
        "requests": [
            {"id": HOSTILE_ID, "prompt_len": 3, "max_tokens": 2},
            {"id": "plain", "prompt_len": 2, "max_tokens": 2},
        ],
    }
    created = httpx.post(f"{page.base}/api/runs", json=scenario, timeout=60)
    assert created.status_code == 201, created.text
    page.goto(page.base + created.json()["url"] + "&step=1")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    yield page


def owned_block(page: Any, rid: str) -> int:
    owners = page.evaluate("import('/static/context.js').then(m => m.S.trace.kv_cache.owners)")
    return min(int(b) for b, o in owners.items() if rid in [str(x) for x in o])


def test_hover_shows_user_text_as_text(hostile_page: Any) -> None:
    page = hostile_page
    b = owned_block(page, HOSTILE_ID)
    x, y = page.evaluate(CELL_XY, ["hm-kv", b, 0])
    page.mouse.move(x, y)
    tip = page.locator("#hm-kv .cm-tip")
    tip.wait_for(state="visible")
    assert f"block {b}" in tip.inner_text() and HOSTILE_ID in tip.inner_text()
    assert page.locator("#hm-kv .cm-tip img, #hm-kv img").count() == 0
    assert page.evaluate("window.__pwned") is None
    # the legend names it as typed too
    assert HOSTILE_ID in page.evaluate("document.getElementById('hm-kv').layout.legend")
    page.mouse.move(1, 1)
    tip.wait_for(state="hidden")


def test_clicking_a_kv_cell_selects_its_slot(page: Any) -> None:
    open_run(page, "preset=seed-001&step=2")
    bs = page.evaluate(
        "fetch('/api/presets/seed-001').then(r => r.json()).then(p => p.scenario.config.block_size)"
    )
    x, y = page.evaluate(CELL_XY, ["hm-kv", 3, 1])
    page.mouse.click(x, y)
    slot = 3 * bs + 1
    assert page.locator("#selection").inner_text().startswith(f"slot {slot} = block 3 ")
    assert f"slot={slot}" in page.url
    # the selection outlines its block (row 3) on the overlay, in black
    rows = page.evaluate(
        "document.getElementById('hm-kv').layout.shapes.filter(s => s.line.color === '#000000')"
        ".map(s => s.y0 + 0.5)"
    )
    assert 3 in rows


def test_arrow_keys_and_enter_select_a_cell_without_a_mouse(page: Any) -> None:
    open_run(page, "preset=seed-001&step=2")
    canvas = page.locator("#hm-kv canvas.cm-overlay")
    assert canvas.get_attribute("role") == "img" and canvas.get_attribute("tabindex") == "0"
    assert "KV cache" in canvas.get_attribute("aria-label")
    canvas.focus()
    page.keyboard.press("ArrowDown")  # the cursor appears on cell (0, 0)
    for _ in range(4):
        page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowRight")
    # the arrows moved the cursor, not the step
    assert page.evaluate("document.body.dataset.step") == "2"
    live = page.locator("#hm-kv .cm-live")
    assert live.get_attribute("aria-live") == "polite"
    assert live.inner_text().startswith("slot 9, block 4")  # block 4, slot 1 of 2
    page.keyboard.press("Enter")
    assert page.locator("#selection").inner_text().startswith("slot 9 = block 4 ")
    page.keyboard.press("ArrowDown")
    page.keyboard.press(" ")
    assert page.locator("#selection").inner_text().startswith("slot 11 = block 5 ")


def test_the_png_button_saves_the_drawn_canvas(page: Any, tmp_path: Path) -> None:
    open_run(page, "preset=seed-001&step=2")
    with page.expect_download() as dl:
        page.click("#card-kv button[aria-label='kv PNG']")
    png = tmp_path / "kv.png"
    dl.value.save_as(png)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert [width, height] == page.evaluate(
        "(c => [c.width, c.height])(document.getElementById('hm-kv')._cm.cells)"
    )
    png.unlink()


def test_the_dark_theme_draws_on_a_dark_background(browser: Any, base_url: str) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 720}, color_scheme="dark")
    pg = context.new_page()
    pg.goto(f"{base_url}/run?preset=seed-001&step=2")
    pg.wait_for_selector("body[data-ready='1']", timeout=30_000)
    z = pg.evaluate("document.getElementById('hm-kv').data[0].z")
    free = next(r for r, row in enumerate(z) if row[0] is None)
    # an empty cell shows the plot's own dark background, a request's block its bright colour
    assert sum(pg.evaluate(CELL_RGB, ["hm-kv", free, 0])) < 200
    owned = next(r for r, row in enumerate(z) if row[0] is not None)
    assert sum(pg.evaluate(CELL_RGB, ["hm-kv", owned, 0])) > 250
    context.close()


def test_a_big_run_streams_step_one_onto_the_page_before_it_is_complete(browser: Any) -> None:
    from pagedviz.app.links import pack
    from pagedviz.app.serve import running_server

    # 512 requests, no model: long enough here that step 1 is on the page well before the last step,
    # and within the server's default 128 MB per run (each step's scheduler.block_ids counts too)
    n, max_tokens = 512, 128
    scenario = {
        "name": "stream",
        "config": {
            "block_size": 16,
            "max_model_len": 32 + max_tokens,
            "max_num_reqs": n,
            "max_num_batched_tokens": 32 * n,
            "num_kv_blocks": n * ((32 + max_tokens) // 16 + 1) + 1,
            "model": None,
        },
        "requests": [{"id": f"r{i}", "prompt_len": 32, "max_tokens": max_tokens} for i in range(n)],
    }
    # a server of its own: 512 requests are over the shared server's default --max-requests
    with running_server("--max-requests", str(n)) as server:
        check = httpx.post(f"{server.url}/api/scenarios/validate", json=scenario, timeout=60).json()
        assert check["valid"], check
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        pg = context.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        # the link carries the scenario; the page posts it itself (wait=first), nothing ran it before
        pg.goto(f"{server.url}/run?s={pack(scenario)}&step=1")
        pg.wait_for_selector("body[data-content='1']", timeout=60_000)
        # step 1's tables are drawn while the page still held the run as incomplete
        first = pg.evaluate(
            "[window.pagedvizTiming.completeAtFirstPaint, document.body.dataset.step,"
            " document.querySelectorAll('#request-table tr[data-req]').length,"
            " document.querySelectorAll('#token-table td').length]"
        )
        assert first[0] is False and first[1] == "1" and first[2] > 0 and first[3] > 0, first
        progress = httpx.get(f"{server.url}/api/runs/{check['run_id']}/progress", timeout=60).json()
        pg.wait_for_selector("body[data-complete='1']", timeout=120_000)
        total = httpx.get(f"{server.url}/api/runs/{check['run_id']}", timeout=60).json()["num_steps"]
        assert progress["steps_done"] <= total
        # the timeline ends up with every step, and nothing is left pending
        assert pg.locator("#timeline .tl-step").count() == total
        assert pg.locator("#timeline .tl-pending, #timeline .kind-pending").count() == 0
        pg.click(f"#timeline [data-step='{total}']")
        pg.wait_for_selector(f"body[data-step='{total}']")
        assert errors == []
        context.close()


def test_overview_bars_keep_a_hostile_request_id_as_text(hostile_page: Any) -> None:
    """The overview's bars are written as markup: the id is escaped in their attribute and title,
    a click on its bar focuses that very request, and hovering it lights its row."""
    page = hostile_page
    bars = page.evaluate("[...document.querySelectorAll('#ov-bars .ov-bar')].map(b => b.dataset.req)")
    assert HOSTILE_ID in bars and "plain" in bars
    assert page.locator("#ov-bars img, #overview img").count() == 0
    assert page.evaluate("window.__pwned") is None
    bar = page.locator("#ov-bars .ov-bar").nth(bars.index(HOSTILE_ID))
    assert HOSTILE_ID in bar.locator("title").text_content()
    bar.locator(".ov-hit").hover()
    row = page.evaluate(
        "rid => import('/static/context.js').then(m => m.S.trace.batch.req_ids.map(String).indexOf(rid))",
        HOSTILE_ID,
    )
    assert row >= 0
    page.wait_for_selector(f"#request-table tr.hl[data-r='{row}']")
    bar.locator(".ov-hit").click()
    page.wait_for_function("rid => document.getElementById('focus-req').value === rid", arg=HOSTILE_ID)
    assert page.evaluate("window.__pwned") is None


def test_a_heatmap_put_off_is_drawn_after_the_frame_or_when_it_is_read(page: Any) -> None:
    """While draws are put off (a step change's heatmaps out of view), a heatmap keeps its figure
    and is drawn once the page is idle after the next frame; anything that reads it first (its
    parts, its layout) gets it drawn at once."""
    open_run(page, "preset=seed-001&step=1")
    states = page.evaluate(
        """async () => {
          const cm = await import('/static/canvasmap.js'), views = await import('/static/views.js');
          const make = () => {
            const d = document.createElement('div');
            d.style.width = '400px';
            document.body.append(d);
            return d;
          };
          const z = [[1, 2, 3], [4, 5, 6]];
          const a = make(), b = make();
          cm.deferDraws(true);
          views.heatmap(a, z, { title: 'a' });
          views.heatmap(b, z, { title: 'b' });
          cm.deferDraws(false);
          const out = { aBefore: a.__cm.geo === null, bBefore: b.__cm.geo === null };
          out.aLegend = a.layout.legend.length > 0;  // reading it draws it
          out.aRead = a.__cm.geo !== null;
          out.bStill = b.__cm.geo === null;  // not read, not yet drawn
          // drawn once the page is idle after the frame (within the idle callback's 300 ms)
          for (let i = 0; i < 100 && b.__cm.geo === null; i++) await new Promise((r) => setTimeout(r, 20));
          out.bLater = b.__cm.geo !== null && b.__cm.cells.width > 0;
          views.heatmap(b, [[7]], { title: 'now' });  // drawn at once when not put off
          out.bNow = b.__cm.fig.rows === 1 && b.__cm.geo.W > 0;
          return out;
        }"""
    )
    assert states == dict.fromkeys(
        ["aBefore", "bBefore", "aLegend", "aRead", "bStill", "bLater", "bNow"], True
    )


def test_a_step_change_draws_the_kv_heatmap_below_the_view_for_that_step(page: Any) -> None:
    page.set_viewport_size({"width": 1400, "height": 420})  # a short window: the KV card starts below it
    open_run(page, "preset=seed-001&step=1")
    page.evaluate("window.scrollTo(0, 0)")
    assert page.evaluate("document.querySelector('.sys-panel').getBoundingClientRect().top > innerHeight")
    for step in (2, 3):
        page.keyboard.press("ArrowRight")
        page.wait_for_selector(f"body[data-painted='{step}']", state="attached")
        # the canvas shows the figure this step's drawing made (not the previous step's), once the
        # page is idle after the frame
        shown = "(d => d.__cm.drawn === d.data[0])(document.getElementById('hm-kv'))"
        page.wait_for_function(shown, timeout=5_000)
        z_rows = page.evaluate("document.getElementById('hm-kv').__cm.drawn.z.length")
        kv_blocks = page.evaluate("import('/static/context.js').then(m => m.S.trace.kv_cache.num_blocks)")
        assert z_rows == min(kv_blocks, 256)
