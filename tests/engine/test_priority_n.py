"""Parallel sampling (a request's `n`) and priority scheduling (`config.scheduling_policy`), as
vLLM 0.33.0 runs them: the fields and their refusals, the children as vLLM's engine adds them, the
waiting queue in (priority, arrival) order, the victim of priority preemption with its cause, and
the narration of both in English and 中文. The same against vLLM's own code: the fidelity suite's
test_vllm_priority_n.py."""

from __future__ import annotations

from typing import Any

import pytest

from pagedviz.core import Limits, Scenario, ScenarioError, load_preset, make_engine
from pagedviz.core.narrate import narrate
from pagedviz.core.presets import list_presets, preset_dict


def base(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": "x",
        "config": {"block_size": 4, "max_model_len": 32, "num_kv_blocks": 32, "model": None, "device": "cpu"},
        "requests": [{"id": "a", "prompt_len": 5, "max_tokens": 3}],
    }
    d.update(over)
    return d


def errors_of(d: Any, limits: Limits | None = None) -> dict[str, str]:
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(d, limits)
    return dict(info.value.errors)


def steps_of(d: dict[str, Any]) -> list[Any]:
    return list(make_engine(Scenario.from_dict(d)).run())


def test_defaults_leave_the_canonical_scenario_and_so_run_ids_unchanged() -> None:
    from app.store import run_id_of

    for p in list_presets():
        d = preset_dict(p["id"])
        if "scheduling_policy" in d["config"] or any("n" in r or "priority" in r for r in d["requests"]):
            continue
        s = Scenario.from_dict(d)
        canon = s.to_dict()
        assert "scheduling_policy" not in canon["config"], p["id"]
        assert all("n" not in r and "priority" not in r for r in canon["requests"]), p["id"]
        # the defaults given outright make the same scenario, the same run id
        d["config"]["scheduling_policy"] = "fcfs"
        for r in d["requests"]:
            r.update(n=1, priority=0)
        assert run_id_of(Scenario.from_dict(d)) == run_id_of(s), p["id"]
    # set, they are kept (and round-trip)
    s = load_preset("demo-priority")
    assert s.to_dict()["config"]["scheduling_policy"] == "priority"
    assert Scenario.from_dict(s.to_dict()) == s
    assert load_preset("demo-parallel-sampling").to_dict()["requests"][0]["n"] == 4


def test_bad_n_priority_and_policy_are_refused_naming_the_field() -> None:
    errs = errors_of(base(requests=[{"id": "a", "prompt_len": 5, "n": 0}]))
    assert "must be >= 1" in errs["requests[0].n"]
    errs = errors_of(base(requests=[{"id": "a", "prompt_len": 5, "n": 17}]))
    assert "must be <= 16" in errs["requests[0].n"]
    errs = errors_of(base(requests=[{"id": "a", "prompt_len": 5, "n": "4"}]))
    assert "integer" in errs["requests[0].n"]
    errs = errors_of(base(requests=[{"id": "a", "prompt_len": 5, "priority": 1.5}]))
    assert "integer" in errs["requests[0].priority"]
    errs = errors_of(base(config={"scheduling_policy": "lifo"}))
    assert "fcfs, priority" in errs["config.scheduling_policy"]
    # another request may not carry a child's name ({index}_{request_id})
    errs = errors_of(base(requests=[{"id": "a", "prompt_len": 5, "n": 2}, {"id": "1_a", "prompt_len": 3}]))
    assert "'1_a'" in errs["requests[0].n"] and "requests[1]" in errs["requests[0].n"]
    # the other flavours refuse both, naming the field
    nano = base(flavor="nanovllm", requests=[{"id": "a", "prompt_len": 5, "n": 2}])
    assert "vllm flavour only" in errors_of(nano)["requests[0].n"]
    ascend = base(flavor="ascend", config={**base()["config"], "scheduling_policy": "priority"})
    assert "vllm flavour only" in errors_of(ascend)["config.scheduling_policy"]


def test_a_requests_n_children_count_against_the_token_limit() -> None:
    limits = Limits(max_total_tokens=40)
    one = base(requests=[{"id": "a", "prompt_len": 10, "max_tokens": 5}])
    Scenario.from_dict(one, limits)  # 15 tokens
    errs = errors_of(base(requests=[{"id": "a", "prompt_len": 10, "max_tokens": 5, "n": 3}]), limits)
    assert "45 tokens" in errs["requests"]


