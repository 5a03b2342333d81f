"""Present mode and stage playback as a lecturer uses them (issue 29, items 9 and 10), in a real
Chromium against a real uvicorn at 1280x720: Space plays and pauses after the presentation button
was pressed (the focus does not stay on it); the pause sign is drawn, not a font's glyph; a lesson
in present mode keeps its question on the screen and its masked row masked; steps and stages share
one speed selector; and what a stage writes is outlined, flashed and slid in while stages play.
Screenshots land in test-artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import browser as tb

open_run = tb.open_run


@pytest.fixture()
def page(browser: object, base_url: str) -> Iterator[object]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=30_000)


def _playing(page: Any) -> bool:
    return page.locator("#btn-play").get_attribute("data-playing") == "1"


def test_space_plays_and_pauses_after_entering_and_leaving_presentation(page: Any) -> None:
    open_run(page, "preset=seed-001&step=1")
    page.click("#btn-present")
    assert "present" in page.locator("body").get_attribute("class")
    page.keyboard.press(" ")
    assert _playing(page)
    assert "present" in page.locator("body").get_attribute("class")  # Space did not leave
    page.keyboard.press(" ")
    assert not _playing(page)
    page.click("#btn-present")  # leave
    assert "present" not in page.locator("body").get_attribute("class")
    page.keyboard.press(" ")
    assert _playing(page) and "present" not in page.locator("body").get_attribute("class")
    page.keyboard.press(" ")
    assert not _playing(page)


def test_the_pause_sign_is_drawn_on_both_play_buttons(page: Any) -> None:
    open_run(page, "preset=seed-001&step=1&present=1")
    page.click("#btn-play")
    sign = page.locator("#btn-play .glyph-pause")
    box = sign.bounding_box()
    assert box and box["width"] >= 8 and box["height"] >= 10
    # two bars: the sign's left and right borders, in the button's text colour
    style = sign.evaluate(
        "s => { const c = getComputedStyle(s);"
        " return [c.borderLeftStyle, c.borderRightStyle, c.borderLeftWidth]; }"
    )
    assert style[0] == style[1] == "solid" and float(style[2].rstrip("px")) >= 3
    assert "⏸" not in page.locator("#btn-play").inner_text()
    page.click("#btn-play")
    page.evaluate("import('/static/playback.js').then(m => m.setDwell(60000))")
    page.click("#pb-play")
    assert page.locator("#pb-play .glyph-pause").count() == 1
    assert "⏸" not in page.locator("#pb-play").inner_text()
    page.screenshot(path=str(tb.ARTIFACTS / "present-pause-sign.png"))


def test_steps_and_stages_share_one_speed_and_stage_playback_marks_what_each_stage_writes(page: Any) -> None:
    open_run(page, "preset=seed-001&step=2")
    assert page.locator("select").evaluate_all("ss => ss.map(s => s.id)").count("speed") == 1
    assert page.locator("#pb-speed").count() == 0
    assert page.locator("#speed").input_value() == "1"
    page.evaluate("import('/static/playback.js').then(m => m.setDwell(400))")
    page.select_option("#speed", "0.5")  # ×0.5: 800 ms a stage
    # when each stage first became the active one, timed in the page (Playwright's own polling
    # would add its delay to one end or the other)
    page.evaluate(
        """() => {
          window.stageSeen = {};
          const seen = () => {
            const a = document.querySelector('.stage-btn.active');
            const k = a && a.dataset.stage;
            if (k && !(k in window.stageSeen)) window.stageSeen[k] = performance.now();
          };
          new MutationObserver(seen).observe(document.body,
            { subtree: true, childList: true, attributes: true, attributeFilter: ['class'] });
        }"""
    )
    page.click("#pb-play")
    page.wait_for_selector(".stage-btn.active[data-stage='cu_num_tokens']")
    seen = page.evaluate("window.stageSeen")
    held = seen["cu_num_tokens"] - seen["req_indices"]
    assert 600 < held < 2500, (held, seen)  # the step bar's speed sets the stages' pace
    # what the stage on show marks, read at one instant (playback moves on every 800 ms, so reads
    # one after another could see two stages)
    marks = page.evaluate(
        """() => {
          const row = document.querySelector('#token-table tr.current');
          const cell = row && row.querySelector('td');
          const later = document.querySelector('#token-table tr.future td');
          const cs = cell && getComputedStyle(cell);
          return {stage: document.querySelector('.stage-btn.active').dataset.stage,
                  cls: row ? row.className : null, anim: cs && cs.animationName,
                  outline: cs && [cs.outlineStyle, cs.outlineWidth],
                  hatch: later ? getComputedStyle(later).backgroundImage : null};
        }"""
    )
    assert "pb-new" in marks["cls"].split(), marks  # the rows just written flash and slide in
    assert marks["anim"] == "pb-new", marks
    assert marks["outline"] == ["solid", "3px"], marks
    # rows of later stages are hatched, not only slanted
    assert "repeating-linear-gradient" in marks["hatch"], marks
    page.screenshot(path=str(tb.ARTIFACTS / "playback-marks.png"))
    page.click("#pb-stop")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_lesson_in_present_mode_keeps_its_question_on_screen_and_its_answers_masked(
    page: Any, lang: str
) -> None:
    open_run(page, f"lesson=paged-attention-50&sec=3&present=1{'&lang=zh' if lang == 'zh' else ''}")
    page.wait_for_selector("#lesson-check input")
    for sel in (
        "#lesson-title",
        "#lesson-text",
        "#lesson-check input",
        "#lesson-check button",
        "#lesson-next",
    ):
        box = page.locator(sel).first.bounding_box()
        assert (
            box and box["y"] >= 0 and box["y"] + box["height"] <= 720 and box["x"] + box["width"] <= 1280
        ), (sel, box)
    # the asked row stays concealed: none of its cells shows a value
    asked = page.locator("#lesson-check input").first.get_attribute("aria-label") or ""
    name = asked.split("[")[0].strip() or "positions"
    colours = page.locator(f"#token-table tr[data-array='{name}'] td").evaluate_all(
        "cs => cs.map(c => c.classList.contains('concealed') && getComputedStyle(c).color)"
    )
    assert colours and all(c == "rgba(0, 0, 0, 0)" for c in colours), colours  # drawn in no colour
    page.screenshot(path=str(tb.ARTIFACTS / f"present-lesson-{lang}.png"))


# what each figure's numbers are drawn at: the token table's and the block tables' cells, the KV
# pool's heatmap labels (the size canvasmap.js drew them at), its legend's block numbers and the
# queue's pool bar ("KV pool 8 / 15 blocks in use")
SIZES = """() => {
  const shown = (sel) => [...document.querySelectorAll(sel)].filter((n) => n.getClientRects().length);
  const size = (n) => parseFloat(getComputedStyle(n).fontSize);
  const px = (sel) => shown(sel).filter((n) => /\\d/.test(n.textContent)).map(size);
  const kv = document.getElementById('hm-kv');
  return { tokens: px('#tok-table .tok-table td'), blocks: px('#sys-grid .grid-table td'),
           kv_labels: kv && kv.layout && kv.layout.font ? [kv.layout.font.size] : [],
           kv_legend: px('#card-kv .mark-legend strong'), kv_table: shown('#table-kv td').map(size),
           pool_bar: px('#queue .qbar.pool'),
           slots: px('#slotmap .sm-row > *, #sm-freelist .sm-freechip'),
           body: parseFloat(getComputedStyle(document.body).fontSize) };
}"""


# the slot map's width against its panel's (its events' right edge too: a cell clips what overflows
# it), and the bottoms of the block tables and the KV pool's cells
FITS = """() => {
  const right = (sel) => Math.max(0,
    ...[...document.querySelectorAll(sel)].map((n) => n.getBoundingClientRect().right));
  const panel = document.getElementById('slots-panel').getBoundingClientRect().right;
  const evs = [...document.querySelectorAll('#slotmap .sm-ev')].map((n) => n.getBoundingClientRect().right);
  return { panel, map: right('#slotmap .sm-grid'), events: Math.max(0, ...evs),
           bottoms: ['#table-block_table', '#table-input_block_tables', '#hm-kv canvas.cm-cells', '#slotmap']
             .map((s) => document.querySelector(s).getBoundingClientRect().bottom),
           wide: document.documentElement.scrollWidth };
}"""
# the compare view's pane numbers, by figure, and the lowest edge of its panes
CMP_B = "enable_chunked_prefill:false,max_num_batched_tokens:240"
PANES = """() => {
  const px = (sel) => [...document.querySelectorAll(`#cmp-view ${sel}`)]
    .filter((n) => n.getClientRects().length && /\\d/.test(n.textContent)
      && ![...n.children].some((c) => /\\d/.test(c.textContent)))
    .map((n) => parseFloat(getComputedStyle(n).fontSize));
  const panes = [...document.querySelectorAll('#cmp-view .cp-pane')];
  return { sizes: { queue: px('.cp-queue *'), blocks: px('.cp-bt td'), kv: px('.cp-kv *'),
                    tokens: px('.cp-tokens .cp-tok *') },
           bottom: Math.max(0, ...panes.map((p) => p.getBoundingClientRect().bottom)) };
}"""


def test_present_mode_draws_the_arrays_block_tables_and_kv_pool_at_the_texts_size(page: Any) -> None:
    """At 1280x720 in present mode the body is 20 px, and so are the numbers a room reads: the
    token table, the block table(s) (V1, nano-vllm, Model Runner V2's two), the KV pool (its
    heatmap's labels and legend, its table view, the queue's pool bar), Model Runner V2's slot map
    and the compare view's panes, each view still on the one screen."""
    # (the run, its block tables, whether the step changes the pool: its legend then names blocks)
    for query, tables, changes in (
        ("preset=seed-001&step=2", ["table-block_table"], True),
        ("preset=demo-v2-slots&step=8", ["table-block_table", "table-input_block_tables"], True),
        ("preset=seed-004&step=2", ["table-block_table"], False),
    ):
        open_run(page, f"{query}&present=1")
        page.wait_for_selector("#hm-kv canvas")
        for t in tables:
            assert page.locator(f"#{t}").is_visible(), t
        sizes = page.evaluate(SIZES)
        assert sizes["body"] == 20
        for part in ("tokens", "blocks", "kv_labels", "pool_bar", *(["kv_legend"] if changes else [])):
            assert sizes[part] and min(sizes[part]) >= 20, (query, part, sizes[part])
        assert bool(sizes["kv_legend"]) == changes
        if "v2" in query:
            # Model Runner V2's slot map: its rows, idx_mapping, slots and free order at the text's
            # size, inside its column, and the block tables and the KV pool still on the one screen
            assert sizes["slots"] and min(sizes["slots"]) >= 20, sizes["slots"]
            fits = page.evaluate(FITS)
            assert fits["map"] <= fits["panel"] + 1 and fits["events"] <= fits["panel"] + 1, fits
            assert max(fits["bottoms"]) <= 720 + 1 and fits["wide"] <= 1280, fits
        page.screenshot(path=str(tb.ARTIFACTS / f"present-numbers-{query.split('&')[0].split('=')[1]}.png"))
        # the KV pool as a table: its cells too
        page.locator("#card-kv .card-tools button", has_text="Table").click()
        page.wait_for_selector("#table-kv td")
        kv_table = page.evaluate(SIZES)["kv_table"]
        assert kv_table and min(kv_table) >= 20, (query, kv_table)
        page.locator("#card-kv .card-tools button", has_text="Heatmap").click()  # as it was
        page.wait_for_selector("#hm-kv canvas")
    # the compare view's panes: their queue, block table, KV pool and token row at the text's size,
    # both panes still on the first screen (the tallest of the landing page's contrasts)
    page.goto(f"{page.base}/run?preset=seed-000&step=2&vs={CMP_B}&present=1")
    page.wait_for_selector("body[data-compare='2'] #cmp-view:not([hidden]) .cp-pane[data-side='b']")
    panes = page.evaluate(PANES)
    for part, got in panes["sizes"].items():
        assert got and min(got) >= 20, (part, got)
    assert panes["bottom"] <= 720 and page.evaluate("window.scrollY") == 0, panes["bottom"]
    page.screenshot(path=str(tb.ARTIFACTS / "present-numbers-compare.png"))
    # out of present mode the numbers keep their own size (smaller than the body's 15 px)
    open_run(page, "preset=seed-001&step=2")
    page.wait_for_selector("#hm-kv canvas")
    sizes = page.evaluate(SIZES)
    assert sizes["kv_labels"] == [11] and max(sizes["blocks"]) < 15


