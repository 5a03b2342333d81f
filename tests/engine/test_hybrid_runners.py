"""The runners with several KV cache groups (issue 38, point 3): V1's MultiGroupBlockTable and Model
Runner V2's BlockTables keep one block table and one slot_mapping per group, each group's layers of
the tiny model write and read through their own group's, sliding-window layers mask beyond the
window, and the paged forward equals the dense reference after every layer at every step."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Scenario, make_engine
from pagedviz.core.kv_groups import plan_kv_cache_groups
from pagedviz.core.scenario_parts import ModelConfig
from pagedviz.core.tiny_model import TinyTransformer

WINDOW, BS = 8, 4
LAYERS = ["sliding_attention", "full_attention"]  # vLLM's groups: [sliding (layer 0), full (layer 1)]


def hybrid(runner: str, async_scheduling: bool, **config: Any) -> Scenario:
    """b finishes first, so V1 condenses a into b's row; c arrives later and takes a hole (V1) or a
    freed slot (V2). a's 20-token prompt is longer than the window."""
    base: dict[str, Any] = {
        "model_runner": runner,
        "async_scheduling": async_scheduling,
        "block_size": BS,
        "max_model_len": 64,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 64,
        "num_kv_blocks": 40,
        "enable_prefix_caching": True,
        "layer_types": LAYERS,
        "sliding_window": WINDOW,
        "device": "cpu",
    }
    base.update(config)
    requests = [
        {"id": "b", "prompt_token_ids": list(range(1, 13)), "max_tokens": 2},
        {"id": "a", "prompt_token_ids": list(range(1, 21)), "max_tokens": 8},
        {"id": "c", "prompt_token_ids": list(range(30, 41)), "max_tokens": 6, "arrival_step": 3},
    ]
    return Scenario.from_dict(
        {"name": "hybrid", "flavor": "vllm", "seed": 5, "config": base, "requests": requests}
    )


def suffix(g: int) -> str:
    return f"_g{g}" if g else ""


def same_blocks(row: np.ndarray, scheduler_ids: list[int]) -> bool:
    """A runner's table row against the scheduler's block ids of the request in that group
    (`KVCacheManager.get_block_ids`): the same length and blocks, except where the scheduler has
    the null block 0. The runner learns only the blocks a step adds (new_block_ids), so a block a
    sliding window dropped later stays in its row as vLLM's does (V2 nulls it when it gathers)."""
    n = len(scheduler_ids)
    got = row[:n].tolist()
    return len(got) == n and all(x == s or s == 0 for x, s in zip(got, scheduler_ids)) and not row[n:].any()


def token_rows(t: Any) -> np.ndarray:
    """The batch row of each scheduled token."""
    qsl = t.arrays["query_start_loc"]
    return np.repeat(np.arange(len(qsl) - 1), np.diff(qsl))


