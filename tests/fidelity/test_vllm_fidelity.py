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

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import list_presets, preset_dict

vllm_side = pytest.importorskip(
    "pagedviz.core.vllm_engine.v1",
    reason="the vLLM 0.33.0 wheel is not installed (run scripts/fidelity-deps.sh)",
)
from pagedviz.core.vllm_engine import take  # noqa: E402

pytestmark = pytest.mark.fidelity

ARRAYS = take.V1_ARRAYS  # the arrays of vLLM's `_prepare_inputs` the live engine reads out too


def _vllm_new_blocks(out: Any) -> dict[str, Any]:
    """vLLM's new block ids as pagedviz's trace keeps them: a flat list per request with one KV
    cache group, one list per group (vLLM's tuple) with several (the hybrid group's scenarios)."""
    blocks = {r.req_id: [list(g) for g in r.block_ids] for r in out.scheduled_new_reqs}
    cached = out.scheduled_cached_reqs
    for rid, ids in zip(cached.req_ids, cached.new_block_ids):
        if ids is not None:
            blocks[rid] = [list(g) for g in ids]
    return {rid: b[0] if len(b) == 1 else b for rid, b in blocks.items() if any(b)}


def _compare_step(t: Any, out: Any, got: dict[str, Any]) -> None:
    where = f"step {t.step}"
    s = t.scheduler
    assert list(out.num_scheduled_tokens.items()) == list(s["num_scheduled_tokens"].items()), where
    assert [r.req_id for r in out.scheduled_new_reqs] == s["new_req_ids"], where
    assert sorted(out.scheduled_cached_reqs.resumed_req_ids) == sorted(s["resumed_req_ids"]), where
    assert sorted(out.preempted_req_ids) == sorted(s["preempted_req_ids"]), where
    assert sorted(out.finished_req_ids) == sorted(s["finished_req_ids"]), where
    assert _vllm_new_blocks(out) == s["new_block_ids"], where
    assert got["free_block_queue"] == t.kv_cache["free_block_queue"], where
    a = got["arrays"]
    rows = list(a["req_ids"])
    assert rows == t.batch["req_ids"], where
    for name in ARRAYS:
        if name in a:
            ours = t.arrays[name]
            if name == "input_ids" and "input_ids_device" in t.arrays:
                # async scheduling: the CPU ids of decodes are placeholders; vLLM's side runs
                # synchronously, so compare what the model reads (filled on the device)
                ours = t.arrays["input_ids_device"].copy()
                flat = t.arrays["sample_flattened_indices"]
                rows_of = np.searchsorted(t.arrays["query_start_loc"], flat, side="right") - 1
                chunk = flat[t.arrays["num_scheduled_tokens"][rows_of] > 1]
                # A request preempted after it sampled, across a step that ran no forward, keeps
                # its entry in prev_req_id_to_index: at its first recompute chunk vLLM's
                # _prepare_input_ids scatters that stale sample into the chunk's last position, on
                # the device, which the synchronous side cannot show (it runs no scatter). pagedviz
                # models the scatter; there the side's CPU ids are the only check left.
                ours[chunk] = a[name][chunk]
            valid = t.array_entries[name].valid
            if name == "slot_mapping" and valid is not None:
                # the -1 tail of CUDA-graph padding comes after _prepare_inputs in vLLM (the forward
                # pads to a capture size); compare the scheduled tokens' slots
                ours = ours[:valid]
            assert a[name].tolist() == ours.tolist(), f"{where}: {name}"
    # vLLM's table is wider (get_block_table_width aligns it to 128 tokens); the rest is equal
    K = t.arrays["block_table"].shape[1]
    assert a["block_table"][:, :K].tolist() == t.arrays["block_table"].tolist(), f"{where}: block_table"
    for row in range(len(rows)):
        k = int(t.arrays["num_tokens"][row]) if "num_tokens" in t.arrays else 0
        assert a["token_ids_cpu"][row, :k].tolist() == t.arrays["token_ids_cpu"][row, :k].tolist(), where
    assert got["sampled"] == t.sampled_token_ids, f"{where}: requests that sample"


def run_both(scenario: Scenario) -> int:
    """Step both sides to the end, comparing every step; the number of steps."""
    if scenario.config.async_scheduling:
        return run_both_async(scenario)
    side = vllm_side.VllmSide(scenario)
    steps = 0
    for t in make_engine(scenario).run():
        out, got = side.step(t.sampled_token_ids)
        _compare_step(t, out, got)
        steps += 1
    assert side.scheduler.get_num_unfinished_requests() == 0, "vLLM has unfinished requests"
    return steps


def run_both_async(scenario: Scenario) -> int:
    """Both sides under the engine core's batch queue: per step, the loop's decisions, then (for a
    scheduled batch) everything run_both compares. Both runs end together."""
    side = vllm_side.VllmSide(scenario)
    engine = make_engine(scenario)
    steps = 0
    for t in engine.run():
        loop, got = side.async_step(t.sampled_token_ids)
        where = f"step {t.step}"
        ec = t.engine_core
        assert ec is not None, where
        assert ec["scheduled"] == (loop.scheduler_output is not None), where
        assert ec["consumed_step"] == loop.consumed_step, where
        assert ec["batch_queue"] == loop.batch_queue, where
        if loop.scheduler_output is not None:
            _compare_step(t, loop.scheduler_output, got)
        steps += 1
    assert not engine.truncated and not side.has_work, "the runs did not end together"
    assert side.scheduler.get_num_unfinished_requests() == 0, "vLLM has unfinished requests"
    return steps


