"""Where the student looks (issue 37, point 5), in a real Chromium against a real uvicorn at 1280x720:
every section of every shipped lesson, in English, 中文 and present mode, reached by Next, by Back
and from the list of sections, shows on its first screen (bounding boxes inside the window, no
scrolling) its question, Check and Next and the views it talks about; the lesson panel stays
inside the window (nothing runs past its right edge, the page cannot scroll sideways); the request
table keeps batch order (the focus marks a row, it does not move it); the section's own selection
is applied and in the address; its "#" link points at the section itself; and the queue names
vLLM's queues as vLLM does (a preempted request at the front of `waiting`). One server and one
browser for the module; each walk is one test. Screenshots land in test-artifacts/."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from functools import cache
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from pagedviz.core import make_engine
from pagedviz.core.lesson import list_lessons, load_lesson, scenario_of
from pagedviz.core.trace import StepTrace
from tests.support import browser as tb

LESSONS = [x["id"] for x in list_lessons()]
W, H = 1280, 720
# The address keys a checkpoint keeps out of the address until Check (they would tell its answer:
# issue 37, point 4; static/predict.js WITHHELD); the selection's other keys are in the address at once.
WITHHELD_BEFORE_CHECK: frozenset[str] = frozenset({"pos", "block", "slot", "tok"})

# what the page shows of one section: boxes of the question, Check and Next and of the views the
# section talks about, the panel's right edge, the page's width, the request rows' order, the
# address, the "#" link, the queue
LOOK = """([names, asked]) => {
  const P = { queue: '#queue', block_table: '#card-block_table', kv: '#card-kv', attn_mask: '#card-attn_mask',
    slots: '#slotmap', requests: '#request-table', tokens: '#token-table' };
  const arrayNode = (a) => {
    const e = CSS.escape(a);
    const card = a === 'block_table' || a === 'block_tables' ? 'card-block_table' : `card-${a}`;
    return document.querySelector(`#token-table tr[data-array="${e}"]`)
      || document.querySelector(`#request-table th[title="${e}"]`)
      || document.querySelector(`#req-table [data-array="${e}"]`) || document.getElementById(card);
  };
  const box = (n) => {
    if (!n || !n.getClientRects().length) return null;
    const r = n.getBoundingClientRect();
    return { top: r.top, bottom: r.bottom, left: r.left, right: r.right };
  };
  const views = {};
  for (const v of names) views[v] = box(P[v] ? document.querySelector(P[v]) : arrayNode(v));
  if (asked) views[asked] = box(arrayNode(asked));
  // the right edge of what the panel shows: each node's, cut where a box of the panel clips it (a
  // line ending in an ellipsis); the page's boxes around the panel do not count: what they cut off
  // is lost to the reader
  const lesson = document.getElementById('lesson');
  const right = (n) => {
    let r = n.getBoundingClientRect().right;
    for (let p = n.parentElement; p && p !== lesson; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== 'visible') r = Math.min(r, p.getBoundingClientRect().right);
    }
    return r;
  };
  const shown = [lesson, ...lesson.querySelectorAll('*')].filter((n) => n.checkVisibility());
  const widest = Math.max(...shown.map(right));
  const waiting = [...document.querySelectorAll('#queue .lane-waiting .qchip')];
  return {
    text: box(document.getElementById('lesson-text')), form: box(document.getElementById('predict-form')),
    check: box(document.getElementById('predict-check')), next: box(document.getElementById('lesson-next')),
    views, widest, panelRight: lesson.getBoundingClientRect().right,
    scrollWidth: document.scrollingElement.scrollWidth, innerWidth,
    rows: [...document.querySelectorAll('#request-table tbody tr')].map((r) => Number(r.dataset.r)),
    focusRow: document.querySelector('#request-table tbody tr.focus-row')?.dataset.req || '',
    url: location.href, note: document.getElementById('lesson-note').href,
    waiting: waiting.map((c) => c.dataset.req),
    preemptedMarks: waiting.filter((c) => c.classList.contains('q-preempted')).map((c) => c.dataset.req),
    preemptedLane: document.querySelectorAll('#queue .lane-preempted').length,
  };
}"""


WAITING = "import('/static/context.js').then((m) => m.S.trace.scheduler.waiting_req_ids.map(String))"


@cache
def _run(scenario: str) -> list[StepTrace]:
    return list(make_engine(scenario_of({"scenario": json.loads(scenario)})).run())


def _steps(lesson: str, k: int) -> list[StepTrace]:
    """Section k's run, by the engine (once per scenario: sections share runs)."""
    return _run(json.dumps(load_lesson(lesson)["sections"][k]["scenario"], sort_keys=True))


@pytest.fixture()
def page(browser: object, base_url: str) -> Iterator[object]:
    yield from tb.watched_page(browser, base_url, W, H, timeout_ms=60_000)


def _selection(lesson: str, k: int) -> dict[str, str]:
    """The address keys of section k's selection: a request by id (in the batch or not), a token as
    its request and position, a row as its request, a block."""
    s = load_lesson(lesson)["sections"][k]
    sel, t = s["selection"], _steps(lesson, k)[s["step"] - 1]
    want = {"req": "", "pos": "", "block": ""}
    if sel is None:
        return want
    ids = [str(x) for x in t.batch["req_ids"]]
    if sel["kind"] == "request":
        assert str(sel["id"]) in {str(r.id) for r in scenario_of(s).requests}
        want["req"] = str(sel["id"])
    elif sel["kind"] == "row":
        want["req"] = ids[int(sel["id"])]
    elif sel["kind"] == "block":
        want["block"] = str(sel["id"])
    else:
        i = int(sel["id"])
        rows = t.arrays.get("req_indices")
        cu = next((t.arrays[n] for n in ("query_start_loc", "cu_seqlens_q") if n in t.arrays), None)
        if rows is not None:
            r = int(rows[i])
        elif cu is not None:
            r = next(j for j in range(len(ids)) if cu[j] <= i < cu[j + 1])
        else:
            r = i  # one token per row
        want["req"], want["pos"] = ids[r], str(int(t.arrays["positions"][i]))
    return want


