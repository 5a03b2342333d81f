"""The causes group, V1 runner (pytest -m fidelity): pagedviz's `scheduler.waiting_causes` and
`scheduler.preemption_causes` against vLLM 0.33.0's own Scheduler, step by step.

vLLM's side is the fidelity suite's (pagedviz.core.vllm_engine.v1, sync and, with async
scheduling, vLLM's AsyncScheduler under the engine core's batch queue), with the causes oracle
(pagedviz.core.vllm_engine.causes) watching each `schedule()`: it names each cause from vLLM's
own code (allocate_slots' None, _preempt_request's victims, counterfactual copies of the
scheduler with max_num_seqs or the token budget lifted). Each step that schedules compares the
two sides' causes, key for key, numbers included, and checks that the step's narration names the
head request with the words and numbers of its cause, in English and 中文. Scenarios: every V1
preset the fidelity suite runs (sync and async), the landing page's contrasts (the issue's
"Chunked prefill on vs off" among them), and the suite's own hypothesis strategy. Model Runner V2
has its own module (test_vllm_v2_causes.py); both use the comparison of
tests/support/vllm_causes.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import preset_dict
from tests.support.fidelity_env import require_vllm
from tests.support.strategies import V1_FIDELITY, scenarios

require_vllm()
from tests.support.vllm_causes import run_causes  # noqa: E402
from tests.support.vllm_v1 import V1_ASYNC_PRESETS, V1_PRESETS, as_vllm  # noqa: E402

# the landing page's contrasts (static/compare.js): each preset's B side, on the V1 runner
CONTRASTS = [
    ("seed-000", {"enable_chunked_prefill": False, "max_num_batched_tokens": 240}),
    ("seed-000", {"block_size": 256}),
    ("demo-prefix-cache", {"enable_prefix_caching": False}),
    ("demo-v2-slots", {"model_runner": "v1"}),
]


@pytest.mark.parametrize("preset", V1_PRESETS)
def test_every_v1_presets_causes_are_vllms(preset: str) -> None:
    assert run_causes(as_vllm(preset_dict(preset))) > 0


@pytest.mark.parametrize("preset", V1_ASYNC_PRESETS)
def test_every_v1_presets_causes_are_vllms_with_async_scheduling(preset: str) -> None:
    assert run_causes(as_vllm(preset_dict(preset), async_scheduling=True)) > 0


@pytest.mark.parametrize(("preset", "change"), CONTRASTS, ids=lambda x: str(x))
def test_the_contrasts_causes_are_vllms(preset: str, change: dict[str, Any]) -> None:
    d = preset_dict(preset)
    assert run_causes(as_vllm({**d, "config": {**d["config"], **change}})) > 0


def test_chunked_prefill_off_step_2_says_request_4_waits_for_the_token_budget_as_vllm_does() -> None:
    """The issue's example: "Chunked prefill on vs off", step 2, in the trace and in the words."""
    d = preset_dict("seed-000")
    scenario = as_vllm({**d, "config": {**d["config"], **CONTRASTS[0][1]}})
    assert run_causes(scenario) > 0
    t = list(make_engine(scenario).run())[1]
    want = {"cause": "token_budget", "tokens_needed": 120, "tokens_left": 70}
    assert t.scheduler["waiting_causes"]["4"] == want


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(V1_FIDELITY))
def test_random_scenarios_causes_are_vllms(scenario: Scenario) -> None:
    run_causes(scenario)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(V1_FIDELITY, async_scheduling=True))
def test_random_scenarios_causes_are_vllms_with_async_scheduling(scenario: Scenario) -> None:
    run_causes(scenario)


def _chunking_off() -> Scenario:
    d = preset_dict("seed-000")
    return as_vllm({**d, "config": {**d["config"], **CONTRASTS[0][1]}})


def test_the_comparison_catches_a_cause_rule_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other way round: pagedviz reporting kv_pool where the budget stopped the request (the
    issue's false "because") must part from vLLM."""
    from pagedviz.core.scheduler import Scheduler

    if not hasattr(Scheduler, "_waiting_causes"):
        pytest.skip("pagedviz's scheduler has no _waiting_causes yet (issue 37 point 1)")
    assert run_causes(_chunking_off()) > 0  # unbroken, both sides agree
    rule = Scheduler._waiting_causes

    def budget_as_pool(self: Any, *args: Any, **kwargs: Any) -> dict[str, dict[str, Any]]:
        causes = rule(self, *args, **kwargs)
        for c in causes.values():
            if c["cause"] == "token_budget":
                c.clear()
                c.update(cause="kv_pool", blocks_needed=8, blocks_free=0)
        return causes

    monkeypatch.setattr(Scheduler, "_waiting_causes", budget_as_pool)
    with pytest.raises(AssertionError, match="why 4 waits"):
        run_causes(_chunking_off())


def test_the_narration_check_catches_words_of_another_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    """A narration that words the token budget as the pool's fails the words check."""
    words = pytest.importorskip("pagedviz.core.narrate_causes", reason="no narration of the causes yet")
    assert run_causes(_chunking_off()) > 0
    monkeypatch.setitem(words.MARKERS, "token_budget", words.MARKERS["kv_pool"])
    with pytest.raises(AssertionError, match="no en sentence says 4 waits"):
        run_causes(_chunking_off())
