"""The run page's change cues and the kernel's reads per slot and block (issue 16) in a real Chromium
against a real uvicorn: a KV slot's writer and readers, a block's references, the Δ of the previous
step in the request table, animated transitions (off under reduced motion), links to a note, the
embeddable figure and a keyboard-only walkthrough."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.support import browser as tb

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
        assert f"row {r} (request {ids[r]}) as logical block {c}" in text
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
    assert (
        "referenced by " + ", ".join(f"row {r} (request {ids[r]}) as logical block {c}" for r, c in refs)
        in text
    )
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


def test_the_request_table_shows_what_changed_since_the_previous_step(page: object) -> None:
    open_run(page, "preset=demo-preemption&step=6")
    run = run_of(page)
    now, before = api(page, f"/api/runs/{run}/steps/6"), api(page, f"/api/runs/{run}/steps/5")
    name = "num_computed_tokens_cpu"
    was = dict(zip(before["batch"]["req_ids"], before["arrays"][name]["data"], strict=True))
    heads = page.evaluate(
        "[...document.querySelectorAll('#request-table thead th')].map(th => th.dataset.array)"
    )
    col = heads.index(name)
    changed = 0
    for rid, v in zip(now["batch"]["req_ids"], now["arrays"][name]["data"], strict=True):
        cell = page.locator(f"#request-table tr[data-req='{rid}'] td").nth(col)
        # matched by request id, not by row: b moved from row 1 to row 0 in this step
        if rid in was and was[rid] != v:
            changed += 1
            badge = cell.locator(".delta")
            assert badge.get_attribute("aria-label") == f"was {was[rid]}"
            assert badge.inner_text() == (f"+{v - was[rid]}" if v > was[rid] else f"−{was[rid] - v}")
        else:
            assert cell.locator(".delta").count() == 0
    assert changed
    # the switch turns the badges off, the URL keeps it, and 中文 says 原为
    page.uncheck("#delta-toggle")
    assert page.locator("#request-table .delta").count() == 0
    assert "delta=0" in page.url
    page.check("#delta-toggle")
    page.click("[data-lang='zh']")
    assert page.locator("#request-table .delta").first.get_attribute("aria-label").startswith("原为 ")


RECORD_ANIMATIONS = """() => {
  window.__animated = [];
  const animate = Element.prototype.animate;
  Element.prototype.animate = function (...args) {
    window.__animated.push(this.dataset.req || this.className);
    return animate.apply(this, args);
  };
}"""


def test_a_condense_slides_the_moved_rows_and_reduced_motion_animates_nothing(
    page: object, browser: object, base_url: str
) -> None:
    # demo-preemption step 5 -> 6: b moves from row 1 to row 0
    open_run(page, "preset=demo-preemption&step=5")
    page.evaluate(RECORD_ANIMATIONS)
    page.click("#btn-next")
    page.wait_for_selector("body[data-step='6']")
    animated = page.evaluate("window.__animated")
    assert "b" in animated
    # this step's new blocks fly in from the pool bar
    new_blocks = api(page, f"/api/runs/{run_of(page)}/steps/6")["scheduler"]["new_block_ids"]
    assert ("chip newblocks" in animated) == bool(new_blocks)
    # Play at ×4 steps every 250 ms: the slides would overlap, so none starts
    page.goto(f"{base_url}/run?preset=demo-preemption&step=5")
    page.wait_for_selector("body[data-ready='1']")
    page.evaluate(RECORD_ANIMATIONS)
    page.select_option("#speed", "4")
    last = api(page, f"/api/runs/{run_of(page)}")["num_steps"]
    page.click("#btn-play")  # it plays to the last step and stops there
    page.wait_for_selector(f"body[data-step='{last}']")
    assert page.evaluate("window.__animated") == []
    context = browser.new_context(
        viewport={"width": 1280, "height": 720}, reduced_motion="reduce", bypass_csp=True
    )  # type: ignore[attr-defined]
    calm = context.new_page()
    calm.goto(f"{base_url}/run?preset=demo-preemption&step=5")
    calm.wait_for_selector("body[data-ready='1']")
    calm.evaluate(RECORD_ANIMATIONS)
    calm.click("#btn-next")
    calm.wait_for_selector("body[data-step='6']")
    assert calm.evaluate("document.getAnimations().length") == 0
    assert calm.evaluate("window.__animated") == []
    assert "b: row 1 → 0" in calm.locator("#request-table tr[data-req='b']").inner_text()
    context.close()


def test_a_link_to_a_note_scrolls_to_it_marks_it_and_selects_its_refs(page: object, browser: object) -> None:
    open_run(page, "preset=seed-001&step=2")
    page.wait_for_selector("#narr-step li[data-note] .note-link")
    item = page.locator("#narr-step li[data-note]:has(button.ref-request:not(.ref-absent))").first
    note = item.get_attribute("data-note")
    first_ref = item.locator("button.ref-request").first.inner_text()
    item.locator(".note-link").click()
    assert "note=" in page.url
    url = page.url
    # a fresh page on the link: the note is marked and centred, its first request selected
    context = browser.new_context(viewport={"width": 1280, "height": 720}, bypass_csp=True)  # type: ignore[attr-defined]
    other = context.new_page()
    other.goto(url)
    other.wait_for_selector(".note-target")
    assert other.locator(".note-target").get_attribute("data-note") == note
    box = other.locator(".note-target").bounding_box()
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 720
    rid = first_ref.split()[-1]
    assert other.locator("#selection").inner_text().startswith(f"request {rid} ")
    # a preset's note has its own link
    other.goto(f"{page.base}/run?preset=seed-001&step=1&note=note-0")
    other.wait_for_selector("#preset-notes li.note-target")
    assert other.locator("#preset-notes li.note-target").inner_text().startswith("Note: ")
    context.close()


@pytest.fixture()
def slides_url(base_url: str) -> Iterator[str]:
    """A tiny 'slides' page on another origin (its own port) that frames two figures of the run page:
    one embedded (embed=kv) and one plain page, which must stay unframeable."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    run = f"{base_url}/run?preset=demo-prefix-cache&step=3"
    html = (
        f'<iframe id="fig" src="{run}&embed=kv" width="900" height="500"></iframe>'
        f'<iframe id="plain" src="{run}" width="300" height="200"></iframe>'
    ).encode()

    class Slides(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slides)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_an_embedded_figure_shows_alone_in_an_iframe_of_another_page(
    browser: object, slides_url: str
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 720})  # type: ignore[attr-defined]
    pg = context.new_page()
    pg.goto(slides_url)
    frame = pg.frame_locator("#fig")
    frame.locator("body[data-ready='1']").wait_for(timeout=30_000)
    # the figure alone: the KV card with its legend, no header, no step bar, no other card
    assert frame.locator("#card-kv").is_visible()
    assert frame.locator("#kv-legend").is_visible()
    for hidden in (
        "header.topbar",
        "#stepbar",
        "#card-block_table",
        "#request-table",
        "#narration",
        "#card-kv .card-tools",
    ):
        assert not frame.locator(hidden).is_visible(), hidden
    assert frame.locator("#embed-caption").inner_text().startswith("step 3 / ")
    box = frame.locator("#card-kv").bounding_box()
    assert box is not None and box["width"] > 850  # sized to the frame, not to the page's grid
    # ← / → move the step inside the frame
    frame.locator("#card-kv h3").click()
    pg.keyboard.press("ArrowLeft")
    frame.locator("body[data-step='2']").wait_for(state="attached")
    assert frame.locator("#embed-caption").inner_text().startswith("step 2 / ")
    # the plain page refused to be framed: its frame never runs the app
    plain = pg.locator("#plain").element_handle().content_frame()
    assert plain is None or (plain.locator("#stepbar").count() == 0 and not plain.url.startswith("http"))
    context.close()


