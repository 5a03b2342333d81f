"""The n > 1 and priority group (pytest -m fidelity): pagedviz's vllm flavour against vLLM 0.33.0's
own code on scenarios with parallel sampling (a request's `n`) and `scheduling_policy: "priority"`.

vLLM's side is the suite's (pagedviz.core.vllm_engine: its V1 and V2 sides): a request with n > 1
reaches vLLM's scheduler through vLLM's own `ParentRequest` (`get_child_info` names each child and
gives its sampling params, and the children are added in index order, as `LLMEngine.add_request`
does), and `SchedulerConfig(policy="priority")` makes vLLM's scheduler run its
`PriorityRequestQueue` and its priority victim choice. Step by step the suite's comparisons check
the scheduled tokens, new / resumed / preempted / finished requests, block ids, the free queue
and every array (tests/support/vllm_v1.py, vllm_v2.py), sync and async, and the causes
group checks `waiting_causes` and `preemption_causes` (with the victim's priority) and their
narration. Scenarios: hypothesis draws on the suite's own strategy, with n and priorities added,
and the two presets. Breaking one rule (the victim, the children's order) makes them fail.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario
from pagedviz.core.presets import preset_dict
from tests.support.fidelity_env import needs_triton, require_vllm
from tests.support.strategies import V1_FIDELITY, V2_FIDELITY, scenarios

require_vllm()
from tests.support.vllm_causes import run_causes  # noqa: E402
from tests.support.vllm_live import assert_same_trace, both  # noqa: E402
from tests.support.vllm_v1 import run_both, run_both_async  # noqa: E402

PRESETS = ["demo-parallel-sampling", "demo-priority"]


def _with(d: dict[str, Any], **config: Any) -> Scenario:
    return Scenario.from_dict({**d, "config": {**d["config"], "model": None, "device": "cpu", **config}})


@st.composite
def family_scenarios(draw: st.DrawFn, async_scheduling: bool = False, runner: str = "v1") -> Scenario:
    """The suite's scenarios (tight pools, chunked prefill and prefix caching on and off, arrivals
    over four steps), with each request's n (1 to 3) and priority (-1 to 2) drawn, and the policy."""
    base = draw(scenarios(V1_FIDELITY if runner == "v1" else V2_FIDELITY, async_scheduling=async_scheduling))
    d = base.to_dict()
    d["config"]["scheduling_policy"] = draw(st.sampled_from(["priority", "priority", "fcfs"]))
    if d["config"]["scheduling_policy"] == "priority":
        # vLLM's own livelock is not what these runs are for (see the test below it): without
        # 0.33's full-sequence admission, equal (priority, arrival) requests can preempt each other
        # forever
        d["config"]["scheduler_reserve_full_isl"] = True
    for r in d["requests"]:
        r["n"] = draw(st.sampled_from([1, 1, 2, 3]))
        r["priority"] = draw(st.integers(-1, 2))
    return Scenario.from_dict({**d, "max_steps": 400})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_presets_match_vllm_v1(preset: str, async_scheduling: bool) -> None:
    s = _with(preset_dict(preset), model_runner="v1", async_scheduling=async_scheduling)
    assert (run_both_async if async_scheduling else run_both)(s) > 0


@needs_triton()
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_presets_match_vllm_v2(preset: str, async_scheduling: bool) -> None:
    from tests.support import vllm_v2  # (imported here: only the V2 runner needs Triton)

    s = _with(preset_dict(preset), model_runner="v2", async_scheduling=async_scheduling)
    run = vllm_v2.run_both_async if async_scheduling else vllm_v2.run_both
    assert run(s) > 0


@pytest.mark.parametrize("preset", PRESETS)
def test_the_presets_causes_are_vllms(preset: str) -> None:
    assert run_causes(_with(preset_dict(preset), model_runner="v1", async_scheduling=False)) > 0


def test_priority_preemption_meets_vllms_victim_and_cause() -> None:
    """demo-priority's preemption: vLLM's own scheduler preempts b for c (not c, the last)."""
    s = _with(preset_dict("demo-priority"), model_runner="v1", async_scheduling=False)
    assert run_causes(s) > 0  # preemption_causes compared key for key, the priority included


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family_scenarios())
def test_random_n_and_priority_scenarios_match_vllm_v1(scenario: Scenario) -> None:
    run_both(scenario)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family_scenarios(async_scheduling=True))
