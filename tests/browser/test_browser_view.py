"""The run page's view (issue 16) in a real Chromium against a real uvicorn: stable request colours,
honest encodings and change marks, causes first, the kernel's reads, the dark theme and the
keyboard, deep links and the one-screen presentation layout."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from pagedviz.app.links import pack
from tests.support import browser as tb

open_run = tb.open_run
shot = tb.shot


@pytest.fixture()
def dark_page(browser: object, base_url: str) -> Iterator[object]:
    context = browser.new_context(  # type: ignore[attr-defined]
        viewport={"width": 1280, "height": 720}, color_scheme="dark", reduced_motion="reduce"
    )
    pg = context.new_page()
    pg.base = base_url
    yield pg
    context.close()


def req_colour(page: object, rid: str) -> str:
    cell = page.locator(f"#request-table tr[data-req='{rid}'] td.req-cell")
    return cell.evaluate("c => c.style.backgroundColor")  # its own colour, not a change flash


def test_a_request_keeps_its_colour_when_its_row_changes(page: object) -> None:
    # demo-preemption: b sits in row 1 at step 5 and moves to row 0 at step 6 (c is preempted)
    open_run(page, "preset=demo-preemption&step=5")
    assert page.locator("#request-table tr[data-req='b']").get_attribute("data-r") == "1"
    before = req_colour(page, "b")
    c_colour = req_colour(page, "c")
    assert before != c_colour
    page.click("#btn-next")
    page.wait_for_selector("body[data-step='6']")
    assert page.locator("#request-table tr[data-req='b']").get_attribute("data-r") == "0"
    assert req_colour(page, "b") == before
    # the row move is labelled, in the table and in the change chips
    assert "b: row 1 → 0" in page.locator("#request-table tr[data-req='b']").inner_text()
    assert "b: row 1 → 0" in page.locator("#changes").inner_text()
    # the token table's column of b has b's colour too
    head = page.locator("#token-table th.tok-head[data-t='0']")
    assert head.evaluate("c => c.style.backgroundColor") == before


def test_the_kv_owner_colours_and_the_token_id_colours_do_not_depend_on_the_step(page: object) -> None:
    open_run(page, "preset=demo-preemption&step=1")
    page.wait_for_function("Boolean(document.getElementById('hm-kv').data)")
    scale = "(t => JSON.stringify([t.colorscale, t.zmin, t.zmax]))(document.getElementById('{0}').data[0])"
    kv1 = page.evaluate(scale.format("hm-kv"))
    ids1 = page.evaluate(scale.format("hm-token_ids_cpu"))
    page.click("#timeline [data-step='6']")
    page.wait_for_selector("body[data-step='6']")
    assert page.evaluate(scale.format("hm-kv")) == kv1
    assert page.evaluate(scale.format("hm-token_ids_cpu")) == ids1
    # the token ids are written as numbers in their cells, not read off a colour scale
    trace = page.evaluate("document.getElementById('hm-token_ids_cpu').data[0]")
    assert trace["texttemplate"] == "%{text}"
    assert "Viridis" not in str(trace["colorscale"])


def test_prefix_cache_hits_are_marked_apart_from_new_blocks(page: object) -> None:
    # demo-prefix-cache step 3: b reuses a's 9 hashed blocks and gets 2 new ones
    open_run(page, "preset=demo-prefix-cache&step=3")
    legend = page.locator("#kv-legend")
    assert legend.locator(".legend-reused strong").inner_text() == "1, 2, 3, 4, 5, 6, 7, 8, 9"
    assert legend.locator(".legend-allocated strong").inner_text() == "13, 14"
    colours = page.evaluate(
        "document.getElementById('hm-kv').layout.shapes"
        ".map(s => [s.line.color, s.line.dash, s.y0 + 0.5, s.y1 - 0.5])"
    )
    assert ["#009E73", "solid", 1, 9] in colours  # one outline round the run of reused blocks
    assert ["#D55E00", "dash", 13, 14] in colours


def test_preempted_and_freed_blocks_have_their_own_marks(page: object) -> None:
    open_run(page, "preset=demo-preemption&step=3")
    legend = page.locator("#kv-legend")
    # c is preempted: its blocks 5, 6, 8 leave it (8 goes to a in the same step)
    assert legend.locator(".legend-preempted strong").inner_text() == "5, 6, 8"
    assert legend.locator(".legend-allocated strong").inner_text() == "8"
    page.click("#timeline [data-step='4']")
    page.wait_for_selector("body[data-step='4']")
    # a finishes: its blocks are freed, not preempted
    assert legend.locator(".legend-freed strong").inner_text() == "1, 2, 8"
    assert legend.locator(".legend-preempted strong").inner_text() == "—"
    page.click("#card-kv button:has-text('Table')")
    assert "mark-freed" in page.locator("#table-kv td[data-r='1'][data-c='0']").get_attribute("class")
    # vLLM 0.33 reuses freed blocks first (LIFO): resumed c takes block 1 back in this very step, so
    # its row carries the freed mark beside the allocated one
    assert "−" in page.locator("#table-kv tr[data-r='1'] th").inner_text()


def test_the_request_table_puts_its_inputs_first(page: object) -> None:
    open_run(page, "preset=demo-prefix-cache&step=3")
    heads = page.locator("#request-table thead th code").all_inner_texts()
    assert heads[:3] == ["num_computed_tokens_cpu", "num_tokens", "num_scheduled_tokens"]
    # b's 36-token cache hit is in the first column of numbers
    assert page.locator("#request-table tr[data-req='b'] td").nth(2).inner_text() == "36"


def test_a_token_shows_the_blocks_its_attention_reads_in_logical_order(page: object) -> None:
    # seed-001 step 2: token 4 is the third token of the request in row 2; the blocks and the
    # position come from the engine's own arrays
    open_run(page, "preset=seed-001&step=2")
    page.click("#token-table th.tok-head[data-t='4']")
    text = page.locator("#selection").inner_text()
    from pagedviz.core import load_preset, make_engine

    step2 = list(make_engine(load_preset("seed-001")).run())[1]
    pos = int(step2.arrays["positions"][4])
    row = int(step2.arrays["req_indices"][4])
    blocks = [int(b) for b in step2.arrays["block_table"][row][: pos // 2 + 1]]
    assert f"attention reads blocks {' → '.join(map(str, blocks))} (up to position {pos})" in text
    numbers = page.evaluate(
        "document.getElementById('hm-kv').layout.annotations.map(a => [Number(a.text), a.y])"
    )
    assert numbers == [[k + 1, b] for k, b in enumerate(blocks)]
    # the last block is read only up to the token's own offset: the causal cut
    cut = page.evaluate(
        "document.getElementById('hm-kv').layout.shapes"
        ".filter(s => s.fillcolor && s.fillcolor.startsWith('rgba(255')"
        f" && s.y0 + 0.5 === {blocks[-1]}).map(s => s.x1 - 0.5)"
    )
    assert cut == [pos % 2]


def test_the_selection_is_a_request_and_position_that_survives_a_step_change(
    page: object, browser: object
) -> None:
    open_run(page, "preset=demo-preemption&step=5")
    # b's token at step 5; at step 6 b moves from row 1 to row 0 and its token is another index
    page.click("#request-table tr[data-req='b']")
    assert "req=b" in page.url
    page.click("#btn-next")
    page.wait_for_selector("body[data-step='6']")
    assert page.locator("#request-table tr.hl").get_attribute("data-req") == "b"
    assert page.locator("#selection").inner_text().startswith("request b (row 0)")
    # a link to a request's position reopens that token
    other = browser.new_page()  # type: ignore[attr-defined]
    # (seed-001 step 2: request "2" has positions 5, 6, 7 at token indices 2, 3, 4)
    other.goto(f"{page.base}/run?preset=seed-001&step=2&req=2&pos=6")
    other.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert other.locator("#token-table th.tok-head.hl").get_attribute("data-t") == "3"
    assert "position 6" in other.locator("#selection").inner_text()
    other.goto(f"{page.base}/run?preset=seed-001&step=2&block=6")
    other.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert other.locator("#selection").inner_text().startswith("block 6")
    other.close()


def test_space_presses_the_focused_button_and_plays_only_from_the_page(page: object) -> None:
    open_run(page, "preset=seed-001&step=1")
    page.focus("#btn-next")
    page.keyboard.press(" ")
    page.wait_for_selector("body[data-step='2']")
    assert page.locator("#btn-play").get_attribute("data-playing") != "1"  # not playing
    page.wait_for_selector("body[data-painted='2']", state="attached")
    assert page.locator("body").get_attribute("data-step") == "2"  # not playing
    assert page.locator("#btn-play").inner_text() == "▶"
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press(" ")
    assert page.locator("#btn-play").get_attribute("data-playing") == "1"
    assert page.locator("#btn-play").get_attribute("aria-label") == "Pause"
    page.keyboard.press(" ")
    assert page.locator("#btn-play").inner_text() == "▶"


def test_a_step_change_keeps_the_reader_where_they_are_and_the_timeline_shows_the_step(
    page: object,
) -> None:
    # 2 requests of 60 tokens each: about 60 steps, more than the timeline strip shows at once
    scenario = {
        "name": "long-timeline",
        "config": {"block_size": 16, "max_model_len": 128, "num_kv_blocks": 16, "model": None},
        "requests": [{"id": r, "prompt_len": 8, "max_tokens": 60} for r in ("a", "b")],
    }
    open_run(page, f"s={pack(scenario)}&step=1")
    page.wait_for_selector("body[data-complete='1']", state="attached")
    strip = page.locator("#timeline")
    assert strip.evaluate("s => s.scrollWidth > s.clientWidth + 100")  # the strip scrolls
    # the reader is down at the request table (below the KV cache) and steps on with the keyboard
    page.locator(".req-panel").evaluate("p => p.scrollIntoView({ block: 'start' })")
    y = page.evaluate("window.scrollY")
    assert y > 300
    for n in range(2, 41):
        page.keyboard.press("ArrowRight")
        page.wait_for_selector(f"body[data-painted='{n}']", state="attached")
    tb.settle(page)  # what the page put off after the step is drawn too
    # the page did not jump up to the timeline (what is above may grow or shrink a little)
    assert abs(page.evaluate("window.scrollY") - y) < 100
    # the strip scrolled sideways so that step 40's button is inside it
    inside = """() => { const b = document.querySelector('#timeline .tl-step.active');
      const s = document.getElementById('timeline');
      const r = b.getBoundingClientRect(), q = s.getBoundingClientRect();
      return [b.dataset.step, r.left >= q.left - 1 && r.right <= q.right + 1, s.scrollLeft]; }"""
    step, visible, left = page.evaluate(inside)
    assert step == "40" and visible and left > 0


def luminance(rgb: str) -> float:
    parts = [int(x) for x in re.findall(r"\d+", rgb)[:3]]
    lin = [(c / 255) / 12.92 if c / 255 <= 0.03928 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in parts]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(fg: str, bg: str) -> float:
    a, b = sorted([luminance(fg), luminance(bg)], reverse=True)
    return (a + 0.05) / (b + 0.05)


CONTRAST_JS = """sel => [...document.querySelectorAll(sel)].slice(0, 40).map(n => {
  let b = n, bg = 'rgba(0, 0, 0, 0)';
  while (b && (bg === 'rgba(0, 0, 0, 0)' || bg === 'transparent')) {
    bg = getComputedStyle(b).backgroundColor; b = b.parentElement;
  }
  return [getComputedStyle(n).color, bg];
})"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_and_greyed_future_values_keep_4_5_to_1_in_both_themes(
    browser: object, base_url: str, scheme: str
) -> None:
    context = browser.new_context(  # type: ignore[attr-defined]
        viewport={"width": 1280, "height": 720}, color_scheme=scheme
    )
    pg = context.new_page()
    pg.goto(f"{base_url}/run?preset=seed-001&step=2&stage=req_indices")
    pg.wait_for_selector("body[data-ready='1']", timeout=30_000)
    bg = pg.evaluate("getComputedStyle(document.body).backgroundColor")
    assert (luminance(bg) < 0.05) == (scheme == "dark")
    checked = ["#token-table tr.future td", "#token-table tr.current td", ".stage-title", ".stage-code"]
    for sel in [*checked, "#selection", ".badge", "h2"]:
        pairs = pg.evaluate(CONTRAST_JS, sel)
        assert pairs, sel
        worst = min(contrast(fg, back) for fg, back in pairs)
        assert worst >= 4.5, (scheme, sel, worst, pairs[:3])
    context.close()


