"""The fidelity suite's hybrid group (issue 38): KV cache groups, sliding windows beside full
attention, through vLLM 0.33.0's own code with its hybrid KV cache manager on (pytest -m fidelity).

vLLM's side (pagedviz.core.vllm_engine: v1.py, v2.py, groups.py) plans the groups with vLLM's own
`get_global_kv_cache_groups` / `get_kv_cache_configs` from the scenario's `layer_types`, runs
vLLM's `Scheduler` (a `HybridKVCacheCoordinator` over one `SingleTypeKVCacheManager` per group),
V1's `InputBatch` with its `MultiGroupBlockTable` and V2's `BlockTables` with one table per group.
These tests pin what vLLM does on hybrid configs (the plan, the pool check, the issue's example,
each group's block table and slot_mapping), the engine `vllm` that shows it, and pagedviz's own
engine against vLLM step by step: V1 and V2, synchronous and under the engine core's batch queue,
on hypothesis scenarios over layer patterns and windows (a few examples each, derandomized), on
the issue's example and on every hybrid preset. Each step compares every group's block ids, the
scheduled tokens, preemptions, the free queue, and every group's block table and slot_mapping.

Breaking one rule of pagedviz's hybrid manager makes them fail (checked by hand: freeing
out-of-window blocks a token late, a window one token longer, or the dropped blocks freed head
first instead of tail first).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.scenario_parts import ScenarioError
from tests.support.fidelity_env import needs_triton, require_vllm
from tests.support.strategies import V1_FIDELITY, V2_FIDELITY, scenarios

require_vllm()
from pagedviz.core.vllm_engine import groups  # noqa: E402
from pagedviz.core.vllm_engine import v1 as vllm_side  # noqa: E402
from pagedviz.core.vllm_engine.take import group_name  # noqa: E402
from tests.support import vllm_v1  # noqa: E402
from tests.support.vllm_live import assert_same_trace, both  # noqa: E402

FULL, SLIDING = "full_attention", "sliding_attention"
RUNNERS = ["v1", pytest.param("v2", marks=needs_triton())]


def issue_example(runner: str = "v1", prefix_caching: bool = True, **config: Any) -> Scenario:
    """The issue's example: layer 0 full attention, layer 1 a sliding window of 8 tokens; block
    size 4, 40 blocks, max_model_len 64, 4 sequences, a budget of 64 tokens, chunked prefill;
    request a (prompt ids 1..20, 8 tokens) and b (prompt ids 1..12, 4 tokens) at step 1."""
    cfg = {
        "layer_types": [FULL, SLIDING],
        "sliding_window": 8,
        "block_size": 4,
        "num_kv_blocks": 40,
        "max_model_len": 64,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 64,
        "enable_chunked_prefill": True,
        "enable_prefix_caching": prefix_caching,
        "model_runner": runner,
        "async_scheduling": False,
        "model": None,
        "device": "cpu",
        **config,
    }
    requests = [
        {"id": "a", "prompt_token_ids": list(range(1, 21)), "max_tokens": 8},
        {"id": "b", "prompt_token_ids": list(range(1, 13)), "max_tokens": 4},
    ]
    return Scenario.from_dict({"name": "issue-38", "flavor": "vllm", "config": cfg, "requests": requests})


def vllm_sides(scenario: Scenario) -> Any:
    if scenario.config.model_runner == "v2":
        from pagedviz.core.vllm_engine import v2

        return v2.VllmV2Side(scenario)
    return vllm_side.VllmSide(scenario)


def step_side(side: Any, sampled: dict[str, int]) -> Any:
    """One synchronous step of either side (pagedviz's tokens in), returning what the runner got."""
    if isinstance(side, vllm_side.VllmSide):
        return side.step(sampled)[1]
    return side.step(sampled)


def block_ids_after(scenario: Scenario, steps: int) -> list[dict[str, tuple[list[int], ...]]]:
    """vLLM's `KVCacheManager.get_block_ids` of every live request after each of `steps` steps."""
    side = vllm_sides(scenario)
    km = side.scheduler.kv_cache_manager
    seen = []
    for _ in range(steps):
        step_side(side, {"a": 7, "b": 7})
        seen.append({r: km.get_block_ids(r) for r in ("a", "b") if r in side.scheduler.requests})
    return seen


# -- the plan ---------------------------------------------------------------------------------


def _scenario_with(layer_types: list[str] | None, window: int | None, **config: Any) -> Scenario:
    cfg: dict[str, Any] = {
        "layer_types": layer_types,
        "sliding_window": window,
        "block_size": 4,
        "num_kv_blocks": 400,
        "max_model_len": 64,
        "max_num_batched_tokens": 64,
        "model": None,
        **config,
    }
    return Scenario.from_dict(
        {"name": "plan", "flavor": "vllm", "config": cfg, "requests": [{"id": "r", "prompt_len": 4}]}
    )


def vllm_plan(scenario: Scenario) -> list[dict[str, Any]]:
    kv = vllm_side.kv_cache_config(scenario)
    return groups.describe(kv)


def pagedviz_plan(scenario: Scenario) -> list[dict[str, Any]]:
    return [g.to_dict() for g in scenario.config.kv_cache_groups]


def test_vllm_plans_the_issue_example_full_group_first() -> None:
    """vLLM's groups follow the order in which each kind first appears: layer 0 (full) first."""
    assert vllm_plan(issue_example()) == [
        {"kind": FULL, "layers": [0], "sliding_window": None},
        {"kind": SLIDING, "layers": [1], "sliding_window": 8},
    ]
    swapped = issue_example(layer_types=[SLIDING, FULL])
    assert [g["kind"] for g in vllm_plan(swapped)] == [SLIDING, FULL]


@pytest.mark.parametrize(
    "layer_types",
    [
        None,
        [FULL, FULL],
        [SLIDING, SLIDING],
        [SLIDING, FULL],
        [SLIDING] * 5 + [FULL],  # Gemma 3: five local layers per global one
        [FULL, SLIDING, SLIDING, SLIDING, SLIDING, SLIDING, FULL],  # groups of 2 with padding
        [SLIDING, FULL, SLIDING, FULL],  # gpt-oss: alternating
        [FULL, SLIDING, SLIDING],  # 1:2: one group per sliding layer (2 is not within 1.5x of 1)
    ],
)
def test_vllm_plans_the_groups_pagedviz_plans(layer_types: list[str] | None) -> None:
    """core/kv_groups.py's plan is vLLM's (`get_global_kv_cache_groups` with the hybrid manager on):
    the same kinds, layers and windows, in the same order."""
    scenario = _scenario_with(layer_types, 8 if layer_types and SLIDING in layer_types else None)
    assert pagedviz_plan(scenario) == vllm_plan(scenario)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from([FULL, SLIDING]), min_size=1, max_size=8),
    st.integers(1, 40),
    st.integers(1, 8),
)
def test_vllm_plans_every_layer_pattern_as_pagedviz_does(
    layer_types: list[str], window: int, bs: int
) -> None:
    scenario = _scenario_with(layer_types, window if SLIDING in layer_types else None, block_size=bs)
    assert pagedviz_plan(scenario) == vllm_plan(scenario)


