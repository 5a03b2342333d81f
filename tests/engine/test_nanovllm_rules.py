"""The nanovllm flavour held to nano-vllm's own code, rule by rule (HEAD bb823b3).

Each test names the upstream function whose rule it checks: `BlockManager` (engine/block_manager.py),
`Scheduler` (engine/scheduler.py) and `ModelRunner.prepare_prefill` / `prepare_decode`
(engine/model_runner.py), and the LM head's `last_indices` (layers/embed_head.py).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario, make_engine
from pagedviz.core.flavors.nanovllm_blocks import NanoBlockManager
from pagedviz.core.request import Request
from pagedviz.core.scenario_parts import RequestSpec
from pagedviz.core.trace import StepTrace


def scenario(requests: list[dict[str, Any]], model: bool = False, **config: Any) -> Scenario:
    cfg = {
        "block_size": 4,
        "max_model_len": 64,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 64,
        "num_kv_blocks": 16,
        "device": "cpu",
        **config,
    }
    if not model:
        cfg["model"] = None
    return Scenario.from_dict({"name": "rules", "flavor": "nanovllm", "config": cfg, "requests": requests})


def run(s: Scenario) -> list[StepTrace]:
    return list(make_engine(s).run())


PREFIX = list(range(20, 32))  # three full blocks of 4


def test_allocate_reuses_cached_blocks_and_prefill_starts_at_num_cached_tokens() -> None:
    # BlockManager.can_allocate/allocate look up the chained hashes; prepare_prefill starts at
    # seq.num_cached_tokens, so cu_seqlens_k runs ahead of cu_seqlens_q by the cached tokens
    s = scenario(
        [
            {"id": "a", "prompt_token_ids": [*PREFIX, 40, 41], "max_tokens": 6},
            {"id": "b", "prompt_token_ids": [*PREFIX, 50], "max_tokens": 2, "arrival_step": 3},
        ]
    )
    steps = run(s)
    t = next(t for t in steps if "b" in t.scheduler["new_req_ids"])
    a_blocks = steps[0].scheduler["new_block_ids"]["a"]
    b_blocks = t.scheduler["new_block_ids"]["b"]
    assert b_blocks[:3] == a_blocks[:3] and b_blocks[3] not in a_blocks
    assert [t.kv_cache["ref_cnt"][b] for b in a_blocks[:3]] == [2, 2, 2]
    arr = t.arrays
    assert arr["positions"].tolist() == [12]
    assert arr["input_ids"].tolist() == [50]
    assert arr["cu_seqlens_q"].tolist() == [0, 1] and arr["cu_seqlens_k"].tolist() == [0, 13]
    assert t.scalars["max_seqlen_q"] == 1 and t.scalars["max_seqlen_k"] == 13
    # a cache hit: prepare_prefill passes the block tables
    assert arr["block_tables"].tolist() == [b_blocks]
    assert arr["slot_mapping"].tolist() == [b_blocks[3] * 4 + 0]


def test_prefill_without_a_cache_hit_passes_no_block_tables() -> None:
    # ModelRunner.prepare_prefill: block_tables only `if cu_seqlens_k[-1] > cu_seqlens_q[-1]`
    t = run(
        scenario(
            [{"id": "a", "prompt_len": 9, "max_tokens": 2}, {"id": "b", "prompt_len": 5, "max_tokens": 2}]
        )
    )
    first, second = t[0], t[1]
    assert first.scalars["is_prefill"] and "block_tables" not in first.arrays
    assert first.arrays["cu_seqlens_k"].tolist() == first.arrays["cu_seqlens_q"].tolist() == [0, 9, 14]
    assert first.scalars["block_tables"].startswith("None")
    # prepare_decode always passes them
    assert not second.scalars["is_prefill"] and "block_tables" in second.arrays


def test_the_last_block_is_never_looked_up() -> None:
    # BlockManager.can_allocate: `for i in range(seq.num_blocks - 1)` -- a prompt of exactly three
    # full blocks, all cached, still computes its last block
    s = scenario(
        [
            {"id": "a", "prompt_token_ids": PREFIX, "max_tokens": 1},
            {"id": "b", "prompt_token_ids": PREFIX, "max_tokens": 1, "arrival_step": 3},
        ]
    )
    t = next(t for t in run(s) if "b" in t.scheduler["new_req_ids"])
    assert t.arrays["positions"].tolist() == [8, 9, 10, 11]
    assert t.arrays["cu_seqlens_k"].tolist() == [0, 12]


def test_blocks_are_hashed_only_after_their_tokens_were_computed() -> None:
    # Scheduler.postprocess calls BlockManager.hash_blocks: two equal prompts prefilled in the
    # same step find nothing of each other
    t = run(
        scenario(
            [
                {"id": "a", "prompt_token_ids": PREFIX, "max_tokens": 1},
                {"id": "b", "prompt_token_ids": PREFIX, "max_tokens": 1},
            ]
        )
    )[0]
    nb = t.scheduler["new_block_ids"]
    assert not set(nb["a"]) & set(nb["b"])
    assert "block_tables" not in t.arrays
    # after the step, the filled blocks carry hashes (each of a's three full blocks, and b's)
    engine = make_engine(
        scenario(
            [
                {"id": "a", "prompt_token_ids": PREFIX, "max_tokens": 3},
                {"id": "b", "prompt_token_ids": PREFIX, "max_tokens": 3},
            ]
        )
    )
    engine.step()
    hashed = {b for b, h in enumerate(engine.bm.hash) if h is not None}
    assert hashed == set(engine.bm.block_tables["a"][:3]) | set(engine.bm.block_tables["b"][:3])


def test_hashes_chain_the_parent_block() -> None:
    # BlockManager.compute_hash(token_ids, prefix): the same block after a different prefix misses
    s = scenario(
        [
            {"id": "a", "prompt_token_ids": [*PREFIX, 60], "max_tokens": 1},
            {
                "id": "b",
                "prompt_token_ids": [1, 2, 3, 4, *PREFIX[4:], 60],
                "max_tokens": 1,
                "arrival_step": 3,
            },
        ]
    )
    t = next(t for t in run(s) if "b" in t.scheduler["new_req_ids"])
    assert t.arrays["positions"][0] == 0 and "block_tables" not in t.arrays


def test_freed_blocks_keep_their_hash_and_a_hit_takes_them_out_of_the_free_queue() -> None:
    # BlockManager.deallocate keeps block.hash; allocate() removes a free hit from free_block_ids
    s = scenario(
        [
            {"id": "a", "prompt_token_ids": [*PREFIX, 40], "max_tokens": 1},
            {"id": "b", "prompt_token_ids": [*PREFIX, 50], "max_tokens": 1, "arrival_step": 4},
        ]
    )
    steps = run(s)
    a_blocks = steps[0].scheduler["new_block_ids"]["a"]
    before = steps[2].kv_cache["free_block_queue"]  # a finished at step 1
    assert set(a_blocks) <= set(before)
    t = next(t for t in steps if "b" in t.scheduler["new_req_ids"])
    b_blocks = t.scheduler["new_block_ids"]["b"]
    assert b_blocks[:3] == a_blocks[:3]
    # the hits left the queue from its middle; the new block came from its head
    assert b_blocks[3] == [x for x in before if x not in a_blocks[:3]][0]
    assert t.kv_cache["free_block_queue"] == [x for x in before if x not in b_blocks]


def test_deallocate_frees_in_reverse_to_the_tail() -> None:
    # BlockManager.deallocate: `for block_id in reversed(seq.block_table)` ... free_block_ids.append
    steps = run(scenario([{"id": "a", "prompt_len": 9, "max_tokens": 1}], num_kv_blocks=6))
    blocks = steps[0].scheduler["new_block_ids"]["a"]
    assert blocks == [0, 1, 2]
    bm = NanoBlockManager(6, 4)
    seq = Request(RequestSpec("x", tuple(range(10, 19)), 1, 1))
    bm.allocate(seq, bm.can_allocate(seq))
    bm.deallocate(seq)
    assert list(bm.free_block_ids) == [3, 4, 5, 2, 1, 0]


def test_a_free_cache_hit_still_needs_a_free_block() -> None:
    # BlockManager.can_allocate: num_new_blocks drops only for hits on used blocks
    bm = NanoBlockManager(4, 4)
    a = Request(RequestSpec("a", tuple(PREFIX), 1, 1))
    bm.allocate(a, bm.can_allocate(a))
    bm.hash_blocks(a, 12)
    b = Request(RequestSpec("b", (*PREFIX, 7), 1, 1))
    assert bm.can_allocate(b) == 3  # three hits on used blocks, one new block: 1 free is enough
    bm.deallocate(a)
    c = Request(RequestSpec("c", (*PREFIX, 7, 8, 9, 10, 11), 1, 1))
    # five blocks, three hits now all free: the pool of four cannot hold them
    assert len(bm.free_block_ids) == 4 and bm.can_allocate(c) == -1
    assert bm.can_allocate(b) == 3
    bm.allocate(b, 3)
    assert b.num_computed_tokens == 12 and bm.block_tables["b"][:3] == [0, 1, 2]


def test_a_handed_out_block_loses_its_stale_hash() -> None:
    # BlockManager._allocate_block deletes hash_to_block_id[block.hash] when it still points there
    bm = NanoBlockManager(3, 4)
    a = Request(RequestSpec("a", tuple(PREFIX[:8]), 1, 1))
    bm.allocate(a, bm.can_allocate(a))
    bm.hash_blocks(a, 8)
    bm.deallocate(a)
    assert len(bm.hash_to_block_id) == 2
    other = Request(RequestSpec("o", (1, 2, 3, 4, 5, 6, 7, 8, 9), 1, 1))
    bm.allocate(other, bm.can_allocate(other))  # takes 2, 1, 0 from the head
    assert bm.hash_to_block_id == {} and all(h is None for h in bm.hash)


def test_only_the_first_waiting_sequence_takes_a_chunk() -> None:
    # Scheduler.schedule: `if remaining < num_tokens and scheduled_seqs: break`
    s = scenario(
        [{"id": "a", "prompt_len": 20, "max_tokens": 2}, {"id": "b", "prompt_len": 3, "max_tokens": 2}],
        max_num_batched_tokens=8,
        max_model_len=32,
    )
    steps = run(s)
    sched = [t.scheduler["num_scheduled_tokens"] for t in steps[:4]]
    assert sched[0] == {"a": 8} and sched[1] == {"a": 8}
    # a's last chunk (4) leaves room, and b fits whole behind it
    assert sched[2] == {"a": 4, "b": 3}
    # a partial prefill samples nothing (postprocess `continue`) and has no token appended
    assert steps[0].sampled_token_ids == {} and steps[1].sampled_token_ids == {}
    assert set(steps[2].sampled_token_ids) == {"a", "b"}
    # the second chunk's keys include the first's: block tables are passed
    b2 = steps[1].arrays
    assert b2["positions"].tolist() == list(range(8, 16))
    assert b2["cu_seqlens_q"].tolist() == [0, 8] and b2["cu_seqlens_k"].tolist() == [0, 16]
    assert "block_tables" in b2 and "block_tables" not in steps[0].arrays
    # the whole table was allocated at the first chunk
    assert len(steps[0].scheduler["new_block_ids"]["a"]) == 5
    assert steps[3].scalars["is_prefill"] is False


def test_a_second_sequence_that_does_not_fit_whole_waits() -> None:
    s = scenario(
        [{"id": "a", "prompt_len": 5, "max_tokens": 1}, {"id": "b", "prompt_len": 6, "max_tokens": 1}],
        max_num_batched_tokens=8,
    )
    steps = run(s)
    assert steps[0].scheduler["num_scheduled_tokens"] == {"a": 5}
    assert steps[0].scheduler["waiting_req_ids"] == ["b"]


def test_new_block_ids_are_a_copy_of_the_block_table() -> None:
    # issue 12 item 7: the trace of step 1 must not grow when may_append extends the table later
    engine = make_engine(scenario([{"id": "a", "prompt_len": 4, "max_tokens": 3}], block_size=2))
    dumped = json.loads(json.dumps([t.to_dict() for t in list(engine.run())]))
    assert dumped[0]["scheduler"]["new_block_ids"] == {"a": [0, 1]}
    assert dumped[1]["scheduler"]["new_block_ids"] == {"a": [2]}


def test_decode_slot_context_lens_and_padded_block_tables() -> None:
    # ModelRunner.prepare_decode: slot = block_table[-1] * block_size + last_block_num_tokens - 1,
    # context_lens = len(seq); prepare_block_tables pads rows with -1
    steps = run(
        scenario(
            [{"id": "a", "prompt_len": 9, "max_tokens": 2}, {"id": "b", "prompt_len": 2, "max_tokens": 2}]
        )
    )
    t = steps[1]
    assert t.scalars["is_prefill"] is False
    bt = t.arrays["block_tables"]
    assert bt.tolist() == [[0, 1, 2], [3, -1, -1]]
    assert t.arrays["context_lens"].tolist() == [10, 3]
    assert t.arrays["positions"].tolist() == [9, 2]
    assert t.arrays["slot_mapping"].tolist() == [2 * 4 + 1, 3 * 4 + 2]
    assert t.arrays["input_ids"].tolist() == [
        steps[0].sampled_token_ids["a"],
        steps[0].sampled_token_ids["b"],
    ]


def test_last_indices_pick_each_sequence_last_query_row() -> None:
    # ParallelLMHead.forward: last_indices = context.cu_seqlens_q[1:] - 1 in a prefill only
    steps = run(
        scenario(
            [{"id": "a", "prompt_len": 9, "max_tokens": 2}, {"id": "b", "prompt_len": 2, "max_tokens": 2}]
        )
    )
    cu = steps[0].arrays["cu_seqlens_q"]
    assert steps[0].arrays["last_indices"].tolist() == (cu[1:] - 1).tolist() == [8, 10]
    assert "last_indices" not in steps[1].arrays


def test_may_append_adds_a_block_at_k_block_size_plus_one() -> None:
    # BlockManager.may_append: `if len(seq) % self.block_size == 1`
    steps = run(scenario([{"id": "a", "prompt_len": 4, "max_tokens": 6}]))
    grew = [t.step for t in steps if t.scheduler["new_block_ids"].get("a")]
    # prompt 4 -> one block; lengths 5 and 9 at decode steps 2 and 6 need a new one
    assert grew == [1, 2, 6]


def test_preempt_takes_the_last_running_and_resumes_it_with_its_cached_blocks() -> None:
    # Scheduler.schedule's decode loop preempts self.running.pop(); BlockManager.deallocate keeps
    # hashes, so the resumed prefill finds its own full blocks
    s = scenario(
        [{"id": "a", "prompt_len": 8, "max_tokens": 6}, {"id": "b", "prompt_len": 8, "max_tokens": 6}],
        num_kv_blocks=6,
    )
    steps = run(s)
    pre = next(t for t in steps if t.scheduler["preempted_req_ids"])
    assert pre.scheduler["preempted_req_ids"] == ["b"]
    # b's blocks went to the tail in reverse; a took the head one (b's last block)
    b_table = steps[0].scheduler["new_block_ids"]["b"] + steps[1].scheduler["new_block_ids"]["b"]
    assert pre.scheduler["new_block_ids"]["a"] == [b_table[-1]]
    back = next(t for t in steps if "b" in t.scheduler["resumed_req_ids"])
    # b's two prompt blocks were hashed and are found again
    assert back.scheduler["new_block_ids"]["b"][:2] == b_table[:2]
    assert back.arrays["positions"][0] == 8
    assert back.arrays["cu_seqlens_k"][-1] - back.arrays["cu_seqlens_q"][-1] == 8
    assert "block_tables" in back.arrays


def test_paged_attention_over_cached_blocks_matches_dense() -> None:
    # with a model: a prefill that starts at num_cached_tokens reads the cached K/V correctly
    s = scenario(
        [
            {"id": "a", "prompt_token_ids": [*PREFIX, 40, 41], "max_tokens": 3},
            {"id": "b", "prompt_token_ids": [*PREFIX, 50, 51, 52], "max_tokens": 3, "arrival_step": 3},
        ],
        model=True,
    )
    steps = run(s)
    hit = next(t for t in steps if "b" in t.scheduler["new_req_ids"])
    assert hit.arrays["positions"][0] == 12
    assert all(t.forward["paged_vs_dense_max_abs_diff"] < 1e-4 for t in steps if not t.idle)
    assert np.unique(steps[0].arrays["slot_mapping"]).size == 14


def preset_steps(preset: str) -> list[StepTrace]:
    from pagedviz.core import load_preset

    return list(make_engine(load_preset(preset)).run())


def test_block_tables_preset_shows_minus_one_padding_and_last_indices() -> None:
    steps = preset_steps("nanovllm-block-tables")
    p = steps[0].arrays
    assert p["cu_seqlens_q"].tolist() == p["cu_seqlens_k"].tolist() == [0, 3, 12, 26]
    assert p["last_indices"].tolist() == [2, 11, 25] and "block_tables" not in p
    assert steps[1].arrays["block_tables"].tolist() == [[0, -1, -1, -1], [1, 2, 3, -1], [4, 5, 6, 7]]


def test_prefix_cache_preset_numbers() -> None:
    steps = preset_steps("nanovllm-prefix-cache")
    assert steps[0].scheduler["new_block_ids"]["a"] == list(range(11))
    t = steps[2]
    assert t.scheduler["new_block_ids"]["b"][:9] == list(range(9))
    assert [t.kv_cache["ref_cnt"][b] for b in range(9)] == [2] * 9
    assert t.arrays["positions"][0] == 36
    assert t.arrays["cu_seqlens_q"].tolist() == [0, 7] and t.arrays["cu_seqlens_k"].tolist() == [0, 43]
    assert "block_tables" in t.arrays


def test_chunked_prefill_preset_numbers() -> None:
    steps = preset_steps("nanovllm-chunked-prefill")
    assert [t.scheduler["num_scheduled_tokens"] for t in steps[:4]] == [
        {"a": 16},
        {"a": 16},
        {"a": 8, "b": 6},
        {"c": 10},
    ]
    assert steps[1].arrays["cu_seqlens_k"].tolist() == [0, 32] and "block_tables" in steps[1].arrays
    assert steps[2].scheduler["waiting_req_ids"] == ["c"]


@st.composite
def shared_prefix_scenarios(draw: st.DrawFn, with_model: bool = False) -> Scenario:
    """Prompts over two token ids, block size 2: prefix-cache hits, chunks and preemption are common."""
    n = draw(st.integers(1, 4))
    reqs = [
        {
            "id": f"r{i}",
            "prompt_token_ids": draw(st.lists(st.sampled_from([10, 11]), min_size=1, max_size=9)),
            "max_tokens": draw(st.integers(1, 4)),
            "arrival_step": draw(st.integers(1, 4)),
        }
        for i in range(n)
    ]
    return scenario(
        reqs,
        model=with_model,
        block_size=2,
        max_model_len=16,
        max_num_batched_tokens=draw(st.sampled_from([3, 5, 16])),
        num_kv_blocks=draw(st.integers(7, 14)),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_prefix_scenarios())
def test_ref_counts_match_owners_and_the_pool_is_partitioned(s: Scenario) -> None:
    engine = make_engine(s)
    for t in engine.run():
        kv = t.kv_cache
        owners = kv["owners"]
        for b, cnt in enumerate(kv["ref_cnt"]):
            assert cnt == len(owners.get(str(b), []))
        free = kv["free_block_queue"]
        assert len(set(free)) == len(free) and not set(free) & {int(b) for b in owners}
        assert len(free) + len(owners) == kv["num_blocks"]
        if not t.idle and t.scalars["is_prefill"]:
            cu_q, cu_k = t.arrays["cu_seqlens_q"], t.arrays["cu_seqlens_k"]
            assert ("block_tables" in t.arrays) == bool(cu_k[-1] > cu_q[-1])
            assert t.arrays["last_indices"].tolist() == (cu_q[1:] - 1).tolist()
    assert engine.done and not engine.truncated


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_prefix_scenarios(with_model=True))
def test_paged_attention_matches_dense_with_hits_and_chunks(s: Scenario) -> None:
    for t in make_engine(s).run():
        if not t.idle:
            assert t.forward["paged_vs_dense_max_abs_diff"] < 1e-4
