"""Model Runner V2 with n-gram speculative decoding: V2's speculator (rightmost match, always
num_speculative_tokens drafts), the drafts kept on the worker, cu_num_logits / logits_indices /
expanded_idx_mapping, greedy verification, and post_update's num_computed_tokens."""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedviz.core import Scenario, make_engine
from pagedviz.core.ngram_v2 import gather_draft_sampled, greedy_verify, ngram_propose_v2
from pagedviz.core.sampler import synthetic_tokens
from tests.support.spec_decode import REQS, SEED, VOCAB
from tests.support.spec_decode import spec_scenario as scenario


def propose(tokens: list[int], k: int = 3, min_n: int = 1, max_n: int = 3, sampled: int = 1) -> list[int]:
    arr = np.zeros((1, 32), dtype=np.int32)
    arr[0, : len(tokens)] = tokens
    out = ngram_propose_v2(
        arr, np.array([len(tokens)]), np.array([sampled]), np.array([tokens[-1]]), min_n, max_n, k
    )
    return out[0].tolist()


def test_v2_ngram_takes_the_rightmost_earlier_occurrence_of_the_longest_ngram() -> None:
    # "7" occurs at 2 and 5; V1's drafter would take the earliest (-> 8 9 1), V2 the rightmost
    assert propose([1, 2, 7, 8, 9, 7, 3, 4, 7]) == [3, 4, 7]
    # the 2-gram "5 6" beats the 1-gram "6", even though "6" alone occurs further right
    assert propose([5, 6, 1, 2, 6, 3, 5, 6]) == [1, 2, 6]


def test_v2_ngram_always_proposes_k_drafts_filling_with_the_last_sampled_token() -> None:
    # no earlier occurrence: every draft is the last sampled token
    assert propose([1, 2, 3, 4]) == [4, 4, 4]
    # the continuation runs out after one token: the rest is the last sampled token
    assert propose([9, 1, 2, 1]) == [2, 1, 1]
    # a row that sampled nothing (a partial prefill) proposes only the last sampled token
    assert propose([1, 2, 1], sampled=0) == [1, 1, 1]
    # shorter than prompt_lookup_min: not eligible
    assert propose([3, 3], min_n=3, max_n=3) == [3, 3, 3]


def test_v2_ngram_is_vectorised_over_rows_of_different_lengths() -> None:
    tokens = np.zeros((2, 16), dtype=np.int32)
    tokens[0, :5] = [4, 5, 6, 4, 5]
    tokens[1, :3] = [8, 9, 8]
    out = ngram_propose_v2(tokens, np.array([5, 3]), np.array([1, 1]), np.array([5, 8]), 1, 2, 2)
    assert out.tolist() == [[6, 4], [9, 8]]


def test_greedy_verification_accepts_the_drafts_up_to_the_first_mismatch() -> None:
    # row 0: last=10, drafts 11 12 13; targets 11 12 99 14 -> 2 accepted, 3 sampled
    # row 1: no drafts; row 2: last=20, drafts 21; targets 21 22 -> all accepted + bonus
    input_ids = np.array([10, 11, 12, 13, 50, 20, 21])
    positions = np.array([8, 9, 10, 11, 3, 5, 6])
    logits_indices = np.array([0, 1, 2, 3, 4, 5, 6])
    local = np.array([0, 1, 2, 3, 0, 0, 1])
    cu = np.array([0, 4, 5, 7])
    drafts = gather_draft_sampled(input_ids, positions, logits_indices, local, np.full(7, 2))
    target = np.array([11, 12, 99, 14, 7, 21, 22])
    assert greedy_verify(target, drafts, cu).tolist() == [3, 1, 2]


def test_a_draft_slot_that_starts_inside_the_prompt_is_a_placeholder_and_rejected() -> None:
    input_ids = np.array([5, 6, 7])
    positions = np.array([0, 1, 2])
    drafts = gather_draft_sampled(input_ids, positions, np.arange(3), np.arange(3), np.full(3, 1))
    assert drafts.tolist() == [5, -1, -1]
    assert greedy_verify(np.array([-1, -1, 9]), drafts, np.array([0, 3])).tolist() == [1]


def defaults(**config: Any) -> Scenario:
    """A scenario with drafts that leaves model_runner and async_scheduling to the defaults."""
    cfg = {"num_speculative_tokens": 2, "model": None, **config}
    return Scenario.from_dict({"flavor": "vllm", "config": cfg, "requests": [{"id": "a", "prompt_len": 3}]})


def test_ngram_defaults_to_model_runner_v2_with_async_scheduling_as_vllm_0_33() -> None:
    cfg = defaults().config
    assert (cfg.model_runner, cfg.async_scheduling) == ("v2", True)


