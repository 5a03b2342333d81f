"""Importing a recording of a hybrid vLLM server (issue 38, point 7; no vLLM needed): the shipped
example, vLLM 0.33.0's own Scheduler with its hybrid KV cache manager on (layer 0 full attention,
layer 1 a sliding window of 8 tokens), replays every group's block ids with the null block where
the window dropped blocks, the pool's free count and free queue; the header's groups become the
scenario's layer_types and sliding_window; groups pagedviz does not model are refused naming why;
a model with more layers than a scenario holds stands in as fewer planned into the same groups."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from pagedviz.core.kv_groups import plan_kv_cache_groups
from pagedviz.core.recording import RecordingError, read_recording, split_lines
from pagedviz.core.recordings import example_bytes
from pagedviz.core.replay import ReplayError, import_recording
from tests.support.recorded_run import own_scheduled_traces
from tests.support.recording_cases import gemma_like

HYBRID = example_bytes("real-vllm-hybrid")
LINES = HYBRID.splitlines(keepends=True)
NUM_STEPS = len(LINES) - 1
RECORDED = [json.loads(x) for x in LINES[1:]]


def _with_header(edit: Callable[[dict[str, Any]], None]) -> list[bytes]:
    h = json.loads(LINES[0])
    edit(h)
    return [json.dumps(h).encode() + b"\n", *LINES[1:]]


@pytest.fixture(scope="module")
def imported() -> Any:
    return import_recording(*read_recording(LINES))


def test_the_header_groups_become_the_scenarios_layers(imported: Any) -> None:
    cfg = imported.scenario.config
    assert cfg.layer_types == ("full_attention", "sliding_attention") and cfg.sliding_window == 8
    assert [(g.kind, g.layers) for g in cfg.kv_cache_groups] == [
        ("full_attention", (0,)),
        ("sliding_attention", (1,)),
    ]


def test_each_step_holds_every_groups_blocks_with_the_null_block_where_the_window_dropped(
    imported: Any,
) -> None:
    traces = imported.traces
    assert len(traces) == NUM_STEPS
    # vLLM's get_block_ids after step 1 and step 2: the setup (b misses a's prefix: vLLM
    # keeps a sliding window's blocks cached only where a later hit can end, and a's before
    # token 8 are not); at step 2 the window drops a's first three sliding blocks and b's first
    assert traces[0].scheduler["block_ids"] == {
        "a": [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]],
        "b": [[11, 12, 13], [14, 15, 16]],
    }
    step2 = traces[1].scheduler
    assert {r: step2["block_ids"][r] for r in "ab"} == {
        "a": [[1, 2, 3, 4, 5, 7], [0, 0, 0, 9, 10, 6]],
        "b": [[11, 12, 13, 17], [0, 15, 16, 18]],
    }
    # new block ids: one list per group, as vLLM's tuple
    assert {r: step2["new_block_ids"][r] for r in "ab"} == {"a": [[7], [6]], "b": [[17], [18]]}
    for t, rec in zip(traces, RECORDED):
        where = f"step {t.step}"
        # every scheduled request, every group; the null block only in the sliding group's head
        assert set(t.scheduler["block_ids"]) == set(rec["num_scheduled_tokens"]), where
        for full, sliding in t.scheduler["block_ids"].values():
            assert 0 not in full, where
            k = sliding.count(0)
            assert sliding[:k] == [0] * k, where
        # the pool with two groups: the recorded free count, the free queue as long, no null block
        kv = t.kv_cache
        assert kv["num_free_blocks"] == rec["num_free_blocks"] == len(kv["free_block_queue"]), where
        assert 0 not in kv["free_block_queue"] and kv["ref_cnt"][0] == 0, where
        held = {b for groups in t.scheduler["block_ids"].values() for g in groups for b in g} - {0}
        assert not held & set(kv["free_block_queue"]), where
        assert [g["kind"] for g in kv["kv_cache_groups"]] == ["full_attention", "sliding_attention"]
    # blocks move between groups through the shared free queue: block 7, in a's sliding group at
    # step 1, dropped by the window at step 2 and at once taken by a's full group
    assert traces[0].kv_cache["block_group"]["7"] == 1 and traces[1].kv_cache["block_group"]["7"] == 0
    # the dropped blocks the prefix cache keeps (a's 8, b's 14) wait at the free queue's tail
    assert traces[1].kv_cache["free_block_queue"][-2:] == [8, 14]
    # c's sliding block 35, dropped at step 3, is taken by c's own full group in that step
    assert 35 in traces[1].scheduler["block_ids"]["c"][1] and 35 in traces[2].scheduler["block_ids"]["c"][0]
    # d is preempted at step 6 and resumes at step 7 on its prefix-cache hits: seven of its eight
    # full blocks, and in the sliding group the null block up to the window, then blocks 12 and 11
    assert traces[5].scheduler["preempted_req_ids"] == ["d"]
    resumed = next(t for t in traces[6:] if "d" in t.scheduler["resumed_req_ids"])
    assert resumed.step == 7
    assert resumed.scheduler["block_ids"]["d"] == [
        [18, 16, 17, 33, 32, 31, 30, 8],
        [0, 0, 0, 0, 0, 12, 11, 39],
    ]


def test_the_notes_say_pagedviz_compares_its_scheduler_per_group(imported: Any) -> None:
    assert imported.agreement.modelled
    assert imported.scenario.notes[0] == imported.agreement.text


def test_the_shipped_hybrid_recording_agrees_with_pagedviz_to_its_last_step(imported: Any) -> None:
    """pagedviz's own scheduler, on the recording's arrivals, gives every step's scheduled tokens,
    preemptions and every request's block ids per group as vLLM's hybrid manager did."""
    a = imported.agreement
    assert a.diverges_at is None and a.agrees_up_to == NUM_STEPS, a.text


def test_a_block_the_server_placed_otherwise_in_one_group_is_named_at_its_step() -> None:
    # the recording's step 2 with b's sliding block 18 swapped for 39 (a free one): the replay
    # shows the server's (edited) block, and the comparison names the step and the key
    lines = list(LINES)
    d = json.loads(lines[2])
    for c in d["cached"]:
        if c["id"] == "b":
            c["new_block_ids"][1] = [39]
    lines[2] = json.dumps(d).encode() + b"\n"
    imp = import_recording(*read_recording(lines))
    assert imp.traces[1].scheduler["block_ids"]["b"][1] == [0, 15, 16, 39]
    a = imp.agreement
    assert a.diverges_at == 2 and a.difference.startswith("new_block_ids:") and "[39]" in a.difference


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (
            lambda h: h["kv_cache_groups"].__setitem__(
                1, {"kind": "MambaSpec", "block_size": 4, "num_layers": 1}
            ),
            "KV cache group 1 is MambaSpec (1 layer(s)): pagedviz models full attention (FullAttentionSpec) "
            "and sliding windows (SlidingWindowSpec)",
        ),
        (
            lambda h: h["kv_cache_groups"][1].__setitem__("block_size", 8),
            "KV cache group 1's block size is 8, the scheduler's 4: pagedviz models one block size",
        ),
        (
            lambda h: h["kv_cache_groups"][1].pop("sliding_window"),
            "KV cache group 1 is a sliding window whose size the recording does not say",
        ),
        (
            lambda h: h["kv_cache_groups"][1].__setitem__("extra_retained_tokens", 2),
            "KV cache group 1 keeps 2 token(s) past its window (multi-token prediction)",
        ),
        (
            lambda h: h["kv_cache_groups"].append(
                {"kind": "SlidingWindowSpec", "block_size": 4, "num_layers": 1, "sliding_window": 16}
            ),
            "sliding windows of 8 and 16 tokens: pagedviz models one sliding_window",
        ),
    ],
    ids=["mamba", "block size", "no window", "extra tokens", "two windows"],
)
def test_groups_pagedviz_does_not_model_are_refused_naming_why(
    edit: Callable[[dict], None], says: str
) -> None:
    with pytest.raises(ReplayError) as e:
        import_recording(*read_recording(_with_header(edit)))
    assert str(e.value).startswith("line 1: " + says), str(e.value)


def test_a_model_with_more_layers_than_a_scenario_holds_stands_in_as_fewer_in_the_same_groups() -> None:
    # Gemma 3 27B's 62 layers: five sliding layers per full one, vLLM's groups of 10 layers (six
    # sliding groups, then the full one)
    layers = ["sliding_attention" if i % 6 != 5 else "full_attention" for i in range(62)]
    recorded = plan_kv_cache_groups(tuple(layers), 1024)
    assert [g.kind for g in recorded] == ["sliding_attention"] * 6 + ["full_attention"]

    h, steps = read_recording(split_lines(gemma_like(HYBRID)))
    groups = h.kv_cache_groups
    # the recording's groups are the planned ones, layer for layer
    named = [[int(n.split(".")[2]) for n in (g.model_extra or {})["layer_names"]] for g in groups]
    assert named == [list(g.layers) for g in recorded]
    imp = import_recording(h, steps)
    cfg = imp.scenario.config
    assert len(cfg.layer_types) <= 8
    assert [g.kind for g in cfg.kv_cache_groups] == [g.kind for g in recorded] and len(groups) == 7
    assert any("the recorded model's 62 layers stand in as 7" in n for n in imp.notes)
    assert len(imp.traces[1].scheduler["block_ids"]["a"]) == 7


def test_a_waiting_requests_derived_cause_counts_the_blocks_of_every_group(imported: Any) -> None:
    # d (30 prompt tokens) waits at step 3: 8 blocks in the full group and 8 in the sliding one
    # (under its admission cap of 19: the window less one plus a budget in flight, and one more)
    cause = imported.traces[2].scheduler["waiting_causes"]["d"]
    assert cause["cause"] == "kv_pool" and cause["derived"] == "recording"
    assert (cause["blocks_needed"], cause["blocks_free"]) == (16, RECORDED[2]["num_free_blocks"])
    # d's preemption at step 6 is for a, the running request that gained blocks
    assert imported.traces[5].scheduler["preemption_causes"]["d"]["for"] == "a"


def test_the_pool_plot_of_a_hybrid_step_marks_the_blocks_of_every_group(imported: Any) -> None:
    from pagedviz.plots import step

    fig = step.kv_pool(imported.traces[1], prev=imported.traces[0])
    marks = {tr.name: len(tr.x) for tr in fig.data if tr.type == "scatter"}
    # step 2: a's and b's new block in each group (7 and 6, which a's window had just dropped, and
    # 17 and 18) and c's ten in each; 8 and 14, dropped by the window, freed
    assert marks["allocated this step"] + marks["reused (prefix cache)"] == 4 + 20
    assert marks["freed this step"] == 2


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (
            lambda d: d["cached"][0].__setitem__("new_block_ids", [[7]]),
            "step 2: 'a' has block ids for 1 KV cache group(s), the header 2",
        ),
        (
            lambda d: d["cached"][0].__setitem__("null_head", [0, 3, 1]),
            "step 2: 'a' has a null head for 3 KV cache group(s), the header 2",
        ),
    ],
    ids=["block ids", "null head"],
)
def test_a_step_whose_groups_do_not_match_the_header_is_refused_naming_the_step(
    edit: Callable[[dict], None], says: str
) -> None:
    lines = list(LINES)
    d = json.loads(lines[2])
    edit(d)
    lines[2] = json.dumps(d).encode() + b"\n"
    with pytest.raises(ReplayError, match=re.escape(says)):
        import_recording(*read_recording(lines))


def test_a_negative_null_head_is_refused_naming_its_line() -> None:
    lines = list(LINES)
    d = json.loads(lines[2])
    d["cached"][0]["null_head"] = [0, -1]
    lines[2] = json.dumps(d).encode() + b"\n"
    with pytest.raises(RecordingError, match=r"line 3: cached\.0\.null_head\.1"):
        read_recording(lines)


def test_the_replays_arrays_of_every_group_are_pagedviz_own_run_of_the_recording(imported: Any) -> None:
    """The recorded block ids fed to pagedviz's runner give the same arrays, each group's block
    table and slot mapping included, as pagedviz's own scheduler and runner on the recorded
    arrivals with the recorded tokens (the agreement's engine)."""
    header, steps = read_recording(LINES)
    mine = own_scheduled_traces(header, steps)
    replayed = [t for t in imported.traces if t.scheduler.get("num_scheduled_tokens")]
    assert len(mine) == len(replayed)
    names = set()
    for a, b in zip(mine, replayed):
        assert a.batch["req_ids"] == b.batch["req_ids"], a.step
        for name, arr in a.arrays.items():
            if name in b.arrays:
                names.add(name)
                assert arr.tolist() == b.arrays[name].tolist(), f"step {a.step}: {name}"
        assert a.sampled_token_ids == b.sampled_token_ids, a.step
    assert {"block_table", "slot_mapping"} <= names


def test_a_server_keeping_every_sliding_block_cached_is_replayed_but_not_compared() -> None:
    # prefix_cache_retention_interval null: vLLM keeps every sliding block's hash (dense), which
    # decides its hits; pagedviz's scheduler caches as vLLM's default 0 does
    imp = import_recording(
        *read_recording(_with_header(lambda h: h.update(prefix_cache_retention_interval=None)))
    )
    assert len(imp.traces) == NUM_STEPS
    assert not imp.agreement.modelled
    assert "prefix_cache_retention_interval None" in imp.agreement.text
