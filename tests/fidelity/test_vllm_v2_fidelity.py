"""pagedviz's Model Runner V2 model against vLLM 0.33.0's own V2 code, step by step (pytest -m fidelity).

vLLM's side (pagedviz.core.vllm_engine.v2, the engine `vllm`'s V2 side; what is stubbed and why
is in its docstring): the
Scheduler built for V2, V2's RequestState / BlockTables / InputBuffers and the GPUModelRunner
methods that update them and prepare a step's inputs, with V2's Triton kernels run by Triton's
interpreter on the CPU. pagedviz's side: the engine with `model_runner: "v2"` and `model: null`.
The sampled tokens go from pagedviz's trace to vLLM, so both sides see the same sequences.

Each step compares: the scheduler's scheduled tokens (in order), new (resumed included, in order),
resumed (always none under V2), preempted and finished ids, and new block ids; the state slots
(`req_id_to_index`), the free slots in hand-out order and the slot events; the batch order and
`idx_mapping`; `num_scheduled_tokens`, `query_start_loc` (first R+1), `seq_lens` (R), `positions`,
`input_ids`, `cu_num_logits`, `logits_indices`, `slot_mapping` (first T); the gathered block
table's valid entries (row i: the first cdiv(seq_lens[i], block_size)); the per-slot state of
occupied slots; the attention metadata's counts; vLLM's CUDA-graph dispatch (mode, padded sizes)
and the padded buffers; which requests sample. With async scheduling vLLM's AsyncScheduler runs
under the engine core's batch-queue loop (pagedviz.core.vllm_engine.loop) and each step also
compares the loop's decisions. The interpreter is slow (about 50 ms a step): the hypothesis
example counts keep the group to about two minutes of CPU.
With n-gram speculative decoding also: the scheduled draft counts (-1 placeholders),
`expanded_idx_mapping`, `expanded_local_pos`, `draft_sampled`, `num_sampled`, `num_rejected`, the
per-slot `draft_tokens` each step verifies, and the drafts V2's speculator proposes after it.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import preset_dict
from pagedviz.core.runners.v2 import ModelRunnerV2
from tests.support.fidelity_env import require_triton
from tests.support.strategies import V2_FIDELITY, scenarios

# vLLM's V2 side must be the first to import Triton, with TRITON_INTERPRET set, or Triton's own
# jit'd helpers (tl.zeros, ...) are not interpreted: require_triton only looks it up
require_triton()
from pagedviz.core.vllm_engine import v2  # noqa: E402
from tests.support.vllm_v2 import as_compared, run_both, run_both_async, v2_presets  # noqa: E402


@pytest.mark.parametrize(
    "preset", v2_presets() or [pytest.param(None, marks=pytest.mark.skip("no V2 preset"))]
)
def test_every_v2_preset_matches_vllm_v2(preset: str) -> None:
    scenario = as_compared(preset_dict(preset))
    run = run_both_async if scenario.config.async_scheduling else run_both
    assert run(scenario) > 0


@pytest.mark.parametrize(
    "preset", v2_presets() or [pytest.param(None, marks=pytest.mark.skip("no V2 preset"))]
)
def test_every_v2_preset_matches_vllm_v2_with_async_scheduling(preset: str) -> None:
    d = preset_dict(preset)
    assert run_both_async(as_compared({**d, "config": {**d["config"], "async_scheduling": True}})) > 0


# Each random-scenario property runs in parts, one per choice of chunked prefill (and of prefix
# caching, where drafts allow it), so that pytest-xdist spreads the interpreter's cost over its
# workers. The parts draw everything else as the whole property did (those choices were fair coins)
# and their examples add up to the property's.
CHUNKED = pytest.mark.parametrize("chunked", [False, True], ids=["unchunked", "chunked"])
PREFIX = pytest.mark.parametrize("prefix", [False, True], ids=["no-prefix-caching", "prefix-caching"])


@PREFIX
@CHUNKED
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # x 4: 120
@given(data=st.data())
def test_random_scenarios_match_vllm_v2_step_for_step(
    prefix: bool, chunked: bool, data: st.DataObject
) -> None:
    run_both(data.draw(scenarios(V2_FIDELITY, prefix_caching=prefix, chunked_prefill=chunked), "scenario"))


@CHUNKED
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # x 2: 40
@given(data=st.data())
def test_random_scenarios_with_ngram_drafts_match_vllm_v2_step_for_step(
    chunked: bool, data: st.DataObject
) -> None:
    run_both(data.draw(scenarios(V2_FIDELITY, spec=True, chunked_prefill=chunked), "scenario"))


def test_accepted_ngram_drafts_match_vllm_v2() -> None:
    """A prompt that repeats itself, with a synthetic sampler that continues it: drafts are
    accepted (all, some, none) and rows verify while others prefill."""
    from pagedviz.core.sampler import synthetic_tokens

    s = synthetic_tokens(0, ["a"] * 8, np.arange(6, 14), 512).tolist()
    reqs = [
        {"id": "a", "prompt_token_ids": [*s[:4], 3, 4], "max_tokens": 9},
        {"id": "b", "prompt_token_ids": [7, 8, 9, 7, 8, 9, 7, 8], "max_tokens": 6, "arrival_step": 2},
        {"id": "c", "prompt_len": 20, "max_tokens": 3, "arrival_step": 2},
    ]
    cfg = {
        "model_runner": "v2",
        "async_scheduling": False,
        "block_size": 4,
        "max_model_len": 64,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 16,
        "num_kv_blocks": 60,
        "vocab_size": 512,
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 3,
        "model": None,
        "device": "cpu",
    }
    scenario = Scenario.from_dict({"seed": 0, "config": cfg, "requests": reqs})
    assert run_both(scenario) > 0
    traces = list(make_engine(scenario).run())
    assert any(int(x) > 1 for t in traces if "num_sampled" in t.arrays for x in t.arrays["num_sampled"])


def test_a_one_token_prompt_padded_with_placeholder_drafts_matches_vllm_v2() -> None:
    """vLLM pads a waiting request with one token left to 1 + num_speculative_tokens while decodes
    run (the waiting loop's pad_spec_decode); V2 rejects the placeholders."""
    reqs = [
        {"id": "a", "prompt_len": 4, "max_tokens": 6},
        {"id": "b", "prompt_token_ids": [9], "max_tokens": 3, "arrival_step": 2},
        {"id": "c", "prompt_token_ids": [5], "max_tokens": 2, "arrival_step": 1},
    ]
    cfg = {
        "model_runner": "v2",
        "async_scheduling": False,
        "block_size": 2,
        "max_model_len": 32,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 16,
        "num_kv_blocks": 40,
        "num_speculative_tokens": 2,
        "model": None,
        "device": "cpu",
    }
    scenario = Scenario.from_dict({"config": cfg, "requests": reqs})
    assert run_both(scenario) > 0
    t2 = list(make_engine(scenario).run())[1]
    assert t2.scheduler["scheduled_spec_decode_tokens"].get("b") == [-1, -1]


@PREFIX
@CHUNKED
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # x 4: 60
@given(data=st.data())
def test_random_scenarios_match_vllm_v2_step_for_step_with_async_scheduling(
    prefix: bool, chunked: bool, data: st.DataObject
) -> None:
    s = scenarios(V2_FIDELITY, async_scheduling=True, prefix_caching=prefix, chunked_prefill=chunked)
    run_both_async(data.draw(s, "scenario"))


@CHUNKED
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # x 2: 30
@given(data=st.data())
def test_random_scenarios_with_ngram_drafts_match_vllm_v2_with_async_scheduling(
    chunked: bool, data: st.DataObject
) -> None:
    """vLLM 0.33's default with n-gram drafts on V2: AsyncScheduler's placeholder drafts (-1) and
    output placeholders, rolled back by the rejections of a step whose output arrives a step late."""
    s = scenarios(V2_FIDELITY, async_scheduling=True, spec=True, chunked_prefill=chunked)
    run_both_async(data.draw(s, "scenario"))


def test_the_async_comparison_catches_a_scheduler_without_placeholders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's synchronous Scheduler under the same loop schedules no decode while the request's
    previous step is in flight: the async comparison must part from it."""
    assert run_both_async(_worked_example(async_scheduling=True)) > 0  # unbroken, both sides agree
    monkeypatch.setattr(v2, "AsyncScheduler", v2.Scheduler)
    with pytest.raises(AssertionError):
        run_both_async(_worked_example(async_scheduling=True))


# the worked example of the V2 reader's notes (section 8): A=5, B=3, C=7 tokens, D=6 arriving in
# step 3, block size 4, budget 32, max_num_seqs 8; B stops after two tokens
_PROMPTS = {
    "A": [101, 102, 103, 104, 105],
    "B": [201, 202, 203],
    "C": list(range(301, 308)),
    "D": list(range(401, 407)),
}
_SAMPLED = {
    1: {"A": 106, "B": 204, "C": 308},
    2: {"A": 107, "B": 205, "C": 309},
    3: {"A": 108, "C": 310, "D": 407},
}
_WORKED = {
    1: {
        "req_ids": ["B", "A", "C"],
        "idx_mapping": [6, 7, 5],
        "query_start_loc": [0, 3, 8, 15],
        "positions": [0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6],
        "seq_lens": [3, 5, 7],
        "input_ids": [201, 202, 203, 101, 102, 103, 104, 105, 301, 302, 303, 304, 305, 306, 307],
        "logits_indices": [2, 7, 14],
        "block_rows": [[3], [1, 2], [4, 5]],
        "slot_mapping": [12, 13, 14, 4, 5, 6, 7, 8, 16, 17, 18, 19, 20, 21, 22],
    },
    2: {
        "req_ids": ["A", "B", "C"],
        "idx_mapping": [7, 6, 5],
        "query_start_loc": [0, 1, 2, 3],
        "positions": [5, 3, 7],
        "seq_lens": [6, 4, 8],
        "input_ids": [106, 204, 308],
        "logits_indices": [0, 1, 2],
        "block_rows": [[1, 2], [3], [4, 5]],
        "slot_mapping": [9, 15, 23],
    },
    # the notes' table hand-picked blocks 6 and 7, 8 here; the real pool prepends B's freed block 3
    # to the free queue (block_pool.py free_blocks), so C's third block is 3 and D gets 6, 7
    3: {
        "req_ids": ["A", "C", "D"],
        "idx_mapping": [7, 5, 6],
        "query_start_loc": [0, 1, 2, 8],
        "positions": [6, 8, 0, 1, 2, 3, 4, 5],
        "seq_lens": [7, 9, 6],
        "input_ids": [107, 309, 401, 402, 403, 404, 405, 406],
        "logits_indices": [0, 1, 7],
        "block_rows": [[1, 2], [4, 5, 3], [6, 7]],
        "slot_mapping": [10, 12, 24, 25, 26, 27, 28, 29],
    },
}


def _worked_example(async_scheduling: bool = False) -> Scenario:
    max_tokens = {"A": 4, "B": 2, "C": 4, "D": 2}
    reqs = [
        {"id": r, "prompt_token_ids": p, "max_tokens": max_tokens[r], "arrival_step": 3 if r == "D" else 1}
        for r, p in _PROMPTS.items()
    ]
    cfg = {
        "model_runner": "v2",
        "async_scheduling": async_scheduling,
        "block_size": 4,
        # 60, not the notes' 64: the pool of 16 blocks (15 usable) must hold one max_model_len
        # sequence (vLLM's check); the blocks handed out are the same
        "max_model_len": 60,
        "max_num_reqs": 8,
        "max_num_batched_tokens": 32,
        "num_kv_blocks": 17,  # one max_model_len sequence (16 blocks) plus the null block
        "enable_prefix_caching": False,
        "model": None,
        "device": "cpu",
    }
    return Scenario.from_dict(
        {"name": "notes-s8", "flavor": "vllm", "config": cfg, "requests": reqs, "max_steps": 50}
    )


def test_vllm_v2_side_reproduces_the_notes_worked_example() -> None:
    """vLLM's side alone: vLLM's own V2 code gives the executed table of the notes (section 8)."""
    side = v2.VllmV2Side(_worked_example())
    for step, want in _WORKED.items():
        got = side.step(_SAMPLED[step])
        seen = {"req_ids": got.req_ids, "block_rows": got.block_rows}
        seen.update({k: got.arrays[k].tolist() for k in want if k in got.arrays})
        assert seen == want, f"step {step}"
    # slots M-1, M-2, M-3 for A, B, C; D takes B's freed slot 6 (LIFO); after post_update the GPU
    # num_computed_tokens of slots 5/6/7 is 9/6/7 and the last sampled tokens are C's, D's, A's
    assert got.slots == {"A": 7, "C": 5, "D": 6}
    state = side.state()
    assert state["num_computed_tokens"][5:].tolist() == [9, 6, 7]
    assert state["last_sampled_tokens"][5:].tolist() == [310, 407, 108]


def test_vllm_v2_side_uses_the_v2_scheduler_paths() -> None:
    """A preempted request comes back as a new one carrying all its tokens, and its slot is freed
    in the step that preempts it (the scheduler built for V2, not V1's resumed_req_ids)."""
    cfg = {
        "model_runner": "v2",
        "async_scheduling": False,
        "block_size": 2,
        "max_model_len": 12,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 12,
        "num_kv_blocks": 7,
        "enable_prefix_caching": False,
        "model": None,
        "device": "cpu",
    }
    reqs = [
        {"id": f"r{i}", "prompt_token_ids": [10 + i] * 5, "max_tokens": 6, "arrival_step": 1}
        for i in range(2)
    ]
    side = v2.VllmV2Side(
        Scenario.from_dict(
            {"name": "pre", "flavor": "vllm", "config": cfg, "requests": reqs, "max_steps": 50}
        )
    )
    preempted, resumed = set(), {}
    for _ in range(30):
        if not side.scheduler.get_num_unfinished_requests() and side.step_no:
            break
        got = side.step({r: 7 for r in ("r0", "r1")})
        for r in got.out.preempted_req_ids or ():
            preempted.add(r)
            assert r not in got.slots, "a preempted request keeps no slot"
        for r in got.new_req_ids:
            if r in preempted:
                resumed[r] = got.new_prefill_token_ids[r]
        assert not got.out.scheduled_cached_reqs.resumed_req_ids
    assert preempted, "the scenario was meant to preempt"
    assert resumed and all(len(toks) > 5 for toks in resumed.values()), resumed


def test_pagedviz_v2_reproduces_the_notes_worked_example_as_vllm_does() -> None:
    """Both sides step for step, and pagedviz's arrays are the notes' table (pagedviz samples its
    own tokens, so the decode input ids of steps 2 and 3 are left to the step comparison)."""
    assert run_both(_worked_example()) == 4  # A and C end in step 4
    for t in make_engine(_worked_example()).run():
        want = _WORKED.get(t.step, {})
        for name, values in want.items():
            if name == "req_ids":
                assert t.batch["req_ids"] == values, f"step {t.step}"
            elif name == "block_rows":
                table = t.arrays["input_block_tables"]
                assert [table[i, : len(row)].tolist() for i, row in enumerate(values)] == values
            elif name != "input_ids" or t.step == 1:
                assert t.arrays[name][: len(values)].tolist() == values, f"step {t.step}: {name}"


def _slots_from_the_bottom(monkeypatch: pytest.MonkeyPatch) -> None:
    class FromTheBottom(list):  # type: ignore[type-arg]
        def pop(self, index: int = 0) -> Any:  # V1's rule: the lowest free row first
            return super().pop(index)

    init = ModelRunnerV2.__init__

    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.free_indices = FromTheBottom(self.free_indices)

    monkeypatch.setattr(ModelRunnerV2, "__init__", patched)


def _frees_in_reverse_order(monkeypatch: pytest.MonkeyPatch) -> None:
    update = ModelRunnerV2.update_states

    def patched(self: Any, out: Any) -> Any:
        order = sorted(set(out.finished_req_ids) | set(out.preempted_req_ids), reverse=True)
        self.slot_events = []
        for req_id in order:  # freed before update_states, newest id first: LIFO hands out another slot
            self._free(req_id)
        events = self.slot_events
        result = update(self, out)
        self.slot_events = events + self.slot_events
        return result

    monkeypatch.setattr(ModelRunnerV2, "update_states", patched)


def _ties_in_reverse_scheduler_order(monkeypatch: pytest.MonkeyPatch) -> None:
    stage = ModelRunnerV2._idx_mapping

    @functools.wraps(stage)  # keeps the @stage marker
    def patched(self: Any) -> None:
        v = self.v
        v["scheduled_req_ids"] = v["scheduled_req_ids"][::-1]
        v["scheduler_num_scheduled"] = v["scheduler_num_scheduled"][::-1].copy()
        stage(self)

    monkeypatch.setattr(ModelRunnerV2, "_idx_mapping", patched)


@pytest.mark.parametrize(
    "break_rule",
    [_slots_from_the_bottom, _frees_in_reverse_order, _ties_in_reverse_scheduler_order],
    ids=lambda f: f.__name__,
)
def test_the_comparison_catches_a_broken_v2_rule(break_rule: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other way round: pagedviz's V2 with one rule changed must part from vLLM's. The scenario
    frees two slots in one step and mixes decodes with prefill chunks of several lengths."""
    assert run_both(_broken_rule_scenario()) > 0  # unbroken, both sides agree
    break_rule(monkeypatch)
    with pytest.raises(AssertionError):
        run_both(_broken_rule_scenario())


def _broken_rule_scenario() -> Scenario:
    reqs = [
        {"id": "a", "prompt_token_ids": [11] * 3, "max_tokens": 2, "arrival_step": 1},
        {"id": "b", "prompt_token_ids": [12] * 5, "max_tokens": 2, "arrival_step": 1},
        {"id": "c", "prompt_token_ids": [13] * 7, "max_tokens": 6, "arrival_step": 1},
        {"id": "d", "prompt_token_ids": [14] * 4, "max_tokens": 3, "arrival_step": 3},
        {"id": "e", "prompt_token_ids": [15] * 6, "max_tokens": 2, "arrival_step": 4},
    ]
    cfg = {
        "model_runner": "v2",
        "async_scheduling": False,
        "block_size": 4,
        "max_model_len": 32,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 32,
        "num_kv_blocks": 24,
        "model": None,
        "device": "cpu",
    }
    return Scenario.from_dict(
        {"name": "broken", "flavor": "vllm", "config": cfg, "requests": reqs, "max_steps": 50}
    )