def _as_vllm(d: dict[str, Any], async_scheduling: bool | None = None) -> Scenario:
    """The preset on the vllm flavour with the V1 runner; synchronous unless it asks otherwise
    (ascend presets keep the ascend defaults) or `async_scheduling` says."""
    config = {"model_runner": "v1", "async_scheduling": False, **d["config"], "model": None, "device": "cpu"}
    if async_scheduling is not None:
        config["async_scheduling"] = async_scheduling
    if config.get("speculative_method") == "mtp":  # an ascend-only label of the same n-gram drafts
        config["speculative_method"] = "ngram"
    d = {**d, "flavor": "vllm", "config": config}
    return Scenario.from_dict(d)


def _runs_v1(preset: str) -> bool:
    return Scenario.from_dict(preset_dict(preset)).config.model_runner == "v1"


V1_PRESETS = [
    p["id"]
    if not preset_dict(p["id"])["config"].get("num_speculative_tokens")
    else pytest.param(
        # the V1 side builds vLLM without a drafter (no SpeculativeConfig): drafts cannot be compared
        p["id"],
        marks=pytest.mark.skip(reason="the vLLM side runs no drafter"),
    )
    for p in list_presets()
    if p["flavor"] in ("vllm", "ascend") and _runs_v1(p["id"])
]
# async scheduling is not modelled together with speculative decoding (config.py refuses it)
V1_ASYNC_PRESETS = [p for p in V1_PRESETS if isinstance(p, str)]


@pytest.mark.parametrize("preset", V1_PRESETS)
def test_every_v1_vllm_and_ascend_preset_matches_vllm(preset: str) -> None:
    assert run_both(_as_vllm(preset_dict(preset))) > 0


@pytest.mark.parametrize("preset", V1_ASYNC_PRESETS)
def test_every_v1_preset_matches_vllm_with_async_scheduling(preset: str) -> None:
    assert run_both_async(_as_vllm(preset_dict(preset), async_scheduling=True)) > 0


@st.composite
def scenarios(draw: st.DrawFn, async_scheduling: bool = False) -> Scenario:
    bs = draw(st.integers(1, 4))
    M = draw(st.integers(6, 24))
    prefix = draw(st.booleans())
    chunked = draw(st.booleans())
    max_num_reqs = draw(st.integers(1, 5))
    shared = draw(st.lists(st.integers(3, 40), max_size=M // 2))
    reqs, need, longest = [], 1, 1
    for i in range(draw(st.integers(1, 6))):
        max_tokens = draw(st.integers(1, 5))
        plen = draw(st.integers(1, M - max_tokens))
        tail = draw(st.lists(st.integers(3, 40), min_size=plen, max_size=plen))
        ids = (shared + tail)[:plen] if prefix else tail
        reqs.append(
            {
                "id": f"r{i}",
                "prompt_token_ids": ids,
                "max_tokens": max_tokens,
                "arrival_step": draw(st.integers(1, 4)),
            }
        )
        longest = max(longest, plen + max_tokens)
    # the pool must hold one request of max_model_len (vLLM's KV-cache check, pagedviz's too):
    # max_model_len no longer than needed keeps the pool tight
    M = draw(st.integers(longest, M))
    need = -(-M // bs)
    threshold = draw(st.sampled_from([0, 0, 2, 5]))
    low = max_num_reqs if chunked else max(M, max_num_reqs)
    cfg = {
        "block_size": bs,
        "max_model_len": M,
        "max_num_reqs": max_num_reqs,
        "max_num_batched_tokens": draw(st.integers(low, low + 24)),
        # tight pools: just enough for one max_model_len sequence (vLLM refuses less), so
        # preemption is common
        "num_kv_blocks": max(need, -(-M // bs)) + 1 + draw(st.integers(0, 6)),
        "long_prefill_token_threshold": threshold if threshold <= M else 0,
        "enable_chunked_prefill": chunked,
        "enable_prefix_caching": prefix,
        "scheduler_reserve_full_isl": draw(st.booleans()),
        "watermark": draw(st.sampled_from([0.0, 0.0, 0.1, 0.3])),
        "model": None,
        "device": "cpu",
        "model_runner": "v1",
        "async_scheduling": async_scheduling,
    }
    return Scenario.from_dict(
        {"name": "fid", "flavor": "vllm", "config": cfg, "requests": reqs, "max_steps": 2000}
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_scenarios_match_vllm_step_for_step(scenario: Scenario) -> None:
    run_both(scenario)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(async_scheduling=True))
def test_random_scenarios_match_vllm_step_for_step_with_async_scheduling(scenario: Scenario) -> None:
    run_both_async(scenario)


def test_the_comparison_catches_a_difference() -> None:
    """The other way round: with the older free-queue order pagedviz must part from 0.33."""
    d = preset_dict("demo-preemption")
    d["config"]["free_queue_order"] = "fifo"
    with pytest.raises(AssertionError):
        run_both(_as_vllm(d))


def test_the_async_comparison_catches_a_scheduler_without_placeholders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's synchronous Scheduler under the same loop schedules no decode while a step is in
    flight: the async comparison must part from it."""
    monkeypatch.setattr(vllm_side, "AsyncScheduler", vllm_side.Scheduler)
    with pytest.raises(AssertionError):
        run_both_async(_as_vllm(preset_dict("demo-async-scheduling")))


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
