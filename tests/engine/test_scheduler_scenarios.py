"""Preemption, condense and prefix-cache hits, each pinned to the ids §3's rules give."""

from __future__ import annotations

from tests.support.scenarios import make_scenario, run_all


def test_preemption_recomputes_the_last_running_request() -> None:
    steps = run_all(
        make_scenario(
            [{"id": "A", "prompt_len": 4, "max_tokens": 4}, {"id": "B", "prompt_len": 4, "max_tokens": 4}]
        )
    )
    s1, s2, s3, s4, s5 = steps[:5]
    assert s1.scheduler["new_block_ids"] == {"A": [1, 2], "B": [3, 4]}
    # step 2: A needs a third block (5); B then finds the pool empty and preempts itself
    assert s2.scheduler["num_scheduled_tokens"] == {"A": 1}
    assert s2.scheduler["preempted_req_ids"] == ["B"]
    assert s2.scheduler["waiting_req_ids"] == ["B"]
    assert s2.kv_cache["free_block_queue"] == [4, 3]  # B's blocks, freed in reverse
    assert s2.batch["req_ids"] == ["A"] and s2.arrays["slot_mapping"].tolist() == [10]
    # step 3: B (5 tokens now) cannot get 3 blocks from 2 free ones
    assert s3.scheduler["num_scheduled_tokens"] == {"A": 1}
    assert s4.scheduler["new_block_ids"] == {"A": [4]}
    # A finished at step 4 and freed [1, 2, 5, 4] in reverse to the head: 4, 5, 2, 1, then 3.
    # B resumes and recomputes 5 tokens in the first three
    assert s5.scheduler["resumed_req_ids"] == ["B"]
    assert s5.scheduler["num_scheduled_tokens"] == {"B": 5}
    assert s5.scheduler["new_block_ids"] == {"B": [4, 5, 2]}
    assert s5.kv_cache["free_block_queue"] == [1, 3]
    assert s5.arrays["num_computed_tokens_cpu"].tolist() == [0]
    assert s5.arrays["slot_mapping"].tolist() == [8, 9, 10, 11, 4]


def test_condense_moves_the_last_row_into_the_hole() -> None:
    steps = run_all(
        make_scenario(
            [
                {"id": "A", "prompt_len": 2, "max_tokens": 1},
                {"id": "B", "prompt_len": 2, "max_tokens": 3},
                {"id": "C", "prompt_len": 2, "max_tokens": 3},
            ],
            num_kv_blocks=16,
        )
    )
    s1, s2 = steps[:2]
    assert s1.batch["req_ids"] == ["A", "B", "C"]
    assert s1.arrays["block_table"][:3, :2].tolist() == [[1, 0], [2, 0], [3, 0]]
    assert s2.scheduler["finished_req_ids"] == ["A"]
    assert s2.batch["moves"] == [{"req_id": "C", "from": 2, "to": 0}]
    assert s2.batch["req_ids"] == ["C", "B"]
    # A's block 1 went back to the head of the queue: B's next block is 1, C's is 4
    assert s2.arrays["block_table"][:3, :2].tolist() == [[3, 4], [2, 1], [0, 0]]
    assert s2.arrays["num_scheduled_tokens"].tolist() == [1, 1]


def test_new_request_takes_the_lowest_hole_so_nothing_moves() -> None:
    steps = run_all(
        make_scenario(
            [
                {"id": "A", "prompt_len": 2, "max_tokens": 1},
                {"id": "B", "prompt_len": 2, "max_tokens": 3},
                {"id": "C", "prompt_len": 2, "max_tokens": 3},
                {"id": "D", "prompt_len": 2, "max_tokens": 2, "arrival_step": 2},
            ],
            num_kv_blocks=16,
        )
    )
    s2 = steps[1]
    assert s2.scheduler["new_req_ids"] == ["D"]
    assert s2.batch["req_ids"] == ["D", "B", "C"] and s2.batch["moves"] == []