def test_vllm_refuses_a_pool_that_cannot_hold_one_sequence_across_the_groups() -> None:
    """vLLM's own check, with its message: the full group needs max_model_len / block_size blocks,
    the sliding group what one step can touch (the window plus a budget's chunk, in blocks), and
    one block is the null block. For the issue's example: 16 + 17 + 1 = 34."""
    assert groups.describe(vllm_side.kv_cache_config(issue_example(num_kv_blocks=34)))
    refusal = r"To serve at least one request with the model's max seq len \(64\)"
    with pytest.raises(ValueError, match=refusal):
        vllm_side.kv_cache_config(issue_example(num_kv_blocks=33))


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([[FULL, SLIDING], [SLIDING, FULL], [SLIDING, SLIDING, FULL], [SLIDING, SLIDING]]),
    st.integers(1, 40),
    st.integers(1, 8),
    st.integers(4, 64),
    st.integers(8, 80),
    st.booleans(),
    st.booleans(),
)
def test_pagedviz_refuses_exactly_the_pools_vllm_refuses(
    layer_types: list[str], window: int, bs: int, M: int, budget: int, chunked: bool, async_scheduling: bool
) -> None:
    """The smallest pool vLLM's planner accepts for the groups (its `_check_enough_kv_cache_memory`)
    is the smallest pagedviz accepts; one block less, pagedviz names config.num_kv_blocks."""
    cfg = {
        "layer_types": layer_types,
        "sliding_window": window,
        "block_size": bs,
        "max_model_len": M,
        "max_num_reqs": 8,
        "max_num_batched_tokens": budget if chunked else max(budget, M),
        "enable_chunked_prefill": chunked,
        "async_scheduling": async_scheduling,
        "num_kv_blocks": 10_000,
        "model": None,
    }
    request = {"id": "r", "prompt_len": 1, "max_tokens": 1}
    d = {"name": "pool", "flavor": "vllm", "config": cfg, "requests": [request]}
    need = vllm_min_blocks(Scenario.from_dict(d))
    cfg["num_kv_blocks"] = need
    assert Scenario.from_dict(d).config.num_kv_blocks == need
    cfg["num_kv_blocks"] = need - 1
    with pytest.raises(ScenarioError) as refused:
        Scenario.from_dict(d)
    assert "config.num_kv_blocks" in [loc for loc, _ in refused.value.errors]