def test_the_slot_formula_is_whole_coloured_linked_and_points_upstream(page: object) -> None:
    open_run(page, "preset=seed-001&step=2&stage=slot_mapping")
    formula = page.locator("#slot-formula")
    assert formula.inner_text().startswith(
        "slot = block_table[req, pos // block_size] * block_size + pos % block_size"
    )
    # a term wears its array's colour, and so does that array's row in the token table
    term = formula.locator(".term[data-array='positions']").first
    colour = term.evaluate("t => getComputedStyle(t).color")
    row_mark = page.locator("#token-table tr[data-array='positions'] th").evaluate(
        "t => getComputedStyle(t).boxShadow"
    )
    assert colour in row_mark
    term.hover()
    assert "array-hl" in page.locator("#token-table tr[data-array='positions']").get_attribute("class")
    page.click("#token-table th.tok-head[data-t='2']")
    assert "13 = block_table[2, 5 // 2] * 2 + 5 % 2 = 6 * 2 + 1" in formula.inner_text()
    link = page.locator("#stage-upstream a")
    assert link.get_attribute("href").startswith(
        "https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/v1/worker/block_table.py"
    )
    page.click(".stage-btn[data-stage='positions']")
    assert "gpu_model_runner.py" in link.get_attribute("href")
    assert "_prepare_inputs" in link.inner_text()


