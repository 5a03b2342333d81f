"""Model Runner V2 on the run page, in a real Chromium against a real uvicorn, at 1280 × 720 in
English and Chinese: the slot panel (who holds which state slot, the free slots in hand-out order,
this step's slot events), the batch order with idx_mapping, V2's block tables, the V2 stages' titles
and upstream links, and the runner named in the footer. Expected values come from the engine's own
trace of demo-v2-slots, never typed in."""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pagedviz.core import load_preset, make_engine
from pagedviz.core.trace import StepTrace
from pagedviz.core.upstream import describe
from tests.support import browser as tb

ARTIFACTS = tb.ARTIFACTS
PRESET = "demo-v2-slots"
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture()
def page(browser: Any, base_url: str) -> Iterator[Any]:
    yield from tb.watched_page(browser, base_url, 1280, 720)


@functools.cache
def _steps() -> list[StepTrace]:
    return list(make_engine(load_preset(PRESET)).run())


def resumed_step() -> tuple[StepTrace, str]:
    """The first step where a request that was preempted before is added into a state slot that a
    request freed (this step or earlier): the resumed request takes a freed slot."""
    steps = _steps()
    preempted: set[str] = set()
    freed: set[int] = set()
    for t in steps:
        freed |= {e["slot"] for e in t.batch["slot_events"] if e["event"] == "freed"}
        for e in t.batch["slot_events"]:
            if e["event"] == "added" and e["req_id"] in preempted and e["slot"] in freed:
                return t, e["req_id"]
        preempted |= set(t.scheduler["preempted_req_ids"])
    raise AssertionError(f"{PRESET} has no resumption into a freed slot")


def step_to(page: Any, n: int, lang: str = "en") -> None:
    """Open the run at step 1 and press ▶▶ until step n, as a reader would."""
    page.goto(f"{page.base}/run?preset={PRESET}&lang={lang}")
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    for k in range(2, n + 1):
        page.click("#btn-next")
        page.wait_for_selector(f"body[data-step='{k}']")


def read_slot_panel(page: Any) -> dict[str, Any]:
    """What the slot panel shows: holder per slot, the free order, the rows with their idx_mapping
    and the events marked on each slot."""
    slots: dict[int, str] = {}
    events: dict[int, list[str]] = {}
    for row in page.locator("#slotmap .sm-slot").all():
        j = int(row.get_attribute("data-slot"))
        holder = row.locator(".sm-req")
        slots[j] = holder.inner_text().strip() if holder.count() else ""
        events[j] = [e.inner_text().strip() for e in row.locator(".sm-ev").all()]
    rows = []
    for row in page.locator("#slotmap .sm-rows .sm-row[data-r]").all():
        rows.append(
            (row.locator(".sm-req").inner_text().strip(), row.locator(".sm-idx").inner_text().strip())
        )
    free = [int(re.sub(r"\D", "", c.inner_text())) for c in page.locator("#sm-freelist .sm-freechip").all()]
    return {"slots": slots, "events": events, "rows": rows, "free": free}


def expected_panel(t: StepTrace) -> dict[str, Any]:
    held = {j: rid for rid, j in t.batch["slots"].items()}
    return {
        "held": held,
        "free": list(t.batch["free_slots"]),
        "rows": [(rid, f"→ {int(j)}") for rid, j in zip(t.batch["req_ids"], t.arrays["idx_mapping"])],
    }


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_slot_panel_shows_a_resumed_request_taking_a_freed_slot(page: Any, lang: str) -> None:
    t, rid = resumed_step()
    step_to(page, t.step, lang)
    panel = page.locator("#slots-panel")
    assert panel.is_visible()
    seen = read_slot_panel(page)
    want = expected_panel(t)
    # every slot held after this step's frees and adds, by the right request
    for j, holder in want["held"].items():
        assert seen["slots"][j] == holder, (j, seen["slots"])
    # the free slots, in the order they will be handed out (next first)
    assert seen["free"] == want["free"]
    for j in want["free"]:
        assert seen["slots"].get(j, "") == ""
    # the batch order and idx_mapping, row by row
    assert seen["rows"] == want["rows"]
    # the resumed request's slot is marked "added" with its id, and the request that freed a slot
    # this step is marked there too
    slot = t.batch["slots"][rid]
    added = page.locator(f"#slotmap .sm-slot[data-slot='{slot}'] .sm-ev-added")
    assert added.inner_text().strip().endswith(rid)
    for e in t.batch["slot_events"]:
        marks = seen["events"][e["slot"]]
        assert any(m.endswith(str(e["req_id"])) for m in marks), (e, marks)
    # one arrow per batch row
    assert page.locator("#slotmap .sm-arrow").count() == len(t.batch["req_ids"])
    # the runner is named in the footer, as the server's upstream says it (once the run is whole)
    page.wait_for_selector("body[data-complete='1']")
    # (in 中文 with the runner's name in Chinese, as the page words the server's line)
    named = describe("vllm", "v2")
    if lang == "zh":
        named = named.replace("Model Runner V2", "模型运行器 V2")
    assert page.locator("#upstream").inner_text() == named
    if lang == "zh":
        assert CJK.search(page.locator("#slots-panel h2").inner_text())
        for head in page.locator("#slotmap .sm-head span").all():
            assert CJK.search(head.inner_text()), head.inner_text()
        assert CJK.search(page.locator("#sm-freelist strong").inner_text())
        assert CJK.search(page.locator("#slots .sm-legend").inner_text())
        for ev in page.locator("#slotmap .sm-ev").all():
            assert CJK.search(ev.inner_text())
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#slots-panel").scroll_into_view_if_needed()
    path = ARTIFACTS / f"v2-slots-{lang}.png"
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000
    page.locator(".sys-panel").scroll_into_view_if_needed()
    page.wait_for_selector("#table-block_table")
    page.screenshot(path=str(ARTIFACTS / f"v2-tables-{lang}.png"))