# -- the issue's example through vLLM's scheduler ------------------------------------------------


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_issues_example_through_vllms_scheduler(runner: str) -> None:
    """The issue's numbers are what vLLM 0.33.0's scheduler gives with prefix caching off: the
    window drops a's first three sliding blocks at step 2 (freed tail first, put at the head of
    the free queue: 8, 7, 6), a's full group takes 8 and its sliding group 7; b drops 14, its full
    group takes 14 and its sliding group 6."""
    one, two = block_ids_after(issue_example(runner, prefix_caching=False), 2)
    assert one == {"a": ([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]), "b": ([11, 12, 13], [14, 15, 16])}
    assert two == {
        "a": ([1, 2, 3, 4, 5, 8], [0, 0, 0, 9, 10, 7]),
        "b": ([11, 12, 13, 14], [0, 15, 16, 6]),
    }


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_issues_example_with_prefix_caching_on_keeps_cached_sliding_blocks_last(runner: str) -> None:
    """With prefix caching on (as the issue states its setup) vLLM 0.33.0 gives other numbers: a
    sliding group caches (hashes) only the blocks a later hit could use, the `need` blocks before
    each aligned boundary (`SlidingWindowManager.reachable_block_mask`): a's dropped 8 and b's
    dropped 14 hold a hash and go to the tail of the free queue (`BlockPool.free_blocks`: cached
    blocks are evicted last), a's 7 and 6 hold none and go to its head."""
    one, two = block_ids_after(issue_example(runner, prefix_caching=True), 2)
    assert one == {"a": ([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]), "b": ([11, 12, 13], [14, 15, 16])}
    assert two == {
        "a": ([1, 2, 3, 4, 5, 7], [0, 0, 0, 9, 10, 6]),
        "b": ([11, 12, 13, 17], [0, 15, 16, 18]),
    }


