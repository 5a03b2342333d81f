"""Narration of Model Runner V2 steps (core/narrate_v2.py): state slots freed and handed out (the
highest free slot, a freed one first), a resumed request in a fresh slot, the sorted batch and
idx_mapping, the gathered block table; every number read from the engine's own trace."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from pagedviz.core import load_preset, make_engine
from pagedviz.core.narrate import explain, narrate
from pagedviz.core.trace import StepTrace
from tests.support.scenarios import make_scenario, run_all
from tests.support.spec_decode import REQS as SPEC_REQS
from tests.support.spec_decode import spec_scenario


@functools.cache
def _run() -> tuple[object, list[StepTrace]]:
    sc = load_preset("demo-v2-slots")
    return sc, list(make_engine(sc).run())


def _items(step: int) -> dict[str, dict]:
    sc, steps = _run()
    items = narrate(steps[step - 1], steps[step - 2] if step > 1 else None, sc.config)  # type: ignore[attr-defined]
    return {it["key"]: it for it in items}


def _step_where_a_resumed_request_takes_a_freed_slot() -> int:
    """The first step where a request preempted the step before is added into a slot freed in the
    same step or earlier (demo-v2-slots: c, preempted at step 3, comes back at step 4)."""
    _, steps = _run()
    for k, t in enumerate(steps[1:], start=1):
        preempted = set(steps[k - 1].scheduler["preempted_req_ids"])
        if any(e["event"] == "added" and e["req_id"] in preempted for e in t.batch["slot_events"]):
            return t.step
    raise AssertionError("no resumption in demo-v2-slots")


def test_a_new_request_takes_the_highest_free_slot_and_the_sentence_says_so() -> None:
    _, steps = _run()
    first = steps[0]
    for e in first.batch["slot_events"]:
        item = _items(1)[f"slot_added:{e['req_id']}"]
        assert f"takes state slot {e['slot']}" in item["text"]["en"]
        assert f"状态槽 {e['slot']}" in item["text"]["zh"]
        assert item["stage"] == "finish_and_add"
    # the first one added got the top slot, max_num_reqs - 1
    top = steps[0].batch["slot_events"][0]["slot"]
    assert top == steps[0].arrays["block_tables"].shape[0] - 1


def test_a_slot_freed_in_the_step_is_named_as_reused_first() -> None:
    _, steps = _run()
    for t in steps:
        freed = {e["slot"] for e in t.batch["slot_events"] if e["event"] == "freed"}
        for e in t.batch["slot_events"]:
            if e["event"] != "added":
                continue
            en = _items(t.step)[f"slot_added:{e['req_id']}"]["text"]["en"]
            assert ("last in, first out" in en) == (e["slot"] in freed), (t.step, en)


def test_a_resumed_request_is_narrated_as_new_with_its_outputs_in_a_fresh_slot() -> None:
    n = _step_where_a_resumed_request_takes_a_freed_slot()
    _, steps = _run()
    t = steps[n - 1]
    rid = next(
        e["req_id"]
        for e in t.batch["slot_events"]
        if e["event"] == "added" and e["req_id"] in steps[n - 2].scheduler["preempted_req_ids"]
    )
    slot = t.batch["slots"][rid]
    prefill = int(t.arrays["prefill_len"][slot])
    items = _items(n)
    res = items[f"resumed:{rid}"]
    assert f"{prefill} tokens (prefill_len[{slot}] = {prefill})" in res["text"]["en"]
    assert f"all_token_ids[{slot}]" in res["text"]["zh"]
    assert "as a new request" in res["text"]["en"]
    # not called a fresh prompt: V1's "is admitted" sentence is left out for it
    assert f"new:{rid}" not in items
    assert "comes back from its preemption" in items[f"slot_added:{rid}"]["text"]["en"]


def test_the_sort_sentence_gives_the_order_and_idx_mapping_from_the_trace() -> None:
    _, steps = _run()
    for t in steps:
        if t.idle:
            continue
        en = _items(t.step)["sort"]["text"]["en"]
        idx = [int(j) for j in t.arrays["idx_mapping"]]
        assert f"idx_mapping = [{', '.join(map(str, idx))}]" in en
        for r, rid in enumerate(t.batch["req_ids"]):
            assert f"row {r} ({rid}) reads slot {idx[r]}" in en
        order = list(t.scheduler["num_scheduled_tokens"])
        if order != t.batch["req_ids"]:
            assert f"the scheduler's order was {', '.join(order)}" in en


def test_the_gather_sentence_names_each_rows_slot_and_own_blocks() -> None:
    _, steps = _run()
    t = steps[6]
    en = _items(t.step)["stage:gather_block_tables"]["text"]["en"]
    bt, nb = t.arrays["block_tables"], t.arrays["num_blocks"]
    for r, j in enumerate(t.arrays["idx_mapping"]):
        own = bt[j, : nb[j]]
        # the gathered row holds the same blocks
        assert np.array_equal(t.arrays["input_block_tables"][r, : nb[j]], own)
        assert f"row {r} ← slot {j} (blocks" in en


def test_the_slot_mapping_sentence_reads_the_per_slot_table_through_idx_mapping() -> None:
    _, steps = _run()
    for t in steps:
        item = _items(t.step)["stage:slot_mappings"]
        i = next(r["id"] for r in item["refs"] if r["kind"] == "token")
        value = int(t.arrays["slot_mapping"][i])
        assert item["text"]["en"].split(": ")[0].endswith(f"= {value}")
        assert "block_tables[idx_mapping[" in item["text"]["en"]


def test_explain_uses_v2_formulas_for_positions_and_seq_lens() -> None:
    _, steps = _run()
    t = steps[3]
    r = len(t.batch["req_ids"]) - 1
    j = int(t.arrays["idx_mapping"][r])
    text = explain(t, "seq_lens", r)
    assert text is not None
    assert f"num_computed_tokens[{j}]" in text["en"] and "num_computed_tokens_cpu" not in text["en"]
    assert text["en"].endswith(f"= {int(t.arrays['seq_lens'][r])} (tokens attended to)")


def test_a_finished_requests_sentence_names_no_persistent_batch_row() -> None:
    for step in range(1, len(_run()[1]) + 1):
        for key, it in _items(step).items():
            if key.startswith("finish:"):
                assert "persistent batch" not in it["text"]["en"]


def test_a_v2_runs_traces_keep_their_own_slot_mapping_after_later_steps() -> None:
    # each step's slot_mapping is its own (a copy), not a view of the runner's buffer that later
    # steps overwrite: it matches block_tables[idx_mapping[row], pos // bs] * bs + pos % bs
    sc = make_scenario(
        [{"id": "a", "prompt_len": 3, "max_tokens": 3}, {"id": "b", "prompt_len": 2, "max_tokens": 4}],
        model_runner="v2",
        async_scheduling=False,
    )
    steps = run_all(sc)
    assert len(steps) > 2
    bs = sc.config.block_size
    for t in steps:
        T = t.scalars["total_num_scheduled_tokens"]
        rows = np.repeat(np.arange(len(t.batch["req_ids"])), t.arrays["num_scheduled_tokens"])
        slots = t.arrays["idx_mapping"][rows]
        pos = t.arrays["positions"]
        want = t.arrays["block_tables"][slots, pos // bs] * bs + pos % bs
        assert t.arrays["slot_mapping"][:T].tolist() == want.tolist(), t.step


def _spec_v2(async_scheduling: bool) -> list[Any]:
    """test_v2_spec_decode's scenario with drafts (its first two requests)."""
    return list(make_engine(spec_scenario(SPEC_REQS[:2], async_scheduling=async_scheduling)).run())


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_rejected_drafts_are_narrated_with_when_the_scheduler_rolls_back(async_scheduling: bool) -> None:
    traces = _spec_v2(async_scheduling)
    steps = [(t, prev) for prev, t in zip([None, *traces], traces) if t.forward.get("num_rejected_tokens")]
    assert steps, "no step rejected a draft"
    t, prev = steps[0]
    items = [it for it in narrate(t, prev) if it["key"].startswith("rejected:")]
    rid, k = next((r, k) for r, k in t.forward["num_rejected_tokens"].items() if k)
    item = next(it for it in items if it["key"] == f"rejected:{rid}")
    assert f"{k} draft" in item["text"]["en"] and f"减去 {k}" in item["text"]["zh"]
    late = "a step late" in item["text"]["en"]
    assert late == async_scheduling
