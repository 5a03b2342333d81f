"""pagedviz.record on vLLM 0.33.0's Scheduler with its hybrid KV cache manager on (pytest -m fidelity):
the recording keeps each KV cache group's blocks (new block ids per group, the null head a sliding
window leaves), the free queue and the free count, and the shipped hybrid example is what the
recorder writes today (tests/support/hybrid_recording.py makes it)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario, make_engine
from pagedviz.core.recording import read_recording
from pagedviz.core.replay import import_recording
from pagedviz.core.scenario_parts import RequestSpec, ScenarioError
from tests.support.fidelity_env import require_vllm
from tests.support.recorded_run import own_scheduled_traces
from tests.support.strategies import V1_FIDELITY, scenarios

require_vllm()
from tests.support import hybrid_recording  # noqa: E402
from tests.support.vllm_record import check_import, record  # noqa: E402


def _rebuild(lines: list[dict[str, Any]]) -> list[dict[str, list[list[int]]]]:
    """Each step's block ids per scheduled request and group, from the recording's lines alone."""
    held: dict[str, list[list[int]]] = {}
    out = []
    for s in lines:
        for rid in s["finished"] + s["preempted"]:
            held.pop(rid, None)
        for n in s["new"]:
            held[n["id"]] = [list(g) for g in n["block_ids"]]
        for c in s["cached"]:
            added = c["new_block_ids"] or [[] for _ in held.get(c["id"], [[]])]
            groups = [[] for _ in added] if c["resumed"] else held[c["id"]]
            groups = [g + a for g, a in zip(groups, added)]
            for g, k in zip(groups, c.get("null_head") or []):
                g[:k] = [0] * k
            held[c["id"]] = groups
        out.append({rid: held[rid] for rid in s["num_scheduled_tokens"]})
    return out


@pytest.mark.parametrize("runner", ["v1", "v2"])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_hybrid_recording_keeps_every_groups_block_ids_free_count_and_window_drops(
    async_scheduling: bool, runner: str, tmp_path: Path
) -> None:
    path = tmp_path / "rec.jsonl"
    seen = hybrid_recording.record(path, async_scheduling=async_scheduling, runner=runner)
    header, *lines = (json.loads(x) for x in path.read_text().splitlines())
    assert [(g["kind"], g.get("sliding_window"), g["layer_names"]) for g in header["kv_cache_groups"]] == [
        ("FullAttentionSpec", None, ["model.layers.0.self_attn.attn"]),
        ("SlidingWindowSpec", 8, ["model.layers.1.self_attn.attn"]),
    ]
    assert len(lines) == len(seen)
    for s, vs, blocks in zip(lines, seen, _rebuild(lines)):
        assert s["num_scheduled_tokens"] == vs["num_scheduled_tokens"], s["step"]
        assert blocks == vs["block_ids"], s["step"]  # vLLM's get_block_ids, every group
        assert s["num_free_blocks"] == vs["num_free_blocks"] == len(vs["free_queue"]), s["step"]
    # the run shows what the example is for: a window drop, a block moving from the sliding group
    # to the full group, and (the shipped run: synchronous) a preemption
    assert any(0 in g for vs in seen for b in vs["block_ids"].values() for g in b[1:])
    assert any(s["preempted"] for s in lines) or async_scheduling
    moved = False
    for before, after in zip(seen, seen[1:]):
        sliding = {b for r in before["block_ids"].values() for b in r[1]} - {0}
        full = {b for r in after["block_ids"].values() for b in r[0]}
        old_full = {b for r in before["block_ids"].values() for b in r[0]}
        moved = moved or bool((full - old_full) & sliding)
    assert moved
    # and the import replays it: vLLM's blocks per group, its free queue in its order, its free count
    with open(path, "rb") as f:
        imported = import_recording(*read_recording(f))
    assert len(imported.traces) == len(seen)
    for t, vs in zip(imported.traces, seen):
        assert t.scheduler["block_ids"] == vs["block_ids"], t.step
        assert t.kv_cache["free_block_queue"] == vs["free_queue"], t.step
        assert t.kv_cache["num_free_blocks"] == vs["num_free_blocks"], t.step


CONFIGS = {
    # Gemma 3's pattern: five sliding layers per full one (six groups of one layer), a window of 12
    "gemma-5-to-1": {
        "layer_types": ("sliding_attention",) * 5 + ("full_attention",),
        "sliding_window": 12,
        "num_kv_blocks": 110,
    },
    # gpt-oss: sliding and full alternating, a window of 4 (one block), prefix caching off
    "gpt-oss-alternating": {
        "layer_types": ("sliding_attention", "full_attention") * 2,
        "sliding_window": 4,
        "enable_prefix_caching": False,
        "num_kv_blocks": 36,
    },
    # every layer sliding: one group that drops blocks
    "all-sliding": {"layer_types": ("sliding_attention",) * 2, "sliding_window": 6, "num_kv_blocks": 20},
}


OTHER_REQUESTS = (
    (1, "a", tuple(range(1, 30)), 12),
    (1, "b", tuple(range(1, 18)), 9),
    (2, "c", tuple(range(50, 61)), 20),
    (4, "d", tuple(range(1, 26)), 7),
    (6, "e", tuple(range(200, 240)), 5),
)


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_other_hybrid_layouts_import_as_vllm_scheduled_them(
    name: str, async_scheduling: bool, tmp_path: Path
) -> None:
    path = tmp_path / "rec.jsonl"
    seen = hybrid_recording.record(path, OTHER_REQUESTS, async_scheduling=async_scheduling, **CONFIGS[name])
    with open(path, "rb") as f:
        header, steps = read_recording(f)
    imported = import_recording(header, steps)
    groups = imported.scenario.config.kv_cache_groups
    assert [g.kind for g in groups] == [
        {"FullAttentionSpec": "full_attention", "SlidingWindowSpec": "sliding_attention"}[g.kind]
        for g in header.kv_cache_groups
    ]
    assert len(imported.traces) == len(seen)
    for t, vs in zip(imported.traces, seen):
        assert t.scheduler["block_ids"] == vs["block_ids"], t.step
        assert t.kv_cache["free_block_queue"] == vs["free_queue"], t.step
    assert any(0 in g for vs in seen for b in vs["block_ids"].values() for g in b)  # the window dropped


def test_a_one_group_recording_writes_no_hybrid_fields(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    hybrid_recording.record(path, layer_types=("full_attention", "full_attention"))
    header, *lines = (json.loads(x) for x in path.read_text().splitlines())
    assert header["kv_cache_groups"] == [{"kind": "FullAttentionSpec", "block_size": 4, "num_layers": 2}]
    assert "scheduling_policy" not in header
    assert not any("null_head" in c for s in lines for c in s["cached"])


def test_the_shipped_hybrid_example_is_what_the_recorder_writes(tmp_path: Path) -> None:
    """core/recordings/real-vllm-hybrid.jsonl, recorded afresh, byte for byte
    (PAGEDVIZ_REGENERATE_EXAMPLES=1 rewrites it)."""
    path = tmp_path / "rec.jsonl"
    hybrid_recording.record(path)
    if os.environ.get("PAGEDVIZ_REGENERATE_EXAMPLES") == "1":
        hybrid_recording.SHIPPED.write_bytes(path.read_bytes())
    assert path.read_bytes() == hybrid_recording.SHIPPED.read_bytes()


FAMILY = (
    (1, "a", tuple(range(1, 21)), 6, 1, 5),
    (1, "p", tuple(range(1, 14)), 5, 3, 0),  # n = 3: children 0_p, 1_p, 2_p
    (2, "q", tuple(range(300, 330)), 8, 1, -1),  # a higher priority (lower number) than a
)


def _family_recording(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    path = tmp_path / "rec.jsonl"
    return path, hybrid_recording.record(path, FAMILY, policy="priority", num_kv_blocks=40)


def test_a_hybrid_recording_with_priorities_and_parallel_sampling_keeps_both_and_imports(
    tmp_path: Path,
) -> None:
    path, seen = _family_recording(tmp_path)
    header, *lines = (json.loads(x) for x in path.read_text().splitlines())
    assert header["scheduling_policy"] == "priority"
    arrived = {a["id"]: a for s in lines for a in s["arrivals"]}
    # vLLM's engine fans p out into its children before the scheduler: they are what is recorded
    assert list(arrived) == ["a", "0_p", "1_p", "2_p", "q"]
    assert (
        arrived["a"]["priority"] == 5 and arrived["q"]["priority"] == -1 and "priority" not in arrived["0_p"]
    )
    with open(path, "rb") as f:
        imported = import_recording(*read_recording(f))
    assert len(imported.traces) == len(seen)
    for t, vs in zip(imported.traces, seen):
        assert t.scheduler["block_ids"] == vs["block_ids"], t.step
        assert t.kv_cache["free_block_queue"] == vs["free_queue"], t.step
    # the children share the prompt's full blocks through prefix-cache hits (ref_cnt > 1)
    assert any(c > 1 for t in imported.traces for c in t.kv_cache["ref_cnt"])


@pytest.mark.skipif(
    not {"n", "priority"} <= {f.name for f in dataclasses.fields(RequestSpec)},
    reason="RequestSpec.n and .priority come with parallel sampling and priority scheduling (priority-n)",
)
def test_the_imported_scenario_has_the_parent_with_its_n_and_the_priorities(tmp_path: Path) -> None:
    path, _ = _family_recording(tmp_path)
    with open(path, "rb") as f:
        imported = import_recording(*read_recording(f))
    specs = {r.id: r for r in imported.scenario.requests}
    assert list(specs) == ["a", "p", "q"]
    assert (specs["p"].n, specs["a"].priority, specs["q"].priority) == (3, 5, -1)
    assert imported.scenario.config.scheduling_policy == "priority"  # type: ignore[attr-defined]


@pytest.mark.skipif(
    not {"n", "priority"} <= {f.name for f in dataclasses.fields(RequestSpec)},
    reason="RequestSpec.n and .priority come with parallel sampling and priority scheduling (priority-n)",
)
def test_a_recording_with_priorities_and_parallel_sampling_agrees_to_its_last_step(tmp_path: Path) -> None:
    """One KV cache group, the priority policy, a request with n = 3: q (priority -1) arrives at
    step 3 and vLLM preempts a (priority 5), the lowest priority, not the last running."""
    path = tmp_path / "rec.jsonl"
    requests = (
        (1, "a", tuple(range(1, 21)), 10, 1, 5),
        (1, "p", tuple(range(1, 14)), 8, 3, 0),
        (3, "q", tuple(range(300, 330)), 8, 1, -1),
    )
    seen = hybrid_recording.record(
        path, requests, policy="priority", num_kv_blocks=12, max_model_len=40, layer_types=("full_attention",)
    )
    assert [s["preempted"] for s in seen if s["preempted"]] == [["a"]]
    with open(path, "rb") as f:
        imported = import_recording(*read_recording(f))
    assert imported.agreement.diverges_at is None, imported.agreement.text
    assert imported.agreement.agrees_up_to == len(seen)
    assert imported.traces[0].scheduler["parents"]["2_p"] == {"parent": "p", "index": 2, "n": 3}


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("name", ["example", "example-v2", *CONFIGS])
def test_pagedviz_agrees_with_vllms_hybrid_manager_to_the_last_recorded_step(
    name: str, async_scheduling: bool, tmp_path: Path
) -> None:
    """Every step's scheduled tokens, preemptions and every request's block ids per KV cache
    group, pagedviz's own scheduler against the recording of vLLM's hybrid manager (Model Runner
    V2's scheduler too: resumed requests as new ones)."""
    path = tmp_path / "rec.jsonl"
    if name.startswith("example"):
        runner = "v2" if name.endswith("v2") else "v1"
        seen = hybrid_recording.record(path, async_scheduling=async_scheduling, runner=runner)
    else:
        seen = hybrid_recording.record(
            path, OTHER_REQUESTS, async_scheduling=async_scheduling, **CONFIGS[name]
        )
    with open(path, "rb") as f:
        imported = import_recording(*read_recording(f))
    assert imported.agreement.diverges_at is None, imported.agreement.text
    assert imported.agreement.agrees_up_to == len(seen)


def test_the_replays_arrays_per_group_are_vllms_own_runners(tmp_path: Path) -> None:
    """The shipped example recorded again with each batch through vLLM's V1 runner
    (MultiGroupBlockTable): every step's block table and slot_mapping of each group, and the
    batch's arrays, are what pagedviz's V1 runner makes from the recording."""
    path = tmp_path / "rec.jsonl"
    seen = hybrid_recording.record(path, vllm_runner=True)
    shipped = [
        json.loads(x)["num_scheduled_tokens"] for x in hybrid_recording.SHIPPED.read_text().splitlines()[1:]
    ]
    assert [s["num_scheduled_tokens"] for s in seen] == shipped  # the example's run
    with open(path, "rb") as f:
        imported = import_recording(*read_recording(f))
    compared = set()
    for t, vs in zip(imported.traces, seen):
        where = f"step {t.step}"
        assert t.batch["req_ids"] == vs["arrays"]["req_ids"].tolist(), where
        for name, theirs in vs["arrays"].items():
            if name in ("req_ids", "token_ids_cpu") or name not in t.arrays:
                continue
            ours = t.arrays[name]
            if name.startswith("block_table"):  # vLLM's table is wider (aligned to 128 tokens)
                theirs = theirs[: ours.shape[0], : ours.shape[1]]
            assert theirs.tolist() == ours.tolist(), f"{where}: {name}"
            compared.add(name)
        for row, n in enumerate(t.arrays.get("num_tokens", [])):  # the known tokens of each row
            theirs, ours = vs["arrays"]["token_ids_cpu"][row, :n], t.arrays["token_ids_cpu"][row, :n]
            assert theirs.tolist() == ours.tolist(), f"{where}: token_ids_cpu row {row}"
    assert {"block_table_g1", "slot_mapping", "slot_mapping_g1", "positions"} <= compared


@st.composite
def hybrid_scenarios(draw: st.DrawFn, async_scheduling: bool = False) -> Scenario:
    """The differential suite's scenarios with a layer pattern holding a sliding window, the pool
    grown to what vLLM's planner asks for one max_model_len request in every group."""
    sc = draw(scenarios(V1_FIDELITY, async_scheduling=async_scheduling))
    types = draw(st.lists(st.sampled_from(["full_attention", "sliding_attention"]), min_size=1, max_size=4))
    if "sliding_attention" not in types:
        types.append("sliding_attention")
    d = sc.to_dict()
    d["config"].update(layer_types=types, sliding_window=draw(st.integers(1, 12)))
    try:
        return Scenario.from_dict(d)
    except ScenarioError as e:
        need = re.search(r"num_kv_blocks to at least (\d+)", str(e))
        if need is None:
            raise
        d["config"]["num_kv_blocks"] = int(need.group(1)) + draw(st.integers(0, 6))
        return Scenario.from_dict(d)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenario=hybrid_scenarios())