def test_v1_keeps_one_block_table_and_one_slot_mapping_per_group() -> None:
    """V1's MultiGroupBlockTable: one BlockTable per group, each row appended with the new block
    ids the scheduler sends for that group. The window's drop never reaches it: the scheduler sends
    only new blocks, so the sliding row keeps the dropped ids (a's 6, 7, 8) where get_block_ids
    has the null block, and 7 twice once a's sliding group takes it back. The attention kernel
    never reads below the window. Each group's slot_mapping is vLLM's own slot-mapping kernel's,
    over that group's table."""
    side = vllm_side.VllmSide(issue_example("v1", prefix_caching=False))
    km = side.scheduler.kv_cache_manager
    side.step({"a": 7, "b": 7})
    out, got = side.step({"a": 7, "b": 7})
    a = got["arrays"]
    assert list(a["req_ids"]) == ["a", "b"]
    assert a["block_table"][:2, :6].tolist() == [[1, 2, 3, 4, 5, 8], [11, 12, 13, 14, 0, 0]]
    assert a["block_table_g1"][:2, :6].tolist() == [[6, 7, 8, 9, 10, 7], [14, 15, 16, 6, 0, 0]]
    assert km.get_block_ids("a")[1] == [0, 0, 0, 9, 10, 7]
    # one decode token each, at positions 20 (a) and 12 (b): block 5 (a) and 3 (b) of each table
    assert a["positions"].tolist() == [20, 12]
    assert a["slot_mapping"].tolist() == [8 * 4 + 0, 14 * 4 + 0]
    assert a["slot_mapping_g1"].tolist() == [7 * 4 + 0, 6 * 4 + 0]


@needs_triton()
def test_v2_gathers_one_block_table_and_one_slot_mapping_per_group() -> None:
    """V2's BlockTables with one table per group: the gathered rows (batch order) and each
    group's slot_mapping from V2's own kernels."""
    from pagedviz.core.vllm_engine import v2

    side = v2.VllmV2Side(issue_example("v2", prefix_caching=False))
    side.step({"a": 7, "b": 7})
    got = side.step({"a": 7, "b": 7})
    km = side.scheduler.kv_cache_manager
    assert len(got.group_block_rows) == 2
    for g in range(2):
        assert got.group_block_rows[g] == [km.get_block_ids(r)[g] for r in got.req_ids], g
    pos = dict(zip(got.req_ids, got.arrays["positions"].tolist()))
    assert pos == {"a": 20, "b": 12}
    slots = dict(zip(got.req_ids, got.arrays["slot_mapping"].tolist()))
    slots_g1 = dict(zip(got.req_ids, got.arrays["slot_mapping_g1"].tolist()))
    assert slots == {"a": 8 * 4, "b": 14 * 4}
    assert slots_g1 == {"a": 7 * 4, "b": 6 * 4}


# -- the engine `vllm` on a hybrid config ----------------------------------------------------------


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_live_engine_shows_vllms_block_ids_per_group(runner: str, async_scheduling: bool) -> None:
    """The engine `vllm` runs the hybrid config: every step's `scheduler.block_ids` is vLLM's
    `get_block_ids`, the KV view names vLLM's groups, and vLLM's arrays of group 1 reach the trace
    under `_g1` names. Under async scheduling the drop comes a step later (vLLM frees on the
    processed tokens: step 1's are still in flight when step 2 schedules)."""
    d = issue_example(runner, prefix_caching=False, async_scheduling=async_scheduling).to_dict()
    scenario = Scenario.from_dict({**d, "engine": "vllm"})
    traces = list(make_engine(scenario).run())
    by_step = {t.step: t for t in traces}
    assert by_step[1].scheduler["block_ids"] == {
        "a": [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]],
        "b": [[11, 12, 13], [14, 15, 16]],
    }
    dropped = by_step[3 if async_scheduling else 2].scheduler["block_ids"]
    assert dropped["a"][1][:3] == [0, 0, 0] and dropped["b"][1][0] == 0
    if not async_scheduling:
        assert dropped == {
            "a": [[1, 2, 3, 4, 5, 8], [0, 0, 0, 9, 10, 7]],
            "b": [[11, 12, 13, 14], [0, 15, 16, 6]],
        }
        assert by_step[2].scheduler["new_block_ids"] == {"a": [[8], [7]], "b": [[14], [6]]}
    kv = by_step[2].kv_cache
    assert kv["kv_cache_groups"] == [
        {"kind": FULL, "layers": [0], "sliding_window": None},
        {"kind": SLIDING, "layers": [1], "sliding_window": 8},
    ]
    taken = by_step[2].forward["vllm_arrays"]
    differences = by_step[2].forward.get("vllm_differences", {})
    for name in ("slot_mapping_g1", "block_table_g1" if runner == "v1" else "input_block_tables_g1"):
        assert name in taken or name in differences, name


