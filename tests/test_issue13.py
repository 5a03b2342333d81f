"""Issue 13, the vLLM side: padding, the token_indices question, speculative decoding, async
scheduling, M-RoPE, the KV cache's shape and the presets' notes on document typos."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Scenario, ScenarioError, load_preset, make_engine
from pagedviz.core.presets import list_presets, preset_dict
from pagedviz.core.runners.mrope import mrope_prompt_positions
from pagedviz.core.spec_decode import calc_spec_decode_metadata, ngram_propose


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
    # a preset without a typo carries only the note that pins the V1 runner
    assert [n for n in en["seed-002"]["notes"] if not n.startswith("Pinned to vLLM 0.33's V1 runner")] == []


def test_notes_must_be_a_short_list_of_strings() -> None:
    base = load_preset("seed-001").to_dict()
    with pytest.raises(ScenarioError) as e:
        Scenario.from_dict({**base, "notes": "one"})
    assert e.value.errors[0][0] == "notes"
    assert Scenario.from_dict({**base, "notes": ["a"]}).notes == ("a",)


# ------------------------------------------------------------------ speculative decoding
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


# ------------------------------------------------------------------ async scheduling
def _sync_twin(preset: str) -> list:
    d = preset_dict(preset)
    d["config"]["async_scheduling"] = False
    return list(make_engine(Scenario.from_dict(d)).run())


def test_async_decode_inputs_are_placeholders_on_the_cpu_and_right_on_the_device() -> None:
    steps, sync = run("demo-async-scheduling"), _sync_twin("demo-async-scheduling")
    assert len(steps) == len(sync)
    for t, s in zip(steps, sync):
        a = t.arrays
        # the device holds what a synchronous engine gathers on the CPU, and the run is the same
        assert a["input_ids_device"].tolist() == s.arrays["input_ids"].tolist()
        assert t.sampled_token_ids == s.sampled_token_ids
        flat = a["sample_flattened_indices"]
        assert (a["input_ids"][flat] == 0).all(), "the CPU has only the placeholder there"
        others = np.setdiff1d(np.arange(len(a["input_ids"])), flat)
        assert (a["input_ids"][others] == a["input_ids_device"][others]).all()
        # every filled token is last step's sample of the same request
        prev = a.get("prev_sampled_token_ids")
        if len(flat):
            assert (a["input_ids_device"][flat] == prev[a["prev_common_req_indices"]]).all()


def test_async_one_copy_when_the_batch_kept_its_order_else_a_scatter() -> None:
    steps = run("demo-async-scheduling")
    modes = [t.scalars["input_ids_copy"] for t in steps]
    assert modes[:5] == ["cpu", "one_copy", "scatter", "one_copy", "one_copy"]
    for t in steps:
        a = t.arrays
        same = (a["sample_flattened_indices"] == a["prev_common_req_indices"]).all()
        dense = (
            len(a["sample_flattened_indices"])
            and a["sample_flattened_indices"].max() == len(a["sample_flattened_indices"]) - 1
        )
        if t.scalars["input_ids_copy"] != "cpu":
            assert (t.scalars["input_ids_copy"] == "one_copy") == bool(same and dense)
    step3 = steps[2]
    assert step3.batch["moves"] == [{"req_id": "c", "from": 2, "to": 0}]
    assert step3.arrays["prev_common_req_indices"].tolist() == [2, 1]
    assert step3.arrays["sample_flattened_indices"].tolist() == [0, 1]


# ------------------------------------------------------------------ M-RoPE
def _mrope_by_definition(num_prompt: int, offset: int, t: int, h: int, w: int) -> np.ndarray:
    """Token by token: text before the image counts 0, 1, ...; image token j sits at its
    (t, h, w) grid index plus offset; text after the image counts on from offset + max(t, h, w)."""
    cols = []
    n_img = t * h * w
    for j in range(num_prompt):
        if j < offset:
            cols.append((j, j, j))
        elif j < offset + n_img:
            ti, hi, wi = np.unravel_index(j - offset, (t, h, w))
            cols.append((offset + ti, offset + hi, offset + wi))
        else:
            p = offset + max(t, h, w) + (j - offset - n_img)
            cols.append((p, p, p))
    return np.array(cols, dtype=np.int64).T


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 5), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.integers(0, 5))
def test_mrope_prompt_positions_follow_qwen2_vl(offset: int, t: int, h: int, w: int, tail: int) -> None:
    n = offset + t * h * w + tail
    m = mrope_prompt_positions(n, (offset, t, h, w))
    assert m.positions.tolist() == _mrope_by_definition(n, offset, t, h, w).tolist()
    assert m.delta == offset + max(t, h, w) + tail - n


def test_mrope_preset_gives_a_3_by_t_array_that_continues_after_the_image() -> None:
    steps = run("demo-mrope")
    full = _mrope_by_definition(12, 3, 1, 2, 3)
    cols = []
    for t in steps:
        a = t.arrays
        mp = a["mrope_positions"]
        assert mp.shape == (3, len(a["positions"]))
        img_rows = a["req_indices"] == t.batch["req_ids"].index("img")
        prompt = img_rows & (a["positions"] < 12)
        assert mp[:, prompt].tolist() == full[:, a["positions"][prompt]].tolist()
        # decoded tokens: position + delta (-3) on all three rows
        dec = img_rows & (a["positions"] >= 12)
        assert (mp[:, dec] == a["positions"][dec] - 3).all()
        # a text-only request: three equal rows, equal to positions
        if "txt" in t.batch["req_ids"]:
            txt = a["req_indices"] == t.batch["req_ids"].index("txt")
            assert (mp[:, txt] == a["positions"][txt]).all()
        cols.extend(mp[:, dec].T.tolist())
    assert cols[0] == [9, 9, 9], "the first decoded token takes max + 1 after the text, not 12"


def test_image_must_fit_its_prompt() -> None:
    base = load_preset("demo-mrope").to_dict()
    reqs = [dict(base["requests"][0], image={"offset": 10, "t": 1, "h": 2, "w": 3}), base["requests"][1]]
    with pytest.raises(ScenarioError) as e:
        Scenario.from_dict({**base, "requests": reqs})
    assert e.value.errors[0][0] == "requests[0].image"


# ------------------------------------------------------------------ served by the CLI and REST
def test_cli_json_carries_every_new_array_under_vllms_names() -> None:
    names = {
        "demo-ngram-spec-decode": {
            "num_draft_tokens",
            "cu_num_draft_tokens",
            "logits_indices",
            "target_logits_indices",
            "bonus_logits_indices",
            "num_sampled_tokens",
        },
        "demo-async-scheduling": {"prev_sampled_token_ids", "sample_flattened_indices", "input_ids_device"},
        "demo-mrope": {"mrope_positions"},
        "demo-max-model-len": {"token_indices_whatif", "input_ids_whatif", "whatif_wrong"},
    }
    for preset, want in names.items():
        r = subprocess.run(
            [sys.executable, "-m", "pagedviz.app.cli", "run", preset, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        seen = set().union(*(s["arrays"] for s in doc["steps"]))
        assert want <= seen, (preset, want - seen)
    step1 = json.loads(
        subprocess.run(
            [sys.executable, "-m", "pagedviz.app.cli", "run", "demo-cudagraph-padding", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    )["steps"][0]
    assert step1["arrays"]["slot_mapping"]["valid"] == 5
    assert step1["arrays"]["query_start_loc"]["buffer"] == [0, 3, 5, 5, 5]
    assert step1["kv_cache"]["shape"][0] == 2


def test_rest_serves_the_notes_and_the_padded_buffers() -> None:
    client = TestClient(create_app(Settings(max_runs=4)))
    presets = {p["id"]: p for p in client.get("/api/presets?lang=zh").json()}
    assert "T_0_3" in presets["seed-001-ascend"]["notes"][0]
    run_id = client.post("/api/runs", json=preset_dict("demo-cudagraph-padding")).json()["run_id"]
    step = client.get(f"/api/runs/{run_id}/steps/1").json()
    assert step["arrays"]["seq_lens"]["buffer"] == [3, 2, 0, 0]
    assert next(s for s in step["stages"] if s["name"] == "slot_mapping")["why"]
