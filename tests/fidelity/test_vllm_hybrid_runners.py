"""pagedviz's runners per KV cache group against vLLM 0.33.0's own (pytest -m fidelity): on hybrid
configs, the engine with `model: null` and the engine `vllm` (vLLM's Scheduler with its hybrid
manager on, V1's InputBatch with its MultiGroupBlockTable, V2's BlockTables with one table per
group and its Triton kernels under the interpreter) run the same scenario, and every step's
per-group arrays agree: V1's `block_table` / `block_table_g1` and `slot_mapping` /
`slot_mapping_g1`; V2's gathered `input_block_tables` / `input_block_tables_g1` (a sliding group's
entries below the window read as the null block), `num_blocks_g1` and `slot_mapping` /
`slot_mapping_g1`; and the scheduler's block ids per group. Also through preemptions and resumes,
sync and async, with prefix caching on and off."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pagedviz.core import Scenario, make_engine
from tests.support.fidelity_env import needs_triton, require_vllm

require_vllm()

RUNNERS = ["v1", pytest.param("v2", marks=needs_triton())]
GROUP_ARRAYS = {
    "v1": ("block_table", "block_table_g1", "slot_mapping", "slot_mapping_g1"),
    "v2": ("input_block_tables", "input_block_tables_g1", "num_blocks_g1", "slot_mapping", "slot_mapping_g1"),
}


def scenario(runner: str, async_scheduling: bool, layer_types: list[str]) -> dict[str, Any]:
    """A window of 8 tokens, block size 4: b finishes first (V1 condenses a into its row), a's
    prompt outgrows the window, c arrives at step 3 into a pool the windows gave back to."""
    config = {
        "layer_types": layer_types,
        "sliding_window": 8,
        "block_size": 4,
        "num_kv_blocks": 20 * len(layer_types),  # vLLM refuses a pool short of one sequence a group
        "max_model_len": 64,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 64,
        "enable_prefix_caching": True,
        "model_runner": runner,
        "async_scheduling": async_scheduling,
        "model": None,
        "device": "cpu",
    }
    requests = [
        {"id": "b", "prompt_token_ids": list(range(1, 13)), "max_tokens": 2},
        {"id": "a", "prompt_token_ids": list(range(1, 21)), "max_tokens": 8},
        {"id": "c", "prompt_token_ids": list(range(30, 41)), "max_tokens": 6, "arrival_step": 3},
    ]
    return {"name": "hybrid-runners", "flavor": "vllm", "config": config, "requests": requests}


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize(
    "layer_types",
    [["full_attention", "sliding_attention"], ["sliding_attention", "full_attention", "sliding_attention"]],
)
def test_each_groups_block_table_and_slot_mapping_are_vllms(
    runner: str, async_scheduling: bool, layer_types: list[str]
) -> None:
    d = scenario(runner, async_scheduling, layer_types)
    ours = list(make_engine(Scenario.from_dict(d)).run())
    theirs = list(make_engine(Scenario.from_dict({**d, "engine": "vllm"})).run())
    assert len(ours) == len(theirs)
    names = GROUP_ARRAYS[runner]
    if len(layer_types) == 3:  # three groups: sliding, sliding, full
        names = (*names, *(n.replace("_g1", "_g2") for n in names if n.endswith("_g1")))
    drops = 0
    for o, t in zip(ours, theirs):
        assert o.scheduler["block_ids"] == t.scheduler["block_ids"], o.step
        drops += any(0 in ids for groups in t.scheduler["block_ids"].values() for ids in groups)
        if t.idle:
            continue
        taken = set(t.forward["vllm_arrays"])
        assert not t.forward.get("vllm_differences"), (o.step, t.forward["vllm_differences"])
        for name in names:
            assert name in taken, (o.step, name)  # vLLM's own array, in the engine vllm's trace
            assert np.array_equal(o.arrays[name], t.arrays[name]), (o.step, name)
    assert drops  # the windows dropped blocks (vLLM's block ids hold the null block)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("prefix_caching", [False, True])
def test_each_groups_arrays_are_vllms_through_preemptions(
    runner: str, async_scheduling: bool, prefix_caching: bool
) -> None:
    """A pool of 22 blocks for four requests under a window of 8: requests are preempted and
    resumed (V1 re-adds a resumed request's rows from the scheduler's lists, null blocks
    included; V2 gives it a fresh slot), and every group's arrays stay vLLM's."""
    config = {
        "layer_types": ["sliding_attention", "full_attention"],
        "sliding_window": 8,
        "block_size": 4,
        "num_kv_blocks": 22,
        "max_model_len": 40,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 24,
        "enable_prefix_caching": prefix_caching,
        "model_runner": runner,
        "async_scheduling": async_scheduling,
        "model": None,
        "device": "cpu",
    }
    prompts = [[1 + (i * 7 + k) % 50 for k in range(10 + 2 * i)] for i in range(4)]
    requests = [{"id": str(i), "prompt_token_ids": p, "max_tokens": 12} for i, p in enumerate(prompts)]
    d = {"name": "hybrid-preemption", "config": config, "requests": requests, "max_steps": 80}
    ours = list(make_engine(Scenario.from_dict(d)).run())
    theirs = list(make_engine(Scenario.from_dict({**d, "engine": "vllm"})).run())
    assert len(ours) == len(theirs)
    assert sum(len(t.scheduler["preempted_req_ids"]) for t in ours) >= 1
    for o, t in zip(ours, theirs):
        assert o.scheduler["block_ids"] == t.scheduler["block_ids"], o.step
        if t.idle:
            continue
        assert not t.forward.get("vllm_differences"), (o.step, t.forward["vllm_differences"])
        for name in GROUP_ARRAYS[runner]:
            assert np.array_equal(o.arrays[name], t.arrays[name]), (o.step, name)