def test_prefix_cache_hits_within_a_step_and_across_steps() -> None:
    shared = list(range(10, 18))
    steps = run_all(
        make_scenario(
            [
                {"id": "A", "prompt_token_ids": [*shared, 18, 19], "max_tokens": 1},
                {"id": "B", "prompt_token_ids": [*shared, 40, 41], "max_tokens": 1},
                {"id": "C", "prompt_token_ids": [*shared, 50, 51, 52], "max_tokens": 1, "arrival_step": 2},
            ],
            block_size=4,
            max_model_len=16,
            num_kv_blocks=10,
            enable_prefix_caching=True,
        )
    )
    s1, s2 = steps
    # A fills and hashes blocks 1 and 2 at allocation; B, later in the same step, hits them
    assert s1.scheduler["new_block_ids"] == {"A": [1, 2, 3], "B": [1, 2, 4]}
    assert s1.scheduler["num_scheduled_tokens"] == {"A": 10, "B": 2}
    assert s1.arrays["num_computed_tokens_cpu"].tolist() == [0, 8]
    assert s1.kv_cache["ref_cnt"][1:5] == [2, 2, 1, 1]
    assert s1.arrays["slot_mapping"].tolist() == [*range(4, 14), 16, 17]
    # C arrives after both finished: 1 and 2 wait hashed at the tail; 4 and 3 unhashed at the head
    assert s2.scheduler["new_block_ids"] == {"C": [1, 2, 4]}
    assert s2.kv_cache["free_block_queue"] == [3, 5, 6, 7, 8, 9]
    assert s2.arrays["slot_mapping"].tolist() == [16, 17, 18]


def test_idle_steps_keep_step_numbers_aligned_with_arrivals() -> None:
    steps = run_all(make_scenario([{"id": "late", "prompt_len": 2, "max_tokens": 1, "arrival_step": 3}]))
    assert [s.idle for s in steps] == [True, True, False]
    assert steps[0].arrays["slot_mapping"].tolist() == [] and steps[0].scalars["num_reqs"] == 0
    assert steps[2].scheduler["new_req_ids"] == ["late"]


def test_without_chunked_prefill_a_prompt_over_the_budget_waits() -> None:
    steps = run_all(
        make_scenario(
            [
                {"id": "A", "prompt_len": 4, "max_tokens": 2},
                {"id": "B", "prompt_len": 5, "max_tokens": 1},
            ],
            max_num_batched_tokens=6,
            enable_chunked_prefill=False,
            max_model_len=6,
            num_kv_blocks=16,
        )
    )
    assert steps[0].scheduler["num_scheduled_tokens"] == {"A": 4}
    assert steps[0].scheduler["waiting_req_ids"] == ["B"]
    assert steps[1].scheduler["num_scheduled_tokens"] == {"A": 1, "B": 5}


def test_long_prefill_threshold_caps_each_chunk() -> None:
    steps = run_all(
        make_scenario(
            [{"id": "A", "prompt_len": 7, "max_tokens": 1}, {"id": "B", "prompt_len": 1, "max_tokens": 4}],
            long_prefill_token_threshold=3,
            num_kv_blocks=16,
        )
    )
    assert [s.scheduler["num_scheduled_tokens"]["A"] for s in steps[:3]] == [3, 3, 1]
    assert [bool(s.arrays["discard_request_mask"][0]) for s in steps[:3]] == [True, True, False]
    assert [len(s.sampled_token_ids) for s in steps[:3]] == [1, 1, 2]


def test_long_prefill_cap_spares_a_lone_request_unless_asked() -> None:
    one = [{"id": "A", "prompt_len": 7, "max_tokens": 1}]
    lone = run_all(make_scenario(one, long_prefill_token_threshold=3, num_kv_blocks=16))
    assert [s.scheduler["num_scheduled_tokens"]["A"] for s in lone] == [7]
    older = run_all(
        make_scenario(
            one, long_prefill_token_threshold=3, num_kv_blocks=16, long_prefill_cap_lone_request=True
        )
    )
    assert [s.scheduler["num_scheduled_tokens"]["A"] for s in older] == [3, 3, 1]


def test_requests_finishing_together_are_freed_in_scheduling_order() -> None:
    steps = run_all(
        make_scenario(
            [
                {"id": "A", "prompt_len": 2, "max_tokens": 1},
                {"id": "B", "prompt_len": 2, "max_tokens": 3},
                {"id": "C", "prompt_len": 2, "max_tokens": 3},
                {"id": "D", "prompt_len": 4, "max_tokens": 1, "arrival_step": 4},
            ],
            num_kv_blocks=16,
        )
    )
    # from step 2 the batch rows are [C, B] (condense) while the running order stays [B, C]
    assert steps[2].batch["req_ids"] == ["C", "B"]
    assert steps[2].scheduler["num_scheduled_tokens"] == {"B": 1, "C": 1}
    # both finish at step 3: B frees [2, 1], then C frees [3, 4], each to the head in reverse
    assert steps[3].scheduler["new_block_ids"] == {"D": [4, 3]}
    assert steps[3].kv_cache["free_block_queue"][:2] == [1, 2]


