"""The run page's feature views (static/features.js) in a real Chromium against a real uvicorn.

Each test opens a shipped preset at the step that shows its feature, reads the same step's trace
from the REST API (the real engine) and checks the page against it: padded buffers greyed past
their real part, the token_indices what-if against its own formula, speculative decoding's logits
rows and verdicts against the drafts and the target's tokens, async scheduling's device fill
against prev_sampled_token_ids, M-RoPE's rows against the request's image, nano-vllm's -1
padding, the Ascend state, the KV tensor's shape and a preset's notes. Screenshots at 1280 x 720
in English and Chinese land in test-artifacts/.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support import browser as tb

ARTIFACTS = tb.ARTIFACTS


@pytest.fixture()
def page(browser: Any, base_url: str) -> Iterator[Any]:
    yield from tb.watched_page(browser, base_url, 1280, 720)


def open_step(page: Any, preset: str, step: int, lang: str = "en") -> dict[str, Any]:
    """Open the run page at a step and return that step's trace from the REST API."""
    page.goto(f"{page.base}/run?preset={preset}&step={step}&lang={lang}")
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    scenario = httpx.get(f"{page.base}/api/presets/{preset}", timeout=30).json()["scenario"]
    run = httpx.post(f"{page.base}/api/runs", json=scenario, timeout=120).json()
    trace = httpx.get(f"{page.base}/api/runs/{run['run_id']}/steps/{step}", timeout=30).json()
    trace["scenario"] = scenario
    return trace


def row_cells(page: Any, table_id: str, array: str) -> list[Any]:
    return page.locator(f"#{table_id} tr[data-array='{array}'] td").all()


def texts(cells: list[Any]) -> list[str]:
    return [c.inner_text().strip() for c in cells]


def shots(page: Any, card_id: str, name: str) -> None:
    """1280 x 720 screenshots of a feature card in English and Chinese."""
    ARTIFACTS.mkdir(exist_ok=True)
    for lang in ("en", "zh"):
        page.locator(f"button[data-lang='{lang}']").click()
        page.locator(f"#{card_id}").scroll_into_view_if_needed()
        path = ARTIFACTS / f"features-{name}-{lang}.png"
        page.screenshot(path=str(path))
        assert path.stat().st_size > 10_000
    assert page.locator(f"#{card_id} h3").inner_text() != ""


def test_cudagraph_padding_shows_full_buffers_with_the_padded_part_greyed(page: Any) -> None:
    tr = open_step(page, "demo-cudagraph-padding", 1)
    slot = tr["arrays"]["slot_mapping"]
    T = tr["scalars"]["total_num_scheduled_tokens"]
    n_in = tr["scalars"]["num_input_tokens"]
    assert n_in > T  # the preset's point: 5 tokens run as 8
    cells = row_cells(page, "pad-slot_mapping", "slot_mapping")
    assert len(cells) == n_in == len(slot["data"])
    for i, c in enumerate(cells):
        assert ("pad" in (c.get_attribute("class") or "")) == (i >= T)
        if i >= T:
            assert c.inner_text() == "-1"
    assert "PAD_SLOT_ID" in page.locator("#pad-slot_mapping th.part-pad").inner_text()
    num_reqs = tr["scalars"]["num_reqs"]
    q = texts(row_cells(page, "pad-query_start_loc", "query_start_loc"))
    assert [int(x) for x in q] == tr["arrays"]["query_start_loc"]["buffer"]
    assert len(q) == tr["scenario"]["config"]["max_num_reqs"] + 1
    assert all(int(x) == int(q[num_reqs]) for x in q[num_reqs:])  # non-decreasing: last value repeated
    assert int(q[num_reqs]) == T
    s = texts(row_cells(page, "pad-seq_lens", "seq_lens"))
    assert all(x == "0" for x in s[num_reqs:]) and len(s) > num_reqs
    pad_q = page.locator("#pad-query_start_loc td.pad").count()
    assert pad_q == len(q) - (num_reqs + 1)
    formula = next(st["formula"] for st in tr["stages"] if st["name"] == "slot_mapping")
    assert page.locator("#feat-padding pre[data-stage='slot_mapping']").inner_text() == formula
    why = page.locator("#feat-padding p[data-stage='slot_mapping']").inner_text()
    assert "reshape_and_cache_flash" in why
    shots(page, "feat-padding", "padding")
    assert "PAD_SLOT_ID" in page.locator("#pad-slot_mapping th.part-pad").inner_text()  # in 中文 too
    assert "补齐" in page.locator("#feat-padding h3").inner_text()