# -- pagedviz against vLLM, step by step ----------------------------------------------------------
#
# Each step compares, besides everything the V1 and V2 groups compare (scheduled tokens, new /
# resumed / preempted / finished requests, new block ids per group, the free queue, the batch and
# group 0's arrays): every scheduled request's blocks per group (`scheduler.block_ids` against
# `get_block_ids` right after schedule()), and every further group's block table and slot_mapping
# (V1: the MultiGroupBlockTable's rows and vLLM's kernel's slot_mapping; V2: the per-slot tables,
# the gathered tables and the slot mappings of V2's kernels, padded as vLLM pads them).


def _num_groups(t: Any) -> int:
    return len(t.kv_cache.get("kv_cache_groups") or [None])


def _compare_groups_v1(t: Any, got: dict[str, Any]) -> None:
    where = f"step {t.step}"
    assert got["block_ids"] == t.scheduler["block_ids"], f"{where}: block_ids per group"
    a, ours = got["arrays"], t.arrays
    for g in range(1, _num_groups(t)):
        table = group_name("block_table", g)
        assert table in ours, f"{where}: pagedviz's trace has no {table}"
        K = ours[table].shape[1]  # vLLM's rows are wider (aligned to 128 tokens)
        assert a[table][:, :K].tolist() == ours[table].tolist(), f"{where}: {table}"
        slots = group_name("slot_mapping", g)
        if slots in a:
            valid = t.array_entries[slots].valid
            theirs, mine = a[slots].tolist(), ours[slots].tolist()
            assert theirs == (mine[:valid] if valid is not None else mine), f"{where}: {slots}"


def _compare_groups_v2(t: Any, got: Any) -> None:
    where = f"step {t.step}"
    assert got.block_ids == t.scheduler["block_ids"], f"{where}: block_ids per group"
    ours, state = t.arrays, got.slot_state
    for g in range(1, _num_groups(t)):
        num_blocks, tables = group_name("num_blocks", g), group_name("block_tables", g)
        for rid, j in got.slots.items():
            n = int(state[num_blocks][j])
            assert n == int(ours[num_blocks][j]), f"{where}: {num_blocks}[{j}] ({rid})"
            assert state[tables][j, :n].tolist() == ours[tables][j, :n].tolist(), f"{where}: {tables} ({rid})"
        if not got.req_ids:
            continue
        slots = group_name("slot_mapping", g)
        T_pad = got.padded["num_tokens_after_padding"]
        assert got.padded[slots].tolist() == ours[slots][:T_pad].tolist(), f"{where}: {slots}"
        gathered = ours[group_name("input_block_tables", g)]
        for i, row in enumerate(got.group_block_rows[g]):
            assert row == gathered[i, : len(row)].tolist(), f"{where}: input_block_tables_g{g} row {i}"


def _compare_plan(scenario: Scenario, kv: Any) -> None:
    assert groups.describe(kv) == pagedviz_plan(scenario), "the KV cache groups"