def test_ngram_on_the_v1_runner_defaults_to_synchronous_and_refuses_async_with_vllms_reason() -> None:
    assert defaults(model_runner="v1").config.async_scheduling is False
    try:
        defaults(model_runner="v1", async_scheduling=True)
    except ValueError as e:
        msg = str(e)
    else:
        raise AssertionError("V1 + n-gram + async scheduling was accepted")
    assert "config.async_scheduling" in msg
    assert "not supported by the V1 model runner with ngram-based speculative decoding" in msg


def test_async_drafts_on_v2_output_what_synchronous_drafts_output() -> None:
    sync = outputs(scenario(REQS))
    asynchronous = outputs(scenario(REQS, async_scheduling=True))
    assert {r: t[: len(sync[r])] for r, t in asynchronous.items()} == sync


def test_async_drafts_are_placeholders_and_rejections_roll_back_when_the_output_arrives() -> None:
    """Under async scheduling the scheduler plans step 2 before step 1's output: a's verify row
    carries placeholder drafts, and the rejections of step n reach the scheduler at step n + 1
    (consumed_step), where they roll back num_computed_tokens and the placeholders."""
    traces = list(make_engine(scenario(REQS, async_scheduling=True)).run())
    t2 = traces[1]
    assert t2.scheduler["scheduled_spec_decode_tokens"].get("a") == [-1, -1, -1]
    assert t2.engine_core["consumed_step"] == 1
    rejected = [(t.step, t.forward.get("num_rejected_tokens")) for t in traces]
    some = [(s, r) for s, r in rejected if r]
    assert some, "no step rejected a draft"
    step, _ = some[0]
    later = traces[step]  # the step after: its update_from_output consumed that step
    assert later.engine_core["consumed_step"] == step
    # the device's slot state already counts only the accepted tokens at the next step
    assert later.forward["slot_mapping_device_matches_cpu"] is True


def test_a_step_of_verify_rows_replays_a_decode_graph_sized_in_multiples_of_k_plus_one() -> None:
    reqs = [{"id": r, "prompt_len": 5, "max_tokens": 6} for r in "abc"]
    sc = scenario(reqs, cudagraph_capture_sizes=[1, 2, 4, 8, 16, 32])
    t1, t2 = list(make_engine(sc).run())[:2]
    # the prefills (15 tokens) are not uniform: the smallest capture size that fits
    assert (t1.scalars["cudagraph_mode"], t1.scalars["num_tokens_after_padding"]) == ("PIECEWISE", 16)
    # 3 rows of [last sampled, d1, d2, d3]: decode graphs hold 4, 8, 16 tokens (32 is past
    # max_num_reqs * 4): the 16-token graph, 4 requests
    assert t2.arrays["num_scheduled_tokens"].data.tolist() == [4, 4, 4]
    s = t2.scalars
    assert (s["cudagraph_mode"], s["num_tokens_after_padding"], s["num_reqs_padded"]) == ("FULL", 16, 4)
    assert t2.arrays["slot_mapping"].data[12:].tolist() == [-1] * 4
    assert t2.forward["slot_mapping_device_matches_cpu"] is True


def outputs(sc: Scenario) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t in make_engine(sc).run():
        for rid, toks in (t.forward.get("generated_token_ids") or {}).items():
            out.setdefault(rid, []).extend(toks)
        if not t.forward.get("generated_token_ids"):
            for rid, tok in t.sampled_token_ids.items():
                out.setdefault(rid, []).append(tok)
    return out


def test_greedy_spec_decode_on_v2_outputs_what_plain_decoding_outputs() -> None:
    spec = outputs(scenario(REQS))
    plain = outputs(scenario(REQS, num_speculative_tokens=0))
    assert {r: t[: len(plain[r])] for r, t in spec.items()} == plain
    assert all(len(spec[r["id"]]) >= r["max_tokens"] for r in REQS)


def accepting_prompt(n_prompt: int = 6) -> list[int]:
    """A prompt whose first tokens are what the synthetic sampler will output for request "a"
    at positions n_prompt .. n_prompt + 3: after the first sampled token the 1-gram matches at 0
    and the drafts are the next three outputs, so all are accepted."""
    s = synthetic_tokens(SEED, ["a"] * 5, np.arange(n_prompt, n_prompt + 5), VOCAB).tolist()
    return [*s[:4], 3, 4][:n_prompt]