def test_token_indices_whatif_marks_the_tokens_the_wrong_formula_misreads(page: Any) -> None:
    tr = open_step(page, "demo-max-model-len", 2)
    cfg = tr["scenario"]["config"]
    M, bs = cfg["max_model_len"], cfg["block_size"]
    assert M % bs  # the preset's point
    stride = math.ceil(M / bs) * bs
    a = tr["arrays"]
    pos, req = a["positions"]["data"], a["req_indices"]["data"]
    right = [p + r * M for p, r in zip(pos, req, strict=True)]
    wrong = [p + r * stride for p, r in zip(pos, req, strict=True)]
    assert [int(x) for x in texts(row_cells(page, "whatif-table", "token_indices"))] == right
    assert [int(x) for x in texts(row_cells(page, "whatif-table", "token_indices_whatif"))] == wrong
    marked = [
        "wrong" in (c.get_attribute("class") or "")
        for c in row_cells(page, "whatif-table", "input_ids_whatif")
    ]
    assert marked == [w != r for w, r in zip(wrong, right, strict=True)]
    assert any(marked) and not marked[0]  # row 0 is right either way
    # the wrong indices read the flat token table somewhere else
    flat = [x for row in a["token_ids_cpu"]["data"] for x in row]
    ids_wrong = texts(row_cells(page, "whatif-table", "input_ids_whatif"))
    for i, w in enumerate(wrong):
        expect = flat[w] if w < len(flat) else None
        if expect is not None:
            assert ids_wrong[i].lstrip("✗ ") == str(expect)
    assert f"= {stride}" in page.locator("#whatif-table tr.group").nth(1).inner_text()
    # the stage's formula with a misread token's own numbers
    page.locator("button.stage-btn[data-stage='token_indices_whatif']").click()
    bad = marked.index(True)
    page.locator(f"#token-table thead th[data-t='{bad}']").click()
    sub = page.locator("#stage-sub").inner_text()
    assert f"= {wrong[bad]}" in sub and f"token_indices[{bad}] = {right[bad]}" in sub and "✗" in sub
    shots(page, "feat-whatif", "whatif")


def test_spec_decode_strip_labels_target_and_bonus_rows_and_verdicts(page: Any) -> None:
    tr = open_step(page, "demo-ngram-spec-decode", 2)
    a = tr["arrays"]
    logits = a["logits_indices"]["data"]
    kinds = texts(page.locator("#spec-strip tbody tr").nth(2).locator("td").all())
    assert len(kinds) == len(logits)
    assert [i for i, k in enumerate(kinds) if k == "bonus"] == a["bonus_logits_indices"]["data"]
    assert [i for i, k in enumerate(kinds) if k == "target"] == a["target_logits_indices"]["data"]
    strip = page.locator("#spec-strip tbody tr")
    drafts = texts(strip.nth(3).locator("td").all())
    target = texts(strip.nth(4).locator("td").all())
    verdict = texts(strip.nth(5).locator("td").all())
    req_row = texts(strip.nth(1).locator("td").all())
    ids = tr["batch"]["req_ids"]
    for r, rid in enumerate(ids):
        rows = [j for j, x in enumerate(req_row) if x == rid]
        checked = [j for j in rows if kinds[j] == "target"]
        # greedy: accepted while the draft equals the target's own token, then one rejection
        n_acc = 0
        while n_acc < len(checked) and drafts[checked[n_acc]] == target[checked[n_acc]]:
            n_acc += 1
        assert n_acc == a["num_accepted_tokens"]["data"][r]
        assert [verdict[j] for j in checked[:n_acc]] == ["accepted"] * n_acc
        if n_acc < len(checked):
            assert verdict[checked[n_acc]] == "rejected"
        assert a["num_rejected_tokens"]["data"][r] == len(checked) - n_acc
    req_table = page.locator("#spec-requests").inner_text()
    for rid, gen in tr["forward"]["generated_token_ids"].items():
        assert f"[{', '.join(map(str, gen))}]" in req_table, rid
    assert page.locator("#feat-spec pre[data-stage='spec_decode_metadata']").count() == 1
    shots(page, "feat-spec", "spec-decode")