def run_hybrid(scenario: Scenario) -> int:
    """Both sides to the end, comparing every step; the number of steps. V1 or V2, synchronous or
    under the engine core's batch queue, as the scenario says."""
    cfg = scenario.config
    v2_runner = cfg.model_runner == "v2"
    if v2_runner:  # (imported here: only the V2 runner's scenarios need Triton)
        from pagedviz.core.vllm_engine.v2 import VllmV2Side
        from tests.support import vllm_v2
    side = VllmV2Side(scenario) if v2_runner else vllm_side.VllmSide(scenario)
    _compare_plan(scenario, side.kv_cache_config)
    engine = make_engine(scenario)
    steps = 0
    for t in engine.run():
        where = f"step {t.step}"
        if v2_runner:
            before = dict(side.runner.req_states.req_id_to_index)
            targets = vllm_v2.targets(t)
            if cfg.async_scheduling:
                loop, got = side.async_step(t.sampled_token_ids, targets)
            else:
                loop, got = None, side.step(t.sampled_token_ids, targets)
            out = got.out if got is not None else None
        elif cfg.async_scheduling:
            loop, got = side.async_step(t.sampled_token_ids)
            out = loop.scheduler_output
        else:
            out, got = side.step(t.sampled_token_ids)
            loop = None
        if loop is not None:
            ec = t.engine_core
            assert ec is not None, where
            assert ec["scheduled"] == (loop.scheduler_output is not None), f"{where}: scheduled"
            assert ec["consumed_step"] == loop.consumed_step, f"{where}: consumed_step"
            assert ec["batch_queue"] == loop.batch_queue, f"{where}: batch_queue"
        if out is None:
            steps += 1
            continue
        if v2_runner:
            vllm_v2.compare_step(t, got, before)
            _compare_groups_v2(t, got)
        else:
            vllm_v1.compare_step(t, out, got)
            _compare_groups_v1(t, got)
        steps += 1
    if engine.truncated:
        # both sides agreed at every step up to max_steps: vLLM must still be at it too (a
        # request that preempts itself forever, as vLLM 0.33 can with async scheduling and a
        # pool just big enough, is vLLM's own behaviour)
        assert side.scheduler.get_num_unfinished_requests() > 0, "pagedviz's run was cut short"
        return steps
    if cfg.async_scheduling:
        assert not side.has_work, "the runs did not end together"
    assert side.scheduler.get_num_unfinished_requests() == 0, "vLLM has unfinished requests"
    return steps


def vllm_min_blocks(scenario: Scenario) -> int:
    """The smallest pool vLLM's planner accepts for the scenario's groups (its own check)."""
    lo, hi = 2, len(scenario.config.kv_cache_groups) * (scenario.config.max_num_blocks_per_req + 2) + 1
    while lo < hi:
        n = (lo + hi) // 2
        try:
            vllm_side.kv_cache_config(
                dataclasses.replace(scenario, config=dataclasses.replace(scenario.config, num_kv_blocks=n))
            )
            hi = n
        except ValueError:
            lo = n + 1
    return lo


PATTERNS = [
    [FULL, SLIDING],
    [SLIDING, FULL],
    [SLIDING, SLIDING, FULL],
    [FULL, SLIDING, SLIDING, SLIDING],
    [SLIDING, FULL, SLIDING, FULL],
    [SLIDING, SLIDING],
]


