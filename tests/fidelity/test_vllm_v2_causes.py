"""The causes group, Model Runner V2 (pytest -m fidelity): pagedviz's `waiting_causes` and
`preemption_causes` against vLLM 0.33.0's Scheduler built for V2 (sync, and AsyncScheduler under
the engine core's batch queue), with n-gram drafts too (placeholder drafts, and the padding of a
one-token request that vLLM prefers not to schedule unpadded). vLLM's side is the V2 fidelity
suite's (pagedviz.core.vllm_engine.v2), the causes oracle watching its scheduler; the comparison
and the narration check are tests/support/vllm_causes.py's. V2's kernels run under Triton's interpreter, so
the hypothesis example counts stay small.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import preset_dict
from tests.support.fidelity_env import require_triton
from tests.support.strategies import V2_FIDELITY, scenarios

require_triton()
from pagedviz.core.vllm_engine import v2 as vllm_v2_side  # noqa: E402
from pagedviz.core.vllm_engine.causes import CausesOracle  # noqa: E402
from tests.support.vllm_causes import check_narration, compare_causes, have_causes  # noqa: E402
from tests.support.vllm_v2 import as_compared, targets, v2_presets  # noqa: E402


def run_causes(scenario: Scenario) -> int:
    """Both sides to the end (Model Runner V2), comparing each scheduled step's causes and
    narration; the number of steps compared."""
    side = vllm_v2_side.VllmV2Side(scenario)
    oracle = CausesOracle(side.scheduler)
    prev, compared = None, 0
    for t in make_engine(scenario).run():
        if scenario.config.async_scheduling:
            loop, _ = side.async_step(t.sampled_token_ids, targets(t))
            scheduled = loop.scheduler_output is not None
        else:
            side.step(t.sampled_token_ids, targets(t))
            scheduled = True
        if scheduled:
            assert oracle.last is not None, f"step {t.step}"
            have_causes(t)
            compare_causes(t, oracle.last, f"step {t.step}")
            check_narration(t, prev, scenario.config, oracle.last, f"step {t.step}")
            compared += 1
        prev = t
    return compared


V2_PRESETS = v2_presets() or [pytest.param(None, marks=pytest.mark.skip("no V2 preset"))]


@pytest.mark.parametrize("preset", V2_PRESETS)
def test_every_v2_presets_causes_are_vllms(preset: str) -> None:
    assert run_causes(as_compared(preset_dict(preset))) > 0


@pytest.mark.parametrize("preset", V2_PRESETS)
def test_every_v2_presets_causes_are_vllms_with_async_scheduling(preset: str) -> None:
    d = preset_dict(preset)
    assert run_causes(as_compared({**d, "config": {**d["config"], "async_scheduling": True}})) > 0


def test_padding_that_does_not_fit_is_the_token_budget_padded_as_vllm_says() -> None:
    """A one-token request padded to 1 + num_speculative_tokens while a decode runs: 2 tokens
    left, 4 needed; vLLM prefers not to schedule it unpadded."""
    reqs = [
        {"id": "a", "prompt_len": 4, "max_tokens": 6},
        {"id": "b", "prompt_token_ids": [9], "max_tokens": 2, "arrival_step": 3},
    ]
    cfg = {
        "model_runner": "v2",
        "async_scheduling": False,
        "block_size": 2,
        "max_model_len": 32,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 6,
        "num_kv_blocks": 40,
        "num_speculative_tokens": 3,
        "model": None,
        "device": "cpu",
    }
    scenario = Scenario.from_dict({"config": cfg, "requests": reqs})
    assert run_causes(scenario) > 0
    t = list(make_engine(scenario).run())[2]
    want = {"cause": "token_budget", "tokens_needed": 4, "tokens_left": 2, "padded": True}
    assert t.scheduler["waiting_causes"]["b"] == want


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(V2_FIDELITY))
def test_random_scenarios_causes_are_vllms_v2(scenario: Scenario) -> None:
    run_causes(scenario)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(V2_FIDELITY, spec=True))
def test_random_scenarios_with_ngram_drafts_causes_are_vllms_v2(scenario: Scenario) -> None:
    run_causes(scenario)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(V2_FIDELITY, async_scheduling=True))
def test_random_scenarios_causes_are_vllms_v2_with_async_scheduling(scenario: Scenario) -> None:
    run_causes(scenario)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(V2_FIDELITY, async_scheduling=True, spec=True))
def test_random_scenarios_with_ngram_drafts_causes_are_vllms_v2_with_async_scheduling(
    scenario: Scenario,
) -> None:
    run_causes(scenario)
