"""Engine invariants over random scenarios (hypothesis): tiny blocks, tight budgets, pools small
enough to preempt, staggered arrivals, prefix caching on and off, every flavour (the strategy is
tests/support/strategies.py's, its ENGINE family)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario, make_engine
from tests.support.strategies import scenarios


def check_vllm_step(
    scenario: Scenario, requests: dict[str, Any], t: Any, prev_sampled: dict[str, int]
) -> None:
    """Invariants of one step, against the KV cache as the step's forward saw it (t.kv_cache)."""
    cfg = scenario.config
    a = t.arrays
    T = t.scalars["total_num_scheduled_tokens"]
    slots = a["slot_mapping"][:T]
    req_ids = t.batch["req_ids"]
    held: dict[str, list[int]] = {}
    for b, owners in t.kv_cache["owners"].items():
        for rid in owners:
            held.setdefault(rid, []).append(int(b))
    # slots unique within the step; padding (if any) is -1
    assert len(set(slots.tolist())) == T
    assert (a["slot_mapping"][T:] == -1).all()
    assert t.scalars["num_input_tokens"] >= T
    # budget and batch size
    assert cfg.max_num_batched_tokens >= T
    assert t.scalars["num_reqs"] <= cfg.max_num_reqs and len(req_ids) == t.scalars["num_reqs"]
    # query_start_loc strictly increasing from 0 to T
    qsl = a["query_start_loc"]
    assert qsl[0] == 0 and qsl[-1] == T and (np.diff(qsl) > 0).all()
    # positions stay inside the model length
    assert (a["positions"] < cfg.max_model_len).all()
    for tok in range(T):
        row = int(a["req_indices"][tok])
        rid = req_ids[row]
        pos = int(a["positions"][tok])
        # each slot lies in a block held by its request
        assert slots[tok] // cfg.block_size in held[rid]
        assert a["block_table"][row, pos // cfg.block_size] == slots[tok] // cfg.block_size
        # input ids are the token table's entries, which are the request's own tokens
        assert a["input_ids"][tok] == a["token_ids_cpu"][row, pos] == requests[rid].token_ids[pos]
    # a decode step's input is the token sampled for that request one step earlier
    for row, rid in enumerate(req_ids):
        decode = (
            a["num_scheduled_tokens"][row] == 1
            and a["num_computed_tokens_cpu"][row] == a["num_tokens"][row] - 1
        )
        if decode and rid in prev_sampled:
            assert a["input_ids"][qsl[row]] == prev_sampled[rid]
    # ref counts match the holders; a block is shared only through the prefix cache
    holders: dict[int, int] = {}
    for blocks in held.values():
        for b in blocks:
            holders[b] = holders.get(b, 0) + 1
    ref = t.kv_cache["ref_cnt"]
    for b, count in holders.items():
        assert ref[b] == count
        if count > 1:
            assert cfg.enable_prefix_caching and str(b) in t.kv_cache["block_hash"]
    # free plus held is the whole pool (minus the null block), with no overlap
    free = t.kv_cache["free_block_queue"]
    assert len(free) == len(set(free))
    assert set(free).isdisjoint(holders) and set(free) | set(holders) == set(range(1, cfg.num_kv_blocks))
    assert all(ref[b] == 0 for b in free)


def check_v2_step(scenario: Scenario, requests: dict[str, Any], t: Any) -> None:
    """Model Runner V2's invariants of one step: rows sorted, each row read through its slot."""
    cfg = scenario.config
    a = t.arrays
    T = t.scalars["total_num_scheduled_tokens"]
    bs = cfg.block_size
    req_ids, slots_of = t.batch["req_ids"], t.batch["slots"]
    # every slot is held by one request or free, never both; free slots are handed out from the top
    held = sorted(slots_of.values())
    assert len(held) == len(set(held))
    assert sorted(held + t.batch["free_slots"]) == list(range(cfg.max_num_reqs))
    # the batch is sorted: decodes first, then prefill chunks by ascending length
    n = a["num_scheduled_tokens"]
    keys = list(zip((n != 1).tolist(), n.tolist()))
    assert keys == sorted(keys)
    assert a["idx_mapping"].tolist() == [slots_of[r] for r in req_ids]
    qsl = a["query_start_loc"]
    assert qsl[0] == 0 and qsl[-1] == T and (np.diff(qsl) == n).all()
    sm = a["slot_mapping"]
    assert len(set(sm[:T].tolist())) == T and (sm[T:] == -1).all()
    rows = np.repeat(np.arange(len(req_ids)), n)
    slot_rows = a["idx_mapping"][rows]
    pos = a["positions"]
    assert (a["block_tables"][slot_rows, pos // bs] == sm[:T] // bs).all()
    for tok in range(T):
        rid = req_ids[rows[tok]]
        assert a["input_ids"][tok] == requests[rid].token_ids[pos[tok]]
    # the gathered table holds each row's slot blocks, as far as attention reads them
    for i, rid in enumerate(req_ids):
        k = -(-int(a["seq_lens"][i]) // bs)
        assert (a["input_block_tables"][i, :k] == a["block_tables"][slots_of[rid], :k]).all()


def check_v2_spec_step(scenario: Scenario, requests: dict[str, Any], t: Any) -> None:
    """V2 with drafts: verify rows first, then decodes, then chunks by length; each row's logits
    are its last num_draft_tokens + 1 tokens; a known token's input id is the request's own, a
    draft's is its slot's draft_tokens entry."""
    cfg = scenario.config
    a = t.arrays
    T = t.scalars["total_num_scheduled_tokens"]
    req_ids, slots_of = t.batch["req_ids"], t.batch["slots"]
    n, d = a["num_scheduled_tokens"], a["num_draft_tokens"]
    keys = list(zip((d == 0).tolist(), (n != 1 + cfg.num_speculative_tokens).tolist(), n.tolist()))
    assert keys == sorted(keys)
    assert d.tolist() == [len(t.scheduler["scheduled_spec_decode_tokens"].get(r, [])) for r in req_ids]
    cu = a["cu_num_logits"]
    assert (np.diff(cu) == d + 1).all()
    qsl = a["query_start_loc"]
    ends = np.repeat(qsl[1:], d + 1)
    assert (a["logits_indices"] == ends - np.repeat(d + 1, d + 1) + a["expanded_local_pos"]).all()
    assert (a["expanded_idx_mapping"] == np.repeat(a["idx_mapping"], d + 1)).all()
    sm = a["slot_mapping"]
    assert len(set(sm[:T].tolist())) == T and (a["positions"] < cfg.max_model_len).all()
    drafts = np.asarray(a["draft_tokens"])
    for i, rid in enumerate(req_ids):
        row = a["input_ids"][qsl[i] : qsl[i + 1]]
        pos = a["positions"][qsl[i] : qsl[i + 1]]
        known = len(row) - int(d[i])
        assert (row[:known] == requests[rid].token_ids[pos[:known]]).all()
        assert (row[known:] == drafts[slots_of[rid], : int(d[i])]).all()
        # a row's tokens never pass the request's max_tokens by more than its drafts
        assert pos[-1] < cfg.max_model_len


def run_checked(scenario: Scenario) -> None:
    engine = make_engine(scenario)
    prev: dict[str, int] = {}
    while not engine.done:
        t = engine.step()
        assert engine.step_no <= scenario.max_steps
        if not t.idle and scenario.config.model_runner == "v2" and scenario.config.num_speculative_tokens:
            check_v2_spec_step(scenario, engine.scheduler.requests, t)
        elif not t.idle and scenario.config.model_runner == "v2":
            check_v2_step(scenario, engine.scheduler.requests, t)
        elif not t.idle:
            check_vllm_step(scenario, engine.scheduler.requests, t, prev)
        prev = t.sampled_token_ids
    # every request finished, and every block came back
    assert len(engine.scheduler.requests) == len(scenario.requests)
    assert all(r.is_done for r in engine.scheduler.requests.values())
    assert engine.scheduler.kv.pool.num_free == scenario.config.num_kv_blocks - 1


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_vllm_invariants_hold_at_every_step(scenario: Scenario) -> None:
    run_checked(scenario)


@SETTINGS
@given(scenarios(runner="v2"))
def test_v2_slots_sort_and_gather_hold_at_every_step(scenario: Scenario) -> None:
    run_checked(scenario)


@SETTINGS
@given(scenarios(runner="v2", spec=True))
def test_v2_with_drafts_verify_rows_lead_and_read_their_slots_drafts(scenario: Scenario) -> None:
    run_checked(scenario)


def outputs(scenario: Scenario) -> dict[str, list[int]]:
    """Each request's output tokens, in order (drafts accepted or not)."""
    engine = make_engine(scenario)
    for _ in engine.run():
        pass
    return {
        rid: r.token_ids[r.num_prompt_tokens : r.num_tokens].tolist()
        for rid, r in engine.scheduler.requests.items()
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(runner="v2", spec=True))
def test_greedy_drafts_on_v2_never_change_what_is_generated(scenario: Scenario) -> None:
    plain = Scenario.from_dict(
        {**scenario.to_dict(), "config": {**scenario.to_dict()["config"], "num_speculative_tokens": 0}}
    )
    assert outputs(scenario) == outputs(plain)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(flavor="ascend"))
def test_ascend_mask_rows_follow_positions(scenario: Scenario) -> None:
    engine = make_engine(scenario)
    for t in engine.run():
        if t.idle:
            continue
        a = t.arrays
        state = t.scalars["attn_state"]
        if state == "ChunkedPrefill":
            S = t.scalars["max_seq_len"]
            assert a["attn_mask"].shape == (t.scalars["total_num_scheduled_tokens"], S)
            assert ((a["attn_mask"] == 0).sum(1) == np.minimum(a["positions"] + 1, S)).all()
        elif state == "PrefillCacheHit":
            # chunked prefill off, some request computed before: the builder's fixed 128 x 128 mask
            assert not scenario.config.enable_chunked_prefill and a["num_computed_tokens_cpu"].any()
            assert a["attn_mask"].shape == (128, 128)
        elif state == "PrefillNoCache":
            assert (a["num_computed_tokens_cpu"] == 0).all()
            assert a["attn_mask"].shape == (t.scalars["max_seq_len"],) * 2
        else:
            assert state == "DecodeOnly" and (a["num_scheduled_tokens"] == 1).all()
    assert engine.done


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(flavor="nanovllm"))
def test_nanovllm_steps_never_mix_and_slots_stay_in_owned_blocks(scenario: Scenario) -> None:
    engine = make_engine(scenario)
    bs = scenario.config.block_size
    for t in engine.run():
        if t.idle:
            continue
        a = t.arrays
        slots = a["slot_mapping"]
        assert len(set(slots.tolist())) == len(slots)
        owners = t.kv_cache["owners"]
        if t.scalars["is_prefill"]:
            # keys = cached + scheduled tokens, so cu_seqlens_k runs ahead of cu_seqlens_q on a hit
            assert (np.diff(a["cu_seqlens_k"]) >= np.diff(a["cu_seqlens_q"])).all()
            req_of = np.repeat(np.arange(len(t.batch["req_ids"])), np.diff(a["cu_seqlens_q"]))
            hit = a["cu_seqlens_k"][-1] > a["cu_seqlens_q"][-1]
        else:
            assert len(slots) == len(t.batch["req_ids"])
            req_of = np.arange(len(slots))
            hit = True
        # written slots lie in blocks the request holds alone (cached blocks are never rewritten)
        for s, r in zip(slots.tolist(), req_of.tolist()):
            assert owners[str(s // bs)] == [t.batch["req_ids"][r]]
        assert ("block_tables" in a) == bool(hit)
        if hit:
            bt = a["block_tables"]
            assert ((bt == -1) | (bt >= 0)).all()
    assert engine.done and not engine.truncated


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([("v1", False), ("v2", False), ("v2", True)]).flatmap(
        lambda r: scenarios(with_model=True, runner=r[0], spec=r[1])
    )
)
def test_paged_attention_matches_dense_at_every_step(scenario: Scenario) -> None:
    for t in make_engine(scenario).run():
        if not t.idle:
            assert t.forward["paged_vs_dense_max_abs_diff"] < 1e-4
            assert t.forward["slot_mapping_device_matches_cpu"] is True