@st.composite
def hybrid_scenarios(draw: st.DrawFn, runner: str = "v1", async_scheduling: bool = False) -> Scenario:
    """The V1 or V2 group's scenarios (small pools, chunked prefill, prefix caching on and off,
    arrivals over four steps, watermarks, CUDA-graph sizes on V2) with a layer pattern and a window
    (from 1 token to half max_model_len), over the tightest pool vLLM accepts for the groups plus up to
    three blocks: windows drop blocks and preemption is common."""
    family = V1_FIDELITY if runner == "v1" else V2_FIDELITY
    base = scenarios(family, async_scheduling=async_scheduling)
    d = draw(base).to_dict()
    M = d["config"]["max_model_len"]
    d["max_steps"] = 120  # (a run that never ends ends here, on both sides: run_hybrid)
    d["config"].update(
        layer_types=draw(st.sampled_from(PATTERNS)),
        sliding_window=draw(st.integers(1, max(2, M // 2))),
        num_kv_blocks=10_000,
    )
    d["config"]["num_kv_blocks"] = vllm_min_blocks(Scenario.from_dict(d)) + draw(st.integers(0, 3))
    for _ in range(64):  # pagedviz's own check may ask for more (a single sliding group asks less)
        try:
            return Scenario.from_dict(d)
        except ScenarioError:
            d["config"]["num_kv_blocks"] += 1
    return Scenario.from_dict(d)


# a few examples each, derandomized (the whole CI stays under 20 minutes on 2 cores): V2 runs its
# kernels under Triton's interpreter, about five times V1's cost a step
HYBRID = settings(
    max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
HYBRID_V2 = settings(HYBRID, max_examples=5)


@HYBRID
@given(hybrid_scenarios("v1"))
def test_hybrid_scenarios_match_vllm_v1_step_for_step(scenario: Scenario) -> None:
    run_hybrid(scenario)


@HYBRID
@given(hybrid_scenarios("v1", async_scheduling=True))
def test_hybrid_scenarios_match_vllm_v1_with_async_scheduling(scenario: Scenario) -> None:
    run_hybrid(scenario)


@needs_triton()
@HYBRID_V2
@given(st.data())
def test_hybrid_scenarios_match_vllm_v2_step_for_step(data: st.DataObject) -> None:
    run_hybrid(data.draw(hybrid_scenarios("v2")))


@needs_triton()
@HYBRID_V2
@given(st.data())
def test_hybrid_scenarios_match_vllm_v2_with_async_scheduling(data: st.DataObject) -> None:
    run_hybrid(data.draw(hybrid_scenarios("v2", async_scheduling=True)))


@pytest.mark.parametrize("runner", RUNNERS)
def test_pagedviz_keeps_every_groups_arrays(runner: str) -> None:
    """The runners' side of the comparison is on: pagedviz's trace holds group 1's block table and
    slot_mapping, and they are vLLM's (run_hybrid compares them at every step)."""
    scenario = issue_example(runner, prefix_caching=False, layer_types=[SLIDING, FULL])
    t = next(iter(make_engine(scenario).run()))
    table = "block_table_g1" if runner == "v1" else "input_block_tables_g1"
    assert table in t.arrays and "slot_mapping_g1" in t.arrays
    assert run_hybrid(scenario) > 0


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("prefix_caching", [False, True])
def test_the_issues_example_matches_vllm_step_for_step(
    runner: str, async_scheduling: bool, prefix_caching: bool
) -> None:
    assert run_hybrid(issue_example(runner, prefix_caching, async_scheduling=async_scheduling)) > 0


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_live_engine_equals_pagedvizs_own_on_the_issues_example(
    runner: str, async_scheduling: bool
) -> None:
    """The engine `vllm`'s trace (vLLM's scheduling, its window drops watched on vLLM's sliding
    managers, its arrays per group) equals pagedviz's own, field for field."""
    d = issue_example(runner, prefix_caching=True, async_scheduling=async_scheduling).to_dict()
    own, live = both(d)
    assert any("window_drops" in t.scheduler for t in live)
    assert_same_trace(own, live)


def _hybrid_presets() -> list[Any]:
    """The shipped presets with a sliding-window layer (several KV cache groups, or one sliding)."""
    found = [
        p["id"]
        for p in list_presets()
        if p["flavor"] == "vllm" and SLIDING in (preset_dict(p["id"])["config"].get("layer_types") or ())
    ]
    return found or [pytest.param(None, marks=pytest.mark.skip(reason="no hybrid preset ships yet"))]


@pytest.mark.parametrize("preset", _hybrid_presets())
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_every_hybrid_preset_matches_vllm(preset: str, runner: str, async_scheduling: bool) -> None:
    """Every hybrid preset, on V1 and V2, synchronous and asynchronous, without the tiny model
    (the scheduler and the arrays are compared, not the forward)."""
    d = preset_dict(preset)
    config = {
        **d["config"],
        "model": None,
        "device": "cpu",
        "model_runner": runner,
        "async_scheduling": async_scheduling,
    }
    if config.get("num_speculative_tokens") and runner == "v1":
        pytest.skip("the V1 side runs no drafter (as in the V1 group)")
    assert run_hybrid(Scenario.from_dict({**d, "config": config})) > 0
