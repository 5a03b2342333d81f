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
import test_browser as tb

pytestmark = tb.pytestmark
base_url = tb.base_url
browser = tb.browser
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
