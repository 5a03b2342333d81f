"""The landing page's recordings (issue 30), in a real Chromium: the shipped recording of vLLM
0.33.0's own scheduler opens as a run with the agreement note; a recording file picked on the
landing page is imported and opened; a bad one says which line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pagedviz.core.recording import read_recording, split_lines
from pagedviz.core.recordings import example_bytes
from pagedviz.core.replay import import_recording
from tests.support.browser import shot, watched_page
from tests.support.recording_cases import CUT, CUT_SAYS, EXAMPLE, NUM_STEPS, cases, gemma_like

HYBRID = example_bytes("real-vllm-hybrid")


@pytest.fixture()
def page(browser: object, base_url: str) -> Iterator[object]:
    yield from watched_page(browser, base_url, 1400, 1000)


def test_the_landing_page_opens_the_shipped_recording_with_the_agreement_note(page: object) -> None:
    page.goto(page.base + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    link = page.locator("#recording-list a").first
    assert "a real vLLM schedule" in link.inner_text()
    link.click()
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    page.wait_for_selector("body[data-complete='1']", timeout=30_000)  # the replay has ended
    assert "example=real-vllm-preemption" in page.url
    assert "agrees with the recording up to step" in page.locator("#preset-notes").inner_text()
    assert page.locator("#timeline [data-step]").count() == NUM_STEPS


def test_a_picked_recording_is_imported_and_opened(page: object, tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_bytes(EXAMPLE)
    page.goto(page.base + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    page.set_input_files("#recording-upload", str(path))
    page.wait_for_url("**/run?run=rec-*", timeout=30_000)
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    page.wait_for_selector("body[data-complete='1']", timeout=30_000)  # the replay has ended
    assert page.locator("#timeline [data-step]").count() == NUM_STEPS
    page.reload()  # the address reopens the recording's run, not a scenario
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert (
        "run=rec-" in page.url and "agrees with the recording" in page.locator("#preset-notes").inner_text()
    )


def test_a_bad_recording_says_which_line(browser: object, base_url: str, tmp_path: Path) -> None:
    body, _ = cases(16 << 20)["a line that is not JSON"]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(body)
    # the failed POST's 422 is a console error of its own: this page is not watched for them
    context = browser.new_context(bypass_csp=True)  # type: ignore[attr-defined]
    pg = context.new_page()
    pg.goto(base_url + "/")
    pg.wait_for_selector("body[data-ready='1']", timeout=30_000)
    pg.set_input_files("#recording-upload", str(path))
    pg.wait_for_function("document.getElementById('recording-out').textContent.includes('line 4')")
    assert "not JSON" in pg.locator("#recording-out").inner_text()
    context.close()


def test_a_recording_cut_mid_write_says_where_it_stops_and_opens_its_whole_steps(
    page: object, tmp_path: Path
) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_bytes(CUT)
    page.goto(page.base + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    page.set_input_files("#recording-upload", str(path))
    page.wait_for_selector("#recording-out[data-cut='5'] a", timeout=30_000)
    assert page.locator("#recording-out").inner_text().startswith(f"cut.jsonl: {CUT_SAYS}")
    page.click("#recording-out a")
    page.wait_for_url("**/run?run=rec-*", timeout=30_000)
    page.wait_for_selector("body[data-complete='1']", timeout=30_000)
    assert page.locator("#timeline [data-step]").count() == 3
    assert CUT_SAYS in page.locator("#preset-notes").inner_text()


def test_the_landing_page_lists_the_hybrid_recording_in_both_languages_and_opens_it(page: object) -> None:
    """The shipped recording of vLLM's hybrid KV cache manager (issue 38, point 7): listed in en and
    zh, it opens as a run with every recorded step and the comparison note."""
    from pagedviz.core.recordings import EXAMPLES

    num_steps = len(HYBRID.splitlines()) - 1
    for lang in ("zh", "en"):
        page.goto(page.base + f"/?lang={lang}")
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        link = page.locator("#recording-list a[href*='example=real-vllm-hybrid']")
        key = "title_zh" if lang == "zh" else "title"
        assert link.inner_text().strip() == EXAMPLES["real-vllm-hybrid"][key]
    link.click()
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    page.wait_for_selector("body[data-complete='1']", timeout=30_000)
    assert "example=real-vllm-hybrid" in page.url
    assert f"agrees with the recording up to step {num_steps}" in page.locator("#preset-notes").inner_text()
    assert page.locator("#timeline [data-step]").count() == num_steps
    shot(page, "import-hybrid-recording.png")
    # in 中文 the run's notes are the page's words, the stand-in note of a model with more layers
    # than a scenario holds too (the server writes them in English: i18n.js's SERVER_WORDS)
    page.goto(page.base + "/run?example=real-vllm-hybrid&lang=zh")
    page.wait_for_selector("body[data-complete='1']", timeout=30_000)
    assert f"pagedviz 的调度器与录制一致，直到第 {num_steps} 步" in page.locator("#preset-notes").inner_text()
    stand_in = next(
        n for n in import_recording(*read_recording(split_lines(gemma_like(HYBRID)))).notes if "stand in" in n
    )
    zh = page.evaluate("n => import('/static/i18n.js').then(m => m.serverText('zh', n))", stand_in)
    assert zh.startswith("录制的模型有 62 层，这里以 7 层") and zh.endswith("同样的 7 个 KV 缓存组"), zh
