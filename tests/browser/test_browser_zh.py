"""中文 complete (issue 37, point 8): every page in a real Chromium against a real uvicorn, in 中文,
shows no English phrase of three or more words outside code and names. One server, one browser,
one walk in six parts (WALK_PARTS: so that two workers share it): the landing page, run pages of
V1, V2, ascend, nano-vllm and the feature presets (every step, and every stage of one step), every
compare link of the landing page, the shipped recording and the import flow (a good file and a bad
one), error pages, every section of every shipped lesson (Next through all, each checkpoint's hint
and answer, the wrap-up), present mode, embedded figures, the keyboard help, and the documents
(/docs-md/NAME?lang=zh, reached from the footer's link). Every phrase found is listed with where it
was, then the part fails."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pagedviz.core.lesson import list_lessons, load_lesson
from pagedviz.core.recordings import EXAMPLES, example_bytes
from tests.support.browser import PAGE_TEXT, english_phrases

ROOT = Path(__file__).resolve().parents[2]
HAN = re.compile(r"[\u4e00-\u9fff]")


def test_the_phrase_finder_finds_english_and_passes_chinese_code_and_names() -> None:
    assert english_phrases("Your own vLLM server") == ["Your own server"]
    assert english_phrases("Steps recorded from a real vLLM 0.33 scheduler") == ["Steps recorded from"]
    assert english_phrases("请求 c 在第 3 步被抢占，slot_mapping = [5, 14] · Model Runner V2") == []
    assert english_phrases("V1 runner (gpu_model_runner.py) · REST API") == []
    assert english_phrases("等待：4，因为 token budget is short") == ["token budget is short"]
    # a one-letter word (a request id, the article) breaks a run
    assert english_phrases("Prefix caching: a shared prompt prefix is computed once false") == [
        "shared prompt prefix is computed once"
    ]
    assert english_phrases("a, b, c 与 V1 gpu_model_runner.py 0.33.0 [false, false, true, null]") == []
    assert english_phrases("enable_prefix_caching = false, the pool is full") == ["the pool is full"]


class Walk:
    """A page in 中文 and the English phrases found on it so far, by where."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.found: dict[str, set[str]] = {}

    def goto(self, path: str, ready: str | None = "body[data-ready='1']") -> None:
        sep = "&" if "?" in path else "?"
        self.page.goto(f"{self.page.base}{path}{'' if 'lang=zh' in path else sep + 'lang=zh'}")
        if ready:
            self.page.wait_for_selector(ready, timeout=60_000)

    def scan(self, label: str, root: str | None = None) -> None:
        """Every English phrase of the page (or of the element `root` selects) under `label`."""
        self.page.evaluate("() => document.querySelectorAll('details').forEach((d) => { d.open = true; })")
        for where, text in self.page.evaluate(PAGE_TEXT, root):
            for phrase in english_phrases(text):
                self.found.setdefault(phrase, set()).add(f"{label}: {where}")

    def report(self) -> str:
        lines = [f"  {p!r}  at  {' | '.join(sorted(at)[:3])}" for p, at in sorted(self.found.items())]
        return "\n".join(lines)


@pytest.fixture()
def zh_page(browser: Any, base_url: str) -> Iterator[Any]:
    """A page at 1280 × 720 that fails the test on an uncaught error (error pages log the 404s
    they were answered, so console errors are not counted here)."""
    context = browser.new_context(viewport={"width": 1280, "height": 720}, bypass_csp=True)
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.base = base_url
    yield pg
    context.close()
    assert errors == [], errors


def _step_count(page: Any) -> int:
    label = page.locator("#step-label").inner_text()
    m = re.search(r"(\d+)\s*/\s*(\d+)", label)
    return int(m.group(2)) if m else 1


# the narration's heading names the step once its sentences for that step are written
NARRATED = "(k) => document.getElementById('narr-h').textContent.trim().endsWith(` ${k}`)"


def _walk_steps(w: Walk, label: str, most: int = 12) -> None:
    """Every step of the run on show (up to `most`), each scanned once painted."""
    n = min(_step_count(w.page), most)
    for k in range(1, n + 1):
        w.page.click(f"#timeline [data-step='{k}']")
        w.page.wait_for_function(
            f"/(^|\\D){k}\\s*\\/\\s*\\d/.test(document.getElementById('step-label').textContent)"
        )
        # the step's narration is fetched with it: scanned once it is on the page
        w.page.wait_for_function(NARRATED, arg=k)
        w.scan(f"{label} step {k}")


def _walk_stages(w: Walk, label: str) -> None:
    """Every stage of the step on show: its title, explanation and the narration of the stage."""
    names = w.page.eval_on_selector_all(".stage-btn[data-stage]", "bs => bs.map((b) => b.dataset.stage)")
    for name in names:
        w.page.click(f".stage-btn[data-stage='{name}']")
        w.page.wait_for_function("(n) => new URLSearchParams(location.search).get('stage') === n", arg=name)
        w.scan(f"{label} stage {name}", root="#main")


