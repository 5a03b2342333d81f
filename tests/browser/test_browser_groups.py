"""KV cache groups on the run page (issue 38, point 4), in a real Chromium against a real uvicorn at
1280x720: the issue's own example (layer 0 full attention, layer 1 a sliding window of 8 tokens)
opened from its link, at step 2, where the window dropped a's first three sliding blocks and a's
full group took block 8 that its sliding group had just given back. What a person sees: one block
table per group side by side under the group's name, the null block 0 in the sliding table, the
pool's legend by owner and group with the null block said for what it is, the moved block
outlined in the table and on the pool, the window on each request's token row; in English and in
中文, in the normal view and in present mode; and a Gemma 3 style run (five sliding groups, one
full) whose sliding groups beyond the first fold to a compact row each. A run with one group keeps
today's page. The tier's server and browser; screenshots land in test-artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pagedviz.app.links import pack
from tests.support import browser as tb
from tests.support.browser import LOW_CONTRAST, PAGE_TEXT, english_phrases

open_run = tb.open_run
shot = tb.shot

# the issue's example from vLLM's own scheduler (block size 4, 40 blocks, a window of 8 tokens; its
# numbers as vLLM gives them with no sliding block in the prefix cache: prefix caching off)
ISSUE = {
    "name": "hybrid-window",
    "title": "A sliding window beside full attention",
    "flavor": "vllm",
    "config": {
        "model_runner": "v1",
        "async_scheduling": False,
        "block_size": 4,
        "max_model_len": 64,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 64,
        "num_kv_blocks": 40,
        "enable_chunked_prefill": True,
        "enable_prefix_caching": False,
        "layer_types": ["full_attention", "sliding_attention"],
        "sliding_window": 8,
    },
    "requests": [
        {"id": "a", "prompt_token_ids": list(range(1, 21)), "max_tokens": 8},
        {"id": "b", "prompt_token_ids": list(range(1, 13)), "max_tokens": 4},
    ],
    "max_steps": 16,
}
GEMMA = {
    **ISSUE,
    "name": "hybrid-gemma",
    "title": "Five local layers per global one",
    "config": {
        **ISSUE["config"],
        "num_kv_blocks": 120,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
    },
}
NULL_EN = "null block: placeholder for blocks a sliding window dropped"
NULL_ZH = "空块（null block）：滑动窗口丢弃的块的占位"
MOVED = "#7F3C8D"


@pytest.fixture()
def page(browser: object, base_url: str) -> Iterator[object]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=30_000)


def _at(page: Any, scenario: dict[str, Any], step: int, extra: str = "") -> None:
    open_run(page, f"s={pack(scenario)}&step={step}{extra}")
    page.wait_for_selector(f"body[data-painted='{step}']")


def _row(page: Any, table: str, r: int, n: int) -> list[str]:
    return [page.locator(f"#{table} td[data-r='{r}'][data-c='{c}']").inner_text() for c in range(n)]


def _side_by_side(page: Any, first: str, second: str) -> None:
    a, b = page.locator(first).bounding_box(), page.locator(second).bounding_box()
    assert a and b, (first, second)
    assert b["x"] >= a["x"] + a["width"] and abs(a["y"] - b["y"]) < 4, (a, b)
    assert max(a["y"] + a["height"], b["y"] + b["height"]) <= 720, "the tables are below the first screen"


def test_two_groups_two_tables_the_null_block_the_window_and_the_moved_block(page: Any) -> None:
    _at(page, ISSUE, 2)
    groups = page.locator("#card-block_table .bt-group")
    assert groups.count() == 2
    names = page.locator("#card-block_table .bt-group-name").all_inner_texts()
    assert names == ["group 0 · full attention · layer 0", "group 1 · sliding window (8 tokens) · layer 1"]
    page.locator("#card-block_table").scroll_into_view_if_needed()
    _side_by_side(page, "#table-block_table", "#table-block_table_g1")
    # the issue's numbers: a holds [1, 2, 3, 4, 5, 8] and [0, 0, 0, 9, 10, 7], b [11..14] and [0, 15, 16, 6]
    assert _row(page, "table-block_table", 0, 6) == ["1", "2", "3", "4", "5", "8"]
    assert _row(page, "table-block_table_g1", 0, 6) == ["0", "0", "0", "9", "10", "7"]
    assert _row(page, "table-block_table_g1", 1, 4) == ["0", "15", "16", "6"]
    null = page.locator("#table-block_table_g1 td.null-block")
    assert null.count() == 4  # a's three dropped blocks and b's one
    assert null.first.get_attribute("title").startswith(NULL_EN)
    # V1's runner is not told of the drop: its block_table_g1 still holds 6 there, shown struck
    assert null.first.get_attribute("data-stale") == "6"
    assert "block_table_g1 still holds block 6" in null.first.get_attribute("title")
    # past a request's own blocks a 0 is padding, not the null block
    assert "null-block" not in page.locator("#table-block_table_g1 td[data-r='1'][data-c='4']").get_attribute(
        "class"
    )
    # block 8: a's sliding group gave it back at this step and a's full group took it
    # (and b's full group block 14, which b's sliding group dropped)
    moved = page.locator("#table-block_table td.moved-block")
    assert moved.all_inner_texts() == ["8", "14"]
    assert "group 1 · sliding window (8 tokens) · layer 1 → group 0" in moved.first.get_attribute("title")
    assert page.locator("#table-block_table_g1 td.moved-block").count() == 0
    assert page.locator("#kv-legend .legend-moved strong").inner_text() == "8, 14"
    shapes = page.evaluate(
        "document.getElementById('hm-kv').layout.shapes.map(s => [s.line.color, s.y0 + 0.5, s.y1 - 0.5])"
    )
    assert [MOVED, 8, 8] in shapes and [MOVED, 14, 14] in shapes
    # the pool by owner and group kind, and the null block for what it is
    legend = page.locator("#kv-pool-legend")
    assert legend.locator("li[data-kind='null']").inner_text() == NULL_EN
    kinds = legend.locator("li").all_inner_texts()
    assert {"a · full", "a · sliding window", "b · full", "b · sliding window"} <= set(kinds), kinds
    trace = page.evaluate("document.getElementById('hm-kv').data[0]")
    assert (
        trace["z"][0][0] == trace["colorbar"]["tickvals"][trace["colorbar"]["ticktext"].index("null block")]
    )
    assert any(
        a["text"] == "null block" and a["y"] == 0
        for a in page.evaluate("document.getElementById('hm-kv').layout.annotations")
    )
    # the window on the token rows: a's 21 tokens, 12 dropped (3 blocks), the last token's window 13..20
    row_a = page.locator("#win-rows .win-row[data-req='a']")
    assert row_a.get_attribute("data-dropped") == "12"
    assert row_a.locator(".win-drop").count() == 12 and row_a.locator(".win-in").count() == 8
    assert row_a.locator(".win-in").first.get_attribute("data-pos") == "13"
    assert "window 13–20 · 12 dropped" in row_a.inner_text()
    assert page.locator("#win-rows .win-row[data-req='b']").get_attribute("data-dropped") == "4"
    shot(page, "groups-en.png")

    # a checkpoint on the sliding group's table hides the tables, the token rows and the pool
    page.select_option("#predict-array", "block_table_g1")
    page.fill("#predict-entries", "0-5")
    page.click("#predict-start")
    page.wait_for_selector("#card-block_table.concealed-card")
    assert "concealed-card" in page.locator("#card-kv").get_attribute("class")
    assert not page.locator("#table-block_table_g1 td.null-block").first.is_visible()
    page.click("#predict-reveal")  # "just show me": the answers, and the views again
    page.wait_for_function("!document.querySelector('#card-block_table.concealed-card')")

    # 中文: the same views, every word in Chinese
    page.click("[data-lang='zh']")
    page.wait_for_function("document.documentElement.lang === 'zh-CN'")
    names = page.locator("#card-block_table .bt-group-name").all_inner_texts()
    assert names == ["组 0 · 全注意力 · 层 0", "组 1 · 滑动窗口（8 个 token） · 层 1"]
    assert page.locator("#kv-pool-legend li[data-kind='null']").inner_text() == NULL_ZH
    first_null = page.locator("#table-block_table_g1 td.null-block").first
    assert first_null.get_attribute("title").startswith(NULL_ZH)
    assert "转到另一个 KV cache 组" in page.locator("#kv-legend .legend-moved").inner_text()
    found = [
        (where, p) for where, text in page.evaluate(PAGE_TEXT, ".sys-panel") for p in english_phrases(text)
    ]
    assert found == [], found
    shot(page, "groups-zh.png")

    # present mode at 1280x720: the two tables side by side beside the KV pool, on the screen
    page.click("[data-lang='en']")
    page.click("#btn-present")
    page.locator("#card-block_table").scroll_into_view_if_needed()
    _side_by_side(page, "#table-block_table", "#table-block_table_g1")
    kv = page.locator("#card-kv").bounding_box()
    table = page.locator("#table-block_table_g1").bounding_box()
    assert kv and table and kv["x"] >= table["x"] + table["width"] and kv["y"] < 720
    size = page.locator("#table-block_table_g1 td[data-r='0'][data-c='3']").evaluate(
        "c => parseFloat(getComputedStyle(c).fontSize)"
    )
    assert size >= 18  # the room reads the numbers at the text's size
    shot(page, "groups-present.png")


def test_gemma_style_sliding_groups_fold_to_a_row_each_and_one_group_keeps_todays_page(page: Any) -> None:
    _at(page, GEMMA, 2, "&present=1")
    names = page.locator("#card-block_table .bt-group-name").all_inner_texts()
    assert (
        len(names) == 6 and names[0].startswith("group 0 · sliding") and names[5].startswith("group 5 · full")
    )
    # the first sliding group and the full group are tables, side by side; groups 1-4 are one line each
    assert page.locator("#card-block_table details.bt-group.compact").count() == 4
    _side_by_side(page, "#table-block_table", "#table-block_table_g5")
    compact = page.locator("#card-block_table details.bt-group.compact[data-group='1']")
    line = compact.locator(".bt-compact-req").first
    assert line.locator(".bt-chip").all_inner_texts()[:3] == ["0", "0", "0"]
    assert line.locator(".bt-chip.null-block").count() == 3
    box = compact.bounding_box()
    assert box and box["height"] < 40  # one line
    # unfolded, it is a table like the others, and stays open on the next step
    compact.locator("summary").click()
    assert page.locator("#table-block_table_g1").is_visible()
    page.click("#btn-next")
    page.wait_for_selector("body[data-painted='3']")
    assert page.locator("#table-block_table_g1").is_visible()
    shot(page, "groups-gemma-present.png")

    # one group: the block table card of today, no group names, no pool legend, no moved mark
    _at(
        page,
        {
            **ISSUE,
            "config": {
                k: v for k, v in ISSUE["config"].items() if k not in ("layer_types", "sliding_window")
            },
        },
        2,
    )
    assert page.locator(".bt-groups, #kv-pool-legend, #win-rows, #kv-legend .legend-moved").count() == 0
    assert page.locator("#card-block_table h3").inner_text() == "Block table (block_table)"
    assert page.locator("#card-block_table button:has-text('Heatmap')").count() == 1


def test_the_group_views_keep_their_text_readable_in_both_themes(browser: Any, base_url: str) -> None:
    # the null block is hatched dark on the light theme and light on the dark one, its text with it
    for theme in ("light", "dark"):
        context = browser.new_context(
            viewport={"width": 1280, "height": 720}, color_scheme=theme, reduced_motion="reduce"
        )
        pg = context.new_page()
        pg.goto(f"{base_url}/run?s={pack(ISSUE)}&step=2")
        pg.wait_for_selector("body[data-painted='2']", timeout=60_000)
        assert pg.locator("#table-block_table_g1 td.null-block").count() == 4
        low = pg.evaluate(LOW_CONTRAST)
        assert low == [], (theme, low)
        context.close()