def test_async_scheduling_shows_the_scatter_and_the_one_copy_case(page: Any) -> None:
    tr = open_step(page, "demo-async-scheduling", 3)
    a = tr["arrays"]
    assert page.locator("#feat-async .mode").get_attribute("data-mode") == "scatter"
    flat, common = a["sample_flattened_indices"]["data"], a["prev_common_req_indices"]["data"]
    prev = [int(x) for x in texts(row_cells(page, "async-prev", "prev_sampled_token_ids"))]
    dev_cells = row_cells(page, "async-tokens", "input_ids_device")
    dev = [int(x) for x in texts(dev_cells)]
    filled = [i for i, c in enumerate(dev_cells) if "filled" in (c.get_attribute("class") or "")]
    assert filled == sorted(flat)
    for t, p in zip(flat, common, strict=True):
        assert dev[t] == prev[p]  # the device's id came from last step's sampled row
    links = texts(page.locator("#async-links li").all())
    assert len(links) == len(flat) and f"input_ids_device[{flat[0]}]" in links[0]
    assert common != list(range(len(common)))  # a real reorder, not the identity
    shots(page, "feat-async", "async-scatter")
    page.locator("button[data-lang='en']").click()
    page.locator("#btn-prev").click()
    page.wait_for_selector("body[data-step='2']")
    assert page.locator("#feat-async .mode").get_attribute("data-mode") == "one_copy"
    assert "one slice copy" in page.locator("#feat-async .mode").inner_text()


def test_mrope_heatmap_sits_beside_positions_with_image_tokens_on_the_grid(page: Any) -> None:
    tr = open_step(page, "demo-mrope", 1)
    m = tr["arrays"]["mrope_positions"]["data"]
    T = len(m[0])
    pos = [int(x) for x in texts(row_cells(page, "mrope-table", "positions"))]
    rows = [
        [int(x) for x in texts(row_cells(page, "mrope-table", f"mrope_positions[{k}] ({ax})"))]
        for k, ax in enumerate("thw")
    ]
    assert rows == m and len(pos) == T
    img_req = next(r for r in tr["scenario"]["requests"] if r.get("image"))
    im = img_req["image"]
    req_of = tr["arrays"]["req_indices"]["data"]
    row_of_img = tr["batch"]["req_ids"].index(img_req["id"])
    img_cells = row_cells(page, "mrope-table", "positions")
    img_end = im["offset"] + im["t"] * im["h"] * im["w"]
    for i in range(T):
        is_img = req_of[i] == row_of_img and im["offset"] <= pos[i] < img_end
        assert ("img" in (img_cells[i].get_attribute("class") or "")) == is_img
        if not is_img:
            assert rows[0][i] == rows[1][i] == rows[2][i]
    assert page.locator("#hm-mrope canvas.cm-cells").count() == 1
    ticks = page.evaluate("document.getElementById('hm-mrope').layout.yaxis.ticktext")
    assert ticks == ["positions", "t", "h", "w"]
    n_rows = page.evaluate("document.getElementById('hm-mrope').data[0].z.length")
    assert n_rows == 4  # positions, then t, h, w
    shots(page, "feat-mrope", "mrope")


def test_a_step_change_redraws_the_mrope_heatmap_in_the_same_node_with_the_new_steps_values(
    page: Any,
) -> None:
    nxt = open_step(page, "demo-mrope", 2)  # step 2's trace (the page opened there)
    page.goto(f"{page.base}/run?preset=demo-mrope&step=1")
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    page.evaluate("window.kept = document.getElementById('hm-mrope')")
    page.keyboard.press("ArrowRight")
    page.wait_for_selector("body[data-step='2']", state="attached")
    # the node, its one canvas of cells, and the figure it draws are step 2's
    assert page.evaluate("window.kept.isConnected && window.kept === document.getElementById('hm-mrope')")
    assert page.locator("#hm-mrope canvas.cm-cells").count() == 1
    assert page.locator("#features #hm-mrope").count() == 1
    m = nxt["arrays"]["mrope_positions"]["data"]
    z = page.evaluate("document.getElementById('hm-mrope').data[0].z")
    assert z == [nxt["arrays"]["positions"]["data"][: len(m[0])], *m]


