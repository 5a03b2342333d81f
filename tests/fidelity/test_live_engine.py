"""The engine `vllm` (core/vllm_engine/live.py) against pagedviz's own engine (pytest -m fidelity):
on every preset it runs, its trace, made of vLLM 0.33.0's own scheduling and final arrays, equals
pagedviz's own trace of the same scenario, field for field (the timings aside, and the block
hashes, which are vLLM's own hash function's: the same blocks hold one). When pagedviz's replay
computes something else, the step says so and shows vLLM's values."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.runners.v1_stages import V1Stages
from pagedviz.core.vllm_engine import problems
from tests.support.fidelity_env import needs_triton, require_vllm

require_vllm()
from tests.support.vllm_live import assert_same_trace, both  # noqa: E402


def _runs_live(preset: str) -> bool:
    d = preset_dict(preset)
    s = Scenario.from_dict(d)
    return not problems(s.flavor, s.config, s.requests)


# every preset the engine vllm runs as it is (V1 and V2; the rest are refused, naming the field)
PRESETS = [p["id"] for p in list_presets() if _runs_live(p["id"])]


@pytest.mark.parametrize("preset", PRESETS)
def test_the_live_engines_trace_equals_pagedvizs_own_on_every_preset_it_runs(preset: str) -> None:
    d = preset_dict(preset)
    # the tiny model on the first preset (its forward reads the arrays); the others simulate
    if preset != PRESETS[0]:
        d = {**d, "config": {**d["config"], "model": None}}
    assert_same_trace(*both(d))


def test_the_presets_it_runs_take_in_both_runners_both_schedulings_and_v2s_drafts() -> None:
    configs = [Scenario.from_dict(preset_dict(p)).config for p in PRESETS]
    assert {c.model_runner for c in configs} == {"v1", "v2"}, PRESETS
    assert {c.async_scheduling for c in configs} == {True, False}, PRESETS
    assert any(c.num_speculative_tokens and c.model_runner == "v2" for c in configs), PRESETS


def test_v2s_drafts_are_verified_and_proposed_by_vllms_own_code() -> None:
    """demo-v2-spec-decode with its tiny model (whose greedy tokens repeat the prompt's n-grams):
    vLLM's rejection sampler accepts drafts (a row samples more than one token) and its n-gram
    speculator's proposals are the trace's, as pagedviz's own."""
    own, live = both(preset_dict("demo-v2-spec-decode"))
    assert any(int(t.arrays["num_sampled"].max()) > 1 for t in live if "num_sampled" in t.arrays)
    assert any(t.forward.get("proposed_draft_token_ids") for t in live)
    assert all("draft_sampled" in t.forward["vllm_arrays"] for t in live if "num_sampled" in t.arrays)
    assert_same_trace(own, live)


@pytest.mark.parametrize("preset", ["demo-preemption", "demo-v2-slots", "demo-v2-spec-decode"])
def test_the_live_engine_under_async_scheduling_equals_pagedvizs_own(preset: str) -> None:
    """vLLM's AsyncScheduler under the engine core's batch queue (loop.py): the loop's decisions
    (whether a step schedules, whose output update_from_output takes, what stays queued, which
    requests finish) are the trace's, with preemption (V1), V2's slots and V2's drafts (placeholder
    drafts of -1, rejections rolled back a step late)."""
    d = preset_dict(preset)
    d = {**d, "config": {**d["config"], "model": None, "async_scheduling": True}}
    own, live = both(d)
    assert any(t.engine_core["consumed_step"] is None for t in live)  # planned before the output came
    assert_same_trace(own, live)


def test_the_live_engine_runs_vllms_defaults() -> None:
    """A scenario that leaves the config to its defaults: Model Runner V2 with async scheduling,
    vLLM 0.33's own defaults."""
    d = {
        "name": "defaults",
        "config": {"model": None, "max_model_len": 64, "num_kv_blocks": 16},
        "requests": [
            {"id": "a", "prompt_len": 20, "max_tokens": 3},
            {"id": "b", "prompt_len": 7, "max_tokens": 2},
        ],
    }
    cfg = Scenario.from_dict(d).config
    assert (cfg.model_runner, cfg.async_scheduling) == ("v2", True)
    assert_same_trace(*both(d))


@needs_triton()
def test_the_live_engine_pads_to_cuda_graph_sizes_as_vllm_v2_dispatches() -> None:
    """Model Runner V2 with capture sizes: vLLM's own CudaGraphManager dispatches, and its padded
    slot_mapping and counts are the trace's."""
    d = {
        "name": "v2-graphs",
        "config": {
            "model_runner": "v2",
            "async_scheduling": False,
            "block_size": 4,
            "max_model_len": 32,
            "max_num_reqs": 4,
            "max_num_batched_tokens": 16,
            "num_kv_blocks": 24,
            "cudagraph_capture_sizes": [1, 2, 4, 8],
            "model": None,
        },
        "requests": [
            {"id": "a", "prompt_len": 5, "max_tokens": 3},
            {"id": "b", "prompt_len": 3, "max_tokens": 4, "arrival_step": 2},
        ],
    }
    own, live = both(d)
    assert any(t.scalars.get("cudagraph_mode") == "FULL" for t in live)
    assert_same_trace(own, live)


def test_a_difference_from_vllm_is_said_and_vllms_values_are_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    """pagedviz's replay with a broken stage: the step names the array and its first difference,
    and the trace shows vLLM's values (those of pagedviz's unbroken run)."""
    d = preset_dict("demo-preemption")
    d = {**d, "config": {**d["config"], "model": None}}
    own = list(make_engine(Scenario.from_dict(d)).run())
    stage = V1Stages._seq_lens

    @functools.wraps(stage)  # keeps the @stage marker
    def off_by_one(self: Any) -> None:
        stage(self)
        self.seq_lens_np[: self.v["num_reqs"]] += 1

    monkeypatch.setattr(V1Stages, "_seq_lens", off_by_one)
    live = list(make_engine(Scenario.from_dict({**d, "engine": "vllm"})).run())
    assert len(live) == len(own)
    for a, b in zip(own, live):
        if a.idle:
            continue
        diffs = b.forward["vllm_differences"]
        assert "seq_lens" in diffs and "vLLM" in diffs["seq_lens"], b.step
        assert np.array_equal(b.arrays["seq_lens"], a.arrays["seq_lens"]), b.step


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"flavor": "ascend"}, "flavor"),
        ({"config": {"num_speculative_tokens": 2}}, "config.num_speculative_tokens"),
        ({"config": {"device": "cuda"}}, "config.device"),
        ({"config": {"free_queue_order": "fifo"}}, "config.free_queue_order"),
    ],
)
def test_what_vllms_side_cannot_run_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    from pagedviz.core import ScenarioError

    d = preset_dict("demo-preemption")
    d = {**d, **change, "config": {**d["config"], **change.get("config", {})}, "engine": "vllm"}
    with pytest.raises(ScenarioError) as e:
        Scenario.from_dict(d)
    assert field in [loc for loc, _ in e.value.errors], e.value.errors