def _walk_lesson(w: Walk, lesson: str) -> None:
    """Every section by Next; at a checkpoint a wrong answer (its hint) and then the answer; the
    wrap-up after the last section."""
    sections = load_lesson(lesson)["sections"]
    w.goto(f"/run?lesson={lesson}&sec=0")
    for k in range(len(sections)):
        w.page.wait_for_selector(f"body[data-lesson-section='{k}']", timeout=60_000)
        w.page.wait_for_selector("body[data-lesson-ready='1']", timeout=60_000)
        w.scan(f"{lesson} section {k}")
        if w.page.locator("#predict-form input").count() and w.page.locator("#predict-check").count():
            for i in range(w.page.locator("#predict-form input").count()):
                w.page.locator("#predict-form input").nth(i).fill("987")
            w.page.click("#predict-check")
            w.page.wait_for_function("document.getElementById('lesson-check').textContent.length > 0")
            w.scan(f"{lesson} section {k} after a wrong Check")
            if w.page.locator("#predict-reveal").count():
                w.page.click("#predict-reveal")
                w.scan(f"{lesson} section {k} answer shown")
        w.page.click("#lesson-next")
    w.page.wait_for_selector("#lesson-end:not([hidden])")
    w.scan(f"{lesson} wrap-up")


# runs that show every view: V1 and V2 (with a preemption), ascend, nano-vllm, speculative
# decoding on both runners, async scheduling, M-RoPE, CUDA-graph padding
PRESETS = [
    "seed-001",
    "demo-v2-slots",
    "demo-preemption",
    "seed-001-ascend",
    "nanovllm-prefix-cache",
    "demo-spec-decode-metadata",
    "demo-v2-spec-decode",
    "demo-async-scheduling",
    "demo-mrope",
    "demo-cudagraph-padding",
]
STAGE_WALKS = {"seed-001": 2, "demo-v2-slots": 2, "seed-001-ascend": 2, "nanovllm-prefix-cache": 2}


def _landing(w: Walk) -> tuple[list[str], list[str]]:
    """The landing page, every part of it (the lesson loader's details opened); its compare links
    and shipped recordings."""
    page = w.page
    w.goto("/")
    page.wait_for_selector("#recording-list li a")
    page.wait_for_selector("#gallery .preset-card")
    w.scan("landing")
    contrasts = page.eval_on_selector_all("#contrasts a", "as => as.map((a) => a.getAttribute('href'))")
    recordings = page.eval_on_selector_all("#recording-list a", "as => as.map((a) => a.getAttribute('href'))")
    assert len(contrasts) >= 6 and len(recordings) == len(EXAMPLES)
    assert all("lang=zh" in h for h in contrasts + recordings), contrasts + recordings
    return contrasts, recordings


def _landing_import_recordings_and_error_pages(w: Walk, tmp_path: Path) -> None:
    page = w.page
    _, recordings = _landing(w)
    # the footer says in Chinese which runner is the default ("by default, … on request" in English)
    page.wait_for_function("/默认/.test(document.getElementById('upstream').textContent)")

    # the import flow: a recording that is not one (the error box), then the shipped one (its run)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "a recording"}\n', encoding="utf-8")
    page.set_input_files("#recording-upload", str(bad))
    page.wait_for_selector("#recording-out.bad")
    w.scan("landing, a bad import")
    good = tmp_path / "server.jsonl"
    good.write_bytes(example_bytes(next(iter(EXAMPLES))))
    page.set_input_files("#recording-upload", str(good))
    page.wait_for_url(re.compile(r"/run\?run=rec-"), timeout=60_000)
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    assert "lang=zh" in page.url
    w.scan("an imported recording")
    for href in recordings:
        w.goto(href)
        _walk_steps(w, href, most=6)

    # error pages: the reader is told in Chinese, the server's own lines are quoted as English
    for path in ("/run?preset=no-such-preset", "/run?run=rec-0000000000000000", "/run?s=not-a-scenario"):
        w.goto(path, ready=None)
        page.wait_for_selector("#error:not([hidden]) li")
        assert HAN.search(page.locator("#error").inner_text()), path
        w.scan(path)


def _runs(w: Walk, presets: list[str]) -> None:
    """Run pages: every step, and every stage of one step."""
    for preset in presets:
        w.goto(f"/run?preset={preset}")
        w.scan(preset)
        _walk_steps(w, preset)
        if preset in STAGE_WALKS:
            w.page.click(f"#timeline [data-step='{STAGE_WALKS[preset]}']")
            _walk_stages(w, f"{preset} step {STAGE_WALKS[preset]}")


def _first_runs(w: Walk, tmp_path: Path) -> None:
    _runs(w, PRESETS[:5])


