"""The lesson as a student uses it (issue 29), in a real Chromium against a real uvicorn at 1280x720,
in English and 中文: at every checkpoint of every shipped lesson nothing tells the asked values before
"Check" (issue 37, point 4): not the visible text, the accessibility tree, the address, a hover on
any token, nor what stands where a card or a value is concealed (a grey placeholder, no colour); a
wrong answer's hints are one per entry (point 6); each section sets its whole view (run, step,
stage, selection, focus, scroll) whichever section it is reached from; a wrong answer gets a hint
first, the cause from the trace when revealed, and "Just show me" shows the answer in the checkpoint itself.
Every expected number comes from the engine's own run. Screenshots land in test-artifacts/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest

from pagedviz.core.lesson import list_lessons, load_lesson, scenario_of
from tests.support import browser as tb
from tests.support.browser import open_run, settle
from tests.support.browser import view_shot as shot

HAN = re.compile(r"[\u4e00-\u9fff]")

# The page's text a reader can see, one chunk per block of text (a formula's terms join into one
# line), and the tooltips of what can be hovered: nothing inside what a checkpoint conceals, nor
# hidden, nor the checkpoint's own form (its entry names are the question).
VISIBLE_TEXT = """() => {
  const out = [];
  const BLOCK = 'p, li, pre, td, th, h1, h2, h3, h4, div, section, label, button, summary, dt, dd, a, '
    + 'option, span.chip';
  const gone = (e) => e.closest('.concealed, .concealed-card .card-body, script, style, [hidden], '
    + '#predict-form')
    || !e.checkVisibility({ visibilityProperty: true, opacityProperty: true });
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let block = null;
  while (walk.nextNode()) {
    const n = walk.currentNode, e = n.parentElement;
    if (!e || !n.textContent.trim() || gone(e)) continue;
    const b = e.closest(BLOCK);
    if (b !== block || !out.length) out.push(n.textContent); else out[out.length - 1] += n.textContent;
    block = b;
  }
  for (const e of document.querySelectorAll('[title]')) if (e.title.trim() && !gone(e)) out.push(e.title);
  return out.join(' ¦ ');
}"""

# the values shown under the array's own label, outside the checkpoint's form: a row's cells, a line
LABELLED = """(a) => {
  const out = [];
  for (const n of document.querySelectorAll(`[data-array="${CSS.escape(a)}"]`)) {
    if (n.closest('#predict-form, .stage-list') || n.tagName === 'TH') continue;
    if (n.classList.contains('term')) continue;
    const cells = n.tagName === 'TR' ? [...n.querySelectorAll('td')] : [n];
    for (const c of cells) {
      if (!c.textContent.trim() || c.closest('.concealed, .concealed-card .card-body, [hidden]')) continue;
      const shown = c.checkVisibility({ visibilityProperty: true, opacityProperty: true });
      if (shown) out.push(c.textContent.slice(0, 40));
    }
  }
  return out;
}"""

LESSONS = [x["id"] for x in list_lessons()]


@pytest.fixture()
def page(browser: object, base_url: str) -> Iterator[object]:
    yield from tb.watched_page(browser, base_url, 1280, 720, timeout_ms=30_000)


def visible(page: Any) -> str:
    return str(page.evaluate(VISIBLE_TEXT))


@cache
def _steps(lesson: str, k: int) -> list[Any]:
    from pagedviz.core import make_engine

    return list(make_engine(scenario_of(load_lesson(lesson)["sections"][k])).run())


def _checkpoints() -> list[tuple[str, int]]:
    return [
        (lid, k) for lid in LESSONS for k, s in enumerate(load_lesson(lid)["sections"]) if s["checkpoint"]
    ]


def answer(lesson: str, k: int) -> tuple[str, list[int], list[int], tuple[int, ...]]:
    s = load_lesson(lesson)["sections"][k]
    cp = s["checkpoint"]
    value = _steps(lesson, k)[s["step"] - 1].arrays[cp["array"]]
    flat = value.reshape(-1)
    return cp["array"], cp["indices"], [int(flat[i]) for i in cp["indices"]], tuple(value.shape)


def tells(array: str, indices: list[int], values: list[int], shape: tuple[int, ...]) -> list[re.Pattern[str]]:
    """What would say the asked values on the page: the answer as a list (a note, a chip, a row of
    cells), or one entry's worked formula with its result ("10 = block_table[2, 2 // 2] * 2 + …",
    "slot_mapping[7] = … = 10")."""
    out = []
    if len(values) > 1:
        for sep in (", ", "、", " "):
            # the whole list, not a run inside a longer list of other things (freed blocks 1, 2, 3, …)
            s = re.escape(sep)
            out.append(rf"(?<!\d{s})(?<![\d.]){re.escape(sep.join(map(str, values)))}(?![\d.])(?!{s}\d)")
        # a run 0, 1, 2, … is every table's index header: a row of cells is then told by its formula
        if values != list(range(values[0], values[0] + len(values))):
            out.append(re.escape(" ¦ ".join(map(str, values))) + r"(?! ?\d)")
    for i, v in zip(indices, values):
        where = (
            [rf"\[{i}\]"]
            if len(shape) < 2
            else [rf"\[{i // shape[1]}\]\[{i % shape[1]}\]", rf"\[{i // shape[1]}, {i % shape[1]}\]"]
        )
        out.append(rf"(?<![\w.\[\-]){v} = [a-z_]+\[")  # a formula that starts with its result
        out += [rf"{array}{w}[^¦]*= {v}(?![\d.])" for w in where]
    return [re.compile(p) for p in out]


def open_section(page: Any, lesson: str, k: int, lang: str) -> None:
    """The section opened from its address; `lang` may name present mode too ("en-present")."""
    base, _, mode = lang.partition("-")
    extra = ("&lang=zh" if base == "zh" else "") + ("&present=1" if mode == "present" else "")
    open_run(page, f"lesson={lesson}&sec={k}" + extra)
    page.wait_for_selector(f"body[data-lesson-section='{k}']", timeout=60_000)
    page.wait_for_selector("body[data-lesson-ready='1']", timeout=60_000)


# ------------------------------------------------------------------ 1. no answer before "Check"
# What stands where a concealed answer was (issue 37, point 4): every concealed value and card body
# is hidden from drawing, find-in-page and the accessibility tree (visibility), every element in
# it too (a canvas, a bar, a number), and the placeholder over it is grey stripes: no colour.
CONCEALED = """() => {
  const out = { areas: 0, shown: [], coloured: [] };
  const grey = (c) => {
    const m = c.match(/\\d+(\\.\\d+)?/g);
    return !m || (m[0] === m[1] && m[1] === m[2]);
  };
  for (const a of document.querySelectorAll('.concealed, .concealed-card .card-body')) {
    if (a.closest('[hidden]') || !a.isConnected) continue;
    out.areas += 1;
    const id = a.id || a.closest('[id]')?.id || a.tagName;
    for (const n of [a, ...a.querySelectorAll('*')]) {
      if (n.checkVisibility({ visibilityProperty: true })) {
        out.shown.push(`${id}: ${n.tagName} ${n.textContent.slice(0, 30)}`);
      }
    }
    const after = getComputedStyle(a, '::after');
    const paint = `${after.backgroundColor} ${after.backgroundImage}`;
    const colours = paint.match(/rgba?\\([^)]*\\)/g) || [];
    const bad = colours.filter((c) => !grey(c));
    // (content: none: nothing drawn in its place, as for the export links)
    if (after.content !== 'none' && (!colours.length || bad.length)) {
      out.coloured.push(`${id}: ${after.content} ${colours.join(' ')}`);
    }
  }
  return out;
}"""

# Hovering each token of the step (the asked row's among them): what the hover outlines beyond the
# token's own column and its request's row. A heatmap's outlines (its overlay's shapes), a lit cell
# in any other view, the kernel's reads on the KV card: none may come while the answer is hidden.
HOVER_EVERY_TOKEN = """() => {
  const beyond = () => [...document.querySelectorAll('.hl, .read')].filter(
    (n) => !n.closest('#token-table, #request-table, #predict-form'))
    .map((n) => n.closest('[id]')?.id || n.tagName);
  const shapes = () => Object.fromEntries([...document.querySelectorAll('.heatmap')]
    .filter((d) => d.layout && !d.closest('.concealed-card, [hidden]'))
    .map((d) => [d.id, (d.layout.shapes || []).length + (d.layout.annotations || []).length]));
  const before = shapes(), base = beyond().length, out = [];
  const cells = [...document.querySelectorAll('#token-table [data-t]')];
  const tokens = [...new Set(cells.map((c) => c.dataset.t))];
  for (const t of tokens) {
    const c = cells.find((n) => n.dataset.t === t && !n.closest('.concealed'));
    if (!c) continue;
    c.dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
    const now = shapes();
    for (const [id, n] of Object.entries(now)) {
      if (n > (before[id] || 0)) out.push(`token ${t}: ${n - (before[id] || 0)} outline(s) on ${id}`);
    }
    const lit = beyond();
    if (lit.length > base) out.push(`token ${t}: lit ${lit.join(', ')}`);
  }
  document.getElementById('tok-table').dispatchEvent(new MouseEvent('mouseleave'));
  return { hovered: tokens.length, out };
}"""

# the address's keys a checkpoint withholds until Check (predict.js WITHHELD)
WITHHELD = ("pos", "block", "slot", "tok")
ADDRESS = "() => Object.fromEntries(new URLSearchParams(location.search))"


def aria_text(page: Any) -> str:
    """What a screen reader gets: the names of the page's accessibility tree (Chromium's, through
    CDP: Playwright's aria snapshot takes minutes on a 200-token table), one chunk per node,
    without the checkpoint's own form (its entry names are the question)."""
    cdp = page.context.new_cdp_session(page)
    try:
        nodes = cdp.send("Accessibility.getFullAXTree")["nodes"]
    finally:
        cdp.detach()
    by_id = {n["nodeId"]: n for n in nodes}
    form = page.locator("#predict-h").inner_text()
    skip: set[str] = set()
    name_of = lambda n: str((n.get("name") or {}).get("value", "")).strip()  # noqa: E731
    for n in nodes:  # the form's subtree
        if (n.get("role") or {}).get("value") == "form" and form in name_of(n):
            todo = [n["nodeId"]]
            while todo:
                x = todo.pop()
                skip.add(x)
                todo += by_id[x].get("childIds", []) if x in by_id else []
    out = []
    for n in nodes:
        if n["nodeId"] in skip or n.get("ignored"):
            continue
        name = name_of(n)
        # a table's index row ("index 0 1 2 3 4"): a run, as tells() says, is no answer
        run = re.fullmatch(r"[^\d]+ ((?:\d+ ?)+)", name)
        if run:
            xs = [int(x) for x in run.group(1).split()]
            if xs == list(range(xs[0], xs[0] + len(xs))):
                continue
        if name:
            out.append(name)
    return " ¦ ".join(out)


