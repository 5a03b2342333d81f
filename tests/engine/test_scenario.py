"""Scenario validation: every broken rule names its field; valid prompts in three forms."""

from __future__ import annotations

from typing import Any

import pytest

from pagedviz.core import Limits, Scenario, ScenarioError
from pagedviz.core.tokenizer import decode_ids, encode_text


def base(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": "x",
        "config": {"block_size": 4, "max_model_len": 32, "num_kv_blocks": 32},
        "requests": [{"id": "a", "prompt_len": 5, "max_tokens": 3}],
    }
    d.update(over)
    return d


def errors_of(d: Any, limits: Limits | None = None) -> list[tuple[str, str]]:
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(d, limits)
    return info.value.errors


def test_three_prompt_forms_and_text_round_trip() -> None:
    s = Scenario.from_dict(
        base(
            requests=[
                {"id": "a", "prompt_token_ids": [5, 6, 7], "max_tokens": 2},
                {"id": "b", "prompt": "héllo <b>", "max_tokens": 2},
                {"id": "c", "prompt_len": 9, "max_tokens": 2},
            ]
        )
    )
    a, b, c = s.requests
    assert a.prompt_token_ids == (5, 6, 7)
    assert decode_ids(b.prompt_token_ids) == "héllo <b>" and b.prompt == "héllo <b>"
    assert len(c.prompt_token_ids) == 9 and all(3 <= t < 512 for t in c.prompt_token_ids)
    assert encode_text("A") == [65 + 3]


def test_prompt_len_ids_depend_on_seed_only() -> None:
    one = Scenario.from_dict(base(seed=7)).requests[0].prompt_token_ids
    two = Scenario.from_dict(base(seed=7)).requests[0].prompt_token_ids
    other = Scenario.from_dict(base(seed=8)).requests[0].prompt_token_ids
    assert one == two and one != other


def test_duplicate_ids_are_refused() -> None:
    errs = errors_of(base(requests=[{"id": "a", "prompt_len": 2}, {"id": "a", "prompt_len": 2}]))
    assert errs == [("requests[1].id", "duplicate id 'a'")]


def test_prompt_plus_max_tokens_over_max_model_len_is_refused() -> None:
    errs = errors_of(base(requests=[{"id": "a", "prompt_len": 30, "max_tokens": 5}]))
    assert any(loc == "requests[0]" and "exceeds max_model_len 32" in msg for loc, msg in errs)


def test_request_larger_than_the_pool_is_refused() -> None:
    d = base()
    d["config"]["num_kv_blocks"] = 2
    errs = errors_of(d)
    assert any("needs 2 KV blocks but the pool has 1 usable" in msg for _, msg in errs)


def test_ids_outside_vocabulary_are_refused() -> None:
    errs = errors_of(base(requests=[{"id": "a", "prompt_token_ids": [1, 512]}]))
    assert errs[0][0] == "requests[0].prompt_token_ids" and "vocab_size=512" in errs[0][1]


def test_wrong_types_and_unknown_fields_name_the_field() -> None:
    d = base(flavor="tpu", seed="x")
    d["config"]["block_size"] = True
    d["config"]["bogus"] = 1
    locs = {loc for loc, _ in errors_of(d)}
    assert {"flavor", "scenario.seed", "config.block_size", "config.bogus"} <= locs


def test_sizes_past_the_limits_are_flagged_too_large() -> None:
    d = base()
    d["config"].update(max_num_reqs=4000, max_model_len=4000)
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(d, Limits(max_cells=1000))
    assert info.value.too_large
    assert "token_ids_cpu would hold 16000000 cells" in str(info.value)


def test_not_an_object_is_refused() -> None:
    assert errors_of([1, 2]) == [("scenario", "must be a JSON object")]
    assert errors_of(base(requests=[])) == [("requests", "must be a non-empty list")]


def test_gqa_heads_must_divide() -> None:
    d = base()
    d["config"]["model"] = {"num_heads": 4, "num_kv_heads": 3}
    assert ("config.model.num_kv_heads", "must divide num_heads (grouped-query attention)") in errors_of(d)


def test_canonical_dict_round_trips() -> None:
    s = Scenario.from_dict(base(requests=[{"id": "a", "prompt": "hi", "max_tokens": 2}]))
    again = Scenario.from_dict(s.to_dict())
    assert again == s


def test_nanovllm_takes_sequences_longer_than_the_budget_in_chunks() -> None:
    # nano-vllm's Scheduler.schedule lets the first waiting sequence take a chunk; it has no switch
    d = base(flavor="nanovllm")
    d["config"].update(max_num_batched_tokens=6, enable_chunked_prefill=False)
    assert Scenario.from_dict(d).flavor == "nanovllm"
    d["flavor"] = "vllm"
    assert any("must fit the budget whole" in msg for _, msg in errors_of(d))


def test_canonical_dict_keeps_seed_drawn_prompts_short() -> None:
    s = Scenario.from_dict(base(seed=3))
    assert s.to_dict()["requests"][0] == {"id": "a", "prompt_len": 5, "max_tokens": 3, "arrival_step": 1}
    assert Scenario.from_dict(s.to_dict()) == s