def _other_runs_help_present_and_figures(w: Walk, tmp_path: Path) -> None:
    page = w.page
    _runs(w, PRESETS[5:])
    page.click("#btn-help")  # the keyboard help
    page.wait_for_selector("#help:not([hidden])")
    w.scan("keyboard help", root="#help")
    w.goto("/run?preset=demo-v2-slots&present=1&step=6")
    w.scan("present mode")
    for card in ("kv", "narration", "slots"):  # a figure alone, for a lecturer's slides
        w.goto(f"/run?preset=demo-v2-slots&step=6&embed={card}")
        w.scan(f"embedded {card}")


def _compare_links(w: Walk, half: int) -> None:
    """Every other compare link of the landing page (from the first or the second), at its first
    difference and at every step after."""
    contrasts, _ = _landing(w)
    for href in contrasts[half::2]:
        w.goto(href)
        w.page.wait_for_selector("#compare:not([hidden]) #cmp-heads span")
        w.scan(href)
        _walk_steps(w, href, most=6)


def _compare_links_from_the_first(w: Walk, tmp_path: Path) -> None:
    _compare_links(w, 0)


def _compare_links_from_the_second(w: Walk, tmp_path: Path) -> None:
    _compare_links(w, 1)


def _lessons_and_documents(w: Walk, tmp_path: Path) -> None:
    page = w.page
    # every shipped lesson, every section
    for lesson in [x["id"] for x in list_lessons()]:
        _walk_lesson(w, lesson)

    # the documents, reached from the footer's link: the Chinese version where docs/zh/ has one,
    # else the English text under a note in Chinese
    w.goto("/run?preset=seed-001")
    href = page.get_attribute("footer a[data-i18n='docs']", "href") or ""
    assert href.endswith("?lang=zh"), href
    for doc in sorted((ROOT / "docs").glob("*.md")):
        page.goto(f"{page.base}/docs-md/{doc.name}?lang=zh")
        text = page.inner_text("body")
        if not HAN.search(text.strip().splitlines()[0]):
            w.found.setdefault("(the document starts in English)", set()).add(f"/docs-md/{doc.name}?lang=zh")
        elif (ROOT / "docs" / "zh" / doc.name).is_file():
            for phrase in english_phrases(prose_of(text)):
                w.found.setdefault(phrase, set()).add(f"/docs-md/{doc.name}?lang=zh")


# The walk in six parts of about equal length, each on a page of its own, so that pytest-xdist's
# workers share it (as one test of 73 s it held a worker alone at the end of a CI run); together
# they visit every page the one walk did
WALK_PARTS = {
    "landing-import-recordings-errors": _landing_import_recordings_and_error_pages,
    "runs-first-half": _first_runs,
    "runs-second-half-help-present-figures": _other_runs_help_present_and_figures,
    "compare-links-odd": _compare_links_from_the_first,
    "compare-links-even": _compare_links_from_the_second,
    "lessons-documents": _lessons_and_documents,
}


@pytest.mark.parametrize("part", list(WALK_PARTS))
def test_every_page_and_lesson_section_in_chinese_has_no_english_phrase(
    zh_page: Any, tmp_path: Path, part: str
) -> None:
    w = Walk(zh_page)
    WALK_PARTS[part](w, tmp_path)
    assert not w.found, f"English phrases on the pages in 中文 ({len(w.found)}, {part}):\n{w.report()}"


def prose_of(markdown: str) -> str:
    """A document's running text: no fenced code, no `code`, no link targets, no table rules."""
    text = re.sub(r"```.*?```", " ⟨⟩ ", markdown, flags=re.S)
    text = re.sub(r"`[^`\n]*`", " ⟨⟩ ", text)
    text = re.sub(r"\]\([^)]*\)", "] ⟨⟩ ", text)
    return text


def test_the_landing_forms_problems_and_limits_in_chinese_have_no_english_phrase(zh_page: Any) -> None:
    """A value out of range in the landing form, in 中文: the problem beside the field and in the
    summary are introduced in Chinese (the server's own line marked lang="en"), and the help under
    num_kv_blocks says in Chinese the most the server accepts with the other fields as they are."""
    w = Walk(zh_page)
    page = zh_page
    w.goto("/")
    page.wait_for_function("document.getElementById('help-num_kv_blocks').textContent.includes('最多为')")
    for key, value in (("num_kv_blocks", "2000000"), ("max_model_len", "0"), ("num_kv_blocks", "300000")):
        page.fill(f"#f-{key}", value)
        page.wait_for_selector("#validation.bad")
        said = page.locator(f"label[data-field='{key}'] .field-error, #config-errors li").first.inner_text()
        assert said.startswith("服务器的说明（英文）："), said
        w.scan(f"landing form, {key} = {value}", "#editor")
        page.fill(f"#f-{key}", {"num_kv_blocks": "16", "max_model_len": "12"}[key])
        page.wait_for_selector("#validation.ok")
    assert page.locator("#editor [lang='en']").count() == 0  # gone with the problems
    assert not w.found, "English phrases in the landing form in 中文:\n" + w.report()
