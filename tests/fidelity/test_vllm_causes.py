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
has its own module (test_vllm_v2_causes.py), which reuses the comparison below.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from test_vllm_fidelity import V1_ASYNC_PRESETS, V1_PRESETS, _as_vllm, scenarios, vllm_side

from pagedviz.core import Scenario, make_engine
from pagedviz.core.narrate import narrate
from pagedviz.core.presets import preset_dict
from pagedviz.core.vllm_engine.causes import CausesOracle, StepCauses

pytestmark = pytest.mark.fidelity

# the words a sentence uses for each cause (en, zh), and the numbers it must carry
WORDS = {
    "token_budget": ("token budget", "token 预算"),
    "kv_pool": ("KV block", "KV 块"),
    "max_num_seqs": ("max_num_seqs", "max_num_seqs"),
    "preemption": ("preempt", "抢占"),
    "output_in_flight": ("in flight", "在途"),
}
NUMBERS = {
    "token_budget": ("tokens_needed", "tokens_left"),
    "kv_pool": ("blocks_needed", "blocks_free"),
    "max_num_seqs": ("running", "max_num_seqs"),
}


def _have_causes(t: Any) -> None:
    if "waiting_causes" not in t.scheduler:
        pytest.skip("pagedviz's trace has no scheduler.waiting_causes yet (issue 37 point 1)")


def compare_causes(t: Any, theirs: StepCauses, where: str) -> None:
    """pagedviz's step `t` states vLLM's causes (`theirs`), key for key, numbers included."""
    s = t.scheduler
    assert theirs.problem is None, f"{where}: the oracle cannot name a cause: {theirs.problem}"
    assert list(s["waiting_causes"]) == s["waiting_req_ids"], f"{where}: waiting_causes' keys"
    assert list(theirs.waiting) == s["waiting_req_ids"], f"{where}: vLLM's waiting queue"
    for rid, want in theirs.waiting.items():
        assert s["waiting_causes"][rid] == want, f"{where}: why {rid} waits ({theirs.how[rid]})"
    assert s["preemption_causes"] == theirs.preemption, f"{where}: preemption_causes"


def _clause(text: str, opener: str) -> str | None:
    i = text.find(opener)
    if i < 0:
        return None
    return re.split(r"; |；|。|\.$", text[i:])[0]


def check_narration(t: Any, prev: Any, config: Any, theirs: StepCauses, where: str) -> None:
    """The step's narration names its head request (the first waiting one after a preemption) with
    the words of its cause and its numbers, in both languages."""
    if not theirs.waiting:
        return
    head = theirs.head if theirs.head is not None else next(iter(theirs.waiting))
    cause = theirs.waiting[head]
    if cause["cause"] == "behind":  # a skipped request at the front, the head behind it
        return
    texts = [item["text"] for item in narrate(t, prev, config)]
    for lang, opener in ((0, f"request {head} ".lower()), (1, f"请求 {head} ")):
        key = ("en", "zh")[lang]
        # en: "Request 4 waits ..." at a sentence's start, "request 4 waits ..." inside one
        clauses = [c for c in (_clause(x[key].lower() if lang == 0 else x[key], opener) for x in texts) if c]
        word = WORDS[cause["cause"]][lang].lower() if lang == 0 else WORDS[cause["cause"]][lang]
        said = [c for c in clauses if word in c]
        assert said, f"{where}: no {key} sentence says {head} waits for {cause}: {clauses}"
        for name in NUMBERS.get(cause["cause"], ()):
            n = str(cause[name])
            assert any(re.search(rf"(?<![\d.]){n}(?![\d.])", c) for c in said), (
                f"{where}: the {key} sentence on {head} lacks {name} = {n}: {said}"
            )


def run_causes(scenario: Scenario) -> int:
    """Both sides to the end (V1 runner), comparing each scheduled step's causes and narration;
    the number of steps compared."""
    side = vllm_side.VllmSide(scenario)
    oracle = CausesOracle(side.scheduler)
    engine = make_engine(scenario)
    prev, compared = None, 0
    for t in engine.run():
        if scenario.config.async_scheduling:
            loop, _ = side.async_step(t.sampled_token_ids)
            scheduled = loop.scheduler_output is not None
        else:
            side.step(t.sampled_token_ids)
            scheduled = True
        if scheduled:
            assert oracle.last is not None, f"step {t.step}"
            _have_causes(t)
            compare_causes(t, oracle.last, f"step {t.step}")
            check_narration(t, prev, scenario.config, oracle.last, f"step {t.step}")
            compared += 1
        prev = t
    return compared


# the landing page's contrasts (static/compare.js): each preset's B side, on the V1 runner
CONTRASTS = [
    ("seed-000", {"enable_chunked_prefill": False, "max_num_batched_tokens": 240}),
    ("seed-000", {"block_size": 256}),
    ("demo-prefix-cache", {"enable_prefix_caching": False}),
    ("demo-v2-slots", {"model_runner": "v1"}),
]


@pytest.mark.parametrize("preset", V1_PRESETS)
def test_every_v1_presets_causes_are_vllms(preset: str) -> None:
    assert run_causes(_as_vllm(preset_dict(preset))) > 0


@pytest.mark.parametrize("preset", V1_ASYNC_PRESETS)
def test_every_v1_presets_causes_are_vllms_with_async_scheduling(preset: str) -> None:
    assert run_causes(_as_vllm(preset_dict(preset), async_scheduling=True)) > 0


@pytest.mark.parametrize(("preset", "change"), CONTRASTS, ids=lambda x: str(x))
def test_the_contrasts_causes_are_vllms(preset: str, change: dict[str, Any]) -> None:
    d = preset_dict(preset)
    assert run_causes(_as_vllm({**d, "config": {**d["config"], **change}})) > 0


def test_chunked_prefill_off_step_2_says_request_4_waits_for_the_token_budget_as_vllm_does() -> None:
    """The issue's example: "Chunked prefill on vs off", step 2, in the trace and in the words."""
    d = preset_dict("seed-000")
    scenario = _as_vllm({**d, "config": {**d["config"], **CONTRASTS[0][1]}})
    assert run_causes(scenario) > 0
    t = list(make_engine(scenario).run())[1]
    want = {"cause": "token_budget", "tokens_needed": 120, "tokens_left": 70}
    assert t.scheduler["waiting_causes"]["4"] == want


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_scenarios_causes_are_vllms(scenario: Scenario) -> None:
    run_causes(scenario)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(async_scheduling=True))
def test_random_scenarios_causes_are_vllms_with_async_scheduling(scenario: Scenario) -> None:
    run_causes(scenario)


def _chunking_off() -> Scenario:
    d = preset_dict("seed-000")
    return _as_vllm({**d, "config": {**d["config"], **CONTRASTS[0][1]}})


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