def test_nanovllm_block_tables_show_minus_one_as_padding(page: Any) -> None:
    tr = open_step(page, "nanovllm-block-tables", 2)
    bt = tr["arrays"]["block_tables"]["data"]
    n_pad = sum(row.count(-1) for row in bt)
    assert n_pad > 0
    pads = page.locator("#table-block_table td.pad")
    assert pads.count() == n_pad and set(texts(pads.all())) == {"-1"}
    assert "-1" in page.locator("#feat-nano").inner_text()
    assert page.locator("#feat-nano .bt-status.ok").count() == 1
    shots(page, "feat-nano", "nanovllm-decode")
    page.locator("button[data-lang='en']").click()
    page.locator("#btn-first").click()
    page.wait_for_selector("body[data-step='1']")
    line = page.locator("#feat-nano p[data-array='cu_seqlens_q']").inner_text()
    cu = [int(x) for x in line.split("=")[1].strip(" []").split(",")]
    last = page.locator("#feat-nano p[data-array='last_indices']").inner_text()
    assert [int(x) for x in last.split("=")[1].strip(" []").split(",")] == [c - 1 for c in cu[1:]]
    assert "None" in page.locator("#feat-nano .bt-status").inner_text()


def test_ascend_state_row_and_mask_follow_the_step(page: Any) -> None:
    tr = open_step(page, "ascend-prefill-cache-hit", 4)
    state = tr["scalars"]["attn_state"]
    assert state == "PrefillCacheHit"  # the preset's title says so
    assert page.locator("#ascend-states tr.current").get_attribute("data-state") == state
    assert page.locator("#ascend-states tbody tr").count() == 5
    mask = tr["arrays"]["attn_mask"]["shape"]
    assert f"{mask[0]} × {mask[1]}" in page.locator("#ascend-states tr.current").inner_text()
    assert "longest request" in page.locator("#feat-ascend").inner_text()
    shots(page, "feat-ascend", "ascend")
    page.locator("button[data-lang='en']").click()
    page.locator("#btn-first").click()
    # step 1 shown before Next is pressed: pressed while step 1 is still fetched, Next counts from
    # the step left (4) and the page never shows step 2
    page.wait_for_selector("body[data-step='1']", state="attached")
    page.locator("#btn-next").click()
    page.wait_for_selector("body[data-step='2']")
    assert page.locator("#ascend-states tr.current").get_attribute("data-state") == "DecodeOnly"


def test_kv_shape_and_preset_notes_in_both_languages(page: Any) -> None:
    tr = open_step(page, "seed-000", 1)
    shape = tr["kv_cache"]["shape"]
    assert f"[{', '.join(map(str, shape))}]" in page.locator("#kv-shape").inner_text()
    notes = httpx.get(f"{page.base}/api/presets/seed-000", timeout=30).json()["notes"]
    assert notes and page.locator("#preset-notes li").count() == len(notes)
    assert notes[0] in page.locator("#preset-notes").inner_text()
    zh = httpx.get(f"{page.base}/api/presets/seed-000?lang=zh", timeout=30).json()["notes"]
    page.locator("button[data-lang='zh']").click()
    page.wait_for_function(
        "t => document.getElementById('preset-notes').innerText.includes(t)", arg=zh[0][:20]
    )
    assert "KV cache 张量" in page.locator("#kv-shape").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "features-notes-zh.png"))


def test_stage_texts_say_request_counts_are_not_padded(page: Any) -> None:
    open_step(page, "demo-cudagraph-padding", 1)
    page.locator("button.stage-btn[data-stage='attn_metadata']").click()
    assert "not padded" in page.locator("#stage-expl").inner_text()
    page.locator("button.stage-btn[data-stage='block_table_indices']").click()
    assert "compute_slot_mapping" in page.locator("#stage-expl").inner_text()
    page.locator("button[data-lang='zh']").click()
    page.locator("button.stage-btn[data-stage='attn_metadata']").click()
    assert "不补齐" in page.locator("#stage-expl").inner_text()
    # the new stages have their own titles in both languages, not their code names
    page.goto(f"{page.base}/run?preset=demo-max-model-len&step=2&lang=zh")
    page.wait_for_selector("body[data-ready='1']")
    title = page.locator("button.stage-btn[data-stage='token_indices_whatif'] .stage-title").inner_text()
    assert title != "token_indices_whatif" and "假如" in title
