"""The teaching side of the pages (issue 15) in a real Chromium against a real uvicorn: narration,
stage-by-stage playback, lessons, predict-then-reveal, what-if and compare. Screenshots at
1280x720 in English and 中文 land in test-artifacts/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import browser as tb
from tests.support.browser import classes, open_run
from tests.support.browser import view_shot as shot

ARTIFACTS = tb.ARTIFACTS
HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture()
def page(browser: object, base_url: str) -> Iterator[object]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=20_000)


# ------------------------------------------------------------------ 1. narration
def test_narration_follows_step_and_stage_and_its_names_light_up_the_views(page: object) -> None:
    open_run(page, "preset=seed-001&step=2&stage=slot_mapping")
    stage = page.locator("#narr-stage")
    page.wait_for_function("document.getElementById('narr-stage').textContent.includes('slot_mapping[2]')")
    # token 2 of step 2 is written to slot 13 = block 6 * 2 + 1 (the same slot the tables show)
    assert "= 13" in stage.inner_text()
    assert page.locator("#token-table tr[data-array='slot_mapping'] td[data-t='2']").inner_text() == "13"
    # the step's own sentences: step 2 opens blocks 7 and 8 (the changes chip says the same)
    assert "new blocks: 1 → [7], 2 → [8]" in page.locator("#changes").inner_text()
    grow = page.locator("#narr-step li[data-key='grow']")
    assert "7" in grow.inner_text() and "8" in grow.inner_text()
    # hovering "block 6" lights block 6 in the block table, and nothing else there
    page.hover("#narr-stage .ref[data-kind='block'][data-id='6']")
    lit = page.locator("#table-block_table td.hl").all_inner_texts()
    assert lit and set(lit) == {"6"}
    # focusing a request name (keyboard) lights its row of the request table
    page.focus("#narr-stage .ref[data-kind='request'][data-id='2']")
    assert page.locator("#request-table tr.hl").get_attribute("data-r") == "2"
    page.click("#narr-stage .ref[data-kind='request'][data-id='2']")
    assert page.locator("#selection").inner_text().startswith("request 2")
    shot(page, "teach-narration.png")
    # the stage below: the narration follows it
    page.focus("#btn-next")
    page.keyboard.press("Escape")
    page.locator("body").press("ArrowDown")
    page.wait_for_function("document.getElementById('narr-stage').textContent.includes('query_start_loc')")
    # another step: its own sentences
    page.click("#timeline [data-step='1']")
    page.wait_for_function("document.getElementById('narr-h').textContent.includes('1')")
    page.wait_for_selector("#narr-step li[data-key='chunk:2']")
    assert "chunked" in page.locator("#narr-step li[data-key='chunk:2']").inner_text()
    # and in Chinese
    page.click("[data-lang='zh']")
    page.wait_for_function("document.getElementById('narr-h').textContent.includes('发生了什么')")
    assert HAN.search(page.locator("#narr-step li[data-key='chunk:2']").inner_text())
    assert HAN.search(page.locator("#narr-stage").inner_text())
    shot(page, "teach-narration-zh.png")


# ------------------------------------------------------------------ 2. stage-by-stage playback
def test_stage_playback_walks_the_stages_in_order_with_their_narration_and_stops_at_pause_points(
    page: object,
) -> None:
    open_run(page, "preset=seed-001&step=2")
    names = page.evaluate("[...document.querySelectorAll('.stage-btn')].map(b => b.dataset.stage)")
    assert names[0] == "update_states" and "slot_mapping" in names
    # one speed for steps and stages: the step bar's
    assert page.locator("#pb-speed").count() == 0 and page.locator("select#speed").count() == 1
    # record every stage the page shows, and the narration shown with it
    page.evaluate(
        """window.seen = [];
        new MutationObserver(() => {
          const a = document.querySelector('.stage-btn.active');
          const n = document.getElementById('narr-stage').textContent;
          if (!a) return;
          const last = window.seen.at(-1);
          if (!last || last[0] !== a.dataset.stage) window.seen.push([a.dataset.stage, n]);
          else window.seen.at(-1)[1] = n;  // the stage's narration arrives just after it
        }).observe(document.getElementById('main'), {subtree: true, childList: true, characterData: true});"""
    )
    page.evaluate("import('/static/playback.js').then(m => m.setDwell(150))")
    stop_at = names.index("slot_mapping")
    point = page.locator("#pb-points button[data-stage='slot_mapping']")
    point.click()
    assert point.get_attribute("aria-pressed") == "true"
    page.select_option("#speed", "1")
    page.focus("#pb-play")
    page.keyboard.press("Enter")  # keyboard alone
    page.wait_for_function("document.querySelector('.stage-btn.active').dataset.stage === 'slot_mapping'")
    # a pause point holds: playback stopped there, with no next stage scheduled
    page.wait_for_selector("#pb-play[aria-pressed='false']")
    assert page.locator(".stage-btn.active").get_attribute("data-stage") == "slot_mapping"
    assert "Paused at Slot mapping" in page.locator("#pb-status").inner_text()
    shot(page, "teach-playback.png")
    page.wait_for_function(
        "window.seen.length && window.seen.at(-1)[0] === 'slot_mapping' && "
        "window.seen.at(-1)[1].includes('slot_mapping[')"
    )
    seen = page.evaluate("window.seen")
    order = [s for s, _ in seen]
    assert order == names[: stop_at + 1], order  # from the first stage, every stage once, in order
    # each stage was shown with its own narration: its title, and its formula where it has one
    titles = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('.stage-btn')]"
        ".map(b => [b.dataset.stage, b.querySelector('.stage-title').textContent]))"
    )
    for stage, text in seen:
        assert text.startswith(f"This stage: {titles[stage]}"), (stage, text)
        if stage not in ("update_states", "attn_metadata"):
            assert f"{stage}[" in text, (stage, text)
    page.locator("body").press("p")  # continue to the end
    page.wait_for_function(f"document.querySelector('.stage-btn.active').dataset.stage === '{names[-1]}'")
    page.wait_for_function("document.getElementById('pb-play').getAttribute('aria-pressed') === 'false'")
    assert page.locator("body").get_attribute("data-step") == "2"  # one step, not the next
    # Chinese labels
    page.click("[data-lang='zh']")
    assert HAN.search(page.locator("#pb-h").inner_text())
    assert HAN.search(page.locator("#pb-play").inner_text())


def test_a_step_change_keeps_the_pause_points_and_the_what_if_table_and_rewrites_their_values(
    page: object,
) -> None:
    from pagedviz.core import load_preset, make_engine
    from pagedviz.core.metrics import run_metrics

    steps = run_metrics(list(make_engine(load_preset("seed-001")).run()))["steps"]
    open_run(page, "preset=seed-001&step=2")
    page.wait_for_selector("#wi-delta-table")
    row = "#wi-delta-table tr[data-metric='wi_blocks_step']"
    assert page.locator(f"{row} td").all_inner_texts() == [str(steps[1]["blocks_used"])] * 2 + ["0"]
    page.evaluate(
        "window.kept = [document.querySelector(\"#pb-points button[data-stage='slot_mapping']\"),"
        " document.getElementById('wi-delta-table')]"
    )
    point = page.locator("#pb-points button[data-stage='slot_mapping']")
    point.click()
    assert point.get_attribute("aria-pressed") == "true"
    page.keyboard.press("ArrowRight")  # from the pause point that has the focus
    page.wait_for_selector("body[data-step='3']", state="attached")
    page.wait_for_function(f"document.querySelector(\"{row} th\").textContent.includes('3')")
    # the same nodes, the focus and the chosen point kept; the values are step 3's
    assert page.evaluate("window.kept.every((n) => n.isConnected)")
    assert page.evaluate("document.activeElement === window.kept[0]")
    assert point.get_attribute("aria-pressed") == "true"
    assert page.locator(f"{row} td").all_inner_texts() == [str(steps[2]["blocks_used"])] * 2 + ["0"]
    assert page.locator("#wi-delta-table").count() == 1 and page.locator("[id='whatif-table']").count() <= 1
    # a language change builds them again, in Chinese
    page.click("[data-lang='zh']")
    page.wait_for_function("!window.kept[0].isConnected")
    assert HAN.search(page.locator("#pb-points button").first.get_attribute("aria-label"))
    assert point.get_attribute("aria-pressed") == "true"  # the chosen point, in the rebuilt buttons


def test_no_id_is_used_twice_where_the_what_if_panel_meets_the_features_what_if_card(page: object) -> None:
    # demo-max-model-len shows the features panel's what-if card (its table #whatif-table) beside
    # the what-if panel's delta table: they once shared that id
    open_run(page, "preset=demo-max-model-len&step=1")
    page.wait_for_selector("#wi-delta-table")
    page.wait_for_selector("#whatif-table")
    dupes = page.evaluate(
        "(() => { const c = {};"
        " for (const e of document.querySelectorAll('[id]')) c[e.id] = (c[e.id] || 0) + 1;"
        " return Object.keys(c).filter((k) => c[k] > 1); })()"
    )
    assert dupes == []
    assert page.locator("#whatif-table").evaluate("t => t.closest('#features') !== null")


# ------------------------------------------------------------------ 3. lessons
def _steps(preset: str) -> list:
    from pagedviz.core import load_preset, make_engine

    return list(make_engine(load_preset(preset)).run())


def test_the_landing_page_starts_with_the_lesson_and_its_panel_drives_the_view(page: object) -> None:
    import json

    shipped = json.loads(
        (Path(__file__).resolve().parents[2] / "core" / "lessons" / "paged-attention-50.json").read_text()
    )
    # the paragraphs as served: their numbers filled in from the runs
    secs = page.request.get(f"{page.base}/api/lessons/paged-attention-50").json()["sections"]
    page.goto(page.base + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    card = page.locator(".lesson-card").first
    assert card.locator("h3").inner_text() == shipped["title"]["en"]
    # the lesson comes before the presets
    assert card.bounding_box()["y"] < page.locator("#presets-h").bounding_box()["y"]
    shot(page, "teach-landing.png")
    card.locator("a.button").click()
    page.wait_for_selector("body[data-lesson-section='0']", timeout=60_000)
    assert page.locator("#lesson-sec-title").inner_text() == secs[0]["title"]["en"]
    assert page.locator("#lesson-pos").inner_text() == f"Section 1 / {len(secs)}"
    # next section (keyboard): its selection lights up request 2's row
    page.focus("#lesson-next")
    page.keyboard.press("Enter")
    page.wait_for_selector("body[data-lesson-section='1']")
    assert secs[1]["selection"] == {"kind": "request", "id": "2"}
    assert page.locator("#request-table tr.hl").get_attribute("data-r") == "2"
    assert page.locator("#lesson-text").inner_text() == secs[1]["paragraph"]["en"]
    # the section with a checkpoint hides the block table until the student predicts it
    page.keyboard.press("Enter")
    page.wait_for_selector("body[data-lesson-section='2']")
    cp = secs[2]["checkpoint"]
    assert "concealed-card" in classes(page, "#card-block_table")
    truth = _steps(secs[2]["scenario"])[secs[2]["step"] - 1].arrays[cp["array"]].reshape(-1)
    expected = [int(truth[i]) for i in cp["indices"]]
    for k, v in enumerate(expected):
        page.fill(f"#predict-{k}", str(v + 1 if k == 1 else v))  # the second one wrong
    shot(page, "teach-lesson-predict.png")
    page.press("#predict-0", "Enter")
    # a first wrong answer: a hint for the wrong entry, not its value; the block table still hidden
    page.wait_for_selector("body[data-predict='hint']")
    assert page.locator("#predict-result p").first.inner_text().startswith("Not yet: 2 of 3 right.")
    # the array's rule once, and the wrong entry's own hint (its request and logical block)
    assert "free queue" in page.locator("#predict-result .predict-rule").inner_text()
    assert page.locator("#predict-result li").count() == 1
    assert "request 2's logical block 1" in page.locator("#predict-result li").inner_text()
    assert "concealed-card" in classes(page, "#card-block_table")
    page.click("#predict-check")  # wrong again: revealed, with the cause from the trace
    page.wait_for_selector("body[data-predict='revealed']")
    assert page.locator("#predict-result p").first.inner_text() == "2 of 3 right."
    why = page.locator("#predict-result li").inner_text()
    assert f"it is {expected[1]}" in why and "block_table" in why
    assert "concealed-card" not in classes(page, "#card-block_table")
    assert "bad" in classes(page, "#predict-1") and "ok" in classes(page, "#predict-0")
    shot(page, "teach-lesson-revealed.png")
    # a section on another scenario loads its run in place, at its step and stage
    k = next(i for i, s in enumerate(secs) if s["scenario"] != secs[0]["scenario"])
    page.click(".lesson-toc-box summary")
    page.click(f"#lesson-toc button[data-sec='{k}']")
    page.wait_for_selector(f"body[data-lesson-section='{k}']", timeout=60_000)
    assert page.locator("body").get_attribute("data-step") == str(secs[k]["step"])
    assert page.locator(".stage-btn.active").get_attribute("data-stage") == secs[k]["stage"]
    assert "lesson=paged-attention-50" in page.url and f"sec={k}" in page.url
    # in Chinese, the lesson speaks Chinese
    page.click("[data-lang='zh']")
    assert page.locator("#lesson-text").inner_text() == secs[k]["paragraph"]["zh"]
    assert page.locator("#lesson-title").inner_text() == shipped["title"]["zh"]
    shot(page, "teach-lesson-zh.png")


def test_a_lecturers_lesson_file_is_checked_by_field_and_shared_as_a_link(page: object) -> None:
    import json

    page.goto(page.base + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    page.click(".lesson-loader summary")
    bad = {
        "title": {"en": "Mine"},
        "sections": [{"scenario": "seed-002", "step": 1, "stage": "nope", "paragraph": {"en": "x"}}],
    }
    upload = {"name": "bad.json", "mimeType": "application/json", "buffer": json.dumps(bad).encode()}
    page.set_input_files("#lesson-upload", files=[upload])
    page.wait_for_selector("#lesson-file-out.bad")
    assert "sections[0].stage: unknown stage 'nope'" in page.locator("#lesson-file-out").inner_text()
    good = {
        "title": {"en": "My <b>lesson</b>", "zh": "我的课"},
        "sections": [
            {
                "scenario": "seed-002",
                "step": 1,
                "stage": "slot_mapping",
                "selection": {"kind": "token", "id": 3},
                "paragraph": {
                    "en": "Token 3 <script>alert(1)</script> goes where?",
                    "zh": "第 3 个 token 写到哪里？",
                },
                "checkpoint": {"array": "slot_mapping", "indices": [3]},
            },
        ],
    }
    upload = {"name": "good.json", "mimeType": "application/json", "buffer": json.dumps(good).encode()}
    page.set_input_files("#lesson-upload", files=[upload])
    page.wait_for_selector("#lesson-file-out.ok")
    link = page.input_value("#lesson-link")
    assert "/run?l=" in link
    page.goto(link)
    page.wait_for_selector("body[data-lesson-section='0']", timeout=60_000)
    # the lecturer's text is shown as text, never as markup
    assert page.locator("#lesson-title").inner_text() == "My <b>lesson</b>"
    assert "<script>alert(1)</script>" in page.locator("#lesson-text").inner_text()
    assert page.locator("#lesson script, #lesson b").count() == 0
    assert page.locator(".stage-btn.active").get_attribute("data-stage") == "slot_mapping"
    assert (
        page.locator("#token-table th.tok-head.hl").count() + page.locator("#token-table td.hl").count() > 0
    )
    assert page.locator("#predict-0").count() == 1
    page.click("#lesson-share")
    assert page.input_value("#lesson-link").split("?")[1].startswith("l=")


# ------------------------------------------------------------------ 4. predict on any run
def test_predict_any_array_of_any_run_hides_it_then_checks_with_explanations(page: object) -> None:
    open_run(page, "preset=seed-001&step=2&stage=slot_mapping")
    # the current stage's own array is offered first
    assert page.locator("#predict-array").input_value() == "slot_mapping"
    page.fill("#predict-entries", "0-4")
    page.press("#predict-entries", "Enter")
    page.wait_for_selector("#predict-form")
    # the row is hidden in the token table, and so are the narration and formulas that give it away
    assert page.locator("#token-table tr[data-array='slot_mapping'] td.concealed").count() == 5
    assert "concealed" in classes(page, "#stage-values [data-array='slot_mapping']")
    page.wait_for_function("document.querySelector('#narr-stage p.concealed') !== null")
    truth = [int(x) for x in _steps("seed-001")[1].arrays["slot_mapping"]]
    # a value that is not a number: the message names the entry
    page.fill("#predict-0", "x")
    page.click("#predict-check")
    page.wait_for_function("document.getElementById('predict-msg').textContent.length > 0")
    assert page.locator("#predict-msg").inner_text().startswith("slot_mapping[0]: must be a number")
    for k, v in enumerate(truth):
        page.fill(f"#predict-{k}", str(v if k != 3 else v - 1))
    shot(page, "teach-predict.png")
    page.click("#predict-check")
    page.wait_for_selector("body[data-predict='hint']")  # a hint first, the row still hidden
    assert page.locator("#token-table tr[data-array='slot_mapping'] td.concealed").count() == 5
    page.click("#predict-check")
    page.wait_for_selector("body[data-predict='revealed']")
    assert page.locator("#predict-result p").first.inner_text() == "4 of 5 right."
    why = page.locator("#predict-result li[data-index='3']").inner_text()
    assert why.startswith(f"slot_mapping[3] you said {truth[3] - 1}, it is {truth[3]}:")
    assert f"= {truth[3]}" in why  # the formula with this entry's numbers
    assert page.locator("#token-table td.concealed").count() == 0
    shot(page, "teach-predict-revealed.png")
    # a bad list of entries is refused with the field named
    page.fill("#predict-entries", "9-99")
    page.click("#predict-start")
    assert page.locator("#predict-any-msg").inner_text().startswith("Entries:")
    page.click("[data-lang='zh']")
    assert HAN.search(page.locator("#predict-any-h").inner_text())


# ------------------------------------------------------------------ 5. what-if
def test_what_if_reruns_in_place_keeping_step_and_stage_with_a_delta_against_the_baseline(
    page: object,
) -> None:
    from pagedviz.core import Scenario, load_preset, make_engine
    from pagedviz.core.metrics import run_metrics

    open_run(page, "preset=seed-001&step=2&stage=slot_mapping")
    page.wait_for_selector("#wi-delta-table")
    assert page.locator("#wi-delta-table tr[data-metric='wi_blocks_step'] td").last.inner_text() == "0"
    # block size 4 instead of 2, from the keyboard
    page.focus("#wi-block_size")
    page.select_option("#wi-block_size", "4")
    page.focus("#whatif-run")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "document.getElementById('run-title').textContent.includes('what if: block_size 4')"
    )
    page.wait_for_selector("body[data-ready='1']")
    # same step and stage, and the run shows block size 4
    assert page.locator("body").get_attribute("data-step") == "2"
    assert page.locator(".stage-btn.active").get_attribute("data-stage") == "slot_mapping"
    assert "block size 4" in page.locator("#run-title").inner_text()
    assert "block size 2" not in page.locator("#run-title").inner_text()
    # the delta is the engine's own metrics of both runs (computed here, independently of the page)
    base = load_preset("seed-001")
    data = base.to_dict()
    data["config"]["block_size"] = 4
    m_base = run_metrics(list(make_engine(base).run()))
    m_new = run_metrics(list(make_engine(Scenario.from_dict(data)).run()))
    page.wait_for_function(
        "document.querySelector('#wi-delta-table tr[data-metric=\"wi_blocks_peak\"] td:nth-child(3)')"
        f".textContent === '{m_new['totals']['peak_blocks_used']}'"
    )
    row = page.locator("#wi-delta-table tr[data-metric='wi_blocks_peak'] td").all_inner_texts()
    a, b = m_base["totals"]["peak_blocks_used"], m_new["totals"]["peak_blocks_used"]
    assert row == [str(a), str(b), f"{b - a:+d}" if b != a else "0"]
    frag = page.locator("#wi-delta-table tr[data-metric='wi_frag_step'] td").all_inner_texts()
    fa, fb = m_base["steps"][1]["internal_fragmentation"], m_new["steps"][1]["internal_fragmentation"]
    assert frag[:2] == [str(fa), str(fb)]
    # the rerun is announced in one line; the table is not a live region (a screen reader would
    # read its values out again at every step)
    page.wait_for_function("document.getElementById('whatif-status').textContent.includes('block_size 4')")
    assert page.locator("#whatif-status").get_attribute("role") == "status"
    assert page.evaluate("document.getElementById('wi-delta-table').closest('[aria-live]')") is None
    shot(page, "teach-whatif.png")
    # a setting the server refuses: the message names the field
    page.evaluate("document.getElementById('wi-num_kv_blocks').value = 2")
    page.click("#whatif-run")
    page.wait_for_function("document.getElementById('whatif-msg').textContent.length > 0")
    assert "num_kv_blocks" in page.locator("#whatif-msg").inner_text()
    # back to the baseline, still at step 2
    page.click("#whatif-reset")
    page.wait_for_function("!document.getElementById('run-title').textContent.includes('what if')")
    # the baseline reloads in place: wait for it to settle at step 2 with no message left
    page.wait_for_function(
        "document.body.dataset.step === '2' && document.getElementById('whatif-msg').textContent === ''"
    )
    page.wait_for_function("document.getElementById('whatif-status').textContent.includes('baseline again')")
    page.click("[data-lang='zh']")
    assert HAN.search(page.locator("#whatif-h").inner_text())
    shot(page, "teach-whatif-zh.png")


# ------------------------------------------------------------------ 6. compare
def test_compare_prefix_caching_on_and_off_side_by_side_highlights_what_differs(page: object) -> None:
    import numpy as np

    from pagedviz.core import Scenario, load_preset, make_engine
    from pagedviz.core.narrate import narrate

    base = load_preset("demo-prefix-cache")
    assert base.config.enable_prefix_caching
    off = base.to_dict()
    off["config"]["enable_prefix_caching"] = False
    a, b = list(make_engine(base).run()), list(make_engine(Scenario.from_dict(off)).run())
    # the first step where A reuses cached blocks: its narration says so, B's does not
    n = next(
        i + 1
        for i, t in enumerate(a)
        if any(it["key"].startswith("prefix_hit:") for it in narrate(t, a[i - 1] if i else None, base.config))
    )
    ta, tb = a[n - 1].arrays, b[n - 1].arrays
    differ = sorted(
        k for k in set(ta) & set(tb) if ta[k].shape != tb[k].shape or not np.array_equal(ta[k], tb[k])
    )
    assert differ  # a prefix hit changes what is computed
    open_run(page, f"preset=demo-prefix-cache&step={n}&vs=enable_prefix_caching:false")
    page.wait_for_selector(f"body[data-compare='{n}']", timeout=60_000)
    shown = sorted(page.locator("#cmp-arrays tr.differs").evaluate_all("rs => rs.map(r => r.dataset.array)"))
    assert shown == differ
    assert page.locator("#cmp-arrays td .diff, #cmp-arrays td.diff").count() > 0
    only_a = page.locator(".cmp-two > div:first-child .cmp-narr li.only").evaluate_all(
        "ls => ls.map(l => l.dataset.key)"
    )
    assert any(k.startswith("prefix_hit:") for k in only_a)
    # the KV view: blocks whose owners or ref counts differ are marked on both sides
    kv_a = list(a[n - 1].kv_cache["ref_cnt"])
    kv_b = list(b[n - 1].kv_cache["ref_cnt"])
    if kv_a != kv_b:
        assert page.locator(".cmp-kv[data-side='a'] .kv-cell.diff").count() > 0
    # A's differing entries are marked in the token table above too
    token_level = [k for k in differ if a[n - 1].array_entries[k].level == "token"]
    if token_level:
        assert page.locator("#token-table td.cmp-diff").count() > 0
    shot(page, "teach-compare.png")
    page.locator("#compare").scroll_into_view_if_needed()
    shot(page, "teach-compare-panel.png")
    # the next step keeps the comparison, aligned by step
    page.locator("body").press("ArrowRight")
    page.wait_for_selector(f"body[data-compare='{n + 1}']")
    page.click("[data-lang='zh']")
    page.wait_for_function("document.getElementById('cmp-title').textContent.includes('对比')")
    shot(page, "teach-compare-zh.png")
    page.click("#cmp-close")
    assert page.locator("#compare").is_hidden() and "vs=" not in page.url


def test_compare_with_another_flavour_from_the_keyboard(page: object) -> None:
    open_run(page, "preset=seed-001&step=1")
    assert page.locator("#cmp-flavor").input_value() != "vllm"
    page.focus("#cmp-flavor")
    page.select_option("#cmp-flavor", "nanovllm")
    page.focus("#cmp-go-flavor")
    page.keyboard.press("Enter")
    page.wait_for_selector("body[data-compare='1']", timeout=60_000)
    assert "vs=flavor%3Ananovllm" in page.url or "vs=flavor:nanovllm" in page.url
    assert "(nanovllm)" in page.locator("#cmp-heads").inner_text()
    # arrays only vllm has are said to be in one run only
    row = page.locator("#cmp-arrays tr[data-array='req_indices']")
    assert "only one run has it" in row.inner_text()
    # the landing page lists the classic contrasts, each a link to such a view
    page.goto(page.base + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    hrefs = page.locator("#contrasts a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
    assert len(hrefs) == 7 and all("vs=" in h for h in hrefs)
    assert any("layer_types%3Afull_attention" in h for h in hrefs)  # (test_browser_hybrid_teach.py)
    assert any("model_runner%3Av1" in h for h in hrefs)  # V1 vs V2 (test_browser_v2_teach.py follows it)
    assert any("flavor%3Aascend" in h for h in hrefs) and any("block_size%3A256" in h for h in hrefs)
