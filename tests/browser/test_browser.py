"""The run page and the landing page's editor in a real Chromium (Debian's, driven by Playwright)
against a real uvicorn (tests/browser/conftest.py's server and browser)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.browser import open_run, shot
from tests.support.scenarios import LONG_RUN, make_scenario


def test_seed_001_step_2_stage_slot_mapping_shows_the_documents_slots(page: object) -> None:
    open_run(page, "preset=seed-001")
    page.click("#timeline [data-step='2']")
    page.wait_for_function("document.getElementById('step-label').textContent.includes('2 / 5')")
    page.click(".stage-btn[data-stage='slot_mapping']")
    line = page.locator("#stage-values [data-array='slot_mapping']")
    assert line.inner_text() == "slot_mapping = [5, 14, 13, 16, 17]"
    cells = page.locator("#token-table tr[data-array='slot_mapping'] td").all_inner_texts()
    assert cells == ["5", "14", "13", "16", "17"]
    assert "new blocks: 1 → [7], 2 → [8]" in page.locator("#changes").inner_text()
    assert page.locator("#badge-dense").inner_text().startswith("paged = dense ✓")
    shot(page, "run.png")


def test_hovering_the_third_token_lights_up_its_block_table_cell_and_slot(page: object) -> None:
    open_run(page, "preset=seed-001&step=2&stage=slot_mapping")
    page.hover("#token-table th.tok-head[data-t='2']")
    cell = page.locator("#table-block_table td[data-r='2'][data-c='2']")
    assert cell.inner_text() == "6"
    assert "hl" in cell.get_attribute("class").split()
    assert page.locator("#token-table td.hl").count() == 9  # the whole column of token 2
    assert page.locator("#request-table tr.hl").get_attribute("data-r") == "2"
    shapes = page.evaluate(
        "document.getElementById('hm-kv').layout.shapes.filter(s => s.line.color === '#000000')"
        ".map(s => [s.x0 + 0.5, s.y0 + 0.5])"
    )
    assert [1, 6] in shapes  # slot 13 = block 6, offset 1
    assert "slot 13 = 6 × 2 + 1" in page.locator("#selection").inner_text()
    assert page.locator("#stage-sub").inner_text() == (
        "slot_mapping[2] = block_numbers[2] * 2 + block_offsets[2] = 6 * 2 + 1 = 13"
    )
    # the KV table view marks the same slot
    page.click("#token-table th.tok-head[data-t='2']")
    page.click("#card-kv button:has-text('Table')")
    assert "hl" in page.locator("#table-kv td[data-slot='13']").get_attribute("class").split()


def test_chinese_stage_titles_and_the_copied_link_reopen_the_same_view(page: object, browser: object) -> None:
    open_run(page, "preset=seed-001")
    page.click("#timeline [data-step='2']")
    page.click(".stage-btn[data-stage='slot_mapping']")
    page.click("[data-lang='zh']")
    titles = page.locator(".stage-title").all_inner_texts()
    assert all(re.search(r"[\u4e00-\u9fff]", title) for title in titles), titles
    assert "槽位映射" in titles
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    page.wait_for_function("document.getElementById('run-title').textContent.startsWith('准备模型输入')")
    page.click("#btn-copy")
    link = page.input_value("#link-out")
    assert "step=2" in link and "stage=slot_mapping" in link and "lang=zh" in link and "s=" in link
    shot(page, "run-zh.png")
    other = browser.new_page()  # type: ignore[attr-defined]
    other.goto(link)
    other.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert other.locator(".stage-btn.active").get_attribute("data-stage") == "slot_mapping"
    assert other.locator("#timeline .tl-step.active").get_attribute("data-step") == "2"
    assert "槽位映射" in other.locator("#stage-title").inner_text()
    assert (
        other.locator("#stage-values [data-array='slot_mapping']")
        .inner_text()
        .endswith("[5, 14, 13, 16, 17]")
    )
    other.close()


def test_keyboard_moves_steps_and_stages(page: object) -> None:
    open_run(page, "preset=seed-001")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("document.getElementById('step-label').textContent.includes('2 / 5')")
    page.keyboard.press("ArrowDown")
    assert page.locator(".stage-btn.active").get_attribute("data-stage") == "req_indices"
    page.keyboard.press("?")
    assert page.locator("#help").is_visible()


def test_a_stage_pressed_from_the_keyboard_keeps_the_focus_and_the_one_mark(page: object) -> None:
    """The stage list is kept across stage and step changes (only its mark moves): a keyboard
    reader who presses a stage stays on it, exactly one stage is current, and a language change
    still retitles the list."""
    open_run(page, "preset=seed-001")
    page.focus(".stage-btn[data-stage='positions']")
    page.keyboard.press("Enter")
    page.wait_for_selector(".stage-btn.active[data-stage='positions']")
    assert page.evaluate("document.activeElement.dataset.stage") == "positions"
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # the next stage, pressed from where the focus went
    current = page.locator(".stage-btn[aria-current='step']")
    assert current.count() == 1 and current.get_attribute("data-stage") != "positions"
    assert page.locator(".stage-btn.active").count() == 1
    page.click("#btn-next")
    page.wait_for_function("document.getElementById('step-label').textContent.includes('2 / 5')")
    assert page.locator(".stage-btn[aria-current='step']").count() == 1
    en = page.locator(".stage-btn .stage-title").first.inner_text()
    page.click("[data-lang='zh']")
    page.wait_for_function(f"document.querySelector('.stage-btn .stage-title').textContent !== {en!r}")
    assert page.locator(".stage-btn[aria-current='step']").count() == 1


def test_timeline_kinds_play_source_and_exports(page: object, tmp_path: Path) -> None:
    import httpx

    open_run(page, "preset=seed-001&stage=slot_mapping")
    kinds = page.evaluate(
        "[...document.querySelectorAll('#timeline .tl-step')]"
        ".map(b => [...b.classList].find(c => c.startsWith('kind-')))"
    )
    assert kinds == ["kind-prefill", "kind-mixed", "kind-decode", "kind-decode", "kind-decode"]
    # the stage shows its explanation (the engine's @stage text, GET /api/stages/text) and its source
    assert "KV-cache slot where each token's K and V are written" in page.locator("#stage-expl").inner_text()
    page.click("#stage-detail details.source summary")
    assert "def _slot_mapping(self)" in page.locator("#stage-source").inner_text()
    # play at x4 runs to the last step and stops there
    page.select_option("#speed", "4")
    page.click("#btn-play")
    page.wait_for_selector("body[data-step='5']", timeout=10_000)
    page.wait_for_function("document.getElementById('btn-play').textContent === '▶'")
    # the export links serve the step's array; the heatmap's PNG button saves a PNG
    href = page.locator("#token-table a[aria-label='slot_mapping csv']").get_attribute("href")
    assert "/steps/5/arrays/slot_mapping?format=csv" in href
    from pagedviz.core import load_preset, make_engine

    last = list(make_engine(load_preset("seed-001")).run())[-1].arrays["slot_mapping"]
    rows = httpx.get(page.base + href, timeout=60).text.split()
    assert rows[0] == "index,slot_mapping" and rows[1:] == [f"{i},{v}" for i, v in enumerate(last)]
    page.wait_for_function("Boolean(document.getElementById('hm-kv').data)")
    with page.expect_download() as dl:
        page.click("#card-kv button[aria-label='kv PNG']")
    png = tmp_path / "kv.png"
    dl.value.save_as(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_editor_refuses_a_bad_scenario_with_the_apis_message(page: object) -> None:
    page.goto(page.base + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert page.locator(".preset-card").count() >= 4
    page.wait_for_selector("#validation.ok")
    shot(page, "landing.png")
    page.fill("#f-block_size", "0")
    page.wait_for_selector("#validation.bad")
    assert "config.block_size: must be >= 1 (got 0)" in page.locator("#validation").inner_text()
    assert page.locator("#btn-run").is_disabled()
    page.fill("#f-block_size", "2")
    page.wait_for_selector("#validation.ok")
    page.click("#btn-run")
    page.wait_for_url(re.compile(r"/run\?s="))
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert page.locator("#timeline .tl-step").count() == 5


def test_editor_device_choice_is_checked_against_this_server(page: object) -> None:
    import torch

    page.goto(page.base + "/")
    page.wait_for_selector("#validation.ok", timeout=30_000)
    assert page.locator("#f-device").input_value() == "auto"
    page.select_option("#f-device", "cpu")
    page.wait_for_selector("#validation.ok")
    if torch.cuda.is_available():
        return
    page.select_option("#f-device", "cuda")
    page.wait_for_selector("#validation.bad")
    assert page.locator("#validation").inner_text() == (
        "config.device: cuda was asked for but torch sees no CUDA GPU"
    )
    assert page.locator("#btn-run").is_disabled()


def test_rest_api_docs_render_with_no_network_beyond_the_server(page: object) -> None:
    # every request that would leave the server fails: the docs must not need a CDN
    left: list[str] = []

    def only_local(route: object) -> None:
        url = route.request.url  # type: ignore[attr-defined]
        if url.startswith(page.base):
            route.continue_()  # type: ignore[attr-defined]
        else:
            left.append(url)
            route.abort()  # type: ignore[attr-defined]

    page.route("**/*", only_local)
    page.goto(page.base + "/")
    page.click("a:has-text('REST API')")
    page.wait_for_url(re.compile(r"/docs$"))
    page.wait_for_selector(".opblock", timeout=30_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert "/api/runs" in [p.replace("\u200b", "") for p in paths]
    assert left == []


def test_scenario_json_downloads_and_uploads_round_trip(page: object, tmp_path: Path) -> None:
    import json

    page.goto(page.base + "/")
    page.wait_for_selector("#validation.ok", timeout=30_000)
    with page.expect_download() as dl:
        page.click("#btn-download")
    saved = tmp_path / "scenario.json"
    dl.value.save_as(saved)
    scenario = json.loads(saved.read_text())
    assert scenario["name"] == "seed-001" and scenario["config"]["block_size"] == 2
    assert [r["prompt"] for r in scenario["requests"]] == ["Hi!", "Go", "KV cache"]
    # edit the file as a user would, then load it back
    scenario["name"] = "from a file"
    scenario["config"]["block_size"] = 4
    scenario["requests"].append({"id": "3", "prompt_len": 5, "max_tokens": 2, "arrival_step": 2})
    saved.write_text(json.dumps(scenario))
    page.set_input_files("#upload", str(saved))
    page.wait_for_function("document.getElementById('f-name').value === 'from a file'")
    assert page.locator("#f-block_size").input_value() == "4"
    assert page.locator("#req-rows tr").count() == 4
    page.wait_for_function("document.getElementById('validation').textContent.includes('4 requests')")
    assert page.locator("#validation.ok").count() == 1
    # a file that is not JSON is refused with its name, and the form keeps what it had
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    page.set_input_files("#upload", str(broken))
    page.wait_for_selector("#validation.bad")
    assert page.locator("#validation").inner_text().startswith("broken.json: ")
    assert page.locator("#f-name").input_value() == "from a file"


def test_run_page_editor_reruns_an_edited_scenario_and_refuses_a_bad_one(page: object) -> None:
    import json

    open_run(page, "preset=seed-001&step=2")
    page.click("#editor-panel summary")
    # the editor is filled as it opens (its toggle event)
    page.wait_for_function("document.getElementById('scenario-json').value.length > 0")
    scenario = json.loads(page.locator("#scenario-json").input_value())
    assert scenario["name"] == "seed-001"
    scenario["config"]["max_num_batched_tokens"] = 0
    page.fill("#scenario-json", json.dumps(scenario))
    page.click("#btn-rerun")
    page.wait_for_selector("#editor-msg li")
    assert "config.max_num_batched_tokens: must be >= 1 (got 0)" in page.locator("#editor-msg").inner_text()
    scenario["config"]["max_num_batched_tokens"] = 4  # a smaller budget: more, smaller steps
    page.fill("#scenario-json", json.dumps(scenario))
    with page.expect_navigation():
        page.click("#btn-rerun")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert page.locator("#timeline .tl-step").count() > 5
    assert page.locator("#step-label").inner_text().startswith("Step 1 /")


def test_a_long_run_shows_its_progress_while_it_computes(page: object) -> None:
    from pagedviz.app.links import pack

    page.goto(f"{page.base}/run?s={pack(LONG_RUN)}")
    # the page draws step 1 while the run computes (it streams): the timeline's pending mark says
    # how far the run has come, then the timeline takes in every step
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    page.wait_for_function(
        f"/Computing the run: step [0-9]+ of at most {LONG_RUN['max_steps']}/.test("
        "document.querySelector('#timeline .tl-pending')?.getAttribute('aria-label'))",
        timeout=30_000,
    )
    page.wait_for_selector("body[data-complete='1']", timeout=120_000)
    assert page.locator("#status").inner_text() == ""
    assert page.locator("#timeline .tl-step").count() == LONG_RUN["max_steps"]


def test_a_long_run_completes_though_some_of_its_progress_polls_get_no_answer(
    browser: object, base_url: str
) -> None:
    from pagedviz.app.links import pack

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    problems: list[str] = []  # any console error but the dropped connections' own
    reset = "ERR_CONNECTION_RESET"
    page.on(
        "console", lambda m: problems.append(m.text) if m.type == "error" and reset not in m.text else None
    )
    page.on("pageerror", lambda e: problems.append(str(e)))
    dropped: list[str] = []
    armed = [False]

    def flaky(route: object) -> None:
        # the first three progress polls once step 1 is on screen lose their connection
        if armed[0] and len(dropped) < 3:
            dropped.append(route.request.url)
            route.abort("connectionreset")
        else:
            route.continue_()

    page.route("**/progress", flaky)
    page.goto(f"{base_url}/run?s={pack({**LONG_RUN, 'seed': 11})}")
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    assert page.evaluate("document.body.dataset.complete") == "0"  # it streams
    armed[0] = True
    page.wait_for_selector("body[data-complete='1']", state="attached", timeout=120_000)
    assert len(dropped) == 3
    assert page.locator("#status").inner_text() == ""
    assert page.locator("#timeline .tl-step").count() == LONG_RUN["max_steps"]
    assert problems == []
    context.close()


def test_the_landing_run_button_shows_progress_of_a_long_run(page: object) -> None:
    import json

    page.goto(page.base + "/")
    page.wait_for_selector("#validation.ok", timeout=30_000)
    page.set_input_files(
        "#upload",
        files=[
            {
                "name": "long.json",
                "mimeType": "application/json",
                "buffer": json.dumps({**LONG_RUN, "seed": 5}).encode(),
            }
        ],
    )
    page.wait_for_function("document.getElementById('f-name').value === 'long'")
    page.wait_for_function("document.getElementById('validation').textContent.includes('8 requests')")
    page.click("#btn-run")
    page.wait_for_function(
        "document.getElementById('run-status').textContent.startsWith('Computing the run: step')",
        timeout=30_000,
    )
    page.wait_for_url(re.compile(r"/run\?s="), timeout=60_000)
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)


HOSTILE_NAME = "<img src=x onerror=alert(1)>"


def test_names_and_prompts_are_shown_as_text_never_as_markup(page: object) -> None:
    import httpx

    scenario = {
        "name": HOSTILE_NAME,
        "config": {
            "block_size": 2,
            "max_model_len": 16,
            "max_num_reqs": 4,
            "max_num_batched_tokens": 6,
            "num_kv_blocks": 12,
        },
        "requests": [
            {"id": "<b>bold</b>", "prompt": "a<i>b", "max_tokens": 3},
            {"id": "x&amp;y", "prompt_len": 7, "max_tokens": 4},
        ],
    }
    created = httpx.post(f"{page.base}/api/runs", json=scenario, timeout=60)
    assert created.status_code == 201, created.text
    page.goto(page.base + created.json()["url"] + "&step=2")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert page.locator("#run-title").inner_text() == HOSTILE_NAME
    ids = page.locator("#request-table td.req-cell").all_inner_texts()
    assert ids == ["<b>bold</b>", "x&amp;y"]
    assert "new blocks: x&amp;y → [5, 6]" in page.locator("#changes").inner_text()
    # the KV heatmap names the owners in its legend: as the characters typed, not as markup
    page.wait_for_function("document.getElementById('hm-kv') && document.getElementById('hm-kv').data")
    ticks = page.evaluate("document.getElementById('hm-kv').layout.legend")
    assert "<b>bold</b>" in ticks and "x&amp;y" in ticks
    assert page.locator("#hm-kv b").count() == 0
    # and so does the table view
    page.click("#card-kv button:has-text('Table')")
    assert page.locator("#table-kv td[data-slot='2']").inner_text() == "<b>bold</b>"
    assert page.locator("img[src='x']").count() == 0
    assert page.locator("#main b, #main i").count() == 0


def test_presentation_mode_hides_the_editor(page: object) -> None:
    open_run(page, "preset=seed-000&present=1&step=2")
    assert page.locator("#editor-panel").is_hidden()
    assert page.locator("#timeline").is_visible() and page.locator("#btn-next").is_visible()
    size = page.evaluate("parseFloat(getComputedStyle(document.body).fontSize)")
    assert size >= 20
    shot(page, "present.png")
    page.click("#btn-present")
    assert page.locator("#editor-panel").is_visible()


@pytest.mark.parametrize("query", ["preset=seed-001&step=2", "preset=seed-001&step=2&present=1"])
def test_a_narrow_window_gets_one_column_and_no_sideways_page_scroll(page: object, query: str) -> None:
    page.set_viewport_size({"width": 800, "height": 1000})
    open_run(page, query)
    # the stages sit above the panels, and nothing makes the page itself wider than the window
    stages = page.locator("aside.stages").bounding_box()
    panels = page.locator("section.panels").bounding_box()
    assert panels["y"] >= stages["y"] + stages["height"] - 1
    assert page.evaluate("document.documentElement.scrollWidth") <= 800


def test_ascend_mask_row_follows_the_hovered_token(page: object) -> None:
    open_run(page, "preset=seed-001-ascend&step=2&stage=attn_mask")
    assert "attn_state: ChunkedPrefill" in page.locator("#badges").inner_text()
    page.hover("#token-table th.tok-head[data-t='2']")
    rows = page.evaluate("document.getElementById('hm-attn_mask').layout.shapes.map(s => s.y0 + 0.5)")
    assert rows == [2]
    assert page.locator("#stage-sub").inner_text().startswith("attn_mask[2] = causal row of position 5")


def test_nanovllm_run_shows_its_own_arrays(page: object) -> None:
    open_run(page, "preset=seed-004&stage=slot_mapping")
    slots = page.locator("#stage-values [data-array='slot_mapping']").inner_text()
    assert slots.startswith("slot_mapping = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 256, 257")
    page.keyboard.press("ArrowRight")
    page.wait_for_selector("body[data-step='2']")
    assert (
        page.locator("#stage-values [data-array='slot_mapping']").inner_text() == "slot_mapping = [11, 273]"
    )
    page.hover("#token-table th.tok-head[data-t='1']")
    assert "slot 273 = 1 × 256 + 17" in page.locator("#selection").inner_text()


def test_nanovllm_stages_explain_nano_vllm_not_vllm(page: object) -> None:
    # nano-vllm concatenates each sequence's own tokens: the input_ids text must not describe vLLM's gather
    open_run(page, "preset=seed-004&stage=input_ids")
    expl = page.locator("#stage-expl").inner_text()
    assert "no token-id table" in expl and "token_indices" in expl
    # a prefill without a cache hit has no block_tables; the slot's block is read off the slot
    page.click("#stage-list button[data-stage='slot_mapping']")
    page.hover("#token-table th.tok-head[data-t='12']")
    assert page.locator("#stage-sub").inner_text() == (
        "slot_mapping[12] = seq.block_table[1 // 256] * 256 + 1 % 256 = 1 * 256 + 1 = 257"
    )


def test_kv_owners_outside_the_step_batch_keep_their_request_colour(page: object) -> None:
    import httpx

    # nano-vllm runs prefill-only steps: while "late" prefills in step 3, "early" holds its blocks
    # without being in the batch
    scenario = {
        "name": "prefill while another decodes",
        "flavor": "nanovllm",
        "config": {
            "block_size": 4,
            "max_model_len": 32,
            "max_num_reqs": 4,
            "max_num_batched_tokens": 32,
            "num_kv_blocks": 12,
        },
        "requests": [
            {"id": "early", "prompt_len": 6, "max_tokens": 6},
            {"id": "late", "prompt_len": 5, "max_tokens": 2, "arrival_step": 3},
        ],
    }
    created = httpx.post(f"{page.base}/api/runs", json=scenario, timeout=60)
    assert created.status_code == 201, created.text
    page.goto(page.base + created.json()["url"] + "&step=3")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert page.locator("#request-table td.req-cell").all_inner_texts() == ["late"]
    page.wait_for_function("document.getElementById('hm-kv') && document.getElementById('hm-kv').data")
    ticks = page.evaluate("document.getElementById('hm-kv').layout.legend")
    # one colour per request for the whole run (a fixed domain): early keeps its own colour while it
    # sits outside the batch, beside late's
    assert ticks == ["early", "late"]
    z = page.evaluate("document.getElementById('hm-kv').data[0].z.map(row => row[0])")
    # early's two blocks are category 0, late's two are category 1, the rest are free (null)
    assert sorted(v for v in z if v is not None) == [0, 0, 1, 1]


def test_prefix_cache_hits_are_new_to_the_request_that_found_them_and_shown_as_shared(page: object) -> None:
    import httpx

    scenario = {
        "name": "prefix cache",
        "config": {
            "block_size": 4,
            "max_model_len": 32,
            "max_num_reqs": 4,
            "max_num_batched_tokens": 64,
            "num_kv_blocks": 24,
            "enable_prefix_caching": True,
            "model_runner": "v1",  # V1's block_table: a row per batch row
        },
        "requests": [
            {"id": "a", "prompt": "the same long prefix!", "max_tokens": 3},
            {"id": "b", "prompt": "the same long prefix?", "max_tokens": 3, "arrival_step": 2},
        ],
    }
    created = httpx.post(f"{page.base}/api/runs", json=scenario, timeout=60)
    assert created.status_code == 201, created.text
    page.goto(page.base + created.json()["url"] + "&step=2")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    # b found a's five full prefix blocks and got one block of its own
    assert "new blocks: b → [1, 2, 3, 4, 5, 7]" in page.locator("#changes").inner_text()
    new_cells = page.locator("#table-block_table td.new")
    assert {(c.get_attribute("data-r"), c.inner_text()) for c in new_cells.all()} == {
        ("1", "1"),
        ("1", "2"),
        ("1", "3"),
        ("1", "4"),
        ("1", "5"),
        ("1", "7"),
    }
    page.wait_for_function("document.getElementById('hm-kv') && document.getElementById('hm-kv').data")
    ticks = page.evaluate("document.getElementById('hm-kv').layout.legend")
    assert ticks == ["a", "b", "shared (prefix cache)"]
    owner_of_block = page.evaluate("document.getElementById('hm-kv').data[0].z.map(row => row[0])")
    assert owner_of_block[1:8] == [2, 2, 2, 2, 2, 0, 1]


def test_an_idle_step_still_draws_the_empty_tables_on_their_own_axes(page: object) -> None:
    import httpx

    scenario = {
        "name": "late arrival",
        "config": {
            "block_size": 2,
            "max_model_len": 16,
            "max_num_reqs": 4,
            "max_num_batched_tokens": 16,
            "num_kv_blocks": 12,
            "model_runner": "v1",  # V1's token_ids_cpu and its batch rows
        },
        "requests": [{"id": "a", "prompt_len": 4, "max_tokens": 2, "arrival_step": 3}],
    }
    created = httpx.post(f"{page.base}/api/runs", json=scenario, timeout=60)
    assert created.status_code == 201, created.text
    page.goto(page.base + created.json()["url"] + "&step=1")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert "Idle step" in page.locator("#main").inner_text()
    # every cell is empty, yet the axes are the tables' own: twelve free blocks, four batch rows
    ranges = page.evaluate(
        "['hm-kv', 'hm-token_ids_cpu'].map(id => document.getElementById(id).layout)"
        ".map(l => [l.yaxis.range, l.xaxis.range])"
    )
    assert ranges == [[[11.5, -0.5], [-0.5, 1.5]], [[3.5, -0.5], [-0.5, 15.5]]]
    ticks = page.evaluate("document.getElementById('hm-kv').layout.yaxis.ticktext")
    assert sorted(int(t) for t in ticks) == list(range(12))


def test_a_big_step_lists_its_changes_in_brief_with_the_rest_in_the_tooltip(page: object) -> None:
    import httpx

    scenario = {
        "name": "many requests",
        "config": {
            "block_size": 16,
            "max_model_len": 512,
            "max_num_reqs": 128,
            "max_num_batched_tokens": 4096,
            "num_kv_blocks": 4096,
            "model": None,
        },
        "requests": [{"id": f"r{i}", "prompt_len": 40 + (i * 7) % 300, "max_tokens": 20} for i in range(120)],
    }
    created = httpx.post(f"{page.base}/api/runs", json=scenario, timeout=60)
    assert created.status_code == 201, created.text
    page.goto(page.base + created.json()["url"] + "&step=2")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    chip = page.locator("#changes .chip.newblocks")
    shown = chip.inner_text()
    assert "r29 → [272–281]" in shown and shown.endswith("… (+11 more)")
    full = chip.get_attribute("title")
    assert full.count("→") == 19 and "r45 → [531, 532, 533]" in full


def test_preemption_and_condense_are_marked(page: object) -> None:
    import httpx

    scenario = make_scenario(
        [{"id": "A", "prompt_len": 4, "max_tokens": 4}, {"id": "B", "prompt_len": 4, "max_tokens": 4}]
    ).to_dict()
    created = httpx.post(f"{page.base}/api/runs", json=scenario, timeout=60).json()
    open_run(page, f"s={created['link']}")
    step2 = page.locator("#timeline [data-step='2']")
    assert step2.locator(".mark-preempt").count() == 1
    assert "preempted B" in step2.get_attribute("aria-label")
    step2.click()
    page.wait_for_selector("body[data-step='2']")
    assert "preempted: B" in page.locator("#changes").inner_text()
    page.click("#timeline [data-step='5']")
    page.wait_for_selector("body[data-step='5']")
    assert "resumed: B" in page.locator("#changes").inner_text()


def test_clicking_a_kv_block_selects_the_tokens_in_it(page: object) -> None:
    open_run(page, "preset=seed-001&step=1&stage=slot_mapping")
    page.click("#card-kv button:has-text('Table')")
    page.click("#table-kv tbody tr[data-r='5'] th")  # block 5 holds request 2's positions 2 and 3
    assert page.locator("#selection").inner_text().startswith("block 5")
    heads = page.locator("#token-table th.tok-head.hl").all_inner_texts()
    assert heads == ["7", "8"]
    assert page.locator("#request-table tr.hl").get_attribute("data-r") == "2"


def test_keyboard_only_selection_with_a_visible_focus(page: object) -> None:
    open_run(page, "preset=seed-001&step=2&stage=slot_mapping")
    page.focus("#token-table th.tok-head[data-t='0']")
    for _ in range(2):
        page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.dataset.t")
    assert focused == "2"
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"
    assert "slot 13" in page.locator("#selection").inner_text()
    assert page.locator("#table-block_table td[data-r='2'][data-c='2'].hl").count() == 1


VIEW_MODULES = {  # each view of the run page and the module named for it
    "timeline.js": "buildTimeline",
    "stages.js": "renderStageDetail",
    "tables.js": "renderTokenTable",
    "heatmaps.js": "drawBlockTable",
    "kvgrid.js": "drawKv",
    "hover.js": "applySelection",
    "export.js": "exportLinks",
    "features.js": "renderFeatures",
}


def test_the_run_page_loads_every_module_and_each_view_from_its_own(page: object) -> None:
    open_run(page, "preset=seed-001&step=2")
    static = Path(__file__).resolve().parents[2] / "static"
    loaded = page.evaluate(
        "performance.getEntriesByType('resource').map(e => new URL(e.name).pathname)"
        ".filter(p => p.startsWith('/static/') && p.endsWith('.js')).map(p => p.slice('/static/'.length))"
    )
    # every module in static/ but the landing page's own (and its recordings list) is part of the
    # run page: none is left over
    landing_only = ("landing.js", "recordings.js")
    assert sorted(set(loaded)) == sorted(p.name for p in static.glob("*.js") if p.name not in landing_only)
    for module, view in VIEW_MODULES.items():
        exports = page.evaluate(f"import('/static/{module}').then(m => Object.keys(m))")
        assert view in exports, (module, exports)
    # and the views drew: the timeline, the tables, the heatmaps and the KV grid
    assert page.locator("#timeline .tl-step").count() == 5
    assert page.locator("#token-table td").count() > 0
    page.wait_for_function("Boolean(document.getElementById('hm-kv').data)")


def _upload(page: object, scenario: dict, name: str = "scenario.json") -> None:
    import json

    upload = {"name": name, "mimeType": "application/json", "buffer": json.dumps(scenario).encode()}
    page.set_input_files("#upload", files=[upload])


def test_editor_shows_each_problem_next_to_its_field(page: object) -> None:
    import httpx

    from pagedviz.core import load_preset

    page.goto(page.base + "/")
    page.wait_for_selector("#validation.ok", timeout=30_000)
    scenario = load_preset("seed-001").to_dict()
    scenario["config"]["block_sise"] = 4  # misspelt: the form has no field for it
    scenario["config"]["block_size"] = 0
    scenario["requests"][1]["max_tokens"] = 0
    problems = httpx.post(f"{page.base}/api/scenarios/validate", json=scenario, timeout=60).json()["detail"]
    said = {p["field"]: p["message"] for p in problems}
    assert {"config.block_sise", "config.block_size", "requests[1].max_tokens"} <= set(said)
    _upload(page, scenario)
    page.wait_for_selector("#validation.bad")
    # the unknown field at the top of its fieldset, with its path and the API's own words
    unknown = page.locator("#config-errors li").all_inner_texts()
    assert unknown == [f"config.block_sise: {said['config.block_sise']}"]
    assert "unknown field" in unknown[0]
    if "did you mean" in said["config.block_sise"]:
        assert "block_size" in unknown[0].split("did you mean", 1)[1]
    # the others beside their inputs, which are marked invalid
    beside = page.locator("label[data-field='block_size'] .field-error")
    assert beside.inner_text() == said["config.block_size"]
    assert page.get_attribute("#f-block_size", "aria-invalid") == "true"
    described = page.get_attribute("#f-block_size", "aria-describedby").split()
    assert page.locator(f"#{described[0]}").inner_text() == said["config.block_size"]
    row = page.locator("#req-rows tr").nth(1)
    assert row.locator(".field-error").all_inner_texts() == [said["requests[1].max_tokens"]]
    assert row.locator(".r-max").get_attribute("aria-invalid") == "true"
    shot(page, "editor-errors.png")
    # fixing one field takes its message away and leaves the others
    page.fill("#f-block_size", "2")
    page.wait_for_selector("label[data-field='block_size'] .field-error", state="detached")
    assert page.get_attribute("#f-block_size", "aria-invalid") is None
    assert "err-" not in (page.get_attribute("#f-block_size", "aria-describedby") or "")
    assert row.locator(".field-error").count() == 1
    assert page.locator("#config-errors li").count() == 1


def test_editor_sends_no_empty_number_fields(page: object) -> None:
    import json

    page.goto(page.base + "/")
    page.wait_for_selector("#validation.ok", timeout=30_000)

    def validate(request: object) -> bool:
        return request.url.endswith("/api/scenarios/validate")  # type: ignore[attr-defined]

    with page.expect_request(validate) as sent:
        page.fill("#f-seed", "")
    assert "seed" not in json.loads(sent.value.post_data)
    with page.expect_request(validate) as sent:
        page.fill("#f-block_size", " ")
    body = json.loads(sent.value.post_data)
    assert "seed" not in body and "block_size" not in body["config"]
    with page.expect_request(validate) as sent:
        page.locator("#req-rows tr").nth(0).locator(".r-max").fill("")
    assert "max_tokens" not in json.loads(sent.value.post_data)["requests"][0]
    # the server's defaults apply: the scenario is still valid
    page.wait_for_selector("#validation.ok")
    assert page.locator(".field-error").count() == 0


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        target: object = schema
        for key in node["$ref"].lstrip("#/").split("/"):
            target = target[key]  # type: ignore[index]
        node = target  # type: ignore[assignment]
    return node


def test_editor_fields_follow_the_served_scenario_schema(page: object) -> None:
    import httpx

    served = httpx.get(f"{page.base}/api/schema/scenario", timeout=60)
    if served.status_code == 404:
        pytest.skip("this server has no GET /api/schema/scenario")
    schema = served.json()
    top = _resolve(schema, schema)["properties"]
    config = _resolve(schema, top["config"])["properties"]
    page.goto(page.base + "/")
    page.wait_for_selector("#validation.ok", timeout=30_000)
    shown = page.eval_on_selector_all("#config-fields label", "ls => ls.map(l => l.dataset.field)")
    # the form's own order for the fields it knew, then every other scalar setting of the schema
    assert shown[:4] == ["name", "flavor", "seed", "max_steps"]
    for key, prop in config.items():
        prop = _resolve(schema, prop)
        types = {prop["type"]} if isinstance(prop.get("type"), str) else set(prop.get("type") or [])
        scalar = len(types - {"null"}) == 1 and types - {"null"} <= {"integer", "boolean", "string", "number"}
        if "enum" in prop or scalar:
            assert key in shown, key
            title = page.get_attribute(f"label[data-field='{key}']", "title") or ""
            assert title.startswith(prop.get("description", "")), (key, title)
    flavors = page.eval_on_selector_all("#f-flavor option", "os => os.map(o => o.value)")
    assert flavors == [v for v in _resolve(schema, top["flavor"]).get("enum", flavors) if v is not None]


def test_the_footer_names_the_upstream_and_links_the_docs(page: object) -> None:
    import httpx

    upstream = httpx.get(f"{page.base}/healthz", timeout=60).json().get("upstream")
    page.goto(page.base + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    if upstream is None:
        page.wait_for_function("document.getElementById('upstream').textContent === 'vLLM 0.33.0'")
    else:
        # whatever shape the server gives it, each version it names is in the footer
        versions = re.findall(r"\d+\.\d+(?:\.\d+)?|[0-9a-f]{7,40}", str(upstream))
        assert versions
        for v in versions:
            page.wait_for_function(f"document.getElementById('upstream').textContent.includes({v!r})")
    assert page.locator("footer a[href='/docs-md/architecture.md']").inner_text() == "docs"
    open_run(page, "preset=seed-001&lang=zh")
    # in 中文 the link asks for the document's Chinese version
    assert page.locator("footer a[href='/docs-md/architecture.md?lang=zh']").inner_text() == "文档"