def test_hovering_a_token_lights_its_row_and_its_state_slot(page: Any) -> None:
    t, rid = resumed_step()
    step_to(page, t.step)
    # every token column names (and is tinted as) its own request, read off query_start_loc
    qsl = t.arrays["query_start_loc"]
    for r, owner in enumerate(t.batch["req_ids"]):
        for i in range(int(qsl[r]), int(qsl[r + 1])):
            label = page.locator(f"#token-table th.tok-head[data-t='{i}']").get_attribute("aria-label")
            assert label.endswith(f" {owner}"), (i, label)
    r = t.batch["req_ids"].index(rid)
    slot = t.batch["slots"][rid]
    first = int(t.arrays["query_start_loc"][r + 1]) - 1  # its last token
    page.hover(f"#token-table th.tok-head[data-t='{first}']")
    assert "hl" in page.locator(f"#slotmap .sm-rows .sm-row[data-r='{r}']").get_attribute("class").split()
    assert "hl" in page.locator(f"#slotmap .sm-slot[data-slot='{slot}']").get_attribute("class").split()
    assert "hl" in page.locator(f"#slot-state th[data-slot='{slot}']").get_attribute("class").split()
    # the per-slot block table lights the slot's row, the gathered one the batch row
    q = int(t.arrays["positions"][first]) // load_preset(PRESET).config.block_size
    assert (
        "hl"
        in page.locator(f"#table-block_table td[data-r='{slot}'][data-c='{q}']")
        .get_attribute("class")
        .split()
    )
    assert (
        "hl"
        in page.locator(f"#table-input_block_tables td[data-r='{r}'][data-c='{q}']")
        .get_attribute("class")
        .split()
    )
    # the selection line reads the block from the slot's row
    block = int(t.arrays["block_tables"][slot, q])
    assert f"block_tables[{slot}][{q}] = {block}" in page.locator("#selection").inner_text()


def _vllm_source(path: str) -> Path | None:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    file = Path(next(iter(spec.submodule_search_locations))) / "v1" / "worker" / "gpu" / path
    return file if file.is_file() else None


def test_every_v2_stage_links_its_upstream_def_line_and_names_the_runner(page: Any) -> None:
    t, _ = resumed_step()
    step_to(page, 1)
    link = page.locator("#stage-upstream a")
    for stage in t.stages:
        page.click(f".stage-btn[data-stage='{stage.name}']")
        href = link.get_attribute("href")
        m = re.fullmatch(
            r"https://github\.com/vllm-project/vllm/blob/v0\.33\.0/vllm/v1/worker/gpu/(\S+)#L(\d+)", href
        )
        assert m, (stage.name, href)
        assert "Model Runner V2" in page.locator("#stage-upstream").inner_text()
        source = _vllm_source(m.group(1))
        if source is None:
            continue  # vLLM's source is not installed here: the link's form is still checked
        line = source.read_text(encoding="utf-8").splitlines()[int(m.group(2)) - 1]
        fn = link.inner_text().split(" · ", 1)[1].split(" ")[0].split(".")[-1]
        assert re.match(rf"\s*def {re.escape(fn)}\(", line), (stage.name, line)
        # the stage's title is V2's own, in English; its formula is the trace's
        assert page.locator("#stage-formula").inner_text() == stage.formula


def test_v2_stage_titles_and_whys_are_chinese_in_zh(page: Any) -> None:
    step_to(page, 1, "zh")
    titles = page.locator(".stage-title").all_inner_texts()
    assert len(titles) == len(_steps()[0].stages)
    assert all(CJK.search(x) for x in titles), titles
    for name in ("finish_and_add", "idx_mapping", "gather_block_tables"):
        page.click(f".stage-btn[data-stage='{name}']")
        assert CJK.search(page.locator("#stage-expl").inner_text())
        assert "模型运行器 V2" in page.locator("#stage-upstream").inner_text()