def test_the_queue_shows_waiting_running_and_preempted_requests_with_budget_and_pool(page: object) -> None:
    open_run(page, "preset=demo-preemption&step=3")
    lane = lambda key: page.locator(f"#queue .lane-{key} .qchip").evaluate_all(  # noqa: E731
        "cs => cs.map(c => c.dataset.req)"
    )
    assert lane("running") == ["a", "b"]
    # vLLM 0.33 has no preempted queue: _preempt_request puts c back at the front of `waiting`,
    # with the status PREEMPTED, which its chip says
    assert lane("waiting") == ["c"] and lane("preempted") == []
    assert page.locator("#queue .lane-waiting .qlane-h code").inner_text() == "waiting"
    assert "preempted" in page.locator("#queue .lane-waiting .qchip.q-preempted[data-req='c']").inner_text()
    assert "token budget 2 / 16" in page.locator("#queue .qbar.budget").inner_text()
    assert "KV pool 6 / 8" in page.locator("#queue .qbar.pool").inner_text()
    page.click("#timeline [data-step='4']")
    page.wait_for_selector("body[data-step='4']")
    assert lane("finished") == ["a"] and lane("running") == ["c", "b"]
    # a chip focuses its request
    page.click("#queue .lane-running .qchip[data-req='b']")
    assert page.locator("#request-table tr.hl").get_attribute("data-req") == "b"
    # the timeline says what its colours and marks mean
    assert "prefill" in page.locator("#tl-legend").inner_text()
    assert "! a request was preempted" in page.locator("#tl-legend").inner_text()


