"""Issue 13, the vLLM side: padding, the token_indices question, speculative decoding, async
scheduling, M-RoPE, the KV cache's shape and the presets' notes on document typos."""

from __future__ import annotations

import numpy as np
import pytest

from pagedviz.core import Scenario, ScenarioError, load_preset, make_engine
from pagedviz.core.presets import list_presets


def run(preset: str) -> list:
    return list(make_engine(load_preset(preset)).run())


# ------------------------------------------------------------------ padding
def test_cudagraph_padding_pads_five_tokens_to_eight_with_minus_one_slots() -> None:
    t = run("demo-cudagraph-padding")[0]
    d = t.to_dict()["arrays"]
    T = t.scalars["total_num_scheduled_tokens"]
    assert T == 5 and t.scalars["num_input_tokens"] == 8
    sm = d["slot_mapping"]
    assert len(sm["data"]) == 8 and sm["valid"] == 5
    assert sm["data"][5:] == [-1, -1, -1] and min(sm["data"][:5]) >= 0
    # the padded tail is exactly what the real tokens did not fill
    assert sm["data"][:5] == t.arrays["slot_mapping"][:5].tolist()


def test_query_start_loc_buffer_repeats_its_last_value_and_seq_lens_buffer_is_zero_past_num_reqs() -> None:
    for t in run("demo-cudagraph-padding"):
        d = t.to_dict()["arrays"]
        n = t.scalars["num_reqs"]
        qsl, sl = d["query_start_loc"], d["seq_lens"]
        cfg = load_preset("demo-cudagraph-padding").config
        assert len(qsl["buffer"]) == cfg.max_num_reqs + 1 and qsl["valid"] == n + 1
        assert len(sl["buffer"]) == cfg.max_num_reqs and sl["valid"] == n
        # data keeps its request-level length; the buffer starts with it
        assert qsl["buffer"][: n + 1] == qsl["data"] and sl["buffer"][:n] == sl["data"]
        assert set(qsl["buffer"][n + 1 :]) <= {qsl["data"][-1]}
        assert np.all(np.diff(qsl["buffer"]) >= 0), "FlashAttention needs it non-decreasing"
        assert set(sl["buffer"][n:]) <= {0}


def test_unpadded_steps_mark_nothing_as_padding() -> None:
    t = run("seed-001")[0]
    assert "valid" not in t.to_dict()["arrays"]["slot_mapping"]
    assert t.scalars["num_input_tokens"] == t.scalars["total_num_scheduled_tokens"]


def test_attn_metadata_text_no_longer_says_request_counts_are_padded() -> None:
    t = run("demo-cudagraph-padding")[0]
    stage = next(s for s in t.stages if s.name == "attn_metadata")
    assert "not padded" in stage.why and "num_reqs is not padded" in stage.formula


# ------------------------------------------------------------------ token_indices what-if
def test_whatif_token_indices_stride_by_blocks_and_go_wrong_past_row_zero() -> None:
    sc = load_preset("demo-max-model-len")
    M, bs = sc.config.max_model_len, sc.config.block_size
    assert M % bs != 0
    K = -(-M // bs)
    for t in make_engine(sc).run():
        a = t.arrays
        assert a["token_indices_whatif"].tolist() == (a["positions"] + a["req_indices"] * K * bs).tolist()
        wrong = a["whatif_wrong"]
        assert wrong.tolist() == (a["req_indices"] > 0).tolist()
        # where the index is right the ids agree; the right formula's ids are the table's
        assert (a["input_ids_whatif"][~wrong] == a["input_ids"][~wrong]).all()
        table = a["token_ids_cpu"]
        assert a["input_ids"].tolist() == table[a["req_indices"], a["positions"]].tolist()
    step1 = make_engine(sc).step().arrays
    assert (
        step1["input_ids_whatif"][step1["whatif_wrong"]] != step1["input_ids"][step1["whatif_wrong"]]
    ).any()


def test_whatif_stage_runs_only_when_max_model_len_is_not_a_multiple_of_block_size() -> None:
    t = run("seed-001")[0]
    assert "token_indices_whatif" not in t.arrays
    assert "token_indices_whatif" not in [s.name for s in t.stages]


# ------------------------------------------------------------------ KV cache shape, notes
def test_kv_cache_section_gives_the_tensor_shape_per_layer() -> None:
    sc = load_preset("seed-001")
    m = sc.config.model
    assert m is not None
    kv = run("seed-001")[0].kv_cache
    assert kv["shape"] == [2, sc.config.num_kv_blocks, sc.config.block_size, m.num_kv_heads, m.head_size]
    assert kv["num_layers"] == m.num_layers and "per layer" in kv["layout"]


def test_document_typo_notes_reach_the_preset_list_in_both_languages() -> None:
    en = {p["id"]: p for p in list_presets()}
    zh = {p["id"]: p for p in list_presets("zh")}
    assert "[0, 1, 1, 2, 95, 170, 200]" in en["seed-000"]["notes"][0]
    assert "T_0_2" in en["seed-001-ascend"]["notes"][0] and "T_0_3" in en["seed-001-ascend"]["notes"][0]
    assert "T_0_3" in zh["seed-001"]["notes"][0] and zh["seed-001"]["notes"] != en["seed-001"]["notes"]
    assert en["seed-002"]["notes"] == []


def test_notes_must_be_a_short_list_of_strings() -> None:
    base = load_preset("seed-001").to_dict()
    with pytest.raises(ScenarioError) as e:
        Scenario.from_dict({**base, "notes": "one"})
    assert e.value.errors[0][0] == "notes"
    assert Scenario.from_dict({**base, "notes": ["a"]}).notes == ("a",)