@pytest.mark.parametrize("lang", ["en", "zh", "en-present"])
def test_no_view_tells_a_checkpoints_answer_before_check(page: Any, lang: str) -> None:
    """Every checkpoint of every shipped lesson, walked in one page: before Check, none of the asked
    values is in the visible text, the accessibility tree or the address; hovering any token outlines
    nothing that tells them; what is concealed is hidden and stands as a grey placeholder. Checked,
    the views and the section's selection in the address come back."""
    for lesson, k in _checkpoints():
        sec = load_lesson(lesson)["sections"][k]
        array, indices, values, shape = answer(lesson, k)
        pats = tells(array, indices, values, shape)
        open_section(page, lesson, k, lang)
        page.wait_for_selector("#predict-form")
        settle(page)  # the narration and the late cells are concealed as they come
        # the views that would tell it are on the page, in the DOM, hidden
        seen = visible(page)
        leaks = [seen[max(0, m.start() - 80) : m.end() + 40] for p in pats for m in [p.search(seen)] if m]
        assert leaks == [], (k, lang, leaks)
        # and no view that labels its values with the array shows one (a table row, a value line)
        labelled = page.evaluate(LABELLED, array)
        assert labelled == [], (k, lang, labelled)
        # nor a screen reader (or find-in-page: the same hidden nodes)
        heard = aria_text(page)
        leaks = [heard[max(0, m.start() - 80) : m.end() + 40] for p in pats for m in [p.search(heard)] if m]
        assert leaks == [], (k, lang, "accessibility tree", leaks)
        # what is concealed is hidden, element by element, under a placeholder with no colour
        conc = page.evaluate(CONCEALED)
        assert conc["areas"] > 0 and conc["shown"] == [] and conc["coloured"] == [], (k, lang, conc)
        # the address withholds what the section's selection reads off the step's arrays
        address = page.evaluate(ADDRESS)
        assert not set(WITHHELD) & set(address), (k, lang, address)
        # hovering each token outlines its column and its row, nothing more
        hover = page.evaluate(HOVER_EVERY_TOKEN)
        assert hover["hovered"] > 0 and hover["out"] == [], (k, lang, hover)
        # "only this request" draws the tables anew: the answer stays hidden in them
        only = page.locator("#focus-only")
        if only.count() and only.is_visible() and only.is_enabled():
            only.check()
            assert page.evaluate(LABELLED, array) == [], (k, lang, "only this request")
            only.uncheck()
        if k in (2, 4, 8, 12) and lang == "en":
            shot(page, f"lesson-checkpoint-{k}.png")
        # a wrong answer (issue 37, point 6): the rule once, then one hint per entry, each its own,
        # none with a "?" standing for what the trace did not name; the answer still hidden
        for j, v in enumerate(values):
            page.fill(f"#predict-{j}", str(v + 1000))
        page.click("#predict-check")
        page.wait_for_selector("body[data-predict='hint']")
        assert page.locator("#predict-result .predict-rule").count() == 1, k
        hints = page.locator("#predict-result li").all_inner_texts()
        assert len(hints) == len(values) == len(set(hints)), (k, lang, hints)
        placeholder = re.compile(r"(?:request|请求|row|行|token) \?|\?'s")
        assert not any(placeholder.search(h) for h in hints), (k, lang, hints)
        assert page.locator("#lesson .concealed, #main .concealed").count() > 0
        if array == "idx_mapping":
            # "Just show me": the slot each row reads, with the slot stack that handed it out
            page.click("#predict-reveal")
            page.wait_for_selector("body[data-predict='revealed']")
            shown = page.locator("#predict-result").inner_text()
            en = not lang.startswith("zh")
            stack = "on top of the free slot stack" if en else "空闲槽位栈"
            assert stack in shown and ("popped the top" if en else "弹出栈顶") in shown, shown
        else:  # checked right: the views tell it again
            for j, v in enumerate(values):
                page.fill(f"#predict-{j}", str(v))
            page.click("#predict-check")
            page.wait_for_selector("body[data-predict='revealed']")
        # revealed: nothing concealed, and the address says the section's whole selection
        assert page.locator("#lesson .concealed, #main .concealed").count() == 0
        address = page.evaluate(ADDRESS)
        sel = sec["selection"] or {}
        if sel.get("kind") == "block":
            assert address.get("block") == str(sel["id"]), (k, address)
        if sel.get("kind") == "token":
            assert address.get("pos", "") != "", (k, address)


