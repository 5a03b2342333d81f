"""Narration from the trace (core/narrate.py): the sentences name what the engine did, with the
numbers of the documents and the demo presets' summaries, in every flavour and both languages."""

from __future__ import annotations

import copy
import functools
import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario, list_presets, load_preset, make_engine
from pagedviz.core.answers import check_entries
from pagedviz.core.cli import main
from pagedviz.core.metrics import step_metrics
from pagedviz.core.narrate import explain, narrate
from pagedviz.core.parallel_sampling import scheduled_specs
from pagedviz.core.trace import StepTrace
from tests.support.scenarios import make_scenario, run_all
from tests.support.strategies import scenarios

REF_KINDS = {"request", "block", "token", "row"}


@functools.cache
def _run(preset: str) -> tuple[object, list[StepTrace]]:
    sc = load_preset(preset)
    return sc, list(make_engine(sc).run())


def _narr(preset: str, step: int) -> list[dict]:
    sc, steps = _run(preset)
    return narrate(steps[step - 1], steps[step - 2] if step > 1 else None, sc.config)  # type: ignore[attr-defined]


def _by_key(items: list[dict]) -> dict[str, dict]:
    return {it["key"]: it for it in items}


def _refs(item: dict, kind: str) -> list:
    return [r["id"] for r in item["refs"] if r["kind"] == kind]


@pytest.mark.parametrize("preset", [p["id"] for p in list_presets()])
def test_every_step_of_every_preset_narrates_in_both_languages_with_valid_refs(preset: str) -> None:
    sc, steps = _run(preset)
    # the ids the scheduler sees: a request with n > 1 as its children
    req_ids = {r.id for r in scheduled_specs(sc.requests)}  # type: ignore[attr-defined]
    for k, t in enumerate(steps):
        items = narrate(t, steps[k - 1] if k else None, sc.config)  # type: ignore[attr-defined]
        assert items, f"step {t.step} says nothing"
        keys = [it["key"] for it in items]
        assert len(keys) == len(set(keys)), keys
        stage_names = {s.name for s in t.stages} | {"update_states"}
        for it in items:
            assert set(it) == {"key", "text", "refs", "stage"}
            assert it["text"]["en"].strip() and it["text"]["zh"].strip()
            assert re.search(r"[\u4e00-\u9fff]", it["text"]["zh"]), it["text"]["zh"]
            assert it["stage"] is None or it["stage"] in stage_names
            for ref in it["refs"]:
                assert ref["kind"] in REF_KINDS
                if ref["kind"] == "request":
                    assert ref["id"] in req_ids
                if ref["kind"] == "block":
                    assert 0 <= ref["id"] < t.kv_cache["num_blocks"]
        if not t.idle:
            # one sentence per stage of prepare_inputs, in the stages' order
            narrated = [it["stage"] for it in items if it["key"].startswith("stage:")]
            assert narrated == [s.name for s in t.stages if s.name in narrated]
            assert "slot_mapping" in narrated or "slot_mappings" in narrated  # V1 | Model Runner V2


def test_slot_mapping_sentence_substitutes_the_documents_numbers() -> None:
    # document 001, step 2: slot_mapping [5, 14, 13, 16, 17]; token 2 is request 2's position 5,
    # which lies in its block 6 (block table row [4, 5, 6, 8]) at offset 1: 6 * 2 + 1 = 13
    item = _by_key(_narr("seed-001", 2))["stage:slot_mapping"]
    assert "slot_mapping[2] = block 6 * 2 + 1 = 13" in item["text"]["en"]
    assert "slot_mapping[2] = block 6 * 2 + 1 = 13" in item["text"]["zh"]
    assert {"kind": "block", "id": 6} in item["refs"] and {"kind": "token", "id": 2} in item["refs"]


def test_nanovllm_decode_slot_sentence_follows_document_004() -> None:
    # document 004: the first decode step has positions [11, 17] and slots [11, 273] (block size 256)
    item = _by_key(_narr("seed-004", 2))["stage:slot_mapping"]
    assert "block 1 * 256 + 17 = 273" in item["text"]["en"]


