"""The run page's change cues and the kernel's reads per slot and block (issue 16) in a real Chromium
against a real uvicorn: a KV slot's writer and readers, a block's references, the Δ of the previous
step in the request table, animated transitions (off under reduced motion), links to a note, the
embeddable figure and a keyboard-only walkthrough."""

from __future__ import annotations

import test_browser as tb

pytestmark = tb.pytestmark

base_url = tb.base_url
browser = tb.browser
page = tb.page
open_run = tb.open_run
shot = tb.shot


LIT_BT = (
    "[...document.querySelectorAll('#table-block_table td.hl')]"
    ".map(c => [Number(c.dataset.r), Number(c.dataset.c)])"
)


def api(page: object, path: str) -> dict:
    r = page.request.get(f"{page.base}{path}")  # type: ignore[attr-defined]
    assert r.ok, path
    return r.json()


def run_of(page: object) -> str:
    href = page.evaluate("document.querySelector('#req-table a, #tok-table a').href")
    return href.split("/runs/")[1].split("/")[0]


def token_rows(tr: dict) -> list[int]:
    """The batch row of each scheduled token, from the trace itself."""
    a = tr["arrays"]
    if "req_indices" in a:
        return list(a["req_indices"]["data"])
    cu = a["cu_seqlens_q"]["data"]
    return [r for r in range(len(cu) - 1) for _ in range(cu[r], cu[r + 1])]


def test_a_kv_slot_names_its_writer_and_the_queries_that_read_it(page: object) -> None:
    # demo-prefix-cache step 3: b reuses blocks a wrote; a slot of such a block is read by both
    open_run(page, "preset=demo-prefix-cache&step=3")
    page.click("#card-kv button:has-text('Table')")
    run = run_of(page)
    tr = api(page, f"/api/runs/{run}/steps/3")
    bs = api(page, f"/api/runs/{run}")["scenario"]["config"]["block_size"]
    bt = tr["arrays"]["block_table"]["data"]
    ids = tr["batch"]["req_ids"]
    shared = [b for b in range(1, tr["kv_cache"]["num_blocks"]) if sum(row.count(b) for row in bt) > 1]
    assert shared, "the preset shares blocks at step 3"
    block = shared[0]
    slot = block * bs + 1
    # the writer: the last step up to 3 whose slot_mapping holds the slot
    writer = None
    for n in (3, 2, 1):
        t = api(page, f"/api/runs/{run}/steps/{n}")
        T = t["scalars"]["total_num_scheduled_tokens"]
        sm = t["arrays"]["slot_mapping"]["data"][:T]
        if slot in sm:
            i = len(sm) - 1 - sm[::-1].index(slot)
            writer = (t["batch"]["req_ids"][token_rows(t)[i]], t["arrays"]["positions"]["data"][i], n)
            break
    assert writer is not None
    # the readers: this step's tokens of every row holding the block, at or past the slot's position
    rows = token_rows(tr)
    pos = tr["arrays"]["positions"]["data"]
    refs = [(r, c) for r, row in enumerate(bt) for c, b in enumerate(row) if b == block]
    readers = [i for i in range(len(rows)) if any(rows[i] == r and pos[i] >= c * bs + 1 for r, c in refs)]
    page.hover(f"#table-kv td[data-slot='{slot}']")
    sel = page.locator("#selection")
    page.wait_for_selector("#selection .slot-writer[data-step]:not([data-step=''])")
    text = sel.inner_text()
    assert f"written by request {writer[0]} · position {writer[1]} · step {writer[2]}" in text
    assert f"read this step by {len(readers)} token" in text
    for r, c in refs:
        assert f"row {r} ({ids[r]}) [{c}]" in text
    # the reading tokens are lit in the token table, and no other column
    lit = page.evaluate(
        "[...document.querySelectorAll('#token-table th.tok-head.slot-reader')].map(c => Number(c.dataset.t))"
    )
    assert lit == readers
    # and every block-table cell that references the block
    cells = page.evaluate(LIT_BT)
    assert sorted(map(tuple, cells)) == sorted(refs)


def test_a_block_lists_every_row_that_references_it(page: object) -> None:
    open_run(page, "preset=demo-prefix-cache&step=3")
    run = run_of(page)
    tr = api(page, f"/api/runs/{run}/steps/3")
    bt = tr["arrays"]["block_table"]["data"]
    ids = tr["batch"]["req_ids"]
    shared = [b for b in range(1, tr["kv_cache"]["num_blocks"]) if sum(row.count(b) for row in bt) > 1]
    block = shared[-1]
    refs = [(r, c) for r, row in enumerate(bt) for c, b in enumerate(row) if b == block]
    assert len(refs) > 1
    r0, c0 = refs[0]
    page.hover(f"#table-block_table td[data-r='{r0}'][data-c='{c0}']")
    text = page.locator("#selection").inner_text()
    assert text.startswith(f"block {block}")
    assert "referenced by " + ", ".join(f"row {r} ({ids[r]}) [{c}]" for r, c in refs) in text
    lit = page.evaluate(LIT_BT)
    assert sorted(map(tuple, lit)) == sorted(refs)
    # a clicked slot is kept in the URL, and the link reopens it
    page.click("#card-kv button:has-text('Table')")
    bs = api(page, f"/api/runs/{run}")["scenario"]["config"]["block_size"]
    page.click(f"#table-kv td[data-slot='{block * bs}']")
    assert f"slot={block * bs}" in page.url
    page.goto(page.url)
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("#selection").inner_text().startswith(f"slot {block * bs} = block {block} × {bs} + 0")