def test_each_card_offers_its_embed_link(page: object) -> None:
    open_run(page, "preset=seed-001&step=2")
    link = page.locator("#card-block_table .card-tools a.embed-link")
    assert "embed=block_table" in link.get_attribute("href")
    page.click("#request-table caption summary")
    item = page.locator("#request-table caption a.embed-link")
    assert item.is_visible() and "embed=requests" in item.get_attribute("href")
    page.click("[data-lang='zh']")
    assert page.locator("#card-kv .card-tools a.embed-link").inner_text() == "嵌入链接"


def url_has(page: object, part: str, present: bool = True) -> None:
    """The address bar holds (or lacks) `part`; a burst of selections writes it once settled."""
    page.wait_for_function(
        "([p, want]) => location.search.includes(p) === want", arg=[part, present], timeout=5_000
    )


def tab_to(page: object, selector: str, limit: int = 400, back: bool = False) -> None:
    """Tab (or Shift+Tab) until the focused element matches selector."""
    for _ in range(limit):
        if page.evaluate(
            "s => Boolean(document.activeElement && document.activeElement.matches(s))", selector
        ):
            return
        page.keyboard.press("Shift+Tab" if back else "Tab")
    raise AssertionError(f"{selector} not reached with the keyboard")


def test_a_keyboard_only_walkthrough(page: object) -> None:
    open_run(page, "preset=seed-001&step=1")
    page.wait_for_selector("#narr-step li")
    kb = page.keyboard
    # language: Tab to 中文 and press Enter
    tab_to(page, "[data-lang='zh']")
    kb.press("Enter")
    url_has(page, "lang=zh")
    assert page.locator("#stages-h").inner_text() == "阶段"
    tab_to(page, "[data-lang='en']", back=True)
    kb.press("Space")
    url_has(page, "lang=zh", False)
    assert page.locator("#stages-h").inner_text() == "Stages"
    # steps: → and ← with the focus on the page's controls
    kb.press("ArrowRight")
    page.wait_for_selector("body[data-step='2']")
    kb.press("ArrowRight")
    page.wait_for_selector("body[data-step='3']")
    kb.press("ArrowLeft")
    page.wait_for_selector("body[data-step='2']")
    # a token cell: focusing it selects it
    tab_to(page, "#token-table th.tok-head[data-t='2']")
    assert page.locator("#selection").inner_text().startswith("token 2 ")
    url_has(page, "pos=")
    # a card's export menu opens with Enter
    tab_to(page, "#request-table caption summary", back=True)
    kb.press("Enter")
    assert page.locator("#request-table caption details").get_attribute("open") is not None
    assert page.locator("#request-table caption a.embed-link").is_visible()
    kb.press("Enter")  # and closes
    # Table / Heatmap of the KV card, with Space on the focused button
    tab_to(page, "#card-kv .card-tools button[aria-pressed]")
    was = page.locator("#card-kv .card-tools button[aria-pressed]").get_attribute("aria-pressed")
    kb.press("Space")
    page.wait_for_function(
        "w => document.querySelector('#card-kv .card-tools button[aria-pressed]')"
        ".getAttribute('aria-pressed') !== w",
        arg=was,
    )
    assert page.locator("#table-kv").is_visible() == (was == "false")
    # the narration's refs: focusing one lights what it names; Enter selects it
    tab_to(page, "#narr-step button.ref-request:not(.ref-absent)", limit=600)
    rid = page.evaluate("document.activeElement.dataset.id")
    assert page.locator(f"#request-table tr[data-req='{rid}'].hl").count() == 1
    kb.press("Enter")
    assert page.locator("#selection").inner_text().startswith(f"request {rid} ")
    assert page.locator("body").get_attribute("data-step") == "2"  # no key moved the step meanwhile


def test_a_slot_link_on_a_nano_vllm_run_names_its_writer(page: object) -> None:
    # nano-vllm has no null block: block 0 is a real block, written by the first request's prefill
    open_run(page, "preset=nanovllm-prefix-cache&step=1&slot=0")
    page.wait_for_selector("#selection .slot-writer[data-step]:not([data-step=''])")
    text = page.locator("#selection").inner_text()
    assert text.startswith("slot 0 = block 0 × ")
    run = run_of(page)
    tr = api(page, f"/api/runs/{run}/steps/1")
    T = tr["scalars"]["total_num_scheduled_tokens"]
    sm = tr["arrays"]["slot_mapping"]["data"][:T]
    assert 0 in sm
    rid = tr["batch"]["req_ids"][token_rows(tr)[sm.index(0)]]
    assert (
        f"written by request {rid} · position {tr['arrays']['positions']['data'][sm.index(0)]} · step 1"
        in text
    )