def test_chunked_prefill_names_the_budget_that_ran_out() -> None:
    # document 000, step 2: request 4 gets the last 30 tokens of the 200-token budget
    items = _by_key(_narr("seed-000", 2))
    chunk = items["chunk:4"]
    assert "gets 30 tokens" in chunk["text"]["en"] and "budget ran out" in chunk["text"]["en"]
    assert "预算" in chunk["text"]["zh"]
    budget = items["budget"]["text"]["en"]
    assert "out of a budget of 200" in budget and "0 left" in budget
    assert "chunk:0" not in items and "chunk:2" not in items


def test_preemption_names_the_victim_its_blocks_and_the_reason() -> None:
    sc, steps = _run("demo-preemption")
    items = _by_key(narrate(steps[2], steps[1], sc.config))  # type: ignore[attr-defined]
    pre = items["preempt:c"]
    held_before = sorted(int(b) for b, o in steps[1].kv_cache["owners"].items() if "c" in o)
    assert sorted(_refs(pre, "block")) == held_before
    en = pre["text"]["en"]
    assert "ran out" in en and "last request in the running queue" in en
    assert "front of the waiting queue" in en
    assert "抢占" in pre["text"]["zh"]
    assert "admitted" in items["preempt:no_admission"]["text"]["en"]
    assert "c" in _refs(items["waiting"], "request")


def test_prefix_cache_hit_names_the_shared_blocks() -> None:
    # the preset's summary: b finds 9 full blocks (36 tokens), blocks 1-9 get ref count 2
    item = _by_key(_narr("demo-prefix-cache", 3))["prefix_hit:b"]
    assert sorted(_refs(item, "block")) == list(range(1, 10))
    assert "36 tokens" in item["text"]["en"] and "ref count 2" in item["text"]["en"]
    assert "a" in _refs(item, "request")


def test_finish_separates_freed_blocks_from_blocks_still_shared() -> None:
    # a finishes at the end of step 4: its blocks 10-12 go back, 1-9 stay with b
    sc, steps = _run("demo-prefix-cache")
    item = _by_key(narrate(steps[4], steps[3], sc.config))["finish:a"]  # type: ignore[attr-defined]
    assert "10–12 went back to the free queue" in item["text"]["en"]
    assert "1–9 stay allocated, still used by b" in item["text"]["en"]
    back = set(steps[4].kv_cache["free_block_queue"])
    assert {10, 11}.issubset(back) and not back & set(range(1, 10))


def test_condense_move_is_narrated_at_update_states() -> None:
    move = _by_key(_narr("demo-preemption", 6))["move:b"]
    assert move["stage"] == "update_states"
    assert "from row 1 to row 0" in move["text"]["en"]


def test_idle_step_says_why_it_is_recorded() -> None:
    sc = make_scenario([{"id": "x", "prompt_len": 3, "max_tokens": 2, "arrival_step": 3}])
    steps = run_all(sc)
    items = narrate(steps[0], None, sc.config)
    assert [it["key"] for it in items] == ["idle"]
    assert "Idle step" in items[0]["text"]["en"] and "空闲" in items[0]["text"]["zh"]


def test_cudagraph_padding_is_narrated_and_explained() -> None:
    sc = make_scenario([{"id": "x", "prompt_len": 3, "max_tokens": 2}], cudagraph_capture_sizes=[1, 2, 4, 8])
    steps = run_all(sc)
    items = _by_key(narrate(steps[0], None, sc.config))
    assert "3 tokens are padded to 4" in items["padding"]["text"]["en"]
    assert _refs(items["padding"], "token") == [3]
    text = explain(steps[0], "slot_mapping", 3)
    assert text is not None and text["en"].startswith("slot_mapping[3] = -1")


def test_speculative_arrays_are_narrated_when_present() -> None:
    sc, steps = _run("seed-001")
    t = copy.deepcopy(steps[2])  # a decode step: rows 0, 1, 2
    # a trace from an engine that drafts: the arrays another flavour of the engine records
    t.record("num_draft_tokens", "request", np.array([2, 0, 3]), "spec_decode")
    t.scheduler = {**t.scheduler, "num_accepted_tokens": {"0": 1, "2": 3}}
    items = _by_key(narrate(t, steps[1], sc.config))  # type: ignore[attr-defined]
    assert "verifies 2 draft tokens, 1 accepted, 1 rejected" in items["spec:0"]["text"]["en"]
    assert "rejected" not in items["spec:2"]["text"]["en"]
    assert "spec:1" not in items
    # and a trace without them narrates no speculation
    assert not [k for k in _by_key(_narr("seed-001", 3)) if k.startswith("spec")]