def test_presentation_keeps_the_checkpoints_answer_hidden(page: Any) -> None:
    lesson, k = next((lid, i) for lid, i in _checkpoints() if answer(lid, i)[0] == "slot_mapping")
    array, indices, values, shape = answer(lesson, k)
    open_section(page, lesson, k, "en")
    page.click("#btn-present")
    page.wait_for_selector("body.present")
    settle(page)
    seen = visible(page)
    assert [p.pattern for p in tells(array, indices, values, shape) if p.search(seen)] == []
    assert page.evaluate(LABELLED, array) == []
    assert page.locator("#predict-form").count() == 1


# ------------------------------------------------------------------ 3, 5. each section sets its whole view
WHERE = """() => {
  const q = new URLSearchParams(location.search);
  const inView = (n) => {
    if (!n) return null;
    const r = n.getBoundingClientRect();
    return r.bottom > 0 && r.top < innerHeight;
  };
  const lesson = document.getElementById('lesson').getBoundingClientRect();
  return {
    step: document.body.dataset.step,
    stage: (document.querySelector('.stage-btn.active') || {}).dataset?.stage,
    req: q.get('req') || '', pos: q.get('pos') || '', block: q.get('block') || '',
    array: q.get('array') || '',
    focus: (document.getElementById('focus-req') || {}).value || '',
    only: Boolean((document.getElementById('focus-only') || {}).checked),
    focusShown: Boolean(document.getElementById('focus-req')?.checkVisibility()),
    selection: document.getElementById('selection').textContent,
    lessonTop: lesson.top, whereShown: inView(document.getElementById('lesson-where')),
    where: document.getElementById('lesson-where').textContent,
    away: !document.getElementById('lesson-away').hidden,
  };
}"""


