"""Big batches, overview first (issue 16, item 7) in a real Chromium against a real uvicorn: the
per-request stacked bars, the per-step budget and pool bars, the minimap, focus on one request,
run-length compression of long prefills with block starts marked, and a 128-request page that
fits about one screen, in English and Chinese."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest

from tests.support import browser as tb

open_run = tb.open_run

N = 128


def big_scenario() -> dict:
    return {
        "name": "big-128",
        "config": {
            "max_model_len": 1024,
            "num_kv_blocks": 4096,
            "max_num_reqs": N,
            "max_num_batched_tokens": 2048,
            "model": None,
            "model_runner": "v1",  # the page's V1 views (condense, slot_mapping's stage) at 128 requests
        },
        "requests": [{"id": f"r{i}", "prompt_len": 64 + (37 * i) % 200, "max_tokens": 8} for i in range(N)],
    }


@pytest.fixture(scope="module")
def big_link(base_url: str) -> str:
    r = httpx.post(f"{base_url}/api/runs", json=big_scenario(), timeout=120)
    assert r.status_code == 201, r.text
    return str(r.json()["link"])


@pytest.fixture()
def hd_page(browser: object, base_url: str) -> Iterator[object]:
    yield from tb.watched_page(browser, base_url, 1920, 1080)


def open_big(pg: object, link: str, extra: str = "") -> None:
    from urllib.parse import quote

    open_run(pg, f"s={quote(link)}{extra}")


def test_a_128_request_step_has_a_bar_per_request_step_bars_and_a_minimap(
    hd_page: object, big_link: str
) -> None:  # noqa: E501
    open_big(hd_page, big_link, "&step=1")
    batch = hd_page.evaluate("document.querySelectorAll('#ov-bars .ov-bar:not(.waiting)').length")
    waiting = hd_page.evaluate("document.querySelectorAll('#ov-bars .ov-bar.waiting').length")
    # step 1 admits what 2048 tokens of budget allow; every other request waits; all 128 are drawn
    assert batch + waiting == N and 0 < batch < N
    title = hd_page.locator("#ov-bars .ov-bar[data-req='r0'] title").text_content()
    assert "r0" in title and "scheduled now" in title
    # per-step bars: the first step's budget is used at most up to max_num_batched_tokens
    bar = hd_page.locator(".tl-step[data-step='1'] .tl-budget")
    assert int(bar.get_attribute("data-of")) == 2048 and 0 < int(bar.get_attribute("data-n")) <= 2048
    pool = hd_page.locator(".tl-step[data-step='1'] .tl-pool")
    # of the pool as vLLM counts it: num_kv_blocks 4096 less the null block
    assert int(pool.get_attribute("data-of")) == 4095 and int(pool.get_attribute("data-n")) > 0
    assert hd_page.locator("#minimap").bounding_box()["width"] > 500
    # clicking a bar focuses its request: the request table marks its row and keeps batch order
    hd_page.locator("#ov-bars .ov-bar[data-req='r3'] .ov-hit").click()
    row = hd_page.locator("#request-table tbody tr.focus-row")
    assert row.get_attribute("data-req") == "r3"
    rows = hd_page.evaluate(
        "[...document.querySelectorAll('#request-table tbody tr')].map(r => +r.dataset.r)"
    )
    assert rows == sorted(rows) and rows[0] == 0


def test_focus_on_r77_survives_the_next_step(hd_page: object, big_link: str) -> None:
    open_big(hd_page, big_link, "&step=2")
    hd_page.fill("#focus-req", "r77")
    hd_page.press("#focus-req", "Enter")
    hd_page.wait_for_function("new URLSearchParams(location.search).get('req') === 'r77'")
    hd_page.click("#btn-next")
    hd_page.wait_for_function("document.body.dataset.step === '3'")
    assert "req=r77" in hd_page.url
    assert hd_page.locator("#ov-bars .ov-bar.focus").get_attribute("data-req") == "r77"
    if hd_page.locator("#request-table tr[data-req='r77']").count():
        # its row is marked where the batch has it, and scrolled into the table's box
        row = hd_page.locator("#request-table tbody tr.focus-row")
        assert row.get_attribute("data-req") == "r77"
        hd_page.wait_for_function(
            """() => {
              const r = document.querySelector('#request-table tr.focus-row').getBoundingClientRect();
              const b = document.getElementById('req-table').getBoundingClientRect();
              return r.top >= b.top && r.bottom <= b.bottom; }"""
        )
    # only this request: the token table keeps r77's tokens alone
    hd_page.check("#focus-only")
    rows = hd_page.evaluate(
        "[...document.querySelectorAll('#request-table tbody tr')].map(r => r.dataset.req)"
    )  # noqa: E501
    assert rows in (["r77"], [])


def test_long_prefills_are_compressed_with_block_starts_marked_and_expand(
    hd_page: object, big_link: str
) -> None:  # noqa: E501
    open_big(hd_page, big_link, "&step=1")
    gaps = hd_page.locator("#token-table thead th.tok-gap")
    assert gaps.count() > 0
    first = gaps.first
    n = int(first.get_attribute("data-gap"))
    assert f"… {n} …" in first.text_content() and n > 0
    # a prefill of 64+ tokens from position 0 with block_size 16 crosses block starts in its middle
    assert first.locator(".gap-bound").count() >= 1
    bound = first.locator(".gap-bound").first.text_content()
    assert int(bound.lstrip("|")) % 16 == 0
    assert hd_page.locator("#token-table thead th.blk-bound").count() > 0
    # the columns past the box's come once the page is idle: count them all
    hd_page.wait_for_selector("#token-table[data-whole='1']", state="attached")
    shown = hd_page.locator("#token-table thead th[data-t]").count()
    # clicking a compressed column selects its first token
    first.click()
    assert "pos=" in hd_page.url
    hd_page.click("#btn-expand-tokens")
    assert hd_page.locator("#token-table thead th.tok-gap").count() == 0
    hd_page.wait_for_selector("#token-table[data-whole='1']", state="attached")
    assert hd_page.locator("#token-table thead th[data-t]").count() > shown


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_128_request_page_fits_about_one_screen_at_1920_by_1080(
    hd_page: object, big_link: str, lang: str
) -> None:
    open_big(hd_page, big_link, f"&step=2&lang={lang}")
    tb.settle(hd_page)  # the late cells and the heatmaps out of view are drawn
    tb.ARTIFACTS.mkdir(exist_ok=True)
    hd_page.screenshot(path=str(tb.ARTIFACTS / f"bigbatch-1920-{lang}.png"), full_page=True)
    # the step's page, down to the run-level charts ("the whole run", issue 31), which come
    # after it by design (they load once the page is idle)
    height = hd_page.evaluate(
        "(() => { const c = document.getElementById('run-charts');"
        " return c && !c.hidden ? c.getBoundingClientRect().top + window.scrollY"
        " : document.documentElement.scrollHeight; })()"
    )
    # before: about 4,300 px. Now the first screen holds the overview (bars, minimap), the queue,
    # the request box, the token row and the system cards; below it only "inside this step"
    assert height <= 1.5 * 1080, height
    # the whole pipeline is on the first screen: the block table and the KV pool beside the
    # request box and the token row; only "inside this step" (the explanations) is below
    for sel in ("#ov-bars", "#minimap", "#req-table", "#card-block_table", "#card-kv"):
        box = hd_page.locator(sel).bounding_box()
        assert box is not None and box["y"] + box["height"] <= 1080, (sel, box)
    # the token row: its head and the positions row at least
    assert hd_page.locator("#token-table tr[data-array='positions']").bounding_box()["y"] < 1080
    legend = hd_page.locator(".ov-legend").text_content()
    assert ("缓存命中" in legend) if lang == "zh" else ("cached (prefix hit)" in legend)
    assert ("聚焦请求" if lang == "zh" else "Focus on request") in hd_page.locator(".ov-focus").text_content()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_128_request_page_in_presentation_at_1280_by_720(
    browser: object, base_url: str, big_link: str, lang: str
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 720}, bypass_csp=True)  # type: ignore[attr-defined]
    pg = context.new_page()
    pg.base = base_url
    open_big(pg, big_link, f"&step=2&stage=slot_mapping&present=1&lang={lang}")
    assert pg.locator("#ov-bars").count() == 1
    assert pg.evaluate("document.documentElement.scrollWidth") <= 1280
    # the projector's one screen holds the whole story for 128 requests too: the overview (the
    # batch and the waiting queue; the timeline's tiny bars are each step's budget and pool), the
    # formula, the token row, the block table and the KV pool (their cards scroll inside)
    one_screen = {
        "overview": "#ov-bars",
        "step bars": "#timeline .tl-bars",
        "formula": "#slot-formula",
        "positions": "#token-table tr[data-array='positions']",
        "slot_mapping": "#token-table tr[data-array='slot_mapping']",
        "block table": "#card-block_table",
        "KV pool": "#card-kv",
    }
    for what, sel in one_screen.items():
        box = pg.locator(sel).first.bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 720 + 1, (lang, what, box)
    tb.ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(tb.ARTIFACTS / f"bigbatch-present-1280-{lang}.png"))
    context.close()


def test_a_small_runs_bars_agree_with_its_request_table(page: object) -> None:
    open_run(page, "preset=seed-000&step=2")
    rows = page.evaluate(
        """[...document.querySelectorAll('#request-table tbody tr')].map(tr => {
             const head = [...document.querySelectorAll('#request-table thead th')].map(th => th.textContent);
             const cell = (n) => Number(tr.children[head.indexOf(n)].dataset.v);
             return [tr.dataset.req, cell('num_computed_tokens_cpu'), cell('num_scheduled_tokens')];
           })"""
    )
    assert rows
    for rid, computed, scheduled in rows:
        title = page.locator(f"#ov-bars .ov-bar[data-req='{rid}'] title").text_content()
        nums = dict(re.findall(r"(cached \(prefix hit\)|computed|scheduled now|remaining) (\d+)", title))
        assert int(nums["scheduled now"]) == scheduled
        assert int(nums["cached (prefix hit)"]) + int(nums["computed"]) == computed
    # hovering a bar lights the request's row in the request table
    rid = rows[-1][0]
    page.hover(f"#ov-bars .ov-bar[data-req='{rid}'] .ov-hit")
    assert "hl" in page.locator(f"#request-table tr[data-req='{rid}']").get_attribute("class")


def test_three_requests_get_three_bars(page: object) -> None:
    open_run(page, "preset=seed-000&step=1")
    bars = page.evaluate("[...document.querySelectorAll('#ov-bars .ov-bar')].map(b => b.dataset.req)")
    assert len(bars) == len(set(bars)) >= 1
    ov = page.evaluate("fetch('/api/presets/seed-000').then(r => r.json())")
    assert len(bars) <= len(ov["scenario"]["requests"])


def test_clicking_the_minimap_focuses_the_request_under_it(hd_page: object, big_link: str) -> None:
    open_big(hd_page, big_link, "&step=1")
    box = hd_page.locator("#minimap").bounding_box()
    # the first scheduled token belongs to the batch's row 0
    first = hd_page.evaluate("document.querySelector('#request-table tbody tr').dataset.req")
    hd_page.mouse.click(box["x"] + 1, box["y"] + box["height"] / 2)
    hd_page.wait_for_function(f"new URLSearchParams(location.search).get('req') === '{first}'")
    # the window shows the span of tokens the token table's box shows: a part of the row
    win = hd_page.locator("#minimap-window").bounding_box()
    assert win is not None and 0 < win["width"] < box["width"]


def test_a_prefix_cache_hit_is_the_cached_segment_of_its_bar(page: object) -> None:
    open_run(page, "preset=demo-prefix-cache")
    preset = page.evaluate("fetch('/api/presets/demo-prefix-cache').then(r => r.json())")
    bs = preset["scenario"]["config"]["block_size"]
    found = []
    for step in range(1, 4):
        open_run(page, f"preset=demo-prefix-cache&step={step}")
        titles = page.locator("#ov-bars .ov-bar title").all_text_contents()
        found += [int(m) for t in titles for m in re.findall(r"cached \(prefix hit\) (\d+)", t)]
        if page.locator("#ov-bars rect.seg-cached").count():
            tb.ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(tb.ARTIFACTS / "bigbatch-prefix-cache-bars.png"))
            break
    # the demo's second request finds whole blocks of the shared prefix in the cache
    assert any(n > 0 and n % bs == 0 for n in found), found


def test_a_sentence_naming_many_requests_shows_a_few_buttons_and_a_count(
    hd_page: object, big_link: str
) -> None:
    open_big(hd_page, big_link, "&step=1")
    # step 1 leaves most of the 128 requests waiting: the sentence that says so names them all,
    # as 16 buttons and a count of the others
    waiting_bars = hd_page.evaluate("document.querySelectorAll('#ov-bars .ov-bar.waiting').length")
    item = hd_page.locator("#narr-step li", has_text="Still waiting").first
    buttons = item.locator(".refs button.ref-request")
    # the sentences come with the step's narration (fetched), and at a big batch whose list is out
    # of view, once the page is idle
    buttons.first.wait_for(state="attached")
    assert buttons.count() == 16
    more = int(re.search(r"\d+", item.locator(".refs-more").inner_text()).group())
    # a request the sentence's words name (the head of the queue, with its cause) is a button in
    # the text, not again in the list
    ids = "(bs) => bs.map((b) => b.dataset.id)"
    listed = buttons.evaluate_all(ids)
    inline = len(set(item.locator("button.ref-request").evaluate_all(ids)) - set(listed))
    assert inline + 16 + more == waiting_bars > 16, (item.inner_text(), listed)
    # every sentence is capped alike
    for capped in hd_page.locator("#narr-step li:has(.refs-more)").all():
        assert capped.locator(".refs > button").count() == 16
    # the buttons are the first of the requests named, in their order
    named = [b.inner_text().split()[-1] for b in buttons.all()]
    waiting_ids = hd_page.evaluate(
        "[...document.querySelectorAll('#ov-bars .ov-bar.waiting')].map((b) => b.dataset.req)"
    )
    assert set(named) <= set(waiting_ids) and len(set(named)) == 16


def test_a_wide_token_table_gets_its_later_columns_after_the_frame(hd_page: object, big_link: str) -> None:
    """At 128 requests the token table has hundreds of columns: the first 96 are drawn before the
    frame that shows the step, the rest just after it, and a token selected among the later ones
    is lit once its column is there."""
    open_big(hd_page, big_link, "&step=2")
    hd_page.wait_for_selector("body[data-painted]", state="attached")
    expected = hd_page.evaluate(
        """import('/static/tables.js').then(async (t) => {
          const m = await import('/static/context.js');
          const T = m.tokenCount(), pos = m.S.trace.arrays.positions.data;
          return Math.min(512, t.tokenColumns(T, m.reqOfTokens(), pos, m.blockSize()).length);
        })"""
    )
    assert expected > 96
    heads = "document.querySelectorAll('#token-table thead th[data-t], #token-table thead th.pad').length"
    hd_page.wait_for_function(f"{heads} >= {expected}")
    # every row has a cell for every column: the later cells went into each row
    widths = hd_page.evaluate("[...document.querySelectorAll('#token-table tr')].map(r => r.children.length)")
    assert len(set(widths)) == 1 and widths[0] >= expected + 1
    # a token among the later columns, selected: its column lights up once it is drawn
    cols, late = hd_page.evaluate(
        """(() => { const hs = [...document.querySelectorAll('#token-table thead th')];
          const k = hs.findLastIndex((h) => h.dataset.t !== undefined && h.dataset.gap === undefined);
          return [k, Number(hs[k].dataset.t)]; })()"""
    )
    assert cols > 96
    hd_page.keyboard.press("ArrowRight")
    hd_page.wait_for_selector("body[data-painted='3']", state="attached")
    hd_page.keyboard.press("ArrowLeft")
    hd_page.wait_for_selector("body[data-painted='2']", state="attached")
    hd_page.evaluate(f"import('/static/hover.js').then(h => h.select({{ kind: 'token', index: {late} }}))")
    hd_page.wait_for_selector(f"#token-table th[data-t='{late}'].hl", state="attached")
    # and a step change with that token selected lights it in the later columns too
    hd_page.keyboard.press("ArrowRight")
    hd_page.keyboard.press("ArrowLeft")
    hd_page.wait_for_selector("body[data-painted='2']", state="attached")
    hd_page.wait_for_selector(f"#token-table td[data-t='{late}'].hl", state="attached", timeout=5_000)


def test_a_checkpoint_hides_its_array_in_the_late_columns_too(hd_page: object, big_link: str) -> None:
    """Predicting slot_mapping at a 128-request step: the token table's columns drawn after the
    frame are concealed as the first ones are, also after a stage change redraws the table."""
    open_big(hd_page, big_link, "&step=2&stage=slot_mapping")
    hd_page.select_option("#predict-array", "slot_mapping")
    hd_page.fill("#predict-entries", "0-4")
    hd_page.press("#predict-entries", "Enter")
    hd_page.wait_for_selector("#predict-form")
    row = "#token-table tr[data-array='slot_mapping'] td"
    for stage in ("positions", "slot_mapping"):
        hd_page.click(f".stage-btn[data-stage='{stage}']")
        # every column is there (the later ones came after the frame), and every cell is hidden
        hd_page.wait_for_function(f'document.querySelectorAll("{row}").length > 64')
        tb.settle(hd_page)  # the late columns are in, and concealed as they came
        cells = hd_page.locator(row).count()
        assert hd_page.locator(f"{row}.concealed").count() == cells, stage


BLOCK_ROWS = """() => [...document.querySelectorAll('#table-block_table tbody tr')]
  .map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent).join(' '))"""


def test_a_block_table_out_of_view_gets_the_steps_rows_and_the_selection_once_the_page_is_idle(
    page: object, big_link: str
) -> None:
    """Below the first screen, a 128-request step's block table is built after the frame that shows
    the step (as the heatmaps there are drawn): it ends on that step's rows, the selected request's
    cells lit."""
    open_big(page, big_link, "&step=2&req=r5")
    page.wait_for_selector("body[data-painted='2']", state="attached")
    assert page.evaluate(
        "document.getElementById('card-block_table').getBoundingClientRect().top > innerHeight"
    )
    page.wait_for_selector("#table-block_table td.hl", state="attached")
    before = page.evaluate(BLOCK_ROWS)
    page.keyboard.press("ArrowRight")
    page.wait_for_selector("body[data-painted='3']", state="attached")
    want = page.evaluate(
        """import('/static/context.js').then((m) => m.S.trace.arrays.block_table.data.slice(0, 64)
          .map((row) => row.slice(0, 512).join(' ')))"""
    )
    assert want != before  # the step changes the table
    page.wait_for_function(f"JSON.stringify(({BLOCK_ROWS})()) === JSON.stringify({json.dumps(want)})")
    r = page.evaluate(
        "import('/static/context.js').then((m) => m.S.trace.batch.req_ids.map(String).indexOf('r5'))"
    )
    assert r >= 0
    lit = page.evaluate(
        "[...document.querySelectorAll('#table-block_table td.hl')].map((td) => Number(td.dataset.r))"
    )
    assert lit and set(lit) == {r}


@pytest.fixture()
def short_page(browser: object, base_url: str) -> Iterator[object]:
    yield from tb.watched_page(browser, base_url, 1400, 480)


def test_the_step_sentences_below_the_first_screen_are_the_new_steps_once_the_page_is_idle(
    short_page: object, big_link: str
) -> None:
    """A 128-request step's sentences (dozens, under the side panel's first screen) are written after
    the frame that shows the step: the list ends on that step's sentences, every one."""
    page = short_page
    open_big(page, big_link, "&step=1")
    page.wait_for_selector("#narr-step li", state="attached")
    hidden = """(() => { const r = document.getElementById('narr-step').getBoundingClientRect();
      const side = document.getElementById('teach-side').getBoundingClientRect();
      return r.top >= Math.min(innerHeight, side.bottom); })()"""
    assert page.evaluate(hidden)
    keys = "[...document.querySelectorAll('#narr-step li')].map((li) => li.dataset.key)"
    before = page.evaluate(keys)
    page.keyboard.press("ArrowRight")
    page.wait_for_selector("body[data-painted='2']", state="attached")
    want = page.evaluate(
        """import('/static/context.js').then(async (m) => {
          const r = await fetch(`/api/runs/${m.S.created.run_id}/steps/2/narration`);
          const data = await r.json();
          return (data.items || data).filter((x) => !x.stage).map((x) => x.key);
        })"""
    )
    assert want and want != before
    page.wait_for_function(f"JSON.stringify({keys}) === JSON.stringify({json.dumps(want)})")
    assert page.locator("#narr-h").inner_text().endswith(" 2")
