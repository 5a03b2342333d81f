"""Every number the seed documents print for their worked examples."""

from __future__ import annotations

import numpy as np

from pagedviz.core import load_preset, make_engine


def steps_of(preset: str, n: int) -> list:
    engine = make_engine(load_preset(preset))
    return [engine.step() for _ in range(n)]


def test_seed_001_step_1_matches_document_001() -> None:
    t = steps_of("seed-001", 1)[0]
    a = t.arrays
    assert t.scheduler["num_scheduled_tokens"] == {"0": 3, "1": 2, "2": 5}
    assert a["req_indices"].tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2, 2]
    assert a["positions"].tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3, 4]
    assert a["token_indices"].tolist() == [0, 1, 2, 12, 13, 24, 25, 26, 27, 28]
    assert a["block_table_indices"].tolist() == [0, 0, 1, 6, 6, 12, 12, 13, 13, 14]
    assert a["block_numbers"].tolist() == [1, 1, 2, 3, 3, 4, 4, 5, 5, 6]
    assert a["block_offsets"].tolist() == [0, 1, 0, 0, 1, 0, 1, 0, 1, 0]
    assert a["slot_mapping"].tolist() == [2, 3, 4, 6, 7, 8, 9, 10, 11, 12]
    assert a["query_start_loc"].tolist() == [0, 3, 5, 10]
    assert a["seq_lens"].tolist() == [3, 2, 5]
    assert a["num_computed_tokens_cpu"].tolist() == [0, 0, 0]
    assert t.scalars["num_reqs"] == 3 and t.scalars["max_query_len"] == 5
    assert a["block_table"].shape == (4, 6)
    assert a["block_table"][:4].tolist() == [
        [1, 2, 0, 0, 0, 0],
        [3, 0, 0, 0, 0, 0],
        [4, 5, 6, 0, 0, 0],
        [0] * 6,
    ]
    # the whole prompt of request 2 sits in the table although only 5 tokens are scheduled
    assert a["token_ids_cpu"].shape == (4, 12)
    assert (a["token_ids_cpu"][2, :8] != 0).all()
    # input_ids are the token table's entries at token_indices
    assert a["input_ids"].tolist() == a["token_ids_cpu"].ravel()[a["token_indices"]].tolist()


def test_seed_001_step_2_matches_document_001() -> None:
    t1, t = steps_of("seed-001", 2)
    a = t.arrays
    assert t.scheduler["num_scheduled_tokens"] == {"0": 1, "1": 1, "2": 3}
    assert t.scheduler["new_block_ids"] == {"1": [7], "2": [8]}
    assert a["req_indices"].tolist() == [0, 1, 2, 2, 2]
    assert a["positions"].tolist() == [3, 2, 5, 6, 7]
    assert a["token_indices"].tolist() == [3, 14, 29, 30, 31]
    assert a["block_table_indices"].tolist() == [1, 7, 14, 15, 15]
    assert a["block_numbers"].tolist() == [2, 7, 6, 8, 8]
    assert a["block_offsets"].tolist() == [1, 0, 1, 0, 1]
    assert a["slot_mapping"].tolist() == [5, 14, 13, 16, 17]
    assert a["query_start_loc"].tolist() == [0, 1, 2, 5]
    assert a["seq_lens"].tolist() == [4, 3, 8]
    assert a["num_computed_tokens_cpu"].tolist() == [3, 2, 5]
    assert t.scalars["num_reqs"] == 3 and t.scalars["max_query_len"] == 3
    assert a["block_table"][:4].tolist() == [
        [1, 2, 0, 0, 0, 0],
        [3, 7, 0, 0, 0, 0],
        [4, 5, 6, 8, 0, 0],
        [0] * 6,
    ]
    # T_0_3 and T_1_2 are the tokens sampled at step 1
    assert a["input_ids"][:2].tolist() == [t1.sampled_token_ids["0"], t1.sampled_token_ids["1"]]


def test_seed_001_ascend_masks_match_documents_003_and_000() -> None:
    t1, t2, t3 = steps_of("seed-001-ascend", 3)
    assert t1.scalars["attn_state"] == "PrefillNoCache"
    assert t1.arrays["attn_mask"].shape == (5, 5)
    assert t1.arrays["attn_mask"].tolist() == np.triu(np.ones((5, 5), dtype=int), 1).tolist()
    assert t2.scalars["attn_state"] == "ChunkedPrefill"
    mask = t2.arrays["attn_mask"]
    assert mask.shape == (5, 8)
    # row t is the causal row of position t: positions [3, 2, 5, 6, 7]
    assert [int((row == 0).sum()) for row in mask] == [4, 3, 6, 7, 8]
    assert t2.arrays["slot_mapping"].tolist() == [5, 14, 13, 16, 17]
    assert t3.scalars["attn_state"] == "DecodeOnly" and "attn_mask" not in t3.arrays