@pytest.mark.parametrize("runner", ["v1", "v2"])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_hybrid_run_keeps_one_block_table_and_slot_mapping_per_group_and_paged_equals_dense_per_layer(
    runner: str, async_scheduling: bool
) -> None:
    engine = make_engine(hybrid(runner, async_scheduling))
    table = "block_table" if runner == "v1" else "block_tables"
    forwards = kept = 0
    for t in engine.run():
        if t.idle:
            continue
        forwards += 1
        a, f = t.arrays, t.forward
        assert t.scalars["num_kv_cache_groups"] == 2
        assert f["slot_mapping_device_matches_cpu"] is True
        assert f["paged_vs_dense_max_abs_diff"] < 1e-4
        per_layer = f["paged_vs_dense_max_abs_diff_per_layer"]
        assert len(per_layer) == 2 and max(per_layer) < 1e-4, (t.step, per_layer)
        assert [g["kind"] for g in f["attn_groups"]] == ["sliding_attention", "full_attention"]
        assert [g["sliding_window"] for g in f["attn_groups"]] == [WINDOW, None]
        attention_table = "block_table" if runner == "v1" else "input_block_tables"
        assert {"slot_mapping_g1", f"{attention_table}_g1"} <= set(f["device_inputs"])
        assert "slot_mapping_g2" not in a and f"{table}_g2" not in a
        pos = a["positions"]
        T = len(pos)
        rows = token_rows(t)
        block_ids = t.scheduler["block_ids"]
        for g in range(2):
            bt = a[table + suffix(g)]
            sm = a["slot_mapping" + suffix(g)][:T]
            if runner == "v1":
                # the persistent batch's rows hold each request's blocks of this group
                for r, rid in enumerate(t.batch["req_ids"]):
                    assert same_blocks(bt[r], block_ids[rid][g]), (t.step, g, rid)
                    kept += sum(x != s == 0 for x, s in zip(bt[r].tolist(), block_ids[rid][g]))
                want = bt[rows, pos // BS].astype(np.int64) * BS + pos % BS
            else:
                slots = t.batch["slots"]
                nb = a["num_blocks" + suffix(g)]
                for rid, groups in block_ids.items():
                    j = slots[rid]
                    assert same_blocks(bt[j, : nb[j]], groups[g]), (t.step, g, rid)
                    kept += sum(x != s == 0 for x, s in zip(bt[j].tolist(), groups[g]))
                token_slots = a["idx_mapping"][rows]
                want = bt[token_slots, pos // BS].astype(np.int64) * BS + pos % BS
            # slot_mapping of group g: block_table_g[pos // bs] * bs + pos % bs from that group's table
            assert sm.tolist() == want.tolist(), (t.step, g)
            # a scheduled token is never written into the null block, in any group
            assert bool((sm >= BS).all()), (t.step, g)
        # the groups' tables differ (each group has its own blocks), so do their slot mappings
        assert a["slot_mapping"][:T].tolist() != a["slot_mapping_g1"][:T].tolist()
    assert forwards >= 8
    # the sliding window dropped blocks the runner's persistent table still names (vLLM's runner
    # hears only of new blocks): attention never reads them, they lie below the window
    assert kept > 0


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_v2_gathers_a_sliding_groups_table_with_the_null_block_below_the_window(
    async_scheduling: bool,
) -> None:
    """BlockTables.gather_block_tables with MASK_SLIDING_WINDOW: a sliding group's first
    max(num_computed_tokens - (window - 1), 0) // block_size entries are read as the null block."""
    nulled = 0
    for t in make_engine(hybrid("v2", async_scheduling)).run():
        if t.idle:
            continue
        a = t.arrays
        nc = a["num_computed_tokens"]  # the runner's own count, as the kernel reads it
        for g, reach in ((0, WINDOW - 1), (1, 0)):
            gathered, table, nb = (
                a[n + suffix(g)] for n in ("input_block_tables", "block_tables", "num_blocks")
            )
            for b, j in enumerate(a["idx_mapping"]):
                n = nb[j]
                num_null = max(int(nc[j]) - reach, 0) // BS if reach else 0
                want = [0 if c < num_null else int(x) for c, x in enumerate(table[j, :n])]
                assert gathered[b, :n].tolist() == want, (t.step, g, b)
                nulled += min(num_null, n)
    assert nulled > 0  # a's context outgrows the window


def test_with_one_group_nothing_per_group_is_traced() -> None:
    d = hybrid("v1", False).to_dict()
    d["config"].pop("layer_types")
    d["config"].pop("sliding_window")
    for runner in ("v1", "v2"):
        d["config"]["model_runner"] = runner
        t = next(make_engine(Scenario.from_dict(d)).run())
        assert not [n for n in t.arrays if n.endswith("_g1")]
        assert "num_kv_cache_groups" not in t.scalars
        assert "attn_groups" not in t.forward and "paged_vs_dense_max_abs_diff_per_layer" not in t.forward
        assert "written_slots_by_group" not in t.kv_cache


def test_the_window_mask_changes_a_query_that_sees_past_the_window() -> None:
    """A query at position p of a sliding layer attends to keys at positions > p - window: up to
    position window - 1 it sees what full attention sees; past it, it sees less and its output
    differs. The same weights (same seed) with both layers full attention give the comparison."""
    cfg = ModelConfig(num_layers=2)
    cpu = torch.device("cpu")
    sliding = TinyTransformer(cfg, 7, 8, BS, cpu, plan_kv_cache_groups(tuple(LAYERS), WINDOW))
    full = TinyTransformer(cfg, 7, 8, BS, cpu, plan_kv_cache_groups(("full_attention",) * 2, None))
    assert sliding.layer_window == [WINDOW, None] and full.layer_window == [None, None]
    ids = torch.arange(1, 21)
    with_window: list[torch.Tensor] = []
    without: list[torch.Tensor] = []
    with torch.no_grad():
        sliding.dense_hidden(ids, 0, with_window)
        full.dense_hidden(ids, 0, without)
    diff = (with_window[0] - without[0]).abs().amax(-1)  # layer 0, the sliding one, per position
    assert float(diff[:WINDOW].max()) == 0.0
    assert bool((diff[WINDOW:] > 1e-3).all())


def test_a_hybrid_engine_writes_each_groups_kv_into_its_own_blocks() -> None:
    """The kv view: written_slots over every group, and per group (written_slots_by_group): a
    group's layers write only into blocks of that group's tables."""
    engine = make_engine(hybrid("v1", False))
    t = next(engine.run())
    kv = t.kv_cache
    by_group = kv["written_slots_by_group"]
    assert len(by_group) == 2
    owned = [{b for ids in t.scheduler["block_ids"].values() for b in ids[g]} for g in range(2)]
    for g in range(2):
        written = {b for b, n in enumerate(by_group[g]) if n}
        assert written and written <= owned[g], g
    assert [max(x, y) > 0 for x, y in zip(*by_group)] == [n > 0 for n in kv["written_slots"]]


def test_rest_serves_each_groups_arrays_with_their_stage_level_and_group_formula() -> None:
    """POST a hybrid scenario through the real app: group 1's slot_mapping and block table come back
    by name (JSON and npy) with their level and stage, the stages' formulas name the group, and the
    scalars count the groups."""
    client = TestClient(create_app(Settings(max_runs=4)))
    d = hybrid("v2", False).to_dict()
    r = client.post("/api/runs", json=d)
    assert r.status_code in (200, 201), r.text
    run_id = r.json()["run_id"]
    step = client.get(f"/api/runs/{run_id}/steps/2").json()
    arrays = step["arrays"]
    sm = arrays["slot_mapping_g1"]
    assert (sm["level"], sm["stage"]) == ("token", "slot_mappings")
    assert arrays["input_block_tables_g1"]["level"] == "system"
    assert arrays["num_blocks_g1"]["level"] == "slot"
    assert step["scalars"]["num_kv_cache_groups"] == 2
    stages = {s["name"]: s for s in step["stages"]}
    assert "slot_mapping_g{g}" in stages["slot_mappings"]["formula"]
    assert "slot_mapping_g1" in stages["slot_mappings"]["writes"]
    assert "sliding_window - 1" in stages["gather_block_tables"]["formula"]
    one = client.get(f"/api/runs/{run_id}/steps/2/arrays/slot_mapping_g1?format=json")
    assert one.status_code == 200
    npy = client.get(f"/api/runs/{run_id}/steps/2/arrays/slot_mapping_g1?format=npy")
    assert np.load(io.BytesIO(npy.content)).tolist() == arrays["slot_mapping_g1"]["data"]


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_each_groups_arrays_are_owned_by_the_trace(runner: str) -> None:
    """Every group's arrays are copies: no recorded array shares memory with the runner's buffers
    (the per-group ones included), and a trace read after the run equals the trace at its step."""
    engine = make_engine(hybrid(runner, False, model=None))
    r = engine.runner
    buffers = [x for x in vars(r).values() if isinstance(x, np.ndarray) and x.size > 1]
    buffers += [x for x in vars(r).values() if isinstance(x, list) for x in x if isinstance(x, np.ndarray)]
    buffers += [t.block_table_np for t in getattr(getattr(r, "input_batch", None), "block_tables", [])]
    assert len(buffers) > 10
    at_step, traces = [], []
    for t in engine.run():
        for name, entry in t.array_entries.items():
            assert entry.data.base is None or entry.data.base is entry.buffer, (t.step, name)
            assert not any(np.shares_memory(entry.data, b) for b in buffers), (t.step, name)
        at_step.append(t.to_dict()["arrays"])
        traces.append(t)
    assert [t.to_dict()["arrays"] for t in traces] == at_step


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_the_issues_example_through_the_runners(runner: str) -> None:
    """Issue 38's setup (layer 0 full, layer 1 a window of 8, block size 4; a: prompt 1..20, b:
    prompt 1..12; prefix caching off) at step 2, one decode each at positions 20 and 12: the
    scheduler holds a ([1..5, 8], [0, 0, 0, 9, 10, 7]) and b ([11, 12, 13, 14], [0, 15, 16, 6]).
    V1's sliding rows keep the dropped ids (as vLLM's, tests/fidelity); V2's gathered rows null
    them below the window; each group's slot_mapping is its own new block's first slot."""
    d = hybrid(
        runner,
        False,
        model=None,
        enable_prefix_caching=False,
        layer_types=["full_attention", "sliding_attention"],
    )
    d_dict = d.to_dict()
    d_dict["requests"] = [
        {"id": "a", "prompt_token_ids": list(range(1, 21)), "max_tokens": 8},
        {"id": "b", "prompt_token_ids": list(range(1, 13)), "max_tokens": 4},
    ]
    t = list(make_engine(Scenario.from_dict(d_dict)).run())[1]
    assert t.scheduler["block_ids"] == {
        "a": [[1, 2, 3, 4, 5, 8], [0, 0, 0, 9, 10, 7]],
        "b": [[11, 12, 13, 14], [0, 15, 16, 6]],
    }
    a = t.arrays
    assert t.batch["req_ids"] == ["a", "b"]
    if runner == "v1":
        assert a["block_table"][:2, :6].tolist() == [[1, 2, 3, 4, 5, 8], [11, 12, 13, 14, 0, 0]]
        assert a["block_table_g1"][:2, :6].tolist() == [[6, 7, 8, 9, 10, 7], [14, 15, 16, 6, 0, 0]]
    else:
        # a row's cells past its own blocks keep what an earlier step left (never read)
        rows = [r[:n] for r, n in zip(a["input_block_tables"].tolist(), (6, 4))]
        rows_g1 = [r[:n] for r, n in zip(a["input_block_tables_g1"].tolist(), (6, 4))]
        assert rows == [[1, 2, 3, 4, 5, 8], [11, 12, 13, 14]]
        assert rows_g1 == [[0, 0, 0, 9, 10, 7], [0, 15, 16, 6]]
    assert a["positions"].tolist() == [20, 12]
    assert a["slot_mapping"].tolist() == [8 * BS, 14 * BS]
    assert a["slot_mapping_g1"].tolist() == [7 * BS, 6 * BS]