def test_full_sequence_admission_keeps_a_request_waiting_until_it_all_fits() -> None:
    reqs = [{"id": "A", "prompt_len": 6, "max_tokens": 2}, {"id": "B", "prompt_len": 6, "max_tokens": 2}]
    cfg = {"max_num_batched_tokens": 8, "num_kv_blocks": 6}
    # A takes 3 of the 5 usable blocks; B's first chunk (2 tokens) would fit, its 6 tokens not
    s1 = run_all(make_scenario(reqs, **cfg))[0]
    assert s1.scheduler["num_scheduled_tokens"] == {"A": 6}
    assert s1.scheduler["waiting_req_ids"] == ["B"]
    older = run_all(make_scenario(reqs, **cfg, scheduler_reserve_full_isl=False))[0]
    assert older.scheduler["num_scheduled_tokens"] == {"A": 6, "B": 2}


def test_watermark_holds_back_admissions_while_others_run() -> None:
    reqs = [{"id": x, "prompt_len": 2, "max_tokens": 1} for x in "ABC"]
    # 0.5 of 6 blocks: 3 stay free; A enters an empty engine, B leaves 3 free, C would leave 2
    s1 = run_all(make_scenario(reqs, num_kv_blocks=6, watermark=0.5))[0]
    assert s1.scheduler["num_scheduled_tokens"] == {"A": 2, "B": 2}
    assert s1.scheduler["waiting_req_ids"] == ["C"]
    assert run_all(make_scenario(reqs, num_kv_blocks=6))[0].scheduler["waiting_req_ids"] == []


def test_max_num_reqs_bounds_the_batch() -> None:
    steps = run_all(
        make_scenario(
            [{"id": str(i), "prompt_len": 1, "max_tokens": 2} for i in range(3)],
            max_num_reqs=2,
            num_kv_blocks=16,
        )
    )
    assert steps[0].scheduler["num_scheduled_tokens"] == {"0": 1, "1": 1}
    assert steps[0].scheduler["waiting_req_ids"] == ["2"]


def test_same_scenario_gives_the_same_trace() -> None:
    from pagedviz.core import load_preset

    def strip(steps: list) -> list:
        out = []
        for s in steps:
            d = s.to_dict()
            d.pop("timing_us")
            out.append(d)
        return out

    assert strip(run_all(load_preset("seed-000"))) == strip(run_all(load_preset("seed-000")))


def test_configs_vllm_refuses_are_refused_with_its_reason() -> None:
    import pytest

    from pagedviz.core.scenario_parts import ScenarioError

    with pytest.raises(ScenarioError) as e:
        make_scenario(
            [{"id": "A", "prompt_len": 2, "max_tokens": 1}],
            enable_chunked_prefill=False,
            max_num_batched_tokens=6,
            max_model_len=8,
        )
    assert e.value.errors[0][0] == "config.max_num_batched_tokens"
    assert "smaller than max_model_len (8)" in e.value.errors[0][1]
    with pytest.raises(ScenarioError, match="greater than or equal to max_num_seqs"):
        make_scenario([{"id": "A", "prompt_len": 2, "max_tokens": 1}], max_num_batched_tokens=3)
    with pytest.raises(ScenarioError, match="cannot be greater than the max_model_len"):
        make_scenario([{"id": "A", "prompt_len": 2, "max_tokens": 1}], long_prefill_token_threshold=9)


def test_vocab_size_is_a_setting_of_its_own() -> None:
    import pytest

    from pagedviz.core import Scenario
    from pagedviz.core.scenario_parts import ScenarioError

    big = [{"id": "A", "prompt_token_ids": [151000, 7], "max_tokens": 2}]
    sc = make_scenario(big, vocab_size=151936)
    assert sc.config.vocab_size == 151936
    assert all(3 <= t < 151936 for t in run_all(sc)[0].sampled_token_ids.values())
    assert Scenario.from_dict(sc.to_dict()).config == sc.config
    with pytest.raises(ScenarioError, match="vocab_size=512"):
        make_scenario(big)
    # a model takes the setting, and its own vocab_size is still read
    with_model = make_scenario([{"id": "A", "prompt_len": 2, "max_tokens": 2}], model={}, vocab_size=64)
    assert with_model.config.model is not None and with_model.config.model.vocab_size == 64
    old = make_scenario([{"id": "A", "prompt_len": 2, "max_tokens": 2}], model={"vocab_size": 40})
    assert old.config.vocab_size == 40
