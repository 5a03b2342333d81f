"""A request keeps one colour for the whole run (issue 29, item 13), in every view that colours it,
in a real Chromium against a real uvicorn: demo-preemption's request b, across the preemption of c
(step 5 to 6, where b moves from row 1 to row 0): its queue chip, its request-table cell, its
token-table column, its KV blocks' owner category and its compare-pane chips."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import browser as tb

open_run = tb.open_run

COLOURS = """rid => {
  const style = (s) => { const e = document.querySelector(s); return e ? getComputedStyle(e) : null; };
  const row = document.querySelector(`#request-table tr[data-req='${rid}']`);
  const r = row ? Number(row.dataset.r) : -1;
  const reqs = document.querySelector("#token-table tr[data-array='req_indices']");
  const tok = [...document.querySelectorAll('#token-table th.tok-head')].find((th) => {
    const cell = reqs && reqs.querySelector(`td[data-t='${th.dataset.t}']`);
    return cell && Number(cell.textContent) === r;
  });
  const chip = style(`#queue .qchip[data-req='${rid}']`);
  const cell = style(`#request-table tr[data-req='${rid}'] td.req-cell`);
  return { chip: chip && chip.backgroundColor, chipEdge: chip && chip.borderLeftColor,
    cell: cell && cell.backgroundColor, token: tok ? getComputedStyle(tok).backgroundColor : null,
    kvScale: JSON.stringify(document.getElementById('hm-kv').data[0].colorscale) };
}"""


@pytest.fixture()
def page(browser: object, base_url: str) -> Iterator[object]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=30_000)


def test_request_b_keeps_its_colour_in_every_view_across_the_preemption(page: Any) -> None:
    open_run(page, "preset=demo-preemption&step=5")
    page.wait_for_function("Boolean(document.getElementById('hm-kv').data)")
    before = page.evaluate(COLOURS, "b")
    assert None not in before.values(), before
    assert before["chip"] == before["cell"] == before["token"]  # one tint in every table
    page.keyboard.press("ArrowRight")
    page.wait_for_selector("body[data-painted='6']", state="attached")
    page.wait_for_function("Boolean(document.getElementById('hm-kv').data)")
    after = page.evaluate(COLOURS, "b")
    assert page.locator("#request-table tr[data-req='b']").get_attribute("data-r") == "0"  # b moved
    assert after == before
    # b's KV blocks keep b's owner category (its place in the scenario), not its row
    cats = page.evaluate(
        "() => { const d = document.getElementById('hm-kv').data[0];"
        " return [...new Set(d.z.flat().filter((v) => v !== null))]; }"
    )
    assert cats == [1]  # b is the scenario's second request; c's blocks went back to the pool


def test_a_compare_pane_colours_a_request_as_the_page_does(page: Any) -> None:
    open_run(page, "preset=demo-preemption&step=6&vs=num_kv_blocks:16")
    page.wait_for_selector("#cmp-view:not([hidden]) .cp-pane[data-side='b']")
    main = page.locator("#queue .qchip[data-req='b']").evaluate("c => getComputedStyle(c).backgroundColor")
    for side in ("a", "b"):
        chip = page.locator(f".cp-pane[data-side='{side}'] .cp-chip[data-req='b']")
        assert chip.evaluate("c => getComputedStyle(c).backgroundColor") == main
