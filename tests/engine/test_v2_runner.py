"""Model Runner V2's rules (core/runners/v2.py), each pinned on a small scenario: state slots from the
top and reused LIFO, frees in sorted request-id order, the sorted batch and idx_mapping, a resumed
request sent as new, the worked example of the V2 notes, and the CUDA-graph padding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pagedviz.core import Scenario, make_engine
from pagedviz.core.scenario_parts import ScenarioError


def v2(requests: list[dict[str, Any]], **config: Any) -> Scenario:
    base: dict[str, Any] = {
        "model_runner": "v2",
        "async_scheduling": False,
        "block_size": 2,
        "max_model_len": 16,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 32,
        "num_kv_blocks": 24,
        "model": None,
    }
    base.update(config)
    return Scenario.from_dict({"name": "v2", "flavor": "vllm", "config": base, "requests": requests})


def steps(scenario: Scenario) -> list[Any]:
    return list(make_engine(scenario).run())


def test_the_worked_example_of_the_v2_notes_comes_out_with_the_real_block_pool() -> None:
    """reference/vllm-0.33-model-runner-v2.md §8: prompts A=5, B=3, C=7, block 4, M=8, D arrives in
    step 3. The notes chose block ids by hand; the real pool hands C's third block out of B's freed
    block 3 and gives D [6, 7] (their correction), so slot_mapping differs only there."""
    ids = {"A": range(101, 106), "B": range(201, 204), "C": range(301, 308), "D": range(401, 407)}
    reqs = [
        {"id": r, "prompt_token_ids": list(ids[r]), "max_tokens": m, "arrival_step": a}
        for r, m, a in (("A", 3, 1), ("B", 2, 1), ("C", 3, 1), ("D", 1, 3))
    ]
    t = steps(v2(reqs, block_size=4, max_model_len=32, max_num_reqs=8, num_kv_blocks=16))
    want = [
        (["B", "A", "C"], [6, 7, 5], [0, 3, 8, 15], [3, 5, 7], [2, 7, 14]),
        (["A", "B", "C"], [7, 6, 5], [0, 1, 2, 3], [6, 4, 8], [0, 1, 2]),
        (["A", "C", "D"], [7, 5, 6], [0, 1, 2, 8], [7, 9, 6], [0, 1, 7]),
    ]
    for step, (order, idx, qsl, seq_lens, logits) in zip(t, want):
        a = step.arrays
        assert step.batch["req_ids"] == order
        assert a["idx_mapping"].tolist() == idx
        assert a["query_start_loc"].tolist() == qsl
        assert a["seq_lens"].tolist() == seq_lens
        assert a["logits_indices"].tolist() == logits
    assert t[0].arrays["positions"].tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6]
    assert t[0].arrays["slot_mapping"].tolist() == [12, 13, 14, 4, 5, 6, 7, 8, *range(16, 23)]
    assert t[1].arrays["positions"].tolist() == [5, 3, 7]
    assert t[1].arrays["slot_mapping"].tolist() == [9, 15, 23]
    # decode inputs are last step's sampled tokens; D's prefill reads its prompt
    sampled = t[1].sampled_token_ids
    assert t[2].arrays["input_ids"].tolist() == [sampled["A"], sampled["C"], *range(401, 407)]
    assert t[2].arrays["slot_mapping"].tolist() == [10, 12, *range(24, 30)]


def test_slots_are_handed_out_from_the_top_and_a_freed_slot_is_reused_first() -> None:
    reqs = [
        {"id": "a", "prompt_len": 2, "max_tokens": 1},
        {"id": "b", "prompt_len": 2, "max_tokens": 3},
        {"id": "c", "prompt_len": 2, "max_tokens": 3},
        {"id": "d", "prompt_len": 2, "max_tokens": 1, "arrival_step": 3},
    ]
    t = steps(v2(reqs))
    assert t[0].batch["slots"] == {"a": 3, "b": 2, "c": 1}
    assert t[0].batch["free_slots"] == [0]
    # a finished in step 1; step 2 frees its slot, which is now the next one handed out
    assert t[1].batch["free_slots"] == [3, 0]
    assert t[2].batch["slots"]["d"] == 3
    assert t[2].batch["slot_events"] == [{"req_id": "d", "slot": 3, "event": "added"}]


def test_slots_are_freed_in_sorted_request_id_order() -> None:
    """Two requests finishing together free their slots sorted by id: the later-freed one (the
    larger id) is handed out first."""
    reqs = [
        {"id": "z", "prompt_len": 2, "max_tokens": 1},
        {"id": "a", "prompt_len": 2, "max_tokens": 1},
        {"id": "n", "prompt_len": 2, "max_tokens": 1, "arrival_step": 2},
    ]
    t = steps(v2(reqs))
    assert t[0].batch["slots"] == {"z": 3, "a": 2}
    events = [e for e in t[1].batch["slot_events"] if e["event"] == "freed"]
    assert [e["req_id"] for e in events] == ["a", "z"]
    assert t[1].batch["slots"] == {"n": 3}  # z's slot, freed last, is reused first


def test_the_batch_is_sorted_decodes_first_then_prefill_chunks_by_length() -> None:
    reqs = [
        {"id": "long", "prompt_len": 9, "max_tokens": 2, "arrival_step": 2},
        {"id": "d", "prompt_len": 3, "max_tokens": 3},
        {"id": "short", "prompt_len": 4, "max_tokens": 2, "arrival_step": 2},
    ]
    t = steps(v2(reqs))[1]
    assert t.batch["req_ids"] == ["d", "short", "long"]
    assert t.arrays["num_scheduled_tokens"].tolist() == [1, 4, 9]
    assert t.arrays["idx_mapping"].tolist() == [t.batch["slots"][r] for r in t.batch["req_ids"]]


def test_a_preempted_request_frees_its_slot_and_comes_back_as_new_in_a_fresh_slot() -> None:
    reqs = [
        {"id": "a", "prompt_len": 3, "max_tokens": 3},
        {"id": "b", "prompt_len": 4, "max_tokens": 6},
        {"id": "c", "prompt_len": 4, "max_tokens": 6},
    ]
    t = steps(v2(reqs, num_kv_blocks=9, max_num_batched_tokens=16))
    pre = next(s for s in t if s.scheduler["preempted_req_ids"])
    victim = pre.scheduler["preempted_req_ids"][0]
    assert victim not in pre.batch["slots"]
    freed = {"req_id": victim, "slot": t[0].batch["slots"][victim], "event": "freed"}
    assert freed in pre.batch["slot_events"]
    back = next(s for s in t[pre.step :] if victim in s.scheduler["new_req_ids"])
    assert back.scheduler["resumed_req_ids"] == []
    # it brings its prompt and its outputs so far, and prefills all of them
    row = back.batch["req_ids"].index(victim)
    n = back.arrays["num_scheduled_tokens"][row]
    assert n == back.arrays["prefill_len"][back.batch["slots"][victim]] > 4


def test_resumed_requests_get_slots_after_the_new_ones_of_the_same_step() -> None:
    t = steps(
        Scenario.from_dict(
            {
                "name": "demo",
                "flavor": "vllm",
                "config": {
                    "model_runner": "v2",
                    "async_scheduling": False,
                    "block_size": 2,
                    "max_model_len": 16,
                    "max_num_reqs": 4,
                    "max_num_batched_tokens": 16,
                    "num_kv_blocks": 9,
                    "model": None,
                },
                "requests": [
                    {"id": "a", "prompt_len": 3, "max_tokens": 3},
                    {"id": "b", "prompt_len": 4, "max_tokens": 6},
                    {"id": "c", "prompt_len": 4, "max_tokens": 6},
                    {"id": "d", "prompt_len": 5, "max_tokens": 2, "arrival_step": 5},
                ],
            }
        )
    )
    both = next(s for s in t if len(s.scheduler["new_req_ids"]) == 2)
    new, resumed = both.scheduler["new_req_ids"]
    added = [e["req_id"] for e in both.batch["slot_events"] if e["event"] == "added"]
    assert added == [new, resumed] and new == "d" and resumed == "c"


def test_a_full_decode_graph_pads_requests_and_a_piecewise_graph_pads_only_tokens() -> None:
    reqs = [{"id": r, "prompt_len": 3, "max_tokens": 3} for r in "abc"]
    t = steps(v2(reqs, cudagraph_capture_sizes=[1, 2, 4, 8, 16]))
    prefill, decode = t[0], t[1]
    assert prefill.scalars["cudagraph_mode"] == "PIECEWISE"
    assert prefill.scalars["num_reqs_padded"] == 3 and prefill.scalars["num_tokens_after_padding"] == 16
    assert decode.scalars["cudagraph_mode"] == "FULL"
    assert decode.scalars["num_reqs_padded"] == 4 and decode.scalars["num_tokens_after_padding"] == 4
    a, e = decode.arrays, decode.array_entries
    assert e["query_start_loc"].buffer[:5].tolist() == [0, 1, 2, 3, 3]
    assert e["seq_lens"].buffer[3] == 0
    assert a["slot_mapping"].tolist()[3] == -1 and e["slot_mapping"].valid == 3
    assert (a["input_block_tables"][3] == 0).all()


def test_without_capture_sizes_nothing_is_padded() -> None:
    t = steps(v2([{"id": "a", "prompt_len": 3, "max_tokens": 2}]))
    assert all(s.scalars["cudagraph_mode"] == "NONE" for s in t)
    assert all(s.scalars["num_tokens_after_padding"] == s.scalars["total_num_scheduled_tokens"] for s in t)


def test_vllm_defaults_to_v2_and_async_and_other_flavours_to_v1_and_sync() -> None:
    base = {"requests": [{"id": "a", "prompt_len": 3, "max_tokens": 2}]}
    cfg = Scenario.from_dict({**base, "flavor": "vllm"}).config
    assert (cfg.model_runner, cfg.async_scheduling) == ("v2", True)
    for flavor in ("ascend", "nanovllm"):
        cfg = Scenario.from_dict({**base, "flavor": flavor}).config
        assert (cfg.model_runner, cfg.async_scheduling) == ("v1", False)
    # n-gram drafts run on V2 in vLLM 0.33, with async scheduling on
    spec = Scenario.from_dict({**base, "config": {"num_speculative_tokens": 2}}).config
    assert (spec.model_runner, spec.async_scheduling) == ("v2", True)


@pytest.mark.parametrize(
    ("flavor", "config", "needle"),
    [
        ("ascend", {"model_runner": "v2"}, "the ascend flavour has no Model Runner V2"),
        ("nanovllm", {"model_runner": "v2"}, "the nanovllm flavour has no Model Runner V2"),
        ("vllm", {"model_runner": "v3"}, "model_runner"),
    ],
)
def test_a_runner_the_flavour_or_settings_cannot_run_is_refused_naming_the_field(
    flavor: str, config: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(
            {"flavor": flavor, "config": config, "requests": [{"id": "a", "prompt_len": 3, "max_tokens": 2}]}
        )
    assert "config.model_runner" in str(err.value) and needle in str(err.value)


def test_v2_and_v1_schedule_the_same_tokens_into_the_same_blocks() -> None:
    """The runners differ in rows and slots, not in what the scheduler decides: each step
    schedules the same tokens and writes the same KV slots per request."""
    reqs = [
        {"id": "a", "prompt_len": 3, "max_tokens": 3},
        {"id": "b", "prompt_len": 4, "max_tokens": 6},
        {"id": "c", "prompt_len": 4, "max_tokens": 6},
    ]
    one = steps(v2(reqs, model_runner="v1", num_kv_blocks=9, max_num_batched_tokens=16))
    two = steps(v2(reqs, num_kv_blocks=9, max_num_batched_tokens=16))
    assert len(one) == len(two)
    for s1, s2 in zip(one, two):
        assert s1.scheduler["num_scheduled_tokens"] == s2.scheduler["num_scheduled_tokens"]
        assert s1.scheduler["preempted_req_ids"] == s2.scheduler["preempted_req_ids"]

        def per_request(s: Any) -> dict[str, list[int]]:
            n = s.arrays["num_scheduled_tokens"]
            cut = np.cumsum(n)[:-1]
            slots = np.split(s.arrays["slot_mapping"][: n.sum()], cut)
            return {r: sl.tolist() for r, sl in zip(s.batch["req_ids"], slots)}

        assert per_request(s1) == per_request(s2)
