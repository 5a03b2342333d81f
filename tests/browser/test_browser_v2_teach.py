"""Teaching Model Runner V2 in a real Chromium against a real uvicorn, at 1280x720 in English and
中文: the landing page's "V1 vs V2, same requests" contrast opens the compare view of the two runs,
which aligns their batches by request; the what-if controls offer the runner; and the lesson's V2
checkpoint keeps idx_mapping (and everything that tells it: the slot panel, the per-slot tables,
the sentences about slots) out of the page's visible text until "Check". Every expected number
comes from the engine's own run. Screenshots land in test-artifacts/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest

from tests.support import browser as tb
from tests.support.browser import classes, open_run, settle
from tests.support.browser import view_shot as shot

HAN = re.compile(r"[\u4e00-\u9fff]")
PRESET = "demo-v2-slots"
LESSON = "paged-attention-50"

# the page's text a reader can see: not inside what a checkpoint conceals, nor hidden
VISIBLE_TEXT = """() => {
  const out = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const n = walk.currentNode, e = n.parentElement;
    if (!e || !n.textContent.trim()) continue;
    if (e.closest('.concealed, .concealed-card .card-body, script, style, [hidden]')) continue;
    if (!e.checkVisibility({ visibilityProperty: true, opacityProperty: true })) continue;
    out.push(n.textContent);
  }
  return out.join(' ¦ ');
}"""


@pytest.fixture()
def page(browser: object, base_url: str) -> Iterator[object]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=30_000)


@cache
def _steps(runner: str) -> list[Any]:
    from pagedviz.core import Scenario, make_engine
    from pagedviz.core.presets import preset_dict

    d = preset_dict(PRESET)
    d["config"]["model_runner"] = runner
    return list(make_engine(Scenario.from_dict(d)).run())


def _q(lang: str, first: bool = False) -> str:
    return ("?" if first else "&") + "lang=zh" if lang == "zh" else ""


def visible(page: object) -> str:
    return page.evaluate(VISIBLE_TEXT)  # type: ignore[attr-defined]


# ------------------------------------------------------------------ V1 vs V2 on the landing page
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_landing_contrast_v1_vs_v2_opens_the_compare_of_the_two_runs(page: object, lang: str) -> None:
    page.goto(page.base + "/" + _q(lang, first=True))
    page.wait_for_selector("body[data-ready='1']")
    link = page.locator("#contrasts a[href*='preset=demo-v2-slots']")
    assert link.count() == 1
    assert "vs=model_runner%3Av1" in link.get_attribute("href")
    text = link.inner_text()
    assert "V1" in text and "V2" in text and bool(HAN.search(text)) == (lang == "zh")
    shot(page, f"v2teach-landing-{lang}.png")
    link.click()
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    page.wait_for_selector("#cmp-batch-table", timeout=60_000)
    assert "vs=model_runner" in page.url
    heads = page.locator("#cmp-heads").inner_text()
    assert re.search(r"A: .*v2", heads) and re.search(r"B: .*v1", heads)
    # each side named by its preset's title in the page's language
    assert bool(HAN.search(heads)) == (lang == "zh")
    # the first step where the runners order the batch differently (V2 sorts, V1 keeps its rows):
    # the compare link opens there
    v2, v1 = _steps("v2"), _steps("v1")
    n = next(k for k in range(len(v2)) if v2[k].batch["req_ids"] != v1[k].batch["req_ids"]) + 1
    page.wait_for_selector(f"body[data-compare='{n}']")
    page.wait_for_function(f"document.getElementById('cmp-title').textContent.includes('{n}')")
    order = page.locator("#cmp-batch-table tr[data-row='order'] td").all_inner_texts()
    assert order == [f"[{', '.join(t.batch['req_ids'])}]" for t in (v2[n - 1], v1[n - 1])]
    assert "differs" in classes(page, "#cmp-batch-table tr[data-row='order']")
    # each request's place: its V2 row and state slot, its V1 row
    for rid in v2[n - 1].batch["req_ids"]:
        a, b = page.locator(f"#cmp-batch-table tr[data-req='{rid}'] td").all_inner_texts()
        assert re.search(
            rf"\b{v2[n - 1].batch['req_ids'].index(rid)}\b.*\b{v2[n - 1].batch['slots'][rid]}\b", a
        )
        assert a != b and str(v1[n - 1].batch["req_ids"].index(rid)) in b
    # slot_mapping differs entry by entry (another order) but not request by request
    assert "differs" in classes(page, "#cmp-arrays tr[data-array='slot_mapping']")
    assert "differs" not in classes(page, "#cmp-per-req li[data-array='slot_mapping']")
    # each side's own arrays are listed as only one run's
    assert page.locator("#cmp-arrays tr[data-array='idx_mapping'] td").nth(1).inner_text() != ""
    page.evaluate("document.getElementById('compare').scrollIntoView()")
    shot(page, f"v2teach-compare-{lang}.png")


def test_the_what_if_offers_the_runner_and_compares_with_it(page: object) -> None:
    open_run(page, f"preset={PRESET}&step=4")
    sel = page.locator("#wi-model_runner")
    assert sel.input_value() == "v2" and sel.locator("option").all_inner_texts() == ["v1", "v2"]
    sel.select_option("v1")
    page.click("#cmp-go-settings")
    page.wait_for_selector("#cmp-batch-table", timeout=60_000)
    assert "model_runner:v1" in page.url.replace("%3A", ":")
    assert re.search(r"B: .*v1", page.locator("#cmp-heads").inner_text())
    # a flavour with one runner offers only it
    open_run(page, "preset=seed-001-ascend")
    assert page.locator("#wi-model_runner option").all_inner_texts() == ["v1"]
    assert page.locator("#wi-model_runner").is_disabled()


def test_the_editor_leaves_the_runner_to_the_server_for_every_flavour(page: object) -> None:
    page.goto(page.base + "/")
    page.wait_for_selector("body[data-ready='1']")
    for preset in ("seed-004", "seed-001-ascend", PRESET):
        name = page.request.get(f"{page.base}/api/presets/{preset}").json()["scenario"]["name"]
        page.click(f"article[data-preset='{preset}'] button")
        page.wait_for_function(f"document.getElementById('f-name').value === {name!r}")  # the form has it
        page.wait_for_selector("#validation.ok, #validation.bad")
        page.wait_for_function("!document.getElementById('validation').textContent.includes('…')")
        # the live check runs 250 ms after the last change: wait until it has answered
        page.wait_for_selector("body:not([data-checking='1'])", state="attached")
        # on a loaded machine the check of this preset may come later still: wait for it to settle
        page.wait_for_function(
            "(() => { const v = document.getElementById('validation');"
            " return v.classList.contains('ok') && !v.textContent.includes('…'); })()",
            timeout=15_000,
        )
        assert "ok" in classes(page, "#validation"), (preset, page.locator("#validation").inner_text())
    # a preset that names its runner shows it; one that leaves it out says the default applies
    assert page.input_value("#f-model_runner") == "v2"
    page.click("article[data-preset='seed-004'] button")
    page.wait_for_function("document.getElementById('f-model_runner').value === ''", timeout=15_000)
    assert page.input_value("#f-model_runner") == ""
    assert page.eval_on_selector("#f-async_scheduling", "e => e.indeterminate")
    page.click("#f-async_scheduling")  # set by the reader, it is sent: off, then on, which nanovllm lacks
    assert not page.eval_on_selector("#f-async_scheduling", "e => e.indeterminate")
    if not page.is_checked("#f-async_scheduling"):
        page.click("#f-async_scheduling")
    page.wait_for_selector("#validation.bad")
    assert "async" in page.locator("#validation").inner_text()


# ------------------------------------------------------------------ the lesson's V2 checkpoint
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_v2_lesson_asks_for_idx_mapping_and_the_page_tells_it_only_after_check(
    page: object, lang: str
) -> None:
    served = page.request.get(f"{page.base}/api/lessons/{LESSON}").json()
    k, sec = next(
        (i, s)
        for i, s in enumerate(served["sections"])
        if (s["checkpoint"] or {}).get("array") == "idx_mapping"
    )
    assert sec["scenario"] == PRESET
    t = _steps("v2")[sec["step"] - 1]
    rows = sec["checkpoint"]["indices"]
    answer = [int(t.arrays["idx_mapping"][i]) for i in rows]
    reqs = [t.batch["req_ids"][i] for i in rows]
    open_run(page, f"lesson={LESSON}&sec={k}{_q(lang)}")
    page.wait_for_selector(f"body[data-lesson-section='{k}']", timeout=60_000)
    page.wait_for_selector("#predict-form")
    page.wait_for_selector("#slotmap", state="attached")
    settle(page)  # the narration and the late cells are concealed as they come
    # the question, in the page's language, with the paragraph the server filled in from the run
    assert page.locator("#lesson-text").inner_text() == sec["paragraph"][lang]
    assert "idx_mapping" in page.locator("#predict-h").inner_text()
    assert bool(HAN.search(page.locator("#predict-h").inner_text())) == (lang == "zh")
    # what would tell the answer: the arrows of the slot panel, a slot's holder, the sentences
    tells = [
        s
        for i, v, r in zip(rows, answer, reqs)
        for s in (
            f"→ {v}",
            f"{v} · {r}",
            f"{r}: {v}",
            f"{r} → {v}",
            f"idx_mapping[{i}] = req_id_to_index[{r}] = {v}",
            f"slot {v}" if lang == "en" else f"槽位 {v}",
        )
    ]
    dom = page.evaluate("document.body.textContent")
    assert any(s in dom for s in tells), "the views that tell the answer are on the page"
    seen = visible(page)
    assert [s for s in tells if s in seen] == []
    col = page.locator("#request-table thead th").all_inner_texts().index("idx_mapping") + 1
    cells = page.locator(f"#request-table tbody td:nth-child({col})")
    assert cells.count() == len(t.batch["req_ids"])
    assert all("concealed" in (cells.nth(i).get_attribute("class") or "") for i in range(cells.count()))
    assert "concealed" in classes(page, "#slots") and "concealed-card" in classes(page, "#card-block_table")
    page.locator("#predict-form").scroll_into_view_if_needed()
    shot(page, f"v2teach-lesson-predict-{lang}.png")
    # answered and checked: every view tells it again
    for j, v in enumerate(answer):
        page.fill(f"#predict-{j}", str(v))
    page.click("#predict-check")
    page.wait_for_selector("body[data-predict='revealed']")
    assert "ok" in classes(page, "#predict-result p")
    seen = visible(page)
    assert all(f"→ {v}" in seen for v in answer)
    # by batch row (the rows in batch order, the section's request marked)
    by_row = [
        page.locator(f"#request-table tbody tr[data-r='{i}'] td:nth-child({col})").inner_text() for i in rows
    ]
    assert by_row == [str(v) for v in answer]
    assert "concealed" not in classes(page, "#slots")
    page.locator("#slots").scroll_into_view_if_needed()
    shot(page, f"v2teach-lesson-revealed-{lang}.png")


def test_a_compare_link_keeps_words_and_booleans_and_refuses_a_malformed_value(page: object) -> None:
    # async_scheduling is a boolean, model_runner a word: B is the V1 runner with async scheduling
    open_run(page, f"preset={PRESET}&vs=model_runner:v1,async_scheduling:true")
    page.wait_for_selector("#cmp-batch-table", timeout=60_000)
    heads = page.locator("#cmp-heads").inner_text()
    assert "with model_runner = v1, async_scheduling = true" in heads and re.search(r"B: .*v1\)", heads)
    # a number that is not one is refused here, naming the form a spec takes
    open_run(page, f"preset={PRESET}&vs=block_size:big")
    page.wait_for_function("document.getElementById('cmp-msg').textContent.length > 0")
    assert "key:value" in page.locator("#cmp-msg").inner_text()
    assert page.locator("#compare").is_hidden()