def test_children_reach_the_scheduler_in_index_order_with_vllms_ids() -> None:
    d = base(
        config={**base()["config"], "enable_prefix_caching": True},
        requests=[
            {"id": "b", "prompt_len": 3, "max_tokens": 2},
            {"id": "a", "prompt_token_ids": list(range(10, 20)), "max_tokens": 3, "n": 3},
        ],
    )
    steps = steps_of(d)
    s1 = steps[0].scheduler
    assert list(s1["num_scheduled_tokens"]) == ["b", "0_a", "1_a", "2_a"]
    assert s1["parents"]["2_a"] == {"parent": "a", "index": 2, "n": 3} and "b" not in s1["parents"]
    assert all(t.scheduler["parents"] == s1["parents"] for t in steps if t.scheduler)
    # 0_a computes and caches the full blocks; its siblings hit them and compute the rest alone
    assert s1["num_scheduled_tokens"] == {"b": 3, "0_a": 10, "1_a": 2, "2_a": 2}
    blocks = s1["new_block_ids"]
    assert blocks["0_a"][:2] == blocks["1_a"][:2] == blocks["2_a"][:2]
    assert len({blocks[c][2] for c in ("0_a", "1_a", "2_a")}) == 3  # each its own partial block
    ref = steps[0].kv_cache["ref_cnt"]
    assert [ref[b] for b in blocks["0_a"]] == [3, 3, 1]
    # the synthetic sampler (no model) draws from each child's own id: the samples differ
    outs = {c: [t.sampled_token_ids[c] for t in steps if c in t.sampled_token_ids] for c in ("0_a", "1_a")}
    assert outs["0_a"] != outs["1_a"] and len(outs["0_a"]) == 3


def test_children_narration_says_there_is_no_copy_on_write_with_the_traces_numbers() -> None:
    s = load_preset("demo-parallel-sampling")
    t = next(iter(make_engine(s).run()))
    item = next(i for i in narrate(t, None, s.config) if i["key"] == "children:a")
    en, zh = item["text"]["en"], item["text"]["zh"]
    shared = t.scheduler["new_block_ids"]["0_a"][:-1]
    assert "does not copy on write" in en and "不做写时复制" in zh
    assert f"blocks {shared[0]}–{shared[-1]}" in en and f"满块 {shared[0]}–{shared[-1]}" in zh
    assert f"ref_cnt {t.kv_cache['ref_cnt'][shared[0]]}" in en
    own = t.scheduler["new_block_ids"]["3_a"][-1]
    assert f"3_a: {own}" in en and f"3_a: {own}" in zh
    assert "temperature 1" in en and "temperature 1" in zh
    assert {r["id"] for r in item["refs"] if r["kind"] == "block"} == set(shared)


def test_with_the_tiny_model_the_children_sample_at_temperature_1_and_the_rest_stay_greedy() -> None:
    d = base(
        config={"block_size": 4, "max_model_len": 32, "num_kv_blocks": 32, "device": "cpu"},
        requests=[
            {"id": "a", "prompt_len": 9, "max_tokens": 4, "n": 2},
            {"id": "b", "prompt_token_ids": [5, 6, 7, 8, 9], "max_tokens": 4},
        ],
    )
    steps = steps_of(d)
    outs = {
        c: [t.sampled_token_ids[c] for t in steps if c in t.sampled_token_ids] for c in ("0_a", "1_a", "b")
    }
    assert outs["0_a"] != outs["1_a"]  # vLLM refuses n > 1 with greedy sampling
    # the same scenario without the children: b's greedy tokens are unchanged by them
    alone = steps_of({**d, "requests": [d["requests"][1]]})
    assert [t.sampled_token_ids["b"] for t in alone if "b" in t.sampled_token_ids] == outs["b"]
    assert all(t.forward["paged_vs_dense_max_abs_diff"] < 1e-4 for t in steps if not t.idle)
    item = next(i for i in narrate(steps[0], None) if i["key"] == "children:a")
    assert "temperature 1" in item["text"]["en"] and "temperature 1" in item["text"]["zh"]
    # prefix caching off: nothing is shared, and the sentence says so
    assert "share no block" in item["text"]["en"] and "不共享任何块" in item["text"]["zh"]