def test_a_recording_of_vllms_hybrid_manager_imports_as_what_it_scheduled(
    scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine `vllm`'s V1 side on hybrid scenarios, its scheduler replaced by the recorder
    (test_record.py's driver, tests/support/vllm_record.py, pagedviz's tokens): the import gives
    vLLM's new block ids per group, its free queue, pagedviz's own arrays of the scenario, and
    pagedviz's scheduler agrees."""
    path = tmp_path / "rec.jsonl"
    seen = record(scenario, path, monkeypatch)
    check_import(scenario, path, seen)
    with open(path, "rb") as f:
        header, steps = read_recording(f)
    assert "SlidingWindowSpec" in [g.kind for g in header.kv_cache_groups]  # vLLM's hybrid manager
    imported = import_recording(header, steps)
    own = list(make_engine(scenario).run())
    for a, b in zip(own, imported.traces):  # every group's block ids and arrays too
        assert a.scheduler["block_ids"] == b.scheduler["block_ids"], f"step {a.step}"
        for name in ("block_table_g1", "slot_mapping_g1"):
            if name in a.arrays:
                assert a.arrays[name].tolist() == b.arrays[name].tolist(), f"step {a.step}: {name}"


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenario=hybrid_scenarios(async_scheduling=True))
def test_a_recording_of_vllms_async_hybrid_manager_imports_as_what_it_scheduled(
    scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rec.jsonl"
    check_import(scenario, path, record(scenario, path, monkeypatch))


def test_a_v2_hybrid_recordings_arrays_of_every_group_are_pagedviz_own_v2_run(tmp_path: Path) -> None:
    """Model Runner V2 (its BlockTables per group): the recorded block ids fed to pagedviz's V2
    runner give the arrays pagedviz's own scheduler and V2 runner give on the recorded arrivals
    with the recorded tokens."""
    path = tmp_path / "rec.jsonl"
    hybrid_recording.record(path, runner="v2")
    with open(path, "rb") as f:
        header, steps = read_recording(f)
    assert header.runner == "v2"
    imported = import_recording(header, steps)
    mine = own_scheduled_traces(header, steps)
    replayed = [t for t in imported.traces if t.scheduler.get("num_scheduled_tokens")]
    assert len(mine) == len(replayed)
    names = set()
    for a, b in zip(mine, replayed):
        for name, arr in a.arrays.items():
            if name in b.arrays:
                names.add(name)
                assert arr.tolist() == b.arrays[name].tolist(), f"step {a.step}: {name}"
    assert any(n.endswith("_g1") for n in names), sorted(names)