def _inside(b: dict[str, float] | None) -> bool:
    return b is not None and b["top"] >= 0 and b["bottom"] <= H and b["left"] >= 0 and b["right"] <= W


def _check(page: Any, lesson: str, k: int, how: str) -> None:
    s = load_lesson(lesson)["sections"][k]
    page.wait_for_selector(f"body[data-lesson-section='{k}'][data-lesson-ready='1']")
    cp = s["checkpoint"]
    if cp:
        page.wait_for_selector("#predict-check")
    got = page.evaluate(LOOK, [s["views"], cp["array"] if cp else None])
    ctx = (lesson, k + 1, how)
    # the question (the paragraph, and the checkpoint's form), Check and Next: on the first screen
    assert _inside(got["text"]) and _inside(got["next"]), (ctx, got["text"], got["next"])
    if cp:
        assert _inside(got["form"]) and _inside(got["check"]), (ctx, got["form"], got["check"])
    # the views the section talks about, drawn and on the same screen
    off = {v: b for v, b in got["views"].items() if not _inside(b)}
    assert off == {}, (ctx, off)
    # the panel inside the window, the page not wider than it (once its figures have their widths)
    with contextlib.suppress(PlaywrightTimeout):  # (said below, with the numbers)
        page.wait_for_function(f"document.scrollingElement.scrollWidth <= {W}", timeout=10_000)
    got.update(page.evaluate(LOOK, [s["views"], cp["array"] if cp else None]))
    assert got["widest"] <= got["panelRight"] <= W and got["scrollWidth"] <= got["innerWidth"] == W, (
        ctx,
        got["widest"],
        got["scrollWidth"],
    )
    # the request table in batch order; the section's request marked where it is
    want = _selection(lesson, k)
    assert got["rows"] == sorted(got["rows"]) == list(range(len(got["rows"]))), (ctx, got["rows"])
    batch = [str(x) for x in _steps(lesson, k)[s["step"] - 1].batch["req_ids"]]
    if want["req"] in batch:
        assert got["focusRow"] == want["req"], (ctx, got["focusRow"])
    # the section's own view in the address, its selection included (minus what a checkpoint withholds)
    q = {key: v[0] for key, v in parse_qs(urlparse(got["url"]).query).items()}
    assert (
        q.get("sec", "0") == str(k) and q.get("step", "1") == str(s["step"]) and q.get("stage") == s["stage"]
    ), (ctx, q)
    for key, v in want.items():
        expect = "" if cp and key in WITHHELD_BEFORE_CHECK else v
        assert q.get(key, "") == expect, (ctx, key, q)
    # its "#" link: this section, with its own note
    n = {key: v[0] for key, v in parse_qs(urlparse(got["note"]).query).items()}
    assert (
        n.get("note") == f"lesson-{k}"
        and n.get("sec", "0") == str(k)
        and n.get("step", "1") == str(s["step"])
    ), (ctx, n)
    assert n.get("lesson") == q.get("lesson") and n.get("stage") == s["stage"], (ctx, n)
    # the queue as vLLM has it: `waiting` in the trace's order, head first, a preempted request in it
    sched = page.evaluate(WAITING)
    assert got["waiting"] == sched[: len(got["waiting"])] and got["preemptedLane"] == 0, (
        ctx,
        got["waiting"],
        sched,
    )
    status: set[str] = set()  # PREEMPTED: preempted, not scheduled since
    for t in _steps(lesson, k)[: s["step"]]:
        status -= {str(r) for r in [*t.scheduler["new_req_ids"], *t.scheduler["resumed_req_ids"]]}
        status |= {str(r) for r in t.scheduler["preempted_req_ids"]}
    assert got["preemptedMarks"] == [r for r in got["waiting"] if r in status], (ctx, got["preemptedMarks"])


# each mode walks every section by Next, and again by Back or from the list (en by both): every way
# in, every section, in every mode, at a cost CI can carry
WAYS = {"en": ("back", "list"), "zh": ("list",), "present": ("back",)}


@pytest.mark.parametrize("mode", list(WAYS))
@pytest.mark.parametrize("lesson", LESSONS)
def test_every_section_by_next_back_and_the_list_shows_its_question_check_next_and_views_on_one_screen(
    page: Any, lesson: str, mode: str
) -> None:
    n = len(load_lesson(lesson)["sections"])
    q = "&lang=zh" if mode == "zh" else "&present=1" if mode == "present" else ""
    tb.open_run(page, f"lesson={lesson}{q}")
    _check(page, lesson, 0, "opened")
    for k in range(1, n):
        page.click("#lesson-next")
        _check(page, lesson, k, "next")
    page.screenshot(path=str(tb.ARTIFACTS / f"lesson-look-{mode}-{n}.png"))
    if "back" in WAYS[mode]:
        for k in range(n - 2, -1, -1):
            page.click("#lesson-prev")
            _check(page, lesson, k, "back")
    if "list" in WAYS[mode]:
        # from the list of sections, open all the while: jumps across runs, both ways
        page.click(".lesson-toc-box summary")
        for k in [*range(n - 1, 0, -2), *range(0, n, 2)]:
            page.click(f"#lesson-toc button[data-sec='{k}']")
            _check(page, lesson, k, "list")
        page.screenshot(path=str(tb.ARTIFACTS / f"lesson-look-{mode}-list.png"))