def test_export_links_sit_in_one_menu_per_table_and_an_array_can_be_linked(page: object) -> None:
    open_run(page, "preset=seed-001&step=2")
    # the first tab stops after the tools are the data, not dozens of download links
    assert page.locator("#token-table details.export-menu").count() == 1
    assert page.locator("#request-table details.export-menu").count() == 1
    assert page.locator("#token-table a:visible").count() == 0
    page.click("#token-table details.export-menu summary")
    assert page.locator("#token-table a[aria-label='slot_mapping csv']").is_visible()
    # a row header points at its array, and the link keeps it
    page.click("#token-table tr[data-array='positions'] th")
    assert "array=positions" in page.url
    page.goto(page.url)
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert "array-hl" in page.locator("#token-table tr[data-array='positions']").get_attribute("class")


ONE_SCREEN = {
    "queue and budget": "#queue .qbar.budget",
    "block table": "#card-block_table .card-body > div:not([hidden])",
    "positions": "#token-table tr[data-array='positions']",
    "slot_mapping": "#token-table tr[data-array='slot_mapping']",
    "KV pool": "#hm-kv canvas.cm-cells",
    "formula": "#slot-formula",
}


def test_presentation_mode_fits_the_pipeline_on_one_1280_by_720_screen_for_every_preset(
    browser: object, base_url: str
) -> None:
    from pagedviz.core.presets import list_presets

    context = browser.new_context(viewport={"width": 1280, "height": 720}, bypass_csp=True)  # type: ignore[attr-defined]
    pg = context.new_page()
    for preset in list_presets():
        # the first step that schedules a token of its slot stage
        pg.goto(f"{base_url}/run?preset={preset['id']}&step=2&stage=slot_mapping&present=1")
        pg.wait_for_selector("body[data-ready='1']", timeout=30_000)
        pg.wait_for_function("Boolean(document.getElementById('hm-kv').data)")
        assert pg.evaluate("document.documentElement.scrollWidth") <= 1280, preset["id"]
        for what, sel in ONE_SCREEN.items():
            if what == "positions" and pg.locator("#token-table").count() == 0:
                continue  # an idle step has no token row
            box = pg.locator(sel).first.bounding_box()
            assert box is not None, (preset["id"], what)
            assert box["y"] >= 0 and box["y"] + box["height"] <= 720 + 1, (preset["id"], what, box)
        # the stage list is a stepper: one line of numbered buttons
        tops = pg.evaluate(
            "[...new Set([...document.querySelectorAll('.stage-btn')].map(b => b.getBoundingClientRect().y))]"
        )
        assert len(tops) == 1, preset["id"]
        if preset["id"] in ("seed-001", "demo-prefix-cache"):
            shot_name = f"present-1280-{preset['id']}.png"
            tb.ARTIFACTS.mkdir(exist_ok=True)
            pg.screenshot(path=str(tb.ARTIFACTS / shot_name))
    context.close()


