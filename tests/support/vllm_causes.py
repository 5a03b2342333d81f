"""The causes group's comparison (tests/fidelity): pagedviz's `scheduler.waiting_causes` and
`scheduler.preemption_causes` against vLLM 0.33.0's own, as the causes oracle
(pagedviz.core.vllm_engine.causes) names them from vLLM's own scheduler (allocate_slots' None,
_preempt_request's victims, counterfactual copies of the scheduler with max_num_seqs or the token
budget lifted), and the check that a step's narration names the head request with the words and
numbers of its cause, in English and 中文. `run_causes` runs both sides on the V1 runner (sync, and
with async scheduling vLLM's AsyncScheduler under the engine core's batch queue); the V2 group
(test_vllm_v2_causes.py) drives its own side with the same comparison.

Callers check first that vLLM is installed (tests.support.fidelity_env.require_vllm).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from pagedviz.core import Scenario, make_engine
from pagedviz.core.narrate import narrate
from pagedviz.core.vllm_engine import v1 as vllm_side
from pagedviz.core.vllm_engine.causes import CausesOracle, StepCauses

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


def have_causes(t: Any) -> None:
    """Skip the test where pagedviz's trace names no causes yet."""
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
            have_causes(t)
            compare_causes(t, oracle.last, f"step {t.step}")
            check_narration(t, prev, scenario.config, oracle.last, f"step {t.step}")
            compared += 1
        prev = t
    return compared