# the view of the asked array (its token-table row, its request-table column, its card) is on screen
ASKED_IN_VIEW = """(a) => {
  const e = CSS.escape(a);
  const bt = a === 'block_table' || a === 'block_tables';
  const card = document.getElementById(bt ? 'card-block_table' : `card-${a}`);
  const n = document.querySelector(`#token-table tr[data-array="${e}"]`)
    || document.querySelector(`#request-table th[title="${e}"]`)
    || document.querySelector(`#req-table [data-array="${e}"]`) || card;
  if (!n) return false;
  const r = n.getBoundingClientRect();
  return r.bottom > 0 && r.top < innerHeight;
}"""


def _expected_selection(lesson: str, k: int) -> dict[str, str]:
    s = load_lesson(lesson)["sections"][k]
    sel, t = s["selection"], _steps(lesson, k)[s["step"] - 1]
    want = {"req": "", "pos": "", "block": ""}
    if sel is None:
        return want
    ids = [str(x) for x in t.batch["req_ids"]]
    if sel["kind"] == "request":
        want["req"] = str(sel["id"])  # in the batch or not (preempted, waiting): focused all the same
    elif sel["kind"] == "row":
        want["req"] = ids[int(sel["id"])]
    elif sel["kind"] == "block":
        want["block"] = str(sel["id"])
    elif sel["kind"] == "token":
        i = int(sel["id"])
        rows = t.arrays.get("req_indices")
        cu = next((t.arrays[n] for n in ("query_start_loc", "cu_seqlens_q") if n in t.arrays), None)
        if rows is not None:
            r = int(rows[i])
        elif cu is not None:
            r = next(j for j in range(len(ids)) if cu[j] <= i < cu[j + 1])
        else:
            r = i  # a decode step with no cumulative counts: one token per row

        want["req"], want["pos"] = ids[r], str(int(t.arrays["positions"][i]))
    return want


