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
import test_browser as tb

pytestmark = tb.pytestmark
base_url = tb.base_url
browser = tb.browser
HAN = re.compile(r"[\u4e00-\u9fff]")

# the landing page's contrasts (static/compare.js CONTRASTS): a preset and what run B changes
CONTRASTS = [
    ("demo-prefix-cache", {"enable_prefix_caching": False}),
    ("seed-000", {"enable_chunked_prefill": False, "max_num_batched_tokens": 240}),
    ("seed-000", {"block_size": 256}),
    ("seed-001", {"flavor": "nanovllm"}),
    ("seed-001", {"flavor": "ascend"}),
    ("demo-v2-slots", {"model_runner": "v1"}),
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
    another shape), a KV block has other owners, or the batch holds other requests or another
    order; else the first step where one run has an array the other has not."""
    from pagedviz.core import Scenario, make_engine
    from pagedviz.core.compare import compare_runs
    from pagedviz.core.presets import preset_dict

    name, change = CONTRASTS[index]
    a = preset_dict(name)
    b = preset_dict(name)
    for k, v in change.items():
        if k == "flavor":
            b["flavor"] = v
        else:
            b["config"][k] = v
    steps = compare_runs(
        list(make_engine(Scenario.from_dict(a)).run()), list(make_engine(Scenario.from_dict(b)).run())
    )
    for e in steps["steps"]:
        arrays = any(d["status"] == "shape" or d["num_diff"] for d in e["arrays"].values())
        kv = e["kv_cache"]["owners"] or e["kv_cache"]["ref_cnt"]
        batch = not e["batch"]["same_order"] or not e["batch"]["same_requests"]
        if arrays or kv or batch:
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
    ("index", "lang", "present"), [(i, "en", False) for i in range(6)] + [(i, "zh", True) for i in range(6)]
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
    if CONTRASTS[index][1] != {"flavor": "ascend"}:
        assert page.locator("#cmp-view .cp-diff").count() > 0  # the differences are outlined
    else:
        assert "attn_mask" in line  # Ascend's own mask is the difference
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