def test_seed_000_step_2_matches_document_000() -> None:
    t1, t = steps_of("seed-000", 2)
    a = t.arrays
    assert t1.scheduler["num_scheduled_tokens"] == {"0": 54, "1": 145}
    assert t.scheduler["num_scheduled_tokens"] == {"0": 1, "1": 1, "2": 93, "3": 75, "4": 30}
    assert t.scalars["total_num_scheduled_tokens"] == 200 and t.scalars["num_input_tokens"] == 200
    assert t.scalars["num_reqs"] == 5
    assert a["cu_num_tokens"].tolist() == [1, 2, 95, 170, 200]
    assert a["arange"].tolist() == [0, 0, *range(93), *range(75), *range(30)]
    assert a["req_indices"].tolist() == [0, 1] + [2] * 93 + [3] * 75 + [4] * 30
    assert a["positions"].tolist() == [54, 145, *range(93), *range(75), *range(30)]
    M = 240
    assert a["token_indices"].tolist() == [
        54,
        145 + M,
        *(p + 2 * M for p in range(93)),
        *(p + 3 * M for p in range(75)),
        *(p + 4 * M for p in range(30)),
    ]
    bti = a["block_table_indices"].tolist()
    assert bti[:4] == [3, 24, 30, 30] and bti[94] == 35 and bti[95] == 45 and bti[169] == 49
    assert bti[170] == 60 and bti[-1] == 61
    bn = a["block_numbers"].tolist()
    assert bn[:4] == [4, 14, 15, 15] and bn[94] == 20 and bn[95] == 21 and bn[169] == 25
    assert bn[170] == 26 and bn[-1] == 27
    off = a["block_offsets"].tolist()
    assert off[:4] == [6, 1, 0, 1] and off[94] == 12 and off[169] == 10 and off[-1] == 13
    sm = a["slot_mapping"].tolist()
    assert sm[:4] == [70, 225, 240, 241]
    assert sm[2:95] == list(range(240, 333))
    assert sm[95:170] == list(range(336, 411))
    assert sm[170:] == list(range(416, 446))
    assert a["query_start_loc"].tolist() == [0, 1, 2, 95, 170, 200]
    assert a["seq_lens"].tolist() == [55, 146, 93, 75, 30]
    assert a["num_computed_tokens_cpu"].tolist() == [54, 145, 0, 0, 0]
    bt = a["block_table"]
    assert bt.shape == (8, 15)
    expected = [list(range(1, 5)), list(range(5, 15)), list(range(15, 21)), list(range(21, 26)), [26, 27]]
    for row, blocks in enumerate(expected):
        assert bt[row].tolist() == blocks + [0] * (15 - len(blocks))
    assert not bt[5:].any()
    assert a["discard_request_mask"].tolist() == [False, False, False, False, True]


def test_seed_004_nanovllm_matches_document_004() -> None:
    t1, t2 = steps_of("seed-004", 2)
    a = t1.arrays
    assert t1.scalars["is_prefill"] is True
    assert a["slot_mapping"].tolist() == [*range(0, 11), *range(256, 273)]
    assert a["positions"].tolist() == [*range(11), *range(17)]
    assert a["cu_seqlens_q"].tolist() == [0, 11, 28] and a["cu_seqlens_k"].tolist() == [0, 11, 28]
    assert t1.scalars["max_seqlen_q"] == 17 and t1.scalars["max_seqlen_k"] == 17
    assert len(a["input_ids"]) == 28
    b = t2.arrays
    assert t2.scalars["is_prefill"] is False
    assert b["positions"].tolist() == [11, 17]
    assert b["slot_mapping"].tolist() == [11, 273]
    assert b["context_lens"].tolist() == [12, 18]
    assert b["input_ids"].tolist() == [t1.sampled_token_ids["0"], t1.sampled_token_ids["1"]]
    assert b["block_tables"].tolist() == [[0], [1]]


def test_seed_002_matches_the_example_in_document_002() -> None:
    # 002's comments: [2, 5, 3] -> req_indices [0, 0, 1, 1, 1, 1, 1, 2, 2, 2], cu_num_tokens
    # [2, 7, 10], arange [0, 1, 0, 1, 2, 3, 4, 0, 1, 2]
    first, second = steps_of("seed-002", 2)
    a = first.arrays
    assert a["num_scheduled_tokens"].tolist() == [2, 5, 3]
    assert a["req_indices"].tolist() == [0, 0, 1, 1, 1, 1, 1, 2, 2, 2]
    assert a["cu_num_tokens"].tolist() == [2, 7, 10]
    assert a["arange"].tolist() == [0, 1, 0, 1, 2, 3, 4, 0, 1, 2]
    # positions = num_computed_tokens_cpu[req_indices] + arange, all computed counts 0 here
    assert a["positions"].tolist() == a["arange"].tolist()
    assert a["query_start_loc"].tolist() == [0, 2, 7, 10]
    assert a["seq_lens"].tolist() == [2, 5, 3]
    assert not a["discard_request_mask"].any()
    assert a["logits_indices"].tolist() == [1, 6, 9]
    # and then each request decodes one token a step
    assert second.arrays["num_scheduled_tokens"].tolist() == [1, 1, 1]
    assert second.arrays["positions"].tolist() == [2, 5, 3]
