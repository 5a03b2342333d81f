"""The causes oracle (pagedviz.core.vllm_engine.causes) on vLLM 0.33.0's own Scheduler, in cases
whose cause is known by construction: chunked prefill off with a prompt longer than the budget
left (`token_budget`), a pool too small (`kv_pool`, with and without the watermark),
max_num_seqs = 1 (`max_num_seqs`), a budget the running requests use up, a preemption (and for
whom), placeholder drafts that do not fit (V2), and the issue's own example. Also: watching
changes nothing of what vLLM schedules, and the scheduler copy the counterfactuals run on is
independent of the original, for any pool size (pytest -m fidelity).
"""

from __future__ import annotations

from typing import Any

import pytest

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import preset_dict
from tests.support.fidelity_env import needs_triton, require_vllm

require_vllm()
from pagedviz.core.vllm_engine import v1 as vllm_side  # noqa: E402
from pagedviz.core.vllm_engine.causes import CausesOracle, StepCauses  # noqa: E402
from pagedviz.core.vllm_engine.sched_copy import copy_scheduler  # noqa: E402


def _scenario(reqs: list[dict[str, Any]], **config: Any) -> Scenario:
    cfg = {
        "model_runner": "v1",
        "async_scheduling": False,
        "block_size": 4,
        "max_model_len": 32,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 32,
        "num_kv_blocks": 40,
        "model": None,
        "device": "cpu",
        **config,
    }
    return Scenario.from_dict({"name": "causes", "flavor": "vllm", "config": cfg, "requests": reqs})


def oracle_run(scenario: Scenario) -> list[StepCauses]:
    """vLLM's side (V1 or V2 by the scenario) stepped with pagedviz's sampled tokens, the oracle
    watching: each step's causes."""
    v2 = scenario.config.model_runner == "v2"
    if v2:
        from pagedviz.core.vllm_engine.v2 import VllmV2Side
        from tests.support.vllm_v2 import targets

        side: Any = VllmV2Side(scenario)
    else:
        side = vllm_side.VllmSide(scenario)
    oracle = CausesOracle(side.scheduler)
    steps = []
    for t in make_engine(scenario).run():
        if v2:
            side.step(t.sampled_token_ids, targets(t))
        else:
            side.step(t.sampled_token_ids)
        assert oracle.last is not None, f"step {t.step}"
        assert oracle.last.problem is None, f"step {t.step}: {oracle.last.problem}"
        steps.append(oracle.last)
    return steps


def _waits(steps: list[StepCauses]) -> list[dict[str, dict[str, Any]]]:
    return [s.waiting for s in steps]


def test_chunking_off_a_prompt_longer_than_the_budget_left_waits_for_the_token_budget() -> None:
    reqs = [
        {"id": "a", "prompt_len": 20, "max_tokens": 2},
        {"id": "b", "prompt_len": 16, "max_tokens": 2},
        {"id": "c", "prompt_len": 4, "max_tokens": 2},
    ]
    steps = oracle_run(_scenario(reqs, enable_chunked_prefill=False))
    # a takes 20 of 32: b needs 16 with 12 left, and c (4 tokens, it would fit) is behind b
    assert steps[0].waiting == {
        "b": {"cause": "token_budget", "tokens_needed": 16, "tokens_left": 12},
        "c": {"cause": "behind", "behind": "b"},
    }
    assert steps[0].head == "b"


def test_the_issue_example_chunked_prefill_off_step_2_request_4_needs_120_with_70_left() -> None:
    d = preset_dict("seed-000")
    d["config"] = {**d["config"], "enable_chunked_prefill": False, "max_num_batched_tokens": 240}
    d["config"].update(model=None, device="cpu")
    steps = oracle_run(Scenario.from_dict(d))
    assert steps[1].waiting == {"4": {"cause": "token_budget", "tokens_needed": 120, "tokens_left": 70}}


def test_a_tiny_pool_leaves_the_head_waiting_for_blocks_with_vllms_counts() -> None:
    # 6 blocks, one of them the null block: a's 17 tokens take 5 of the 5 usable blocks
    reqs = [
        {"id": "a", "prompt_len": 17, "max_tokens": 2},
        {"id": "b", "prompt_len": 4, "max_tokens": 2},
    ]
    steps = oracle_run(_scenario(reqs, num_kv_blocks=6, max_model_len=20))
    # vLLM 0.33's default scheduler_reserve_full_isl checks the whole sequence first
    want = {"cause": "kv_pool", "blocks_needed": 1, "blocks_free": 0, "full_sequence": True}
    assert steps[0].waiting == {"b": want}
    steps = oracle_run(_scenario(reqs, num_kv_blocks=6, max_model_len=20, scheduler_reserve_full_isl=False))
    assert steps[0].waiting == {"b": {"cause": "kv_pool", "blocks_needed": 1, "blocks_free": 0}}


def test_a_watermark_that_holds_the_head_back_is_named_with_its_blocks() -> None:
    # 21 blocks, 20 usable; watermark 0.1 keeps int(0.1 * 21) = 2 blocks back while a request runs
    reqs = [
        {"id": "a", "prompt_len": 64, "max_tokens": 2},
        {"id": "b", "prompt_len": 8, "max_tokens": 2},
        {"id": "c", "prompt_len": 4, "max_tokens": 2},
    ]
    steps = oracle_run(
        _scenario(reqs, num_kv_blocks=21, max_model_len=80, max_num_batched_tokens=80, watermark=0.1)
    )
    # a takes 16 blocks, b 2 of the 4 left (2 + 2 <= 4); c needs 1 of the 2 free, not 1 + 2
    want = {"cause": "kv_pool", "blocks_needed": 1, "blocks_free": 2, "watermark_blocks": 2}
    assert steps[0].waiting == {"c": {**want, "full_sequence": True}}