def test_every_slot_mapping_explanation_is_right_arithmetic() -> None:
    _, steps = _run("seed-000")
    t = steps[1]
    sm = t.arrays["slot_mapping"]
    for i in range(len(sm)):
        text = explain(t, "slot_mapping", i)
        assert text is not None
        m = re.search(r"block (\d+) \* (\d+) \+ (\d+) = (\d+)", text["en"])
        assert m, text["en"]
        b, bs, o, s = map(int, m.groups())
        assert b * bs + o == s == sm[i]
        assert bs == 16 and o < bs


def test_explain_unknown_array_or_index_is_none() -> None:
    _, steps = _run("seed-001")
    assert explain(steps[0], "no_such_array", 0) is None
    assert explain(steps[0], "slot_mapping", 10) is None
    # a table entry falls back to its stage's formula
    text = explain(steps[0], "block_table", 7)
    assert text is not None and text["en"].startswith("block_table[1, 1] = ")


def test_cli_narrates_a_step_in_either_language(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "demo-preemption", "--step", "3", "--narrate"]) == 0
    out = capsys.readouterr().out
    assert "step 3" in out and "preempts request c" in out and "[slot_mapping] slot_mapping[" in out
    assert main(["run", "demo-preemption", "--step", "3", "--narrate", "--lang", "zh"]) == 0
    assert "抢占请求 c" in capsys.readouterr().out


def test_the_last_step_says_who_finishes(capsys: pytest.CaptureFixture[str]) -> None:
    sc, steps = _run("demo-preemption")
    items = _by_key(narrate(steps[-1], steps[-2], sc.config, last=True))  # type: ignore[attr-defined]
    held = sorted(int(b) for b, o in steps[-1].kv_cache["owners"].items() if "c" in o)
    assert _refs(items["finish:last"], "block") == held and _refs(items["finish:last"], "request") == ["c"]
    assert "c samples its last token and finishes" in items["finish:last"]["text"]["en"]
    assert "finish:last" not in _by_key(narrate(steps[-1], steps[-2], sc.config))  # type: ignore[attr-defined]
    assert main(["run", "demo-preemption", "--step", str(len(steps)), "--narrate"]) == 0
    assert "last step" in capsys.readouterr().out


def test_cli_json_with_narrate_adds_each_steps_narration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "seed-001", "--step", "2", "--json", "--narrate"]) == 0
    step = json.loads(capsys.readouterr().out)["steps"][0]
    assert step["step"] == 2 and any(it["key"] == "stage:slot_mapping" for it in step["narration"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["vllm", "ascend", "nanovllm"]).flatmap(lambda f: scenarios(flavor=f)))
def test_random_runs_narrate_check_and_measure_consistently(sc: Scenario) -> None:
    steps = run_all(sc)
    null = 0 if sc.flavor == "nanovllm" else 1
    per = step_metrics(steps)
    for k, t in enumerate(steps):
        items = narrate(t, steps[k - 1] if k else None, sc.config)
        assert items and all(it["text"]["en"] and it["text"]["zh"] for it in items)
        assert len({it["key"] for it in items}) == len(items)
        m = per[k]
        assert m["blocks_used"] + m["blocks_free"] == sc.config.num_kv_blocks - null
        assert 0 <= m["tokens_held"] <= m["slots_allocated"]
        for name, entry in t.array_entries.items():
            arr = entry.value.reshape(-1)
            if arr.size == 0 or arr.dtype.kind not in "iub":
                continue
            idx = list(range(arr.size))[:64]
            right = check_entries(t, name, idx, [arr[i].item() for i in idx])
            assert right["all_correct"]
            wrong = check_entries(t, name, idx[:3], [int(arr[i]) + 1 for i in idx[:3]])
            for e in wrong["entries"]:
                assert not e["correct"] and e["explanation"] is not None
                assert str(e["expected"]) in e["explanation"]["en"]
