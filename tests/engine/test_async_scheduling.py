"""Async scheduling as vLLM 0.33 runs it: the AsyncScheduler's output placeholders
(core/async_scheduler.py) and the engine core's batch queue (core/engine_core.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario, make_engine
from pagedviz.core.async_scheduler import AsyncScheduler
from pagedviz.core.engine_core import BATCH_QUEUE_SIZE
from pagedviz.core.narrate import narrate
from pagedviz.core.scenario_parts import EngineConfig, RequestSpec


def scenario(reqs: list[dict[str, Any]], **config: Any) -> Scenario:
    cfg = {
        "block_size": 4,
        "max_model_len": 32,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 64,
        "num_kv_blocks": 32,
        "model": None,
        "device": "cpu",
        "async_scheduling": True,
        **config,
    }
    return Scenario.from_dict(
        {"name": "t", "flavor": "vllm", "config": cfg, "requests": reqs, "max_steps": 400}
    )


def req(rid: str, n: int, max_tokens: int, arrival: int = 1) -> dict[str, Any]:
    return {
        "id": rid,
        "prompt_token_ids": list(range(3, 3 + n)),
        "max_tokens": max_tokens,
        "arrival_step": arrival,
    }


def run(s: Scenario) -> list[Any]:
    return list(make_engine(s).run())


def scheduler(reqs: list[RequestSpec], **config: Any) -> AsyncScheduler:
    cfg = EngineConfig(
        **{"block_size": 4, "max_model_len": 32, "num_kv_blocks": 32, "async_scheduling": True, **config}
    )
    return AsyncScheduler(cfg, tuple(reqs))


def spec(rid: str, n: int, max_tokens: int) -> RequestSpec:
    return RequestSpec(id=rid, prompt_token_ids=tuple(range(3, 3 + n)), max_tokens=max_tokens, arrival_step=1)


# ------------------------------------------------------------------ the scheduler's placeholders
def test_a_step_that_samples_leaves_one_output_placeholder_until_its_output_is_processed() -> None:
    sch = scheduler([spec("a", 5, 4)])
    out = sch.schedule(1)
    a = sch.requests["a"]
    assert (a.num_computed_tokens, a.num_output_placeholders, a.is_prefill_chunk) == (5, 1, False)
    # planned before step 1's token is known: the placeholder counts as a token to compute
    out2 = sch.schedule(2)
    assert out2.num_scheduled_tokens == {"a": 1}
    assert (a.num_computed_tokens, a.num_output_placeholders, a.num_in_flight_tokens) == (6, 2, 6)
    sch.update_from_output(out, {"a": 40})
    assert (a.num_tokens, a.num_output_placeholders, a.num_in_flight_tokens) == (6, 1, 1)
    sch.update_from_output(out2, {"a": 41})
    assert (a.num_tokens, a.num_output_placeholders, a.num_in_flight_tokens) == (7, 0, 0)


def test_a_partial_prefill_chunk_gets_no_placeholder() -> None:
    sch = scheduler([spec("a", 10, 2)], max_num_batched_tokens=4, enable_chunked_prefill=True)
    sch.schedule(1)
    a = sch.requests["a"]
    assert (a.num_computed_tokens, a.num_output_placeholders, a.is_prefill_chunk) == (4, 0, True)


def test_the_max_tokens_guard_stops_scheduling_once_the_last_token_is_in_flight() -> None:
    sch = scheduler([spec("a", 5, 2)])
    out1 = sch.schedule(1)  # samples output 1
    out2 = sch.schedule(2)  # samples output 2, the last
    assert out2.num_scheduled_tokens == {"a": 1}
    # the batch queue hands step 1's output over before step 3 is planned
    sch.update_from_output(out1, {"a": 9})
    assert sch.schedule(3).num_scheduled_tokens == {}  # nothing: the last output is in flight
    assert sch.update_from_output(out2, {"a": 9}) == ["a"]
    assert sch.requests["a"].num_output_tokens == 2


def test_drafts_add_placeholders_and_come_back_as_minus_one_drafts() -> None:
    sch = scheduler([spec("a", 5, 8)], num_speculative_tokens=2)
    out1 = sch.schedule(1)
    a = sch.requests["a"]
    # the worker proposes the next drafts: the scheduler only knows how many
    assert a.spec_token_ids == [-1, -1]
    out2 = sch.schedule(2)
    assert out2.num_scheduled_tokens == {"a": 3}  # the placeholder's token plus two drafts
    assert out2.scheduled[0].spec_token_ids == [-1, -1]
    assert a.num_output_placeholders == 1 + (1 + 2)
    sch.update_from_output(out1, {"a": 7})
    # one draft accepted, one rejected: two tokens out, computed and placeholders roll back by one
    computed = a.num_computed_tokens
    sch.update_from_spec_output(out2, {"a": [8, 9]}, {"a": 1})
    assert a.num_computed_tokens == computed - 1
    assert a.num_output_placeholders == 0
    assert a.num_tokens == 5 + 3


# ------------------------------------------------------------------ the engine core's loop
def test_step_two_is_scheduled_before_step_one_output_reaches_the_scheduler() -> None:
    steps = run(scenario([req("a", 5, 3)]))
    s1, s2 = steps[0].engine_core, steps[1].engine_core
    assert s1["consumed_step"] is None and s1["batch_queue"] == [1]
    assert steps[1].scheduler["num_scheduled_tokens"] == {"a": 1}
    assert s2["consumed_step"] == 1 and s2["batch_queue"] == [2]


def test_a_finish_and_its_free_become_visible_one_step_after_the_last_token() -> None:
    steps = run(scenario([req("a", 5, 2)]))
    last = max(t.step for t in steps if "a" in t.sampled_token_ids)
    by_step = {t.step: t for t in steps}
    assert by_step[last].engine_core["finished_req_ids"] == []
    assert by_step[last + 1].engine_core["finished_req_ids"] == ["a"]
    assert by_step[last + 1].engine_core["consumed_step"] == last
    # the runner hears of it from the next schedule(); the pool view there has a's blocks back
    assert by_step[last + 2].scheduler["finished_req_ids"] == ["a"]
    held = by_step[last].kv_cache["owners"]
    assert any("a" in o for o in held.values())
    assert not any("a" in o for o in by_step[last + 2].kv_cache["owners"].values())


def test_a_step_that_schedules_nothing_still_consumes_the_queue() -> None:
    steps = run(scenario([req("a", 5, 2)]))
    empty = [t for t in steps if t.engine_core["scheduled"] and t.idle]
    assert empty and all(t.engine_core["consumed_step"] is not None for t in empty)


def test_a_step_with_no_requests_only_drains_the_queue_and_the_run_ends_empty() -> None:
    steps = run(scenario([req("a", 5, 2)]))
    last = steps[-1].engine_core
    assert last["scheduled"] is False and last["consumed_step"] == steps[-2].step
    assert last["batch_queue"] == []


def test_idle_steps_before_a_late_arrival_neither_schedule_nor_consume() -> None:
    steps = run(scenario([req("a", 5, 1, arrival=3)]))
    for t in steps[:2]:
        assert t.idle and t.engine_core == {
            "scheduled": False,
            "consumed_step": None,
            "finished_req_ids": [],
            "batch_queue": [],
            "batch_queue_size": BATCH_QUEUE_SIZE,
        }
    assert steps[2].scheduler["new_req_ids"] == ["a"]


def test_synchronous_runs_have_no_engine_core_entry() -> None:
    for t in run(scenario([req("a", 5, 2)], async_scheduling=False)):
        assert t.engine_core is None and "engine_core" not in t.to_dict()


@st.composite
def async_scenarios(draw: st.DrawFn) -> Scenario:
    bs = draw(st.integers(1, 4))
    reqs, longest = [], 1
    for i in range(draw(st.integers(1, 5))):
        max_tokens = draw(st.integers(1, 6))
        n = draw(st.integers(1, 12))
        reqs.append(req(f"r{i}", n, max_tokens, draw(st.integers(1, 4))))
        longest = max(longest, n + max_tokens)
    M = draw(st.integers(longest, 24))
    need = -(-M // bs)  # the pool must hold one request of max_model_len (vLLM's check)
    chunked = draw(st.booleans())
    runner = draw(st.sampled_from(["v1", "v2"]))
    return scenario(
        reqs,
        model_runner=runner,
        block_size=bs,
        max_model_len=M,
        max_num_reqs=draw(st.integers(1, 4)),
        max_num_batched_tokens=draw(st.integers(4, 30)) if chunked else draw(st.integers(M, 40)),
        enable_chunked_prefill=chunked,
        enable_prefix_caching=draw(st.booleans()),
        # tight pools: preemption while a step is in flight
        num_kv_blocks=max(need, -(-24 // bs)) + 1 + draw(st.integers(0, 4)),  # vLLM: one max_model_len fits
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(async_scenarios())
def test_every_request_gets_exactly_max_tokens_outputs_and_the_queue_keeps_order(s: Scenario) -> None:
    engine = make_engine(s)
    steps = list(engine.run())
    assert engine.done and not engine.truncated
    outputs = Counter(rid for t in steps for rid in t.sampled_token_ids)
    consumed = [t.engine_core["consumed_step"] for t in steps if t.engine_core["consumed_step"] is not None]
    scheduled = [t.step for t in steps if t.engine_core["scheduled"]]
    # every scheduled batch is consumed once, oldest first; never more than two in flight
    assert consumed == scheduled
    assert all(len(t.engine_core["batch_queue"]) < BATCH_QUEUE_SIZE for t in steps)
    sch = engine.scheduler
    for spec_ in s.requests:
        r = sch.requests[spec_.id]
        assert r.num_output_tokens == spec_.max_tokens
        # every sampled token (stale ones included) was delivered, none past max_tokens
        assert outputs[spec_.id] == spec_.max_tokens
        assert (r.num_output_placeholders, r.num_in_flight_tokens, r.num_stale_output_tokens) == (0, 0, 0)
    finished = [rid for t in steps for rid in t.engine_core["finished_req_ids"]]
    assert sorted(finished) == sorted(r.id for r in s.requests)
    assert sch.kv.pool.num_free == s.config.num_kv_blocks - 1  # every block back (not the null block)


# ------------------------------------------------------------------ narration
@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_the_narration_names_the_step_whose_output_each_update_consumed(runner: str) -> None:
    s = scenario([req("a", 5, 2), req("b", 3, 4)], model_runner=runner)
    steps = run(s)
    for i, t in enumerate(steps):
        items = narrate(t, steps[i - 1] if i else None, s.config, last=i == len(steps) - 1)
        ec = [it for it in items if it["key"] == "engine_core"]
        k = t.engine_core["consumed_step"]
        if k is None:
            assert all("←" not in it["text"]["en"] for it in ec)
            continue
        assert len(ec) == 1
        assert f"update_from_output ← step {k}" in ec[0]["text"]["en"]
        assert f"update_from_output ← 第 {k} 步" in ec[0]["text"]["zh"]


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_the_narration_says_a_finish_came_in_the_update_a_step_after_its_last_token(runner: str) -> None:
    s = scenario([req("a", 5, 2)], model_runner=runner)
    steps = run(s)
    told = [
        (t.step, it["text"]["en"])
        for i, t in enumerate(steps)
        for it in narrate(t, steps[i - 1] if i else None, s.config)
        if it["key"] == "finish:a"
    ]
    last = max(t.step for t in steps if "a" in t.sampled_token_ids)
    held = sorted(int(b) for b, o in steps[last].kv_cache["owners"].items() if "a" in o)
    assert len(held) == 2  # 5 + 2 tokens in blocks of 4
    assert told == [
        (
            last + 2,
            f"Request a finished at the end of step {last + 1}, in the update_from_output that took step "
            f"{last}'s output (the step that sampled its last token): its blocks {held[0]}, {held[1]} "
            "went back to the free queue then.",
        )
    ]
