"""Several KV cache groups as vLLM 0.33's hybrid KV cache manager runs them (issue 38, point 2):
a sliding window drops its out-of-window blocks to the null block at the step vLLM frees them,
prefix hits are found per group and intersected, and a block a sliding group gave back is the next
one any group takes. Every id below is what vLLM's own `Scheduler` gives for the same scenario
(driven with a FullAttentionSpec group and a SlidingWindowSpec group)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core import ScenarioError
from pagedviz.core.kv_cache import KVCacheManager
from pagedviz.core.kv_groups import FULL, SLIDING, KVCacheGroup
from tests.support.scenarios import make_scenario, run_all

HYBRID = {
    "layer_types": ["full_attention", "sliding_attention"],
    "sliding_window": 8,
    "block_size": 4,
    "num_kv_blocks": 40,
    "max_model_len": 64,
    "max_num_reqs": 4,
    "max_num_batched_tokens": 64,
    "enable_chunked_prefill": True,
    "device": "cpu",
}
ISSUE_REQUESTS = [
    {"id": "a", "prompt_token_ids": list(range(1, 21)), "max_tokens": 8},
    {"id": "b", "prompt_token_ids": list(range(1, 13)), "max_tokens": 4},
]


def issue_run(**config: Any) -> list:
    return run_all(make_scenario(ISSUE_REQUESTS, **{**HYBRID, **config}))


def test_the_issues_example_drops_the_window_and_the_full_group_takes_the_block_back() -> None:
    # issue 38's example as vLLM's scheduler runs it with its prefix cache empty of sliding
    # blocks (here: prefix caching off; with it on, see the next test)
    s1, s2 = issue_run(enable_prefix_caching=False)[:2]
    assert s1.scheduler["block_ids"] == {
        "a": [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]],
        "b": [[11, 12, 13], [14, 15, 16]],
    }
    assert "window_drops" not in s1.scheduler
    # step 2: a (20 computed) keeps tokens 13.. in its window of 8: blocks 6, 7, 8 (tokens 0-11)
    # go, freed from the last back (8, 7, 6) to the queue's head, where a's full group takes 8
    # and its sliding group 7; b (12 computed) drops 14, which b's full group takes, and 6
    assert s2.scheduler["block_ids"] == {
        "a": [[1, 2, 3, 4, 5, 8], [0, 0, 0, 9, 10, 7]],
        "b": [[11, 12, 13, 14], [0, 15, 16, 6]],
    }
    assert s2.scheduler["new_block_ids"] == {"a": [[8], [7]], "b": [[14], [6]]}
    assert s2.scheduler["window_drops"] == {
        "a": [
            {
                "group": 1,
                "block_ids": [8, 7, 6],
                "block_indices": [2, 1, 0],
                "num_computed_tokens": 20,
                "sliding_window": 8,
                "first_kept_token": 13,
            }
        ],
        "b": [
            {
                "group": 1,
                "block_ids": [14],
                "block_indices": [0],
                "num_computed_tokens": 12,
                "sliding_window": 8,
                "first_kept_token": 5,
            }
        ],
    }
    assert s2.kv_cache["block_group"]["8"] == 0 and s2.kv_cache["block_group"]["7"] == 1
    assert "0" not in s2.kv_cache["owners"]


def test_with_prefix_caching_b_misses_and_the_dropped_blocks_it_cached_go_to_the_tail() -> None:
    # vLLM caches a sliding group's blocks only where a later hit can end (its default
    # prefix_cache_retention_interval 0): a's before token 19 (its prompt's last), blocks 8, 9.
    # b's lookup: the full group hits 2 blocks (8 tokens), the sliding group needs the 2 blocks
    # before token 8 cached and has none, so the hit is 0 -- and b, having met a shared prefix of
    # 8 tokens its sliding group lacked, caches its own sliding blocks 14, 15 before it
    s1, s2 = issue_run(enable_prefix_caching=True)[:2]
    assert s1.scheduler["block_ids"] == {
        "a": [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]],
        "b": [[11, 12, 13], [14, 15, 16]],
    }
    hashed = set(s1.kv_cache["block_hash"])
    assert {"8", "9", "14", "15"} <= hashed and not {"6", "7", "10", "16"} & hashed
    # step 2: the hashed drops (8, 14) go to the tail, the others (7, 6) to the head
    assert s2.scheduler["block_ids"] == {
        "a": [[1, 2, 3, 4, 5, 7], [0, 0, 0, 9, 10, 6]],
        "b": [[11, 12, 13, 17], [0, 15, 16, 18]],
    }
    assert s2.kv_cache["free_block_queue"][-2:] == [8, 14]


def test_a_sliding_hit_is_null_blocks_then_the_window_and_the_full_hit_is_cut_to_it() -> None:
    # c repeats a's prompt and more, after a finished: the full group hits a's 5 blocks
    # (tokens 0-19); the sliding group's hit ends where its last cdiv(8 - 1, 4) = 2 blocks are
    # cached: a's blocks 2 and 3 (tokens 8-15), the ones before a's last prompt token
    requests = [
        {"id": "a", "prompt_token_ids": list(range(1, 21)), "max_tokens": 1},
        {"id": "c", "prompt_token_ids": list(range(1, 26)), "max_tokens": 1, "arrival_step": 3},
    ]
    steps = run_all(make_scenario(requests, **{**HYBRID, "enable_prefix_caching": True}))
    s3 = steps[2]
    assert s3.scheduler["new_req_ids"] == ["c"]
    full, sliding = s3.scheduler["block_ids"]["c"]
    a_full, a_sliding = steps[0].scheduler["block_ids"]["a"]
    assert full[:4] == a_full[:4] and sliding[:4] == [0, 0, *a_sliding[2:4]]
    assert s3.scheduler["num_scheduled_tokens"] == {"c": 25 - 16}
    # the hit's skipped places were never touched, so nothing was dropped
    assert "window_drops" not in s3.scheduler


def test_window_drops_wait_for_the_tokens_in_flight_with_async_scheduling() -> None:
    # async: the drop is on the processed tokens (computed less in flight), so a's prefill of
    # step 1 is still in flight at step 2 and nothing is dropped before step 3
    steps = issue_run(enable_prefix_caching=False, async_scheduling=True)
    dropped = [s.step for s in steps if s.scheduler.get("window_drops", {}).get("a")]
    assert dropped and dropped[0] == 3


def test_a_request_that_does_not_fit_waits_for_the_blocks_of_every_group() -> None:
    # after a's 5 + 5 blocks, 29 are free; c's 60 tokens need 15 full-attention blocks and 15 in
    # the sliding group (its window and the tokens in flight could need 17): 30
    requests = [ISSUE_REQUESTS[0], {"id": "c", "prompt_token_ids": list(range(1, 61)), "max_tokens": 4}]
    s1 = run_all(make_scenario(requests, **{**HYBRID, "enable_prefix_caching": False}))[0]
    assert s1.scheduler["block_ids"] == {"a": [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]}
    assert s1.scheduler["waiting_causes"]["c"] == {
        "cause": "kv_pool",
        "blocks_needed": 30,
        "blocks_free": 29,
        "full_sequence": True,
    }


def test_preemption_frees_each_group_from_its_end_group_by_group_without_the_null_places() -> None:
    # window 4, blocks of 2, 17 usable blocks; a and b (6 tokens, 8 to generate) decode side by
    # side, each sliding group dropping a block every other step, until b (10 computed) needs a
    # block in each group with 1 free: it preempts itself
    config = {
        **HYBRID,
        "sliding_window": 4,
        "block_size": 2,
        "max_model_len": 16,
        "max_num_batched_tokens": 32,
        "num_kv_blocks": 18,
        "enable_prefix_caching": False,
    }
    requests = [{"id": "a", "prompt_len": 6, "max_tokens": 8}, {"id": "b", "prompt_len": 6, "max_tokens": 8}]
    steps = run_all(make_scenario(requests, **config))
    s5, s6, s7 = steps[4:7]
    assert s5.scheduler["block_ids"]["b"] == [[7, 8, 9, 10, 15], [0, 0, 0, 14, 16]]
    assert s6.scheduler["preempted_req_ids"] == ["b"]
    assert s6.scheduler["preemption_causes"] == {
        "b": {"cause": "kv_pool", "for": "b", "blocks_needed": 2, "blocks_free": 1}
    }
    # group 0's [7, 8, 9, 10, 15] to the head from its end, then group 1's [14, 16] before them
    assert s6.kv_cache["free_block_queue"] == [16, 14, 15, 10, 9, 8, 7, 17]
    # a's next drop goes to the head in its turn
    assert s7.scheduler["window_drops"]["a"][0]["block_ids"] == [13]
    assert s7.kv_cache["free_block_queue"][:2] == [13, 16]


def test_one_sliding_group_alone_drops_too() -> None:
    kv = KVCacheManager(20, 4, False, groups=(KVCacheGroup(SLIDING, (0,), 8),), max_model_len=64)
    ids = np.arange(1, 30, dtype=np.int32)
    assert kv.allocate_slots("a", ids, 0, 16) == [[1, 2, 3, 4]]
    # 16 computed, window 8: tokens 0-8 are out of it, blocks 1 and 2 go (2 first, to the head),
    # before the new block is taken: the new block is 2
    assert kv.allocate_slots("a", ids, 16, 1) == [[2]]
    assert kv.group_blocks_of("a") == [[0, 0, 3, 4, 2]]
    assert kv.last_drops[0]["block_ids"] == [2, 1]
    assert list(kv.pool.free_queue)[:2] == [1, 5]


def test_hits_of_every_group_are_touched_before_any_group_allocates() -> None:
    # vLLM's coordinator touches every group's hits first (allocate_new_computed_blocks), then
    # allocates each group's new blocks: a sliding hit at the free queue's head is not the full
    # group's new block
    groups = (KVCacheGroup(FULL, (0,)), KVCacheGroup(SLIDING, (1,), 3))
    kv = KVCacheManager(8, 2, True, groups=groups, max_model_len=32)
    ids = np.array([1, 2, 3, 4, 5], dtype=np.int32)
    assert kv.allocate_slots("a", ids, 0, 5, num_prompt_tokens=5) == [[1, 2, 3], [4, 5, 6]]
    kv.free("a")
    hits = kv.computed_blocks("b", ids)
    # full: a's first two blocks; sliding (window 3 needs 1 block): a's block 5 (tokens 2-3),
    # the one before a's last prompt token, and the null block before it
    assert hits == [[1, 2], [0, 5]] and kv.hit_tokens(hits) == 4
    # a's frees left [6, 4, 3, 7, 2, 1, 5]; put the sliding hit 5 at the head
    kv.pool.free_queue.move_to_end(5, last=False)
    added = kv.allocate_slots("b", ids, 4, 1, hits, num_prompt_tokens=5)
    # touching 1, 2 and 5 leaves [6, 4, 3, 7]: the full group takes 6, the sliding group 4
    assert added == [[1, 2, 6], [0, 5, 4]]
    assert kv.pool.ref_cnt[[1, 2, 5]].tolist() == [1, 1, 1]


def pool_refusal(**config: Any) -> list[str]:
    try:
        make_scenario(ISSUE_REQUESTS, **{**HYBRID, **config})
    except ScenarioError as e:
        return [msg for loc, msg in e.errors if loc == "config.num_kv_blocks"]
    return []


def test_a_pool_short_of_one_sequence_in_every_group_is_refused_with_vllms_reason() -> None:
    # vLLM's planning: one max_model_len request in every group at once; the sliding group holds
    # at most its window's last 7 tokens and the tokens in flight (64 here: 71 > 64, so all 64),
    # plus one block: 16 + 17 = 33 blocks, and the null block
    assert pool_refusal(num_kv_blocks=33) == [
        "To serve at least one request with the model's max seq len (64), 33 KV blocks are needed, "
        "one request's blocks in every KV cache group (group 0 (full_attention): 16, group 1 "
        "(sliding_attention): 17), which is more than the 32 usable blocks of the pool "
        "(num_kv_blocks 33 less the null block). Based on the available blocks, the estimated "
        "maximum model length is 60. Increase num_kv_blocks to at least 34 or decrease max_model_len."
    ]
    assert pool_refusal(num_kv_blocks=34) == []
    # a budget of 8 tokens keeps the sliding group to cdiv(7 + 8, 4) + 1 = 5 blocks: 21 in all
    assert pool_refusal(num_kv_blocks=21, max_num_batched_tokens=8)[0].startswith(
        "To serve at least one request with the model's max seq len (64), 21 KV blocks are needed"
    )
    assert pool_refusal(num_kv_blocks=22, max_num_batched_tokens=8) == []
    # async scheduling keeps two batches in flight: 7 + 16 tokens, 7 blocks
    assert pool_refusal(num_kv_blocks=23, max_num_batched_tokens=8, async_scheduling=True) != []
    assert pool_refusal(num_kv_blocks=24, max_num_batched_tokens=8, async_scheduling=True) == []