def _check_view(page: Any, lesson: str, k: int, came_from: int) -> None:
    s = load_lesson(lesson)["sections"][k]
    page.wait_for_selector(f"body[data-lesson-section='{k}'][data-lesson-ready='1']", timeout=60_000)
    got = page.evaluate(WHERE)
    ctx = (k, "from", came_from, got)
    assert got["step"] == str(s["step"]) and got["stage"] == s["stage"], ctx
    want = _expected_selection(lesson, k)
    if s["checkpoint"]:  # the keys a checkpoint withholds from the address until Check
        want.update({x: "" for x in WITHHELD if x in want})
    assert {x: got[x] for x in want} == want, ctx
    # nothing of the section before: no focus it did not ask for, no array in focus, no stale selection
    assert (
        (got["focus"] == want["req"] or not got["focusShown"]) and not got["only"] and got["array"] == ""
    ), ctx
    assert "undefined" not in got["selection"], ctx
    # the lesson panel from its top, and the step and run on show said in it
    assert got["lessonTop"] >= 0 and got["whereShown"] and not got["away"], ctx
    assert f" {s['step']} / " in got["where"], ctx
    # the page brought what the section asks about into sight: its checkpoint's array
    if s["checkpoint"]:
        assert page.evaluate(ASKED_IN_VIEW, s["checkpoint"]["array"]), ctx