def test_accepted_drafts_advance_num_computed_tokens_by_n_less_the_rejected() -> None:
    prompt = accepting_prompt()
    traces = list(make_engine(scenario([{"id": "a", "prompt_token_ids": prompt, "max_tokens": 8}])).run())
    t2 = traces[1]
    a = t2.arrays
    s = synthetic_tokens(SEED, ["a"] * 5, np.arange(6, 11), VOCAB).tolist()
    # the verify row is [last sampled, d1, d2, d3], the drafts from the slot's draft_tokens
    assert a["input_ids"].data.tolist() == s[:4]
    slot = int(a["idx_mapping"].data[0])
    assert np.asarray(a["draft_tokens"].data)[slot].tolist() == s[1:4]
    assert t2.scheduler["scheduled_spec_decode_tokens"] == {"a": [-1, -1, -1]}
    assert a["num_sampled"].data.tolist() == [4] and a["num_rejected"].data.tolist() == [0]
    assert t2.forward["generated_token_ids"] == {"a": s[1:5]}
    # post_update: the slot computed all 4 tokens; the next step starts after them
    t3 = traces[2]
    assert t3.arrays["positions"].data[0] == 6 + 4
    assert int(t3.arrays["num_computed_tokens"].data[slot]) == 6 + 4


def test_verify_rows_lead_the_batch_and_the_logits_arrays_follow_cu_num_logits() -> None:
    reqs = [
        {"id": "a", "prompt_len": 5, "max_tokens": 6},
        {"id": "b", "prompt_len": 30, "max_tokens": 2, "arrival_step": 2},
    ]
    traces = list(make_engine(scenario(reqs, max_num_batched_tokens=16)).run())
    t = traces[1]  # a verifies 3 drafts; b's first chunk of 12
    a = t.arrays
    assert t.batch["req_ids"] == ["a", "b"]
    assert a["num_draft_tokens"].data.tolist() == [3, 0]
    assert a["cu_num_logits"].data.tolist() == [0, 4, 5]
    assert a["logits_indices"].data.tolist() == [0, 1, 2, 3, 15]
    slot_a, slot_b = a["idx_mapping"].data.tolist()
    assert a["expanded_idx_mapping"].data.tolist() == [slot_a] * 4 + [slot_b]
    assert a["expanded_local_pos"].data.tolist() == [0, 1, 2, 3, 0]
    # b's partial prefill samples nothing and rejects nothing
    assert a["num_sampled"].data.tolist()[1] == 0 and a["num_rejected"].data.tolist()[1] == 0
    assert "b" not in t.sampled_token_ids
    assert t.forward["slot_mapping_device_matches_cpu"] is True


def test_a_one_token_prompt_joining_decodes_is_padded_with_placeholder_drafts_that_are_rejected() -> None:
    reqs = [
        {"id": "a", "prompt_len": 4, "max_tokens": 6},
        {"id": "b", "prompt_token_ids": [9], "max_tokens": 3, "arrival_step": 2},
    ]
    traces = list(make_engine(scenario(reqs)).run())
    t = traces[1]  # a verifies its drafts; b arrives with one token to compute
    assert t.scheduler["num_scheduled_tokens"] == {"a": 4, "b": 4}
    assert t.scheduler["scheduled_spec_decode_tokens"]["b"] == [-1, -1, -1]
    a = t.arrays
    row = t.batch["req_ids"].index("b")
    q = a["query_start_loc"].data
    # the prompt token, then the slot's draft_tokens (zeroed when b took the slot)
    assert a["input_ids"].data[q[row] : q[row + 1]].tolist() == [9, 0, 0, 0]
    cu = a["cu_num_logits"].data
    assert a["draft_sampled"].data[cu[row] : cu[row + 1]].tolist() == [9, -1, -1, -1]
    assert a["num_sampled"].data[row] == 1 and a["num_rejected"].data[row] == 3
    # post_update keeps only the prompt token computed: b's next step starts at position 1
    nxt = traces[2]
    r2 = nxt.batch["req_ids"].index("b")
    assert nxt.arrays["positions"].data[nxt.arrays["query_start_loc"].data[r2]] == 1


def test_the_v2_spec_decode_demo_verifies_drafts_first_and_accepts_some() -> None:
    from pagedviz.core import load_preset

    sc = load_preset("demo-v2-spec-decode")
    assert (sc.config.model_runner, sc.config.num_speculative_tokens) == ("v2", 3)
    accepted = 0
    for t in make_engine(sc).run():
        d = np.asarray(t.arrays["num_draft_tokens"].data)
        assert (d[:-1] >= d[1:]).all()  # rows with drafts lead
        accepted += int((np.asarray(t.arrays["num_sampled"].data) > 1).sum())
        assert t.forward["paged_vs_dense_max_abs_diff"] < 1e-4
    assert accepted > 0
