"""pagedviz's vllm flavour against the real vLLM 0.33.0, step by step (pytest -m fidelity).

Both sides run the same scenario: vLLM's own Scheduler / KVCacheManager / BlockPool and its
InputBatch / BlockTable with the model runner's `_update_states` and `_prepare_inputs` on the CPU
(pagedviz.core.vllm_engine.v1, the engine `vllm`'s V1 side; what is stubbed and why is in its
docstring), and pagedviz's engine with
`model: null`. Each step compares the scheduled tokens, the new / resumed / preempted / finished
requests, the new block ids, the free queue, the batch rows, every prepare_inputs array, the
persistent block table, the live part of the token table (vLLM leaves stale ids past a request's
tokens and in vacated rows, where pagedviz writes zeros), and which requests sample.
The sampled tokens themselves go from pagedviz to vLLM, so both sides see the same sequences.

With async scheduling vLLM's AsyncScheduler runs under a copy of the engine core's batch-queue
loop (pagedviz.core.vllm_engine.loop): each step also compares whether it scheduled, whose output its
update_from_output consumed and what stayed queued. This group is the V1 runner's (scenarios pin
`model_runner: v1`); Model Runner V2 has its own.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from pagedviz.core import Scenario
from pagedviz.core.presets import preset_dict
from tests.support.fidelity_env import require_vllm
from tests.support.strategies import V1_FIDELITY, scenarios

require_vllm()
from pagedviz.core.vllm_engine import v1 as vllm_side  # noqa: E402
from tests.support.vllm_v1 import V1_ASYNC_PRESETS, V1_PRESETS, as_vllm, run_both, run_both_async  # noqa: E402


@pytest.mark.parametrize("preset", V1_PRESETS)
def test_every_v1_vllm_and_ascend_preset_matches_vllm(preset: str) -> None:
    assert run_both(as_vllm(preset_dict(preset))) > 0


@pytest.mark.parametrize("preset", V1_ASYNC_PRESETS)
def test_every_v1_preset_matches_vllm_with_async_scheduling(preset: str) -> None:
    assert run_both_async(as_vllm(preset_dict(preset), async_scheduling=True)) > 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(V1_FIDELITY))
def test_random_scenarios_match_vllm_step_for_step(scenario: Scenario) -> None:
    run_both(scenario)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(V1_FIDELITY, async_scheduling=True))
def test_random_scenarios_match_vllm_step_for_step_with_async_scheduling(scenario: Scenario) -> None:
    run_both_async(scenario)


def test_the_comparison_catches_a_difference() -> None:
    """The other way round: with the older free-queue order pagedviz must part from 0.33."""
    d = preset_dict("demo-preemption")
    d["config"]["free_queue_order"] = "fifo"
    with pytest.raises(AssertionError):
        run_both(as_vllm(d))


def test_the_async_comparison_catches_a_scheduler_without_placeholders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's synchronous Scheduler under the same loop schedules no decode while a step is in
    flight: the async comparison must part from it."""
    monkeypatch.setattr(vllm_side, "AsyncScheduler", vllm_side.Scheduler)
    with pytest.raises(AssertionError):
        run_both_async(as_vllm(preset_dict("demo-async-scheduling")))


def test_the_installed_vllm_is_the_one_the_engine_names() -> None:
    from importlib.metadata import version

    from pagedviz.core.upstream import UPSTREAM

    assert version("vllm") == UPSTREAM["vllm"]["version"]


def test_vllm_refuses_what_pagedviz_refuses() -> None:
    """vLLM's own SchedulerConfig raises for the configs pagedviz's validation refuses."""
    from vllm.config import SchedulerConfig

    with pytest.raises(ValueError, match="smaller than max_model_len"):
        SchedulerConfig(
            max_model_len=8,
            is_encoder_decoder=False,
            max_num_batched_tokens=6,
            max_num_seqs=4,
            enable_chunked_prefill=False,
        )