def test_the_next_steps_are_fetched_ahead_while_the_page_is_idle(page: object) -> None:
    """After a step is shown, the page fetches the next three (one at a time, while idle), so
    stepping forward draws from its own cache; the steps after those are not fetched."""
    # the run computed first (the tier's server may not have it yet): a page that opens a run still
    # streaming fetches no steps ahead, as its last step is not known
    scenario = page.request.get(f"{page.base}/api/presets/seed-000").json()["scenario"]
    assert page.request.post(f"{page.base}/api/runs", data=scenario, timeout=120_000).status == 201
    tb.open_run(page, "preset=seed-000&step=2")
    page.wait_for_selector("body[data-complete='1']", state="attached")
    cached = "import('/static/context.js').then(m => [...m.S.steps.keys()].sort((a, b) => a - b))"
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url) if "/steps/" in r.url else None)
    # the page's step cache, for polling (wait_for_function does not wait for a promise)
    page.evaluate("import('/static/context.js').then(m => { window.__S = m.S; })")
    page.wait_for_function("[3, 4, 5].every((k) => window.__S.steps.has(k))", polling=50)
    # the prefetch of step 5 (and its narration) has answered and its callbacks have run; then no
    # idle job is left that could fetch another (one would have sent its request by then)
    page.evaluate(
        """async () => { const n = await import('/static/narration.js');
          await Promise.all([3, 4, 5].map((k) => n.narrationOf(window.__S.created.run_id, k)));
          await new Promise((r) => setTimeout(r, 0)); }"""
    )
    page.wait_for_selector(tb.SETTLED, state="attached")
    assert max(page.evaluate(cached)) == 5
    assert not [u for u in fetched if re.search(r"/steps/([6-9]|\d\d)(/|$)", u)], fetched
    page.keyboard.press("ArrowRight")
    page.wait_for_selector("body[data-painted='3']", state="attached")
    assert page.evaluate("window.pagedvizTiming.fetchMs") < 5  # drawn from the cache
    page.wait_for_function("window.__S.steps.has(6)", polling=50)
