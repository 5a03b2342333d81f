"""The compare view as a lecturer opens it (issue 29, item 8), in a real Chromium against a real
uvicorn at 1280x720: each of the landing page's contrasts opens both runs side by side on the first
screen (queue, block table, KV pool, the step's token row with slot_mapping), at the first step
where the runs differ, with a line that says what differs and why; both panes step together;
differences are outlined; present mode keeps the view; 中文 has no English words of the view's own
left. The expected first step comes from the engine's own runs. Screenshots land in test-artifacts/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest

from tests.support import browser as tb

HAN = re.compile(r"[\u4e00-\u9fff]")

# the landing page's contrasts (static/compare.js CONTRASTS): a preset and what run B changes
CONTRASTS = [
    ("demo-prefix-cache", {"enable_prefix_caching": False}),
    ("seed-000", {"enable_chunked_prefill": False, "max_num_batched_tokens": 240}),
    ("seed-000", {"block_size": 256}),
    ("seed-001", {"flavor": "nanovllm"}),
    ("seed-001", {"flavor": "ascend"}),
    ("demo-v2-slots", {"model_runner": "v1"}),
    # every layer full attention beside a sliding window (its window dropped with it)
    ("demo-gpt-oss-sliding-window", {"layer_types": "full_attention"}),
]
# the view's own words in English, which the Chinese view must not show
ENGLISH = [
    "Step",
    "Queue",
    "Block table",
    "KV pool",
    "Token row",
    "running",
    "waiting",
    "Why",
    "differ",
    "schedules",
    "blocks",
    "Outlined",
    "Close",
]


@pytest.fixture()
def page(browser: object, base_url: str) -> Iterator[object]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=60_000)


@cache
def _first_differing_step(index: int) -> int:
    """The first step where the two runs differ: an array both have holds other values (or
    another shape), a KV block has other owners, the batch holds other requests or another
    order, or the attention state or mask differs; else the first step where one run has an
    array the other has not."""
    from pagedviz.core import Scenario, make_engine
    from pagedviz.core.compare import compare_runs
    from pagedviz.core.presets import preset_dict

    name, change = CONTRASTS[index]
    a = preset_dict(name)
    b = preset_dict(name)
    for k, v in change.items():
        if k == "flavor":
            b["flavor"] = v
        elif k == "layer_types":
            b["config"][k] = [v] * len(b["config"][k])
            del b["config"]["sliding_window"]
        else:
            b["config"][k] = v
    steps = compare_runs(
        list(make_engine(Scenario.from_dict(a)).run()), list(make_engine(Scenario.from_dict(b)).run())
    )
    for e in steps["steps"]:
        arrays = any(d["status"] == "shape" or d["num_diff"] for d in e["arrays"].values())
        kv = e["kv_cache"]["owners"] or e["kv_cache"]["ref_cnt"]
        batch = not e["batch"]["same_order"] or not e["batch"]["same_requests"]
        state = e["scalars"].get("attn_state")
        attn = (state and state[0] != state[1]) or "attn_mask" in e["only_a"] + e["only_b"]
        if arrays or kv or batch or attn:
            return int(e["step"])
    return next((int(e["step"]) for e in steps["steps"] if e["only_a"] or e["only_b"]), 1)


def _open_contrast(page: Any, index: int, lang: str, present: bool) -> None:
    page.goto(page.base + ("/?lang=zh" if lang == "zh" else "/"))
    page.wait_for_selector("#contrasts a")
    name, change = CONTRASTS[index]
    hrefs = page.locator("#contrasts a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
    href = hrefs[index]
    assert f"preset={name}" in href and all(k in href for k in change)
    page.goto(page.base + href + ("&present=1" if present else ""))
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector("#cmp-view:not([hidden]) .cp-pane[data-side='b']")


def _in_first_screen(page: Any, selector: str) -> None:
    for box in page.locator(selector).evaluate_all("ns => ns.map(n => n.getBoundingClientRect().toJSON())"):
        assert box["top"] >= 0 and box["bottom"] <= 720 and box["left"] >= 0 and box["right"] <= 1280, (
            selector,
            box,
        )


@pytest.mark.parametrize(
    ("index", "lang", "present"),
    [(i, "en", False) for i in range(len(CONTRASTS))] + [(i, "zh", True) for i in range(len(CONTRASTS))],
)
def test_each_contrast_opens_both_runs_side_by_side_at_the_first_differing_step(
    page: Any, index: int, lang: str, present: bool
) -> None:
    _open_contrast(page, index, lang, present)
    n = _first_differing_step(index)
    page.wait_for_selector(f"body[data-compare='{n}']")
    assert page.locator("body").get_attribute("data-step") == str(n)
    # both panes, and in each its queue, block table, KV pool and token row, on the first screen
    assert page.evaluate("window.scrollY") == 0
    for part in (".cp-pane", ".cp-queue", ".cp-bt", ".cp-kv", ".cp-tokens", "#cmp-line"):
        assert page.locator(f"#cmp-view {part}").count() >= 1
        _in_first_screen(page, f"#cmp-view {part}")
    a, b = page.locator(".cp-pane").evaluate_all("ps => ps.map(p => p.getBoundingClientRect().left)")
    assert a < b  # side by side, A first
    line = page.locator("#cmp-line").inner_text()
    assert str(n) in line
    assert page.locator("#cmp-view .cp-diff").count() > 0  # the differences are outlined
    if CONTRASTS[index][1] == {"flavor": "ascend"}:
        assert "attn_mask" in line  # Ascend's own mask is the difference, outlined in its pane
        assert page.locator("#cmp-view .cp-attn .cp-diff").count() >= 2
    text = page.locator("#cmp-view").inner_text()
    if lang == "zh":
        assert HAN.search(line)
        left = [w for w in ENGLISH if re.search(rf"\b{w}\b", text)]
        assert left == [], left
    page.screenshot(path=str(tb.ARTIFACTS / f"compare-{index}-{lang}{'-present' if present else ''}.png"))


def test_the_panes_step_together_and_offer_the_way_back_to_the_first_difference(
    page: Any,
) -> None:
    _open_contrast(page, 0, "en", False)
    n = _first_differing_step(0)
    page.wait_for_selector(f"body[data-compare='{n}']")
    assert page.locator("#cmp-go-first").count() == 0
    why = page.locator("#cmp-why").inner_text()
    assert "A:" in why  # the sentence only run A says (its prefix-cache hit)
    page.keyboard.press("ArrowRight")
    page.wait_for_selector(f"body[data-compare='{n + 1}']")
    assert f"{n + 1}" in page.locator("#cmpv-title").inner_text()
    # each pane shows its own run's step: B's token count is its own trace's
    ts = page.locator(".cp-pane h4").evaluate_all(
        "hs => hs.map(h => h.textContent).filter(t => t.includes('T = '))"
    )
    assert len(ts) == 2
    page.click("#cmp-go-first")
    page.wait_for_selector(f"body[data-compare='{n}']")
    page.click("#cmp-view .cmp-header button")
    assert page.locator("#cmp-view").is_hidden() and "vs=" not in page.url


def test_a_compare_link_that_names_a_step_opens_at_that_step(page: Any) -> None:
    page.goto(page.base + "/run?preset=demo-prefix-cache&step=1&vs=enable_prefix_caching:false")
    page.wait_for_selector("body[data-compare='1']")
    assert page.locator("body").get_attribute("data-step") == "1"
    assert "No difference" in page.locator("#cmp-line").inner_text()
    assert page.locator("#cmp-view .cp-diff").count() == 0


def test_the_v1_vs_v2_compare_ignores_the_stale_entry_the_main_view_strikes_and_says_so(page: Any) -> None:
    """Step 8 of demo-v2-slots: request d's gathered row on Model Runner V2 is "3 6 1 4", whose 4
    lies past num_blocks (stale, never read; the main view strikes it). The compare does not outline
    it as a difference from V1's "3 6 1", shows it struck, and its line says it ignored it."""
    from pagedviz.core import Scenario, make_engine
    from pagedviz.core.kernel_reads import stale_entries
    from pagedviz.core.presets import preset_dict

    traces = list(make_engine(Scenario.from_dict(preset_dict("demo-v2-slots"))).run())
    stale = stale_entries(traces[7])
    assert [(x["req"], x["value"]) for x in stale] == [("d", 4)]  # the case, from the engine
    (entry,) = stale
    for lang in ("en", "zh"):
        zh = "&lang=zh" if lang == "zh" else ""
        page.goto(page.base + f"/run?preset=demo-v2-slots&step=8&vs=model_runner:v1{zh}")
        page.wait_for_selector("body[data-compare='8'] #cmp-view:not([hidden]) .cp-pane[data-side='b']")
        row = page.locator(".cp-pane[data-side='a'] .cp-bt tr[data-req='d']")
        cells = row.locator("td[data-c]").evaluate_all(
            "ts => ts.map(t => [t.textContent, t.className, getComputedStyle(t).textDecorationLine])"
        )
        assert [c[0] for c in cells] == ["3", "6", "1", str(entry["value"])], cells
        struck = cells[entry["col"]]
        assert "cp-diff" not in struck[1] and "sm-stale" in struck[1] and struck[2] == "line-through", struck
        assert all("cp-diff" not in c[1] for c in cells), cells  # d's blocks read are the same on both sides
        assert page.locator(".cp-pane[data-side='b'] .cp-bt tr[data-req='d'] td[data-c].cp-diff").count() == 0
        # the main view strikes the same cell: the gathered table's d row, past its num_blocks
        main = page.locator("#table-input_block_tables td.sm-stale")
        assert main.all_inner_texts() == [str(entry["value"])]
        line = page.locator("#cmp-stale")
        assert line.is_visible()
        text = line.inner_text()
        sep = "：" if lang == "zh" else ": "
        assert f"A d{sep}input_block_tables[{entry['row']}][{entry['col']}] = 4" in text, text
        assert ("未比较" in text) if lang == "zh" else ("Not compared" in text and "never read" in text), text
        page.screenshot(path=str(tb.ARTIFACTS / f"compare-stale-{lang}.png"))