def test_a_v1_run_has_no_slot_panel_and_names_the_v1_runner(page: Any) -> None:
    page.goto(f"{page.base}/run?preset=demo-preemption&step=6")
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    assert page.locator("#slots-panel").is_hidden()
    assert page.locator("#card-input_block_tables").count() == 0
    page.wait_for_selector("body[data-complete='1']")
    assert page.locator("#upstream").inner_text() == describe("vllm", "v1")
    page.click(".stage-btn[data-stage='slot_mapping']")
    assert "V1 runner" in page.locator("#stage-upstream").inner_text()
    assert "gpu_model_runner.py" not in page.locator("#stage-upstream a").get_attribute("href")
    # V1 keeps its row moves
    assert "b: row 1 → 0" in page.locator("#changes").inner_text()


def test_the_v2_spec_card_shows_each_logits_rows_slot_draft_and_verdict(page: Any, base_url: str) -> None:
    """demo-v2-spec-decode: the speculative-decoding card reads V2's own arrays (no V1 ones):
    expanded_idx_mapping / expanded_local_pos / draft_sampled per logits row, as traced."""
    t = list(make_engine(load_preset("demo-v2-spec-decode")).run())[2]
    page.goto(f"{base_url}/run?preset=demo-v2-spec-decode&step=3&stage=rejection_sampler")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert page.locator("#error").is_hidden()
    strip = page.locator("#spec-strip")
    local = [int(x) for x in t.arrays["expanded_local_pos"].data]
    slot_of = [int(x) for x in t.arrays["expanded_idx_mapping"].data]
    rows = t.arrays["idx_mapping"].data.tolist()
    ns = [int(x) for x in t.arrays["num_sampled"].data]
    for name in ("expanded_idx_mapping", "expanded_local_pos", "draft_sampled"):
        cells = strip.locator(f"tr[data-array='{name}'] td[data-i]")
        assert cells.count() > 0, name
        for k in range(cells.count()):
            c = cells.nth(k)
            assert c.inner_text() == str(t.arrays[name].data[int(c.get_attribute("data-i"))]), name
    # a draft is accepted while its place is below the row's num_sampled
    verdict = strip.locator("tr:last-child td[data-i]")
    for k in range(verdict.count()):
        j = int(verdict.nth(k).get_attribute("data-i"))
        n = ns[rows.index(slot_of[j])]
        accepted = 0 < local[j] < n
        assert ("ok" in (verdict.nth(k).get_attribute("class") or "")) == accepted, j


def test_idle_v2_steps_show_every_slot_free_and_a_finished_requests_slot_goes_back_free(page: Any) -> None:
    import httpx

    scenario = {
        "name": "late arrivals on V2",
        "config": {
            "block_size": 2,
            "max_model_len": 16,
            "max_num_reqs": 4,
            "max_num_batched_tokens": 16,
            "num_kv_blocks": 12,
            "model_runner": "v2",
            "async_scheduling": False,
        },
        "requests": [
            {"id": "a", "prompt_len": 4, "max_tokens": 2, "arrival_step": 3},
            {"id": "b", "prompt_len": 2, "max_tokens": 6, "arrival_step": 3},
        ],
    }
    created = httpx.post(f"{page.base}/api/runs", json=scenario, timeout=60)
    assert created.status_code == 201, created.text
    run_id = created.json()["run_id"]
    steps: list[dict[str, Any]] = []
    while (
        r := httpx.get(f"{page.base}/api/runs/{run_id}/steps/{len(steps) + 1}", timeout=30)
    ).status_code == 200:
        steps.append(r.json())
    page.goto(page.base + created.json()["url"] + "&step=1")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert steps[0]["idle"]
    assert "Idle step" in page.locator("#slots").inner_text()
    assert read_slot_panel(page)["free"] == steps[0]["batch"]["free_slots"]
    # the step where the finished request's slot goes back to the free list
    n, t = next(
        (k + 1, s)
        for k, s in enumerate(steps)
        if any(e["event"] == "freed" for e in s["batch"]["slot_events"])
    )
    page.click(f"#timeline [data-step='{n}']")
    page.wait_for_selector(f"body[data-step='{n}']")
    ev = next(e for e in t["batch"]["slot_events"] if e["event"] == "freed")
    seen = read_slot_panel(page)
    assert any(m.endswith(ev["req_id"]) for m in seen["events"][ev["slot"]])
    assert seen["free"] == t["batch"]["free_slots"] and ev["slot"] == seen["free"][0]


def test_the_slot_map_can_be_embedded_alone(page: Any) -> None:
    t, _ = resumed_step()
    page.goto(f"{page.base}/run?preset={PRESET}&step={t.step}&embed=slots")
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    assert page.locator("#slots-panel").is_visible()
    assert page.locator(".req-panel").is_hidden() and page.locator(".sys-panel").is_hidden()
    assert read_slot_panel(page)["free"] == list(t.batch["free_slots"])
