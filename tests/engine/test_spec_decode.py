"""Speculative decoding: vLLM's spec-decode metadata, the n-gram (prompt-lookup) drafter, drafts
scheduled and accepted by the model's greedy choice, rejected drafts' blocks kept, options checked."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario, ScenarioError, load_preset, make_engine
from pagedviz.core.spec_decode import calc_spec_decode_metadata, ngram_propose


def run(preset: str) -> list:
    return list(make_engine(load_preset(preset)).run())


def test_spec_decode_metadata_reproduces_vllms_worked_example() -> None:
    m = calc_spec_decode_metadata(np.array([3, 0, 2, 0, 1]), np.array([4, 104, 107, 207, 209]))
    assert m["logits_indices"].tolist() == [0, 1, 2, 3, 103, 104, 105, 106, 206, 207, 208]
    assert m["target_logits_indices"].tolist() == [0, 1, 2, 5, 6, 9]
    assert m["bonus_logits_indices"].tolist() == [3, 4, 7, 8, 10]
    assert m["cu_num_draft_tokens"].tolist() == [3, 3, 5, 5, 6]
    assert m["num_sampled_tokens"].tolist() == [4, 1, 3, 1, 2]


def _ngram_by_definition(tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    """Brute force: the longest n in [min_n, max_n] whose last-n tokens occur earlier; of those,
    the earliest occurrence; propose up to k tokens after it."""
    total = len(tokens)
    for n in range(max_n, min_n - 1, -1):
        for start in range(total - n):
            if n <= total - 1 and tokens[start : start + n] == tokens[total - n :]:
                return tokens[start + n : start + n + k]
    return []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=0, max_size=24),
    st.integers(1, 3),
    st.integers(0, 3),
    st.integers(1, 4),
)
def test_ngram_drafter_matches_its_definition(tokens: list[int], min_n: int, extra: int, k: int) -> None:
    max_n = min_n + extra
    got = ngram_propose(np.array(tokens, dtype=np.int32), min_n, max_n, k, max_model_len=1000)
    assert got == _ngram_by_definition(tokens, min_n, max_n, k)


def test_ngram_drafter_never_drafts_past_max_model_len() -> None:
    tokens = np.array([1, 2, 1, 2, 1], dtype=np.int32)
    assert ngram_propose(tokens, 1, 2, 4, max_model_len=7) == [2, 1]
    assert ngram_propose(tokens, 1, 2, 4, max_model_len=5) == []


def test_spec_decode_preset_schedules_drafts_and_computes_vllms_arrays() -> None:
    steps = run("demo-ngram-spec-decode")
    t = steps[1]
    a = t.arrays
    assert t.scheduler["scheduled_spec_decode_tokens"] == {"a": [6, 7, 5], "b": [10, 11, 12]}
    assert t.scheduler["num_scheduled_tokens"] == {"a": 4, "b": 4}
    assert a["num_draft_tokens"].tolist() == [3, 3]
    assert a["cu_num_draft_tokens"].tolist() == [3, 6]
    assert a["num_sampled_tokens"].tolist() == [4, 4]
    assert a["logits_indices"].tolist() == list(range(8))
    assert a["target_logits_indices"].tolist() == [0, 1, 2, 4, 5, 6]
    assert a["bonus_logits_indices"].tolist() == [3, 7]
    # the drafts are what the runner gathered into input_ids from the token table
    assert a["draft_token_ids"].tolist() == [6, 7, 5, 10, 11, 12]
    assert a["input_ids"].tolist()[1:4] == [6, 7, 5] and a["input_ids"].tolist()[5:8] == [10, 11, 12]
    assert t.forward["paged_vs_dense_max_abs_diff"] < 1e-4


def test_spec_decode_accepts_by_the_models_greedy_choice_and_rolls_back_the_rest() -> None:
    steps = run("demo-ngram-spec-decode")
    for t, nxt in zip(steps, steps[1:]):
        if "num_accepted_tokens" not in t.arrays:
            continue
        a = t.arrays
        targets = a["target_token_ids"]
        for row, rid in enumerate(t.batch["req_ids"]):
            lo = a["cu_num_sampled_tokens"][row] - a["num_sampled_tokens"][row]
            drafts = a["draft_token_ids"][a["cu_num_draft_tokens"][row] - a["num_draft_tokens"][row] :][
                : a["num_draft_tokens"][row]
            ]
            acc = int(a["num_accepted_tokens"][row])
            # accepted drafts equal the model's choice, the first rejected one does not
            assert (drafts[:acc] == targets[lo : lo + acc]).all()
            if acc < len(drafts):
                assert drafts[acc] != targets[lo + acc]
            assert t.forward["generated_token_ids"][rid] == targets[lo : lo + acc + 1].tolist()
            if rid in nxt.batch["req_ids"]:
                r2 = nxt.batch["req_ids"].index(rid)
                want = a["num_computed_tokens_cpu"][row] + a["num_scheduled_tokens"][row]
                want -= a["num_rejected_tokens"][row]
                assert nxt.arrays["num_computed_tokens_cpu"][r2] == want
    step2 = steps[1]
    assert step2.arrays["num_rejected_tokens"].tolist() == [2, 3]
    assert steps[2].arrays["num_accepted_tokens"].tolist()[0] == 2  # all of a's drafts, then the bonus


def test_spec_decode_keeps_the_blocks_of_rejected_drafts_as_vllm_does() -> None:
    steps = run("demo-ngram-spec-decode")
    owners = steps[1].kv_cache["owners"]
    blocks_b = sorted(int(b) for b, o in owners.items() if "b" in o)
    # b scheduled 4 tokens past its 6 computed (10 slots, 3 blocks) and rejected all 3 drafts
    assert len(blocks_b) == 3
    owners3 = steps[2].kv_cache["owners"]
    assert blocks_b == sorted(int(b) for b, o in owners3.items() if "b" in o)


def test_spec_decode_options_are_checked() -> None:
    base = load_preset("demo-ngram-spec-decode").to_dict()
    bad = {**base, "config": {**base["config"], "prompt_lookup_min": 3, "prompt_lookup_max": 2}}
    with pytest.raises(ScenarioError) as e:
        Scenario.from_dict(bad)
    assert e.value.errors[0][0] == "config.prompt_lookup_max"