def test_the_ascend_compare_panes_show_the_attention_state_and_mask_that_differ(page: Any) -> None:
    """seed-001 on vLLM against vllm-ascend: the panes show each side's attn_state and attn_mask
    (vLLM none; Ascend the state and mask of its trace), outlined, and the line names them."""
    from pagedviz.core import Scenario, make_engine
    from pagedviz.core.presets import preset_dict

    b = preset_dict("seed-001")
    b["flavor"] = "ascend"
    asc = list(make_engine(Scenario.from_dict(b)).run())
    for step in (1, 2, 3):
        t = asc[step - 1]
        state = str(t.scalars["attn_state"])
        shape = " × ".join(map(str, t.arrays["attn_mask"].shape)) if "attn_mask" in t.arrays else None
        page.goto(page.base + f"/run?preset=seed-001&step={step}&vs=flavor:ascend")
        page.wait_for_selector(f"body[data-compare='{step}'] .cp-pane[data-side='b'] .cp-attn")
        a_state = page.locator(".cp-pane[data-side='a'] .cp-attn-state")
        b_state = page.locator(".cp-pane[data-side='b'] .cp-attn-state")
        assert b_state.get_attribute("data-state") == state and a_state.get_attribute("data-state") == ""
        for side in (a_state, b_state):
            assert "cp-diff" in (side.get_attribute("class") or "")  # outlined: the difference
        b_mask = page.locator(".cp-pane[data-side='b'] .cp-attn-mask").inner_text()
        a_mask = page.locator(".cp-pane[data-side='a'] .cp-attn-mask").inner_text()
        assert "none" in a_mask
        line = page.locator("#cmp-line").inner_text()
        assert f"attention state A none, B {state}" in line, line
        if shape:
            assert shape in b_mask
            # the mask drawn: its masked cells are the trace's ones
            drawn = page.locator(".cp-pane[data-side='b'] .cp-mask td.m").count()
            assert drawn == int(t.arrays["attn_mask"][:16, :40].sum()) > 0
            assert f"attn_mask A none, B {shape}" in line, line
        else:
            assert "none" in b_mask
        why = page.locator("#cmp-why").inner_text()
        assert state in why and "vllm-ascend" in why, why
        _in_first_screen(page, "#cmp-view .cp-attn")
        if step == 2:
            page.screenshot(path=str(tb.ARTIFACTS / "compare-ascend-attention.png"))