def test_the_priority_waiting_queue_is_in_priority_then_arrival_order() -> None:
    cfg = {**base()["config"], "scheduling_policy": "priority", "max_num_reqs": 1}
    reqs = [
        {"id": "w", "prompt_len": 3, "max_tokens": 6},
        {"id": "x", "prompt_len": 3, "max_tokens": 2, "priority": 2},
        {"id": "y", "prompt_len": 3, "max_tokens": 2, "priority": 0},
        {"id": "z", "prompt_len": 3, "max_tokens": 2, "priority": -1, "arrival_step": 2},
        {"id": "v", "prompt_len": 3, "max_tokens": 2, "priority": 0, "n": 2},
    ]
    steps = steps_of(base(config=cfg, requests=reqs))
    assert steps[0].scheduler["waiting_req_ids"] == ["y", "0_v", "1_v", "x"]
    assert steps[1].scheduler["waiting_req_ids"] == ["z", "y", "0_v", "1_v", "x"]
    causes = steps[1].scheduler["waiting_causes"]
    assert causes["z"]["cause"] == "max_num_seqs" and causes["x"] == {"cause": "behind", "behind": "z"}
    order = [next(iter(t.scheduler["new_req_ids"])) for t in steps if t.scheduler.get("new_req_ids")]
    assert order == ["w", "z", "y", "0_v", "1_v", "x"]
    # fcfs keeps arrival order and ignores the priorities, as vLLM does
    cfg["scheduling_policy"] = "fcfs"
    steps = steps_of(base(config=cfg, requests=reqs))
    assert steps[1].scheduler["waiting_req_ids"] == ["x", "y", "0_v", "1_v", "z"]


def test_priority_preemption_takes_the_lowest_priority_and_says_why() -> None:
    s = load_preset("demo-priority")
    steps = list(make_engine(s).run())
    t6 = steps[5]
    assert t6.scheduler["preempted_req_ids"] == ["b"]
    cause = t6.scheduler["preemption_causes"]["b"]
    assert cause["for"] == "c" and cause["policy"] == "priority"
    assert (cause["priority"], cause["arrival_step"]) == (1, 1)
    assert list(t6.scheduler["num_scheduled_tokens"]) == ["a", "c"]
    item = next(i for i in narrate(t6, steps[4], s.config) if i["key"] == "preempt:b")
    en, zh = item["text"]["en"], item["text"]["zh"]
    assert "lowest-priority running request" in en and "priority 1" in en and "for request c" in en
    assert "not to the front" in en and "优先级最低" in zh and "priority 为 1" in zh
    assert "last request in the running queue" not in en
    # b resumes once c has finished, recomputing its tokens
    resumed = next(t for t in steps if "b" in t.scheduler.get("resumed_req_ids", []))
    assert "c" in resumed.scheduler["finished_req_ids"]
    # the same scenario under fcfs preempts c, the last running request, and names no priority
    d = preset_dict("demo-priority")
    d["config"]["scheduling_policy"] = "fcfs"
    fcfs = steps_of(d)[5].scheduler
    assert fcfs["preempted_req_ids"] == ["c"] and "policy" not in fcfs["preemption_causes"]["c"]


def test_a_victim_already_scheduled_this_step_is_taken_back() -> None:
    """vLLM's priority branch: a victim ahead of the request that needs a block, scheduled
    earlier in the same step, loses its tokens (they return to the budget)."""
    cfg = {
        "block_size": 2,
        "max_model_len": 12,
        "num_kv_blocks": 7,
        "max_num_batched_tokens": 32,
        "scheduling_policy": "priority",
        "model": None,
        "device": "cpu",
    }
    reqs = [
        {"id": "low", "prompt_len": 4, "max_tokens": 8, "priority": 5},
        {"id": "high", "prompt_len": 3, "max_tokens": 8, "priority": 0, "arrival_step": 2},
    ]
    steps = steps_of(base(config=cfg, requests=reqs))
    k = next(k for k, t in enumerate(steps) if t.scheduler["preempted_req_ids"])
    t = steps[k]
    # low runs ahead of high (it was admitted first), so the loop schedules it before high fails
    assert list(steps[k - 1].scheduler["num_scheduled_tokens"]) == ["low", "high"]
    assert t.scheduler["preempted_req_ids"] == ["low"]
    assert t.scheduler["preemption_causes"]["low"]["for"] == "high"
    assert t.scheduler["num_scheduled_tokens"] == {"high": 1}
    assert t.scheduler["total_num_scheduled_tokens"] == 1


def test_the_run_plots_name_the_children_not_the_parent() -> None:
    from pagedviz import plots
    from pagedviz.plots.run import lives

    src = plots.resolve("demo-parallel-sampling")
    assert src.req_ids() == ["0_a", "1_a", "2_a", "3_a"]
    segs, _, _ = lives(src)
    assert {s.req_id for s in segs} == {"0_a", "1_a", "2_a", "3_a"}
    # 0_a prefills the whole prompt; its siblings only the tokens past their prefix-cache hits
    first = {s.req_id: s.tokens for s in segs if s.start == 1 and s.state == "prefill"}
    assert first == {"0_a": 18, "1_a": 2, "2_a": 2, "3_a": 2}