@pytest.mark.parametrize("lesson", LESSONS)
def test_each_section_sets_its_whole_view_whether_reached_by_next_or_back(page: Any, lesson: str) -> None:
    n = len(load_lesson(lesson)["sections"])
    open_section(page, lesson, 0, "en")
    _check_view(page, lesson, 0, -1)
    for k in range(n - 1):
        # the student leaves something behind: a focus of their own, "only this request"
        if page.locator("#focus-req").is_visible():
            rid = str(scenario_of(load_lesson(lesson)["sections"][k]).requests[-1].id)
            page.fill("#focus-req", rid)
            page.press("#focus-req", "Enter")
            page.locator("#focus-only").check()
        page.click("#lesson-next")
        _check_view(page, lesson, k + 1, k)
        if k == 8:
            shot(page, "lesson-next-into-another-run.png")
        page.click("#lesson-prev")
        _check_view(page, lesson, k, k + 1)
        page.click("#lesson-next")
        _check_view(page, lesson, k + 1, k)
    # the end: a wrap-up, not a greyed button
    page.click("#lesson-next")
    page.wait_for_selector("#lesson-end:not([hidden])")
    assert "Lesson complete" in page.locator("#lesson-end").inner_text()
    shot(page, "lesson-end.png")


def test_stepping_away_is_said_with_the_way_back(page: Any) -> None:
    lesson = LESSONS[0]
    k = next(
        i for i, s in enumerate(load_lesson(lesson)["sections"]) if s["step"] > 1 and not s["checkpoint"]
    )
    s = load_lesson(lesson)["sections"][k]
    open_section(page, lesson, k, "en")
    page.click("#btn-prev")
    page.wait_for_selector(f"body[data-step='{s['step'] - 1}']")
    page.wait_for_selector("#lesson-away:not([hidden])")
    assert f"about step {s['step']}" in page.locator("#lesson-away").inner_text()
    page.click("#lesson-back")
    page.wait_for_selector(f"body[data-step='{s['step']}']")
    page.wait_for_selector("#lesson-away", state="hidden")
    active = "[...document.querySelectorAll('.stage-btn.active')].map((b) => b.dataset.stage)"
    try:
        page.wait_for_function(f"{active}.join() === {s['stage']!r}", timeout=10_000)
    finally:
        assert page.evaluate(active) == [s["stage"]], (
            page.evaluate(active),
            page.locator("#run-title").inner_text(),
        )


# The previous run's next step, prefetched while the page idles, is held back by the network until
# the section's own run is being created, then lands while that run loads: before the section's
# run had a step cache of its own, that step was kept and shown as the section's step (another
# run's trace, whose stage list lacks the section's stage).
LATE_STEP = """() => {
  const real = window.fetch;
  const wait = (ms) => new Promise((r) => setTimeout(r, ms));
  let release, presets = 0;
  const gate = new Promise((r) => { release = r; });
  window.lateStep = { held: '', own: [] };
  window.fetch = async (u, o) => {
    const url = String(u);
    if (/\\/api\\/presets\\/seed-001-ascend$/.test(url)) {
      presets += 1;
      const r = await real(u, o);
      await wait(300);
      if (presets === 2) { release(); await wait(600); }  // the run is created: the old step lands first
      return r;
    }
    const r = await real(u, o);
    if (/\\/steps\\/2$/.test(url)) {
      if (window.lateStep.held) window.lateStep.own.push(url);
      else { window.lateStep.held = url; await gate; }
    }
    return r;
  };
}"""


