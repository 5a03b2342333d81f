"""The ascend flavour held to vllm-ascend: `NPUModelRunner._build_attn_state` (worker/model_runner_v1.py,
and `build_attn_state` in worker/v2/attn_utils.py) and the per-state masks of the mask builder the
seed documents describe (`_make_attention_mask` / `AttentionMaskBuilder`), rule by rule."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pagedviz.core import Scenario, ScenarioError, load_preset, make_engine, preset_dict
from pagedviz.core.flavors.ascend import STATES, attn_mask_for, build_attn_state, causal_mask
from pagedviz.core.trace import StepTrace


def scenario(requests: list[dict[str, Any]], **config: Any) -> Scenario:
    cfg = {
        "block_size": 4,
        "max_model_len": 64,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 64,
        "num_kv_blocks": 32,
        "device": "cpu",
        "model": None,
        **config,
    }
    return Scenario.from_dict({"name": "rules", "flavor": "ascend", "config": cfg, "requests": requests})


def states(s: Scenario) -> list[StepTrace]:
    return [t for t in make_engine(s).run() if not t.idle]


def arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int32)


@pytest.mark.parametrize(
    ("seq_lens", "scheduled", "valid", "chunked", "method", "want"),
    [
        # seq_lens == num_scheduled_tokens: nothing computed before, even for one-token prompts
        (arr(1, 1), arr(1, 1), arr(1, 1), True, None, ("PrefillNoCache", "PrefillNoCache")),
        (arr(5, 9), arr(1, 1), arr(1, 1), True, None, ("DecodeOnly", "DecodeOnly")),
        # "SpecDecoding now supports seq_len=1": with MTP even a plain decode batch is SpecDecoding
        (arr(5, 9), arr(1, 1), arr(1, 1), True, "mtp", ("SpecDecoding", "SpecDecoding")),
        # drafts: 3 scheduled, 1 valid per request
        (arr(8, 9), arr(3, 3), arr(1, 1), True, "mtp", ("SpecDecoding", "SpecDecoding")),
        # any other drafter: the runner stores ChunkedPrefill
        (arr(8, 9), arr(3, 3), arr(1, 1), False, "ngram", ("SpecDecoding", "ChunkedPrefill")),
        (arr(8, 9), arr(3, 3), arr(1, 1), False, None, ("ChunkedPrefill", "ChunkedPrefill")),
        (arr(5, 9), arr(1, 4), arr(1, 4), True, None, ("ChunkedPrefill", "ChunkedPrefill")),
        (arr(5, 9), arr(1, 4), arr(1, 4), False, None, ("PrefillCacheHit", "PrefillCacheHit")),
    ],
)
def test_build_attn_state_first_match_wins(
    seq_lens: np.ndarray,
    scheduled: np.ndarray,
    valid: np.ndarray,
    chunked: bool,
    method: str | None,
    want: tuple[str, str],
) -> None:
    # _build_attn_state's if/elif chain and its `self.attn_state` override for non-MTP drafters
    assert build_attn_state(seq_lens, scheduled, valid, chunked, method) == want


def test_every_state_has_its_documented_mask() -> None:
    # _make_attention_mask: PrefillNoCache get_attn_mask(max_seq_len), ChunkedPrefill
    # get_splitfuse_attn_mask (rows at positions), PrefillCacheHit get_attn_mask(128), else None
    pos = np.array([3, 0, 1, 2])
    masks = {s: attn_mask_for(s, pos, 4) for s in STATES}
    assert masks["PrefillNoCache"].tolist() == causal_mask(4).tolist()  # type: ignore[union-attr]
    assert masks["ChunkedPrefill"].tolist() == causal_mask(4)[pos].tolist()  # type: ignore[union-attr]
    assert masks["PrefillCacheHit"].shape == (128, 128)  # type: ignore[union-attr]
    assert masks["DecodeOnly"] is None and masks["SpecDecoding"] is None


def test_prefill_cache_hit_preset_reaches_the_state() -> None:
    # chunked prefill off + a prefill over cached tokens beside a decode -> PrefillCacheHit
    steps = [t for t in make_engine(load_preset("ascend-prefill-cache-hit")).run() if not t.idle]
    got = [t.scalars["attn_state"] for t in steps]
    assert got[:4] == ["PrefillNoCache", "DecodeOnly", "DecodeOnly", "PrefillCacheHit"]
    t = steps[3]
    assert t.scheduler["num_scheduled_tokens"] == {"a": 1, "b": 7}
    assert t.arrays["num_computed_tokens_cpu"].tolist() == [50, 32]
    assert t.scheduler["new_block_ids"]["b"][:8] == list(range(1, 9))
    assert t.arrays["attn_mask"].tolist() == causal_mask(128).tolist()
    assert steps[0].arrays["attn_mask"].shape == (48, 48)
    assert "attn_mask" not in steps[1].arrays


def test_chunked_prefill_on_turns_the_same_hit_into_chunked_prefill() -> None:
    # `elif self.scheduler_config.enable_chunked_prefill: ChunkedPrefill` comes before PrefillCacheHit
    prefix = list(range(20, 36))
    s = scenario(
        [
            {"id": "a", "prompt_token_ids": [*prefix, 40], "max_tokens": 4},
            {"id": "b", "prompt_token_ids": [*prefix, 50, 51], "max_tokens": 2, "arrival_step": 2},
        ],
        enable_prefix_caching=True,
    )
    steps = states(s)
    hit = next(t for t in steps if "b" in t.scheduler["new_req_ids"])
    assert hit.arrays["num_computed_tokens_cpu"][-1] == 16
    assert hit.scalars["attn_state"] == "ChunkedPrefill"
    s2 = scenario(
        [
            {"id": "a", "prompt_token_ids": [*prefix, 40], "max_tokens": 4},
            {"id": "b", "prompt_token_ids": [*prefix, 50, 51], "max_tokens": 2, "arrival_step": 2},
        ],
        enable_prefix_caching=True,
        enable_chunked_prefill=False,
    )
    hit2 = next(t for t in states(s2) if "b" in t.scheduler["new_req_ids"])
    assert hit2.scalars["attn_state"] == "PrefillCacheHit"


def test_a_decode_beside_a_fresh_prefill_is_prefill_cache_hit_without_chunked_prefill() -> None:
    # no cache hit needed: some request has computed tokens, not all have one token, chunking off
    s = scenario(
        [
            {"id": "a", "prompt_len": 6, "max_tokens": 4},
            {"id": "b", "prompt_len": 5, "max_tokens": 2, "arrival_step": 2},
        ],
        enable_chunked_prefill=False,
    )
    step2 = states(s)[1]
    assert step2.scheduler["num_scheduled_tokens"] == {"a": 1, "b": 5}
    assert step2.arrays["num_computed_tokens_cpu"].tolist() == [6, 0]
    assert step2.scalars["attn_state"] == "PrefillCacheHit"


def test_one_token_prompts_are_prefill_no_cache_not_decode_only() -> None:
    steps = states(
        scenario(
            [{"id": "a", "prompt_len": 1, "max_tokens": 2}, {"id": "b", "prompt_len": 1, "max_tokens": 2}]
        )
    )
    assert steps[0].scalars["attn_state"] == "PrefillNoCache"
    assert steps[0].arrays["attn_mask"].shape == (1, 1)
    assert steps[1].scalars["attn_state"] == "DecodeOnly"


def test_the_decode_row_is_zero_over_its_own_keys_only() -> None:
    # document 000: "during the decode phase ... the created vector is actually an all-zero vector".
    # The row picked at position seq_len - 1 is 0 over keys 0..seq_len-1 and 1 past them, where the
    # request has no keys; it is all zeros only for the longest request.
    engine = make_engine(load_preset("seed-001-ascend"))
    engine.step()
    step2 = engine.step()
    assert step2.scalars["attn_state"] == "ChunkedPrefill"
    mask, qsl = step2.arrays["attn_mask"], step2.arrays["query_start_loc"]
    seq_lens = step2.arrays["seq_lens"]
    max_seq_len = int(step2.scalars["max_seq_len"])
    decodes = [r for r, n in enumerate(step2.arrays["num_scheduled_tokens"]) if n == 1]
    assert decodes == [0, 1]
    for r in decodes:
        row = mask[qsl[r]]
        assert not row[: seq_lens[r]].any()
        assert row[seq_lens[r] :].all() and (seq_lens[r] < max_seq_len) == bool(row.any())


def test_rows_equal_the_right_down_causal_mask_the_head_kernel_applies() -> None:
    # at HEAD one triu(2048) mask with sparse_mode=3 (right-down causal): query j of a request with
    # q_len queries over seq_len keys sees keys 0..seq_len - q_len + j -- the rows picked by position
    engine = make_engine(load_preset("seed-001-ascend"))
    engine.step()
    t = engine.step()
    mask, qsl, seq_lens = t.arrays["attn_mask"], t.arrays["query_start_loc"], t.arrays["seq_lens"]
    for r in range(int(t.scalars["num_reqs"])):
        q_len, L = int(qsl[r + 1] - qsl[r]), int(seq_lens[r])
        right_down = np.triu(np.ones((q_len, L), dtype=np.uint8), k=L - q_len + 1)
        assert mask[qsl[r] : qsl[r + 1], :L].tolist() == right_down.tolist()
    assert "2048" in t.scalars["attn_mask_head"]


def test_every_attention_state_is_reached_by_a_shipped_preset() -> None:
    seen = {
        t.scalars.get("attn_state")
        for preset in ("seed-001-ascend", "ascend-prefill-cache-hit", "ascend-spec-decoding")
        for t in make_engine(load_preset(preset)).run()
    }
    assert {"PrefillNoCache", "DecodeOnly", "ChunkedPrefill", "PrefillCacheHit", "SpecDecoding"} <= seen


def test_mtp_decodes_with_drafts_are_spec_decoding_and_ngram_ones_chunked_prefill() -> None:
    d = preset_dict("ascend-spec-decoding")
    mtp = [t.scalars["attn_state"] for t in make_engine(Scenario.from_dict(d)).run()]
    d["config"]["speculative_method"] = "ngram"
    steps = list(make_engine(Scenario.from_dict(d)).run())
    assert mtp[0] == "PrefillNoCache" and set(mtp[1:]) == {"SpecDecoding"}
    # vllm-ascend builds SpecDecoding for any drafter but keeps ChunkedPrefill unless it is MTP
    assert {t.scalars["attn_state"] for t in steps[1:]} == {"ChunkedPrefill"}
    assert {t.scalars.get("attn_state_built") for t in steps[1:]} == {"SpecDecoding"}


def test_mtp_is_refused_outside_the_ascend_flavour() -> None:
    d = preset_dict("ascend-spec-decoding")
    d["flavor"] = "vllm"
    with pytest.raises(ScenarioError, match="speculative_method"):
        Scenario.from_dict(d)