def test_random_n_and_priority_scenarios_match_vllm_v1_with_async_scheduling(scenario: Scenario) -> None:
    run_both_async(scenario)


@needs_triton()
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family_scenarios(runner="v2", async_scheduling=True))
def test_random_n_and_priority_scenarios_match_vllm_v2_with_async_scheduling(scenario: Scenario) -> None:
    from tests.support import vllm_v2  # (imported here: only the V2 runner needs Triton)

    vllm_v2.run_both_async(scenario)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family_scenarios())
def test_random_n_and_priority_scenarios_causes_are_vllms(scenario: Scenario) -> None:
    run_causes(scenario)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family_scenarios(async_scheduling=True))
def test_random_n_and_priority_scenarios_causes_are_vllms_with_async_scheduling(scenario: Scenario) -> None:
    run_causes(scenario)


@needs_triton()
def test_the_live_engine_on_v2_with_async_scheduling_equals_pagedvizs_own() -> None:
    """The engine vllm (the children through vLLM's ParentRequest) on 0.33's defaults (V2, async)
    with the tiny model, whose children sample at temperature 1: the same trace as pagedviz's own
    engine. (test_live_engine.py runs both presets as they are, on the V1 runner.)"""
    d = preset_dict("demo-parallel-sampling")
    config = {k: v for k, v in d["config"].items() if k not in ("model_runner", "async_scheduling", "model")}
    assert_same_trace(*both({**d, "config": {**config, "device": "cpu"}}))


def test_two_children_under_priority_preempt_each_other_in_vllm_too() -> None:
    """Children of one request tie on (priority, arrival), and vLLM's victim is the first of the
    maxima in running order (`max(self.running, key=lambda r: (r.priority, r.arrival_time))`):
    with admission of a first chunk only (`scheduler_reserve_full_isl: false`) and a pool short of
    both children, each preempts itself in turn and is readmitted behind the other, forever. Both
    sides agree at every one of 60 steps, and both are still running."""
    cfg = {
        "block_size": 3,
        "max_model_len": 23,
        "max_num_reqs": 2,
        "max_num_batched_tokens": 23,
        "num_kv_blocks": 9,
        "long_prefill_token_threshold": 2,
        "scheduler_reserve_full_isl": False,
        "watermark": 0.1,
        "scheduling_policy": "priority",
        "model": None,
        "device": "cpu",
        "model_runner": "v1",
        "async_scheduling": False,
    }
    ids = [4, 19, 32, 36, 24, 9, 27, 3, 15, 27, 19, 35]
    s = Scenario.from_dict(
        {
            "name": "livelock",
            "config": cfg,
            "requests": [{"id": "r1", "prompt_token_ids": ids, "max_tokens": 7, "n": 3, "arrival_step": 2}],
            "max_steps": 60,
        }
    )
    with pytest.raises(AssertionError, match="vLLM has unfinished requests"):
        run_both(s)  # every step compared equal before this, the last one's check


def test_preempting_the_last_instead_of_the_lowest_priority_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from pagedviz.core.scheduler import Scheduler

    s = _with(preset_dict("demo-priority"), model_runner="v1", async_scheduling=False)
    monkeypatch.setattr(Scheduler, "_victim", lambda self: self.running[-1])
    with pytest.raises(AssertionError):
        run_both(s)


def test_adding_the_children_out_of_index_order_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from pagedviz.core import scheduler

    real = scheduler.scheduled_specs
    monkeypatch.setattr(scheduler, "scheduled_specs", lambda reqs: tuple(reversed(real(reqs))))
    s = _with(preset_dict("demo-parallel-sampling"), model_runner="v1", async_scheduling=False)
    with pytest.raises(AssertionError):
        run_both(s)


def test_a_fifo_waiting_queue_under_priority_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The waiting queue's order is compared: a deque where vLLM keeps its heap parts from it."""
    from collections import deque

    from pagedviz.core import scheduler

    monkeypatch.setattr(scheduler, "waiting_queue", lambda policy: deque())
    d = preset_dict("demo-priority")
    # c arrives while two others wait for the single running slot: only the order differs
    d["config"].update(max_num_reqs=1)
    with pytest.raises(AssertionError):
        run_both(_with(d, model_runner="v1", async_scheduling=False))