def test_a_step_of_the_run_left_that_lands_while_a_section_loads_is_not_shown_as_the_sections(
    page: Any,
) -> None:
    lesson = LESSONS[0]
    secs = load_lesson(lesson)["sections"]
    k = next(i for i, s in enumerate(secs) if s["scenario"] == "seed-001-ascend" and s["step"] == 2)
    page.add_init_script(f"({LATE_STEP})()")
    open_section(page, lesson, k, "en")  # the page starts on the default run, then loads the section's
    late = page.evaluate("window.lateStep")
    run_of = re.compile(r"/api/runs/([^/]+)/steps/2$")
    held = run_of.search(late["held"])
    assert held, late  # the previous run's step 2 was held back and landed while the section loaded
    # the section's run fetched its own step 2 and shows it: its stage is on the list, marked
    own = {m.group(1) for u in late["own"] for m in [run_of.search(u)] if m}
    assert own and held.group(1) not in own, late
    active = page.evaluate("[...document.querySelectorAll('.stage-btn.active')].map((b) => b.dataset.stage)")
    assert active == [secs[k]["stage"]]
    assert page.locator("body").get_attribute("data-step") == "2"


def test_a_section_opened_after_a_burst_of_selections_has_its_own_address_at_once(page: Any) -> None:
    # the address bar's writes are put off past a burst (the browser drops too many): a section
    # the reader opens is written at once all the same, never still naming the section before
    lesson = LESSONS[0]
    secs = load_lesson(lesson)["sections"]
    k = next(
        i for i, s in enumerate(secs) if i and s["scenario"] == secs[i - 1]["scenario"] and s["selection"]
    )
    open_section(page, lesson, k - 1, "en")
    page.evaluate(
        """() => {
          const cells = [...document.querySelectorAll('#token-table thead [data-t]')];
          for (let i = 0; i < 80; i++) cells[i % 2].click();
        }"""
    )
    page.click("#lesson-next")
    page.wait_for_selector(f"body[data-lesson-section='{k}'][data-lesson-ready='1']")
    got = page.evaluate(WHERE)
    want = _expected_selection(lesson, k)
    assert {x: got[x] for x in want} == want, got
    assert page.evaluate("new URLSearchParams(location.search).get('sec')") == str(k)


# ------------------------------------------------------------------ 4. feedback
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_wrong_answer_gets_a_hint_then_the_cause_and_just_show_me_shows_the_answer(
    page: Any, lang: str
) -> None:
    lesson = LESSONS[0]
    # the preemption checkpoint: c's computed tokens, reset by its preemption
    k = next(
        i
        for i, s in enumerate(load_lesson(lesson)["sections"])
        if (s["checkpoint"] or {}).get("array") == "num_computed_tokens_cpu"
    )
    array, _, values, _ = answer(lesson, k)
    open_section(page, lesson, k, lang)
    page.fill("#predict-0", str(values[0] + 4))
    page.click("#predict-check")
    page.wait_for_selector("body[data-predict='hint']")
    hint = page.locator("#predict-result").inner_text()
    assert ("preempted" in hint) if lang == "en" else ("抢占" in hint)
    assert page.locator("#request-table tbody td.concealed").count() > 0  # still hidden
    shot(page, f"lesson-hint-{lang}.png")
    page.click("#predict-check")  # the same wrong answer: revealed, with the cause
    page.wait_for_selector("body[data-predict='revealed']")
    why = page.locator("#predict-result li").inner_text()
    assert ("preempted" in why and "reset" in why) if lang == "en" else "抢占" in why, why
    assert "condense" not in why
    if lang == "zh":
        assert not re.search(r"[A-Za-z]{4,} [a-z]{4,} [a-z]{4,}", why), why  # no English sentence left
    # another section, "Just show me": the answer in the checkpoint, with its cause
    k2 = next(
        i
        for i, s in enumerate(load_lesson(lesson)["sections"])
        if (s["checkpoint"] or {}).get("array") == "block_table"
    )
    _, _, values2, _ = answer(lesson, k2)
    page.click(".lesson-toc-box summary")
    page.click(f"#lesson-toc button[data-sec='{k2}']")
    page.wait_for_selector(f"body[data-lesson-section='{k2}'][data-lesson-ready='1']")
    page.click("#predict-reveal")
    page.wait_for_selector("body[data-predict='revealed']")
    assert [page.input_value(f"#predict-{j}") for j in range(len(values2))] == [str(v) for v in values2]
    shown = page.locator("#predict-result").inner_text()
    assert ("free queue" in shown) if lang == "en" else ("空闲队列" in shown)
    shot(page, f"lesson-shown-{lang}.png")


