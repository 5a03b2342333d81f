"""The token table of a big batch's prefills, in a real Chromium against a real uvicorn: where
its runs, compressed as usual, would still need more than a few screens of columns (128 prompts in
one step), each run keeps its first and last token around one "… n …" column, so that every
request of the step is in the table (it was cut at 512 columns, about 73 requests); a long run's
heading marks its first and last block starts, not every one."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from tests.support import browser as tb

N = 128


def prefills(n: int, prompt: int) -> dict:
    """n requests of `prompt` tokens that all fit in step 1's budget and the pool"""
    return {
        "name": f"prefills-{n}x{prompt}",
        "config": {
            "max_model_len": prompt + 16,
            "num_kv_blocks": n * (prompt // 16 + 2) + 1,
            "max_num_reqs": n,
            "max_num_batched_tokens": n * prompt,
            "model": None,
        },
        "requests": [{"id": f"r{i}", "prompt_len": prompt, "max_tokens": 2} for i in range(n)],
    }


@pytest.fixture()
def hd_page(browser: object, base_url: str) -> Iterator[object]:
    yield from tb.watched_page(browser, base_url, 1920, 1080)


def open_step(pg: object, scenario: dict, step: int) -> None:
    r = httpx.post(f"{pg.base}/api/runs", json=scenario, timeout=120)
    assert r.status_code == 201, r.text
    tb.open_run(pg, f"s={quote(r.json()['link'])}&step={step}")
    pg.wait_for_selector("#token-table[data-whole='1']", state="attached")


# per request of the step: its token columns and its gap columns, and what the table says below
READ = """(() => {
  const t = document.getElementById('token-table');
  const heads = [...t.tHead.rows[0].cells].slice(1);
  const gaps = heads.filter((h) => h.dataset.gap !== undefined);
  const tokens = heads.filter((h) => h.dataset.t !== undefined && h.dataset.gap === undefined);
  return {
    cls: t.className,
    tokens: tokens.map((h) => Number(h.dataset.t)),
    gaps: gaps.map((h) => [Number(h.dataset.t), Number(h.dataset.gap)]),
    marks: gaps.map((h) => h.querySelectorAll('.gap-bound').length),
    cut: [...document.querySelectorAll('#tok-table p.muted')].map((p) => p.textContent),
  };
})()"""


def test_128_prompts_in_one_step_each_keep_their_first_and_last_token_and_none_is_cut(
    hd_page: object,
) -> None:
    prompt = 32
    open_step(hd_page, prefills(N, prompt), 1)
    got = hd_page.evaluate(READ)
    assert "dense" in got["cls"].split()
    assert got["cut"] == []  # no "… more columns" below the table
    # every request's first and last token is a column of its own, its middle one gap
    assert got["tokens"] == [t for r in range(N) for t in (r * prompt, r * prompt + prompt - 1)]
    assert got["gaps"] == [[r * prompt + 1, prompt - 2] for r in range(N)]
    tb.shot(hd_page, "dense-tokens-128.png")


def test_a_few_prompts_keep_three_tokens_at_each_end_and_a_long_gap_marks_two_block_starts(
    hd_page: object,
) -> None:
    prompt = 200  # 12 block starts inside each run's gap
    open_step(hd_page, prefills(4, prompt), 1)
    got = hd_page.evaluate(READ)
    assert "dense" not in got["cls"].split()
    assert got["tokens"] == [
        t
        for r in range(4)
        for t in [*range(r * prompt, r * prompt + 3), *range(r * prompt + prompt - 3, r * prompt + prompt)]
    ]
    assert got["marks"] == [2, 2, 2, 2]  # the first and last block start, "…" between
    gap = hd_page.locator("#token-table thead th.tok-gap").first
    title = gap.get_attribute("title")
    starts = [p for p in range(3, prompt - 3) if p % 16 == 0]
    assert title.endswith(", ".join(map(str, starts)))  # the title lists every one
    assert [m.text_content() for m in gap.locator(".gap-bound").all()] == [f"|{starts[0]}", f"|{starts[-1]}"]
