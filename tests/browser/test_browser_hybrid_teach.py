"""KV cache groups taught (issue 38, point 4) in a real Chromium against a real uvicorn at 1280x720,
in English and 中文: the two hybrid presets on the landing page and at the step their windows first
drop blocks (the narration says which and why), the landing contrast "full attention vs sliding
window, same requests" with the memory each run holds, and the lesson section "Sliding windows and
KV cache groups" with its predict-then-reveal checkpoint on the sliding group's block table. Every
expected number and sentence comes from the engine's own runs. The tier's server and browser, a page
per test; screenshots land in test-artifacts/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest

from pagedviz.core import Scenario, make_engine
from pagedviz.core.lesson import load_lesson, scenario_of
from pagedviz.core.metrics import run_metrics
from pagedviz.core.narrate import narrate
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.trace import StepTrace
from tests.support import browser as tb
from tests.support.browser import open_run
from tests.support.browser import view_shot as shot

HAN = re.compile(r"[\u4e00-\u9fff]")
PRESETS = ("demo-gpt-oss-sliding-window", "demo-gemma3-local-global")
CONTRAST = "demo-gpt-oss-sliding-window"
LESSON = "paged-attention-50"


@pytest.fixture()
def en_page(browser: object, base_url: str) -> Iterator[Any]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=60_000)


@pytest.fixture()
def zh_page(browser: object, base_url: str) -> Iterator[Any]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=60_000)


def _page(request: pytest.FixtureRequest, lang: str) -> Any:
    return request.getfixturevalue(f"{lang}_page")


def _q(lang: str) -> str:
    return "&lang=zh" if lang == "zh" else ""


@cache
def _steps(preset: str, full: bool = False) -> list[StepTrace]:
    d = preset_dict(preset)
    if full:  # the contrast's B: every layer full attention, no window
        d["config"]["layer_types"] = ["full_attention"] * len(d["config"]["layer_types"])
        del d["config"]["sliding_window"]
    return list(make_engine(Scenario.from_dict(d)).run())


def _first_drop(preset: str) -> int:
    """The first step whose window drops blocks."""
    return next(t.step for t in _steps(preset) if t.scheduler.get("window_drops"))


def _said(page: Any, key: str) -> str:
    li = page.locator(f"#narr-step li[data-key='{key}'] .narr-text")
    li.wait_for()
    return li.inner_text().strip()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_hybrid_presets_narrate_their_windows_drops(request: pytest.FixtureRequest, lang: str) -> None:
    page = _page(request, lang)
    page.goto(f"{page.base}/?x=1{_q(lang)}")
    page.wait_for_selector("#gallery .preset-card")
    titles = {p["id"]: p["title"] for p in list_presets(lang)}
    for pid in PRESETS:
        card = page.locator(f"#gallery .preset-card[data-preset='{pid}']")
        assert card.is_visible() and titles[pid] in card.inner_text(), pid
        assert bool(HAN.search(card.inner_text())) == (lang == "zh")
    page.locator(f"#gallery .preset-card[data-preset='{PRESETS[0]}']").scroll_into_view_if_needed()
    shot(page, f"hybrid-landing-{lang}.png")
    for pid in PRESETS:
        k = _first_drop(pid)
        assert k <= 3, (pid, k)  # sized so that a window drops blocks within a few steps
        steps = _steps(pid)
        open_run(page, f"preset={pid}&step={k}{_q(lang)}")
        items = narrate(steps[k - 1], steps[k - 2], Scenario.from_dict(preset_dict(pid)).config)
        want = {
            it["key"]: it["text"][lang]
            for it in items
            if it["key"].startswith(("window_drop:", "group_move:"))
        }
        assert any(key.startswith("window_drop:") for key in want), pid
        for key, text in want.items():
            assert _said(page, key) == text, (pid, key)
        drop = next(v for key, v in want.items() if key.startswith("window_drop:"))
        assert ("dropped" in drop and "null block 0" in drop) if lang == "en" else "丢弃了块" in drop, drop
        shot(page, f"hybrid-{pid}-step{k}-{lang}.png")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_landing_contrast_shows_the_memory_each_run_holds(
    request: pytest.FixtureRequest, lang: str
) -> None:
    page = _page(request, lang)
    page.goto(f"{page.base}/?x=1{_q(lang)}")
    link = page.locator(f"#contrasts a[href*='preset={CONTRAST}']")
    link.wait_for()
    assert "vs=layer_types%3Afull_attention" in (link.get_attribute("href") or "")
    link.scroll_into_view_if_needed()
    shot(page, f"hybrid-landing-contrast-{lang}.png")
    text = link.inner_text()
    assert ("Full attention vs sliding window" in text) if lang == "en" else "全注意力 vs 滑动窗口" in text, (
        text
    )
    link.click()
    page.wait_for_selector("body[data-ready='1']")
    memory = page.locator("#cmp-memory")
    memory.wait_for()
    a, b = run_metrics(_steps(CONTRAST)), run_metrics(_steps(CONTRAST, full=True))
    # the step on show (the first difference) and the peaks, each side's numbers from its trace
    n = int(page.evaluate("document.body.dataset.compare"))
    sa, sb = a["steps"][n - 1], b["steps"][n - 1]
    layers = _steps(CONTRAST, full=True)[0].kv_cache["num_layers"]
    step_text = page.locator("#cmp-memory-step").inner_text()
    if lang == "en":
        assert f"at step {n}," in step_text
        assert f"A holds {sa['layer_blocks_used']} ({sa['blocks_used']} blocks × 1 layer)" in step_text
        assert f"B {sb['layer_blocks_used']} ({sb['blocks_used']} blocks × {layers} layers)" in step_text
    else:
        assert (
            f"第 {n} 步" in step_text
            and f"A 占 {sa['layer_blocks_used']}（{sa['blocks_used']} 个块 × 1 层）" in step_text
        )
        assert f"B 占 {sb['layer_blocks_used']}（{sb['blocks_used']} 个块 × {layers} 层）" in step_text
    pa, pb = a["totals"]["peak_layer_blocks_used"], b["totals"]["peak_layer_blocks_used"]
    assert 0 < pa < pb  # the window saves memory
    peak = page.locator("#cmp-memory-peak").inner_text()
    pct = round(100 * (pb - pa) / pb)
    if lang == "en":
        assert (
            f"At the peak: A {pa}, B {pb}." in peak
            and f"saves {pb - pa} blocks of one layer ({pct}%)" in peak
        )
    else:
        assert f"峰值：A {pa}，B {pb}。" in peak and f"省下 {pb - pa} 个单层块（{pct}%）" in peak
    box = memory.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 720, box  # on the first screen
    shot(page, f"hybrid-contrast-{lang}.png")
    # another step: the line follows it
    last = len(_steps(CONTRAST))
    page.click(f"#timeline [data-step='{last}']")
    page.wait_for_function(f"document.body.dataset.compare === '{last}'")
    want = a["steps"][last - 1]["layer_blocks_used"]
    page.wait_for_function(
        f"document.getElementById('cmp-memory-step').textContent.includes('{last}')"
        f" && document.getElementById('cmp-memory-step').textContent.includes('{want}')"
    )


def _section() -> tuple[int, dict[str, Any]]:
    return next(
        (k, s)
        for k, s in enumerate(load_lesson(LESSON)["sections"])
        if s["title"]["en"] == "Sliding windows and KV cache groups"
    )


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_lesson_section_asks_for_the_sliding_row_and_reveals_the_window_drop(
    request: pytest.FixtureRequest, lang: str
) -> None:
    page = _page(request, lang)
    k, sec = _section()
    open_run(page, f"lesson={LESSON}&sec={k}{_q(lang)}")
    page.wait_for_selector(f"body[data-lesson-section='{k}'][data-lesson-ready='1']")
    lesson = page.locator("#lesson")
    title = "Sliding windows and KV cache groups" if lang == "en" else "滑动窗口与 KV cache 组"
    assert title in lesson.inner_text()
    assert "{{" not in lesson.inner_text()
    # the paragraph's numbers are the run's: the window, a's blocks after step 1
    steps = _steps(sec["scenario"])
    before = steps[0].scheduler["block_ids"]["a"]
    assert ", ".join(map(str, before[0])) in lesson.inner_text()
    assert str(scenario_of(sec).config.sliding_window) in lesson.inner_text()
    cp = sec["checkpoint"]
    t = steps[sec["step"] - 1]
    values = t.arrays[cp["array"]].reshape(-1)[cp["indices"]].tolist()
    # the scheduler's list has the null block where the window dropped; the runner's row keeps ids
    listed = t.scheduler["block_ids"]["a"][0]
    dropped = t.scheduler["window_drops"]["a"][0]
    assert [listed[i] for i in dropped["block_indices"]] == [0] * len(dropped["block_indices"])
    guess = [listed[i] for i in cp["indices"]]  # the scheduler's list at the asked entries
    assert 0 in guess and all(v > 0 for v in values) and values != guess
    assert page.locator("#predict-form input").count() == len(values)
    shot(page, f"hybrid-lesson-{lang}.png")
    # a student who puts the scheduler's null blocks into the runner's row
    for j, v in enumerate(guess):
        page.fill(f"#predict-{j}", str(v))
    page.click("#predict-check")
    page.wait_for_selector("body[data-predict='hint']")
    rule = page.locator("#predict-result .predict-rule").inner_text()
    if lang == "en":
        assert (
            "sliding-window group replaces every block" in rule
            and "The runner hears only of new block ids" in rule
        )
    else:
        assert "滑动窗口组先把" in rule and "runner 只收到新块的 id" in rule
    page.click("#predict-check")  # the same answer again: revealed, with the cause from the trace
    page.wait_for_selector("body[data-predict='revealed']")
    shown = page.locator("#predict-result").inner_text()
    n = dropped["num_computed_tokens"]
    if lang == "en":
        assert "dropped it this step (logical block 0" in shown and f"at {n} computed tokens" in shown
        assert f"its list now: [{', '.join(map(str, listed))}]" in shown
    else:
        assert "本步丢弃了它（第 0 个逻辑块" in shown and f"已计算 {n} 个 token" in shown
        assert not re.search(r"[A-Za-z]{4,} [a-z]{4,} [a-z]{4,}", shown), shown  # no English sentence left
    shot(page, f"hybrid-lesson-revealed-{lang}.png")