def test_the_run_header_names_the_upstream_its_version_and_vllms_runner(page: Any) -> None:
    """The header says what the footer says, 2,700 px higher: 'vLLM 0.33.0 · Model Runner V2' or
    '· V1 runner', nano-vllm's and vllm-ascend's commits, in English and in 中文."""
    from pagedviz.app.links import pack
    from pagedviz.core.presets import preset_dict
    from pagedviz.core.upstream import UPSTREAM

    vllm = f"vLLM {UPSTREAM['vllm']['version']}"
    nano = f"nano-vllm {UPSTREAM['nanovllm']['commit'][:7]}"
    ascend = f"vllm-ascend {UPSTREAM['ascend']['commit'][:7]}"
    on_ascend = {**preset_dict("seed-001"), "flavor": "ascend"}
    cases = [
        ("preset=demo-v2-slots", {"en": f"{vllm} · Model Runner V2", "zh": f"{vllm} · 模型运行器 V2"}),
        ("preset=seed-001", {"en": f"{vllm} · V1 runner", "zh": f"{vllm} · V1 模型运行器"}),
        ("preset=seed-004", {"en": nano, "zh": nano}),
        (
            f"s={pack(on_ascend)}",
            {"en": f"{vllm} · V1 runner · {ascend}", "zh": f"{vllm} · V1 模型运行器 · {ascend}"},
        ),
    ]
    for query, want in cases:
        for lang in ("en", "zh"):
            open_run(page, f"{query}&lang={lang}")
            head = page.locator("#run-upstream")
            assert head.inner_text() == want[lang], (query, lang, head.inner_text())
            box = head.bounding_box()
            assert box and box["y"] < 60 and box["x"] + box["width"] <= 1280  # in the header, in view
    # the language switch renames the runner in place
    open_run(page, "preset=demo-v2-slots&lang=en")
    page.click("[data-lang='zh']")
    assert page.locator("#run-upstream").inner_text() == f"{vllm} · 模型运行器 V2"
    page.screenshot(path=str(tb.ARTIFACTS / "run-header-zh.png"))