def test_an_answer_that_comes_back_after_the_reader_moved_on_changes_nothing(page: Any) -> None:
    """"Just show me", then Next before the server answers: the answer, when it comes, belongs to
    a checkpoint no longer open; nothing is revealed and nothing fails (the page raised a TypeError
    reading the closed checkpoint)."""
    lesson, k = _checkpoints()[0]
    open_section(page, lesson, k, "en")
    held: list[Any] = []
    page.route("**/check", lambda route: held.append(route))
    with page.expect_request("**/check"):
        page.click("#predict-reveal")
    page.click("#lesson-next")
    page.wait_for_selector(f"body[data-lesson-section='{k + 1}'][data-lesson-ready='1']")
    assert len(held) == 1
    with page.expect_response("**/check"):
        held[0].continue_()
    page.evaluate("new Promise((r) => setTimeout(r, 0))")  # the answer's handler has run
    assert page.get_attribute("body", "data-predict") != "revealed"
    page.unroute("**/check")  # (the page fixture fails the test on any page error)


# ------------------------------------------------------------------ 7. 中文
def test_the_language_choice_is_remembered_by_links_that_do_not_carry_it(page: Any) -> None:
    page.goto(f"{page.base}/?lang=zh")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    # a link with no lang (the brand link, a link pasted by hand) opens in 中文
    open_run(page, "preset=seed-001")
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    page.wait_for_function("/[\\u4e00-\\u9fff]/.test(document.getElementById('narr-h').textContent)")
    # chosen again on a page: English from then on
    page.click("[data-lang='en']")
    open_section(page, LESSONS[0], 1, "en")
    assert page.evaluate("document.documentElement.lang") == "en"
    assert not HAN.search(page.locator("#lesson-pos").inner_text())
    # a link that says its language wins
    open_section(page, LESSONS[0], 1, "zh")
    assert HAN.search(page.locator("#lesson-pos").inner_text())


def test_the_lesson_in_chinese_shows_no_english_sentence_in_its_panel_or_its_formulas(page: Any) -> None:
    k = next(i for i, s in enumerate(load_lesson(LESSONS[0])["sections"]) if s["stage"] == "update_states")
    open_section(page, LESSONS[0], k, "zh")
    english = re.compile(r"\b[a-z]{3,} [a-z]{3,} [a-z]{3,}\b")
    for sel in ("#lesson", "#stage-formula", "#stage-expl", "#narration"):
        text = re.sub(r"\b\w*_\w*\b|\bstep\b", "", page.locator(sel).inner_text())
        assert not english.search(text), (sel, english.findall(text))


def test_next_and_back_in_quick_succession_across_runs_end_on_the_last_section_asked(page: Any) -> None:
    # from the last V1 section into the V2 run and back and forth without waiting: each click loads
    # another run in place while the last one is still loading (a page error fails the test)
    lesson = LESSONS[0]
    secs = load_lesson(lesson)["sections"]
    k = next(
        i
        for i, s in enumerate(secs)
        if i and scenario_of(s).config.model_runner != scenario_of(secs[i - 1]).config.model_runner
    )
    open_section(page, lesson, k - 1, "en")
    for button in ("#lesson-next", "#lesson-prev", "#lesson-next"):
        page.click(button)
    _check_view(page, lesson, k, k - 1)
    settle(page)  # nothing still drawing the run that was left
    assert page.locator("body").get_attribute("data-step") == str(secs[k]["step"])
