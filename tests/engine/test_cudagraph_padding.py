"""CUDA-graph padding as vLLM does it: num_input_tokens padded to a capture size, -1 slots in the
padded tail, query_start_loc and seq_lens buffers past num_reqs, and no padding where none is needed."""

from __future__ import annotations

import numpy as np

from pagedviz.core import load_preset, make_engine


def run(preset: str) -> list:
    return list(make_engine(load_preset(preset)).run())


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
