"""The demo presets do what their summaries say (prefix caching; preemption, recompute, condense)."""

from __future__ import annotations

import numpy as np

from pagedviz.core import load_preset, make_engine
from pagedviz.core.presets import list_presets


def run(preset: str) -> list:
    return list(make_engine(load_preset(preset)).run())


def test_prefix_cache_demo_computes_the_shared_prefix_once() -> None:
    steps = run("demo-prefix-cache")
    s1, s3, s5 = steps[0], steps[2], steps[4]
    assert s1.scheduler["new_block_ids"] == {"a": list(range(1, 12))}  # 44 bytes, block size 4
    assert s3.scheduler["new_req_ids"] == ["b"]
    # b finds 9 full blocks in the cache and prefills only its last 7 tokens, into 2 new blocks
    assert s3.scheduler["new_block_ids"]["b"][:9] == list(range(1, 10))
    assert len(s3.scheduler["new_block_ids"]["b"]) == 11
    assert s3.scheduler["num_scheduled_tokens"]["b"] == 7
    assert s3.arrays["num_computed_tokens_cpu"].tolist() == [45, 36]
    ref = np.array(s3.kv_cache["ref_cnt"])
    assert (ref[1:10] == 2).all() and (ref[10:15] == 1).all()
    assert s3.forward["paged_vs_dense_max_abs_diff"] < 1e-4  # the cached K/V are the right ones
    # when a finishes, b's row moves up
    assert s5.scheduler["finished_req_ids"] == ["a"]
    assert s5.batch["moves"] == [{"req_id": "b", "from": 1, "to": 0}]


def test_preemption_demo_preempts_recomputes_and_condenses() -> None:
    steps = run("demo-preemption")
    s3, s4, s6 = steps[2], steps[3], steps[5]
    assert s3.scheduler["preempted_req_ids"] == ["c"] and s3.batch["req_ids"] == ["a", "b"]
    assert s4.scheduler["resumed_req_ids"] == ["c"] and s4.scheduler["finished_req_ids"] == ["a"]
    assert s4.scheduler["num_scheduled_tokens"]["c"] == 6  # prompt 4 + 2 sampled, recomputed
    assert s4.batch["req_ids"] == ["c", "b"]  # c takes the lowest hole, a's row
    assert s6.scheduler["preempted_req_ids"] == ["c"]
    assert s6.batch["moves"] == [{"req_id": "b", "from": 1, "to": 0}]
    assert all(t.forward["paged_vs_dense_max_abs_diff"] < 1e-4 for t in steps if not t.idle)


def test_demos_come_after_the_document_presets_and_name_no_document() -> None:
    presets = list_presets()
    ids = [p["id"] for p in presets]
    seeds = [i for i, pid in enumerate(ids) if pid.startswith("seed-")]
    assert seeds == list(range(len(seeds)))
    assert {"demo-preemption", "demo-prefix-cache"} <= set(ids[len(seeds) :])
    assert all(p["document"] for p in presets if p["id"].startswith("seed-"))
    assert all(not p["document"] for p in presets if p["id"].startswith("demo-"))
    zh = {p["id"]: p for p in list_presets("zh")}
    assert "前缀缓存" in zh["demo-prefix-cache"]["title"] and "抢占" in zh["demo-preemption"]["title"]


def test_spec_decode_metadata_demo_replays_the_worked_example_in_vllms_docstring() -> None:
    # GPUModelRunner._calc_spec_decode_metadata (vllm/v1/worker/gpu_model_runner.py, vLLM 0.33.0)
    # works this example in its comments; the expected values below are copied from there.
    steps = run("demo-spec-decode-metadata")
    s2 = steps[1]
    assert s2.batch["req_ids"] == ["a", "b", "c", "d", "e"]
    assert s2.scheduler["scheduled_spec_decode_tokens"].keys() == {"a", "c", "e"}
    a = s2.arrays
    assert a["num_scheduled_tokens"].tolist() == [4, 100, 3, 100, 2]
    # Inputs:
    assert a["cu_num_tokens"].tolist() == [4, 104, 107, 207, 209]  # cu_num_scheduled_tokens
    assert a["num_draft_tokens"].tolist() == [3, 0, 2, 0, 1]
    # Outputs:
    assert a["cu_num_draft_tokens"].tolist() == [3, 3, 5, 5, 6]
    assert a["logits_indices"].tolist() == [0, 1, 2, 3, 103, 104, 105, 106, 206, 207, 208]
    assert a["target_logits_indices"].tolist() == [0, 1, 2, 5, 6, 9]
    assert a["bonus_logits_indices"].tolist() == [3, 4, 7, 8, 10]
    # the intermediate comments: num_sampled_tokens [4, 1, 3, 1, 2], cu_num_sampled_tokens [4, 5, 8, 9, 11]
    assert a["num_sampled_tokens"].tolist() == [4, 1, 3, 1, 2]
    assert a["cu_num_sampled_tokens"].tolist() == [4, 5, 8, 9, 11]
    # the drafts came from the n-gram drafter after step 1, and the forward stays correct
    drafts = steps[0].forward["proposed_draft_token_ids"]
    assert {r: len(d) for r, d in drafts.items()} == {"a": 3, "c": 2, "e": 1}
    assert s2.scheduler["finished_req_ids"] == ["x", "y"] and s2.scheduler["new_req_ids"] == ["b", "d"]
    assert all(t.forward["paged_vs_dense_max_abs_diff"] < 1e-4 for t in steps)