def test_an_image_request_is_refused_naming_it() -> None:
    from pagedviz.core import ScenarioError

    with pytest.raises(ScenarioError) as e:
        Scenario.from_dict({**preset_dict("demo-mrope"), "engine": "vllm"})
    assert any(loc.endswith(".image") for loc, _ in e.value.errors), e.value.errors


def _chunking_off() -> dict[str, Any]:
    """The issue's "Chunked prefill on vs off" B side (static/compare.js), simulated."""
    d = preset_dict("seed-000")
    cfg = {**d["config"], "enable_chunked_prefill": False, "max_num_batched_tokens": 240, "model": None}
    return {**d, "config": cfg}


def test_the_live_engines_causes_are_vllms_own_and_pagedvizs() -> None:
    """The engine vllm's waiting and preemption causes come from vLLM's own scheduler (the causes
    oracle): step 2 of "Chunked prefill on vs off" says request 4 waits for the token budget, 120
    tokens needed and 70 left, as pagedviz's own engine does, and the whole trace is pagedviz's."""
    own, live = both(_chunking_off())
    want = {"cause": "token_budget", "tokens_needed": 120, "tokens_left": 70}
    assert live[1].scheduler["waiting_causes"] == {"4": want}
    assert_same_trace(own, live)
    # a preemption: for whom, with the failed allocation's numbers
    d = preset_dict("demo-preemption")
    own, live = both({**d, "config": {**d["config"], "model": None}})
    assert live[2].scheduler["preemption_causes"]["c"]["for"] == "a"
    assert live[2].scheduler["waiting_causes"] == {"c": {"cause": "preemption", "preempted": ["c"]}}
    assert_same_trace(own, live)


def test_a_cause_vllms_scheduler_leaves_unnamed_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the oracle cannot name a cause, the request's cause is `unknown` with the step's
    numbers, and the step says so among its differences from vLLM."""
    from pagedviz.core.vllm_engine import causes

    def unnamed(self: Any, before: Any, w: Any, out: Any, rid: str, *args: Any) -> Any:
        raise causes.UndeterminedCauseError(f"no counterfactual admits {rid}")

    monkeypatch.setattr(causes.CausesOracle, "_head", unnamed)
    live = list(make_engine(Scenario.from_dict({**_chunking_off(), "engine": "vllm"})).run())
    got = live[1].scheduler["waiting_causes"]["4"]
    assert got == {
        "cause": "unknown",
        "tokens_left": 70,
        "blocks_free": got["blocks_free"],
        "running": 4,
        "max_num_seqs": 8,
    }
    assert "no counterfactual admits 4" in live[1].forward["vllm_differences"]["waiting_causes"]
    assert "vllm_differences" not in live[0].forward  # nothing waits in step 1
