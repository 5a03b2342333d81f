"""The V1 group's comparison (tests/fidelity): pagedviz's vllm flavour against vLLM 0.33.0's own
Scheduler / KVCacheManager / BlockPool and its InputBatch / BlockTable with the model runner's
`_update_states` and `_prepare_inputs` on the CPU (pagedviz.core.vllm_engine.v1, the engine
`vllm`'s V1 side), step by step.

Each step compares the scheduled tokens, the new / resumed / preempted / finished requests, the
new block ids, the free queue, the batch rows, every prepare_inputs array, the persistent block
table, the live part of the token table (vLLM leaves stale ids past a request's tokens and in
vacated rows, where pagedviz writes zeros), and which requests sample. The sampled tokens go from
pagedviz to vLLM, so both sides see the same sequences. With async scheduling vLLM's
AsyncScheduler runs under a copy of the engine core's batch-queue loop
(pagedviz.core.vllm_engine.loop): each step also compares whether it scheduled, whose output its
update_from_output consumed and what stayed queued.

Callers check first that vLLM is installed (tests.support.fidelity_env.require_vllm).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.vllm_engine import take
from pagedviz.core.vllm_engine import v1 as vllm_side

ARRAYS = take.V1_ARRAYS  # the arrays of vLLM's `_prepare_inputs` the live engine reads out too


def vllm_new_blocks(out: Any) -> dict[str, Any]:
    """vLLM's new block ids as pagedviz's trace keeps them: a flat list per request with one KV
    cache group, one list per group (vLLM's tuple) with several (the hybrid group's scenarios)."""
    blocks = {r.req_id: [list(g) for g in r.block_ids] for r in out.scheduled_new_reqs}
    cached = out.scheduled_cached_reqs
    for rid, ids in zip(cached.req_ids, cached.new_block_ids):
        if ids is not None:
            blocks[rid] = [list(g) for g in ids]
    return {rid: b[0] if len(b) == 1 else b for rid, b in blocks.items() if any(b)}


def compare_step(t: Any, out: Any, got: dict[str, Any]) -> None:
    """Assert that pagedviz's step trace `t` says what vLLM's scheduler (`out`) and V1 runner
    (`got`) did."""
    where = f"step {t.step}"
    s = t.scheduler
    assert list(out.num_scheduled_tokens.items()) == list(s["num_scheduled_tokens"].items()), where
    assert [r.req_id for r in out.scheduled_new_reqs] == s["new_req_ids"], where
    assert sorted(out.scheduled_cached_reqs.resumed_req_ids) == sorted(s["resumed_req_ids"]), where
    assert sorted(out.preempted_req_ids) == sorted(s["preempted_req_ids"]), where
    assert sorted(out.finished_req_ids) == sorted(s["finished_req_ids"]), where
    assert vllm_new_blocks(out) == s["new_block_ids"], where
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
        compare_step(t, out, got)
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
            compare_step(t, loop.scheduler_output, got)
        steps += 1
    assert not engine.truncated and not side.has_work, "the runs did not end together"
    assert side.scheduler.get_num_unfinished_requests() == 0, "vLLM has unfinished requests"
    return steps


def as_vllm(d: dict[str, Any], async_scheduling: bool | None = None) -> Scenario:
    """The preset on the vllm flavour with the V1 runner; synchronous unless it asks otherwise
    (ascend presets keep the ascend defaults) or `async_scheduling` says."""
    config = {"model_runner": "v1", "async_scheduling": False, **d["config"], "model": None, "device": "cpu"}
    if async_scheduling is not None:
        config["async_scheduling"] = async_scheduling
    if config.get("speculative_method") == "mtp":  # an ascend-only label of the same n-gram drafts
        config["speculative_method"] = "ngram"
    d = {**d, "flavor": "vllm", "config": config}
    return Scenario.from_dict(d)


def _compared_on_v1(preset: str) -> bool:
    """A vllm or ascend preset on the V1 runner, without drafts: the V1 side builds vLLM without a
    drafter (no SpeculativeConfig), so drafts cannot be compared here (tests/fidelity's
    test_record_spec.py compares V1's drafts through the recorder, and the V2 group V2's)."""
    d = preset_dict(preset)
    return Scenario.from_dict(d).config.model_runner == "v1" and not d["config"].get("num_speculative_tokens")


V1_PRESETS = [
    p["id"] for p in list_presets() if p["flavor"] in ("vllm", "ascend") and _compared_on_v1(p["id"])
]
# async scheduling is not modelled together with speculative decoding (config.py refuses it)
V1_ASYNC_PRESETS = V1_PRESETS