def test_max_num_seqs_1_keeps_the_second_request_waiting_and_the_third_behind_it() -> None:
    reqs = [{"id": x, "prompt_len": 4, "max_tokens": 2} for x in "abc"]
    steps = oracle_run(_scenario(reqs, max_num_reqs=1))
    assert steps[0].waiting == {
        "b": {"cause": "max_num_seqs", "running": 1, "max_num_seqs": 1},
        "c": {"cause": "behind", "behind": "b"},
    }


def test_a_budget_the_running_requests_use_up_leaves_zero_tokens_for_the_head() -> None:
    # chunked prefill: a's 40 tokens take the whole budget of 8 for five steps; b arrives at 2
    reqs = [
        {"id": "a", "prompt_len": 40, "max_tokens": 2},
        {"id": "b", "prompt_len": 4, "max_tokens": 2, "arrival_step": 2},
    ]
    steps = oracle_run(_scenario(reqs, max_num_batched_tokens=8, max_model_len=48))
    assert steps[1].waiting == {"b": {"cause": "token_budget", "tokens_needed": 4, "tokens_left": 0}}


def test_a_preemption_names_its_victim_and_for_whom_and_admits_nobody() -> None:
    d = preset_dict("demo-preemption")
    d["config"] = {**d["config"], "model": None, "device": "cpu"}
    steps = oracle_run(Scenario.from_dict(d))
    # step 3: a (first in running order) needs a block, the pool is empty, c (last) goes
    pool = {"blocks_needed": 1, "blocks_free": 0}
    assert steps[2].preemption == {"c": {"cause": "kv_pool", "for": "a", **pool}}
    assert steps[2].waiting == {"c": {"cause": "preemption", "preempted": ["c"]}}
    assert steps[5].preemption == {"c": {"cause": "kv_pool", "for": "b", **pool}}
    # the other steps preempt nobody
    assert [i + 1 for i, s in enumerate(steps) if s.preemption] == [3, 6]


@needs_triton()
def test_placeholder_drafts_that_do_not_fit_keep_a_one_token_request_waiting_v2() -> None:
    """Model Runner V2 with n-gram drafts: vLLM pads a waiting request with one token to compute
    to 1 + num_speculative_tokens while decodes run, and prefers not to schedule it unpadded."""
    reqs = [
        {"id": "a", "prompt_len": 4, "max_tokens": 6},
        {"id": "b", "prompt_token_ids": [9], "max_tokens": 2, "arrival_step": 3},
    ]
    cfg = {"model_runner": "v2", "num_speculative_tokens": 3, "max_num_batched_tokens": 6}
    steps = oracle_run(_scenario(reqs, block_size=2, **cfg))
    # step 3: a decodes with 3 placeholder drafts (4 tokens), 2 left; b padded would need 4
    assert steps[2].waiting == {
        "b": {"cause": "token_budget", "tokens_needed": 4, "tokens_left": 2, "padded": True}
    }


def test_watching_changes_nothing_vllm_schedules() -> None:
    reqs = [{"id": x, "prompt_len": n, "max_tokens": 4} for x, n in zip("abcde", (6, 10, 4, 12, 3))]
    cfg = {"block_size": 2, "max_model_len": 16, "num_kv_blocks": 10, "max_num_reqs": 3}
    scenario = _scenario(reqs, max_num_batched_tokens=16, enable_chunked_prefill=False, **cfg)
    watched, plain = vllm_side.VllmSide(scenario), vllm_side.VllmSide(scenario)
    oracle = CausesOracle(watched.scheduler)
    kinds = set()
    for t in make_engine(scenario).run():
        a, got_a = watched.step(t.sampled_token_ids)
        b, got_b = plain.step(t.sampled_token_ids)
        assert a.num_scheduled_tokens == b.num_scheduled_tokens, f"step {t.step}"
        assert got_a["free_block_queue"] == got_b["free_block_queue"], f"step {t.step}"
        assert a.preempted_req_ids == b.preempted_req_ids, f"step {t.step}"
        kinds |= {c["cause"] for c in oracle.last.waiting.values()} if oracle.last else set()
    assert {"preemption", "kv_pool", "token_budget", "behind"} <= kinds, kinds
    oracle.close()
    assert "schedule" not in vars(watched.scheduler)


@pytest.mark.parametrize("num_kv_blocks", [9, 5000])
def test_a_scheduler_copy_is_independent_of_the_original(num_kv_blocks: int) -> None:
    """Scheduling the copy leaves the original's free queue, requests and queues as they were
    (a pool of thousands of blocks too: the free queue's linked list is copied flat)."""
    d = preset_dict("demo-preemption")
    d["config"] = {**d["config"], "model": None, "device": "cpu", "num_kv_blocks": num_kv_blocks}
    side = vllm_side.VllmSide(Scenario.from_dict(d))
    side.step_no = 1
    side.add_arrivals()
    s = side.scheduler

    def state(x: Any) -> Any:
        free = [b.block_id for b in x.kv_cache_manager.block_pool.free_block_queue.get_all_free_blocks()]
        reqs = {r: (q.num_computed_tokens, q.status) for r, q in x.requests.items()}
        return free, reqs, [r.request_id for r in x.running], [r.request_id for r in x.waiting]

    seen = state(s)
    c = copy_scheduler(s)
    assert state(c) == seen
    theirs = c.schedule()
    assert state(s) == seen, "the copy's schedule() changed the original"
    assert state(c) != seen, "the copy scheduled nothing"
    # and the original, scheduled now, does what its copy did
    assert s.schedule().num_scheduled_tokens == theirs.num_scheduled_tokens
    assert state(s) == state(c)
