"""Narration of KV cache groups (core/narrate_groups.py): a sliding window's dropped blocks and why,
a block a full-attention group takes that a sliding group held the step before, and each group's
blocks at admission and growth, in English and 简体中文, every number read from the trace.

The scenario is the issue's example from vLLM's own scheduler, run by the engine: layer 0 full
attention, layer 1 a sliding window of 8 tokens, block size 4, prefix caching off; a (20 prompt
tokens) and b (12) at step 1. After step 2, vLLM's hybrid manager holds a in
([1, 2, 3, 4, 5, 8], [0, 0, 0, 9, 10, 7]) and b in ([11, 12, 13, 14], [0, 15, 16, 6])."""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

from pagedviz.core import Scenario, make_engine
from pagedviz.core.narrate import narrate
from pagedviz.core.trace import StepTrace

ISSUE = {
    "name": "issue-38-example",
    "seed": 0,
    "config": {
        "model_runner": "v1",
        "async_scheduling": False,
        "block_size": 4,
        "num_kv_blocks": 40,
        "max_model_len": 64,
        "max_num_reqs": 4,
        "max_num_batched_tokens": 64,
        "enable_chunked_prefill": True,
        "enable_prefix_caching": False,
        "layer_types": ["full_attention", "sliding_attention"],
        "sliding_window": 8,
    },
    "requests": [
        {"id": "a", "prompt_token_ids": list(range(1, 21)), "max_tokens": 8},
        {"id": "b", "prompt_token_ids": list(range(1, 13)), "max_tokens": 4},
    ],
    "max_steps": 30,
}


@functools.cache
def _run() -> tuple[Scenario, list[StepTrace]]:
    sc = Scenario.from_dict(copy.deepcopy(ISSUE))
    return sc, list(make_engine(sc).run())


def _by_key(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {it["key"]: it for it in items}


def _with_drop(t: StepTrace, n: int, first: int, blocks: tuple[int, ...]) -> StepTrace:
    """Step 2 with other numbers in a's window drop (only the drop: what the sentence reads)."""
    t2 = copy.copy(t)
    t2.scheduler = copy.deepcopy(t.scheduler)
    d = t2.scheduler["window_drops"]["a"][0]
    d.update(block_ids=list(blocks), block_indices=list(range(len(blocks))), num_computed_tokens=n)
    d["first_kept_token"] = first
    return t2


def test_the_issues_step_2_is_the_engines() -> None:
    _, steps = _run()
    assert steps[1].scheduler["block_ids"] == {
        "a": [[1, 2, 3, 4, 5, 8], [0, 0, 0, 9, 10, 7]],
        "b": [[11, 12, 13, 14], [0, 15, 16, 6]],
    }


def test_a_window_drop_says_which_blocks_which_positions_and_why_in_both_languages() -> None:
    sc, steps = _run()
    items = _by_key(narrate(steps[1], steps[0], sc.config))
    en, zh = items["window_drop:a:1"]["text"]["en"], items["window_drop:a:1"]["text"]["zh"]
    assert en.startswith(
        "Request a's sliding-window group (layer 1, window 8) dropped blocks 6–8 (token positions 0–11), "
        "freed in the order 8, 7, 6: at 20"
    )
    assert "at 20 computed tokens the window of 8 keeps positions 13 onward" in en
    assert "the null block 0 takes their places" in en and "return to the free queue" in en
    assert (
        "请求 a 的滑动窗口组（第 1 层，窗口 8）丢弃了块 6–8（token 位置 0–11），按 8、7、6 的顺序释放：" in zh
    )
    assert "已计算 20 个 token" in zh and "位置 13 及之后" in zh and "空块 0" in zh
    refs = [(r["kind"], r["id"]) for r in items["window_drop:a:1"]["refs"]]
    assert refs == [("request", "a"), ("block", 8), ("block", 7), ("block", 6)]
    b = items["window_drop:b:1"]["text"]["en"]
    assert "dropped block 14 (token positions 0–3)" in b and "takes its place" in b and "returns" in b
    b_zh = items["window_drop:b:1"]["text"]["zh"]
    assert "这个块回到空闲队列" in b_zh and "不再读取它。" in b_zh


def test_the_drop_sentence_follows_the_trace_not_the_example() -> None:
    # other numbers in the trace, other numbers in the sentence: nothing is typed in
    sc, steps = _run()
    items = _by_key(narrate(_with_drop(steps[1], n=24, first=17, blocks=(6, 7, 8, 9)), steps[0], sc.config))
    en = items["window_drop:a:1"]["text"]["en"]
    assert "dropped blocks 6–9 (token positions 0–15)" in en  # freed in ascending order here
    assert "at 24 computed tokens the window of 8 keeps positions 17 onward" in en
    assert "positions 13" not in en


def test_a_block_the_sliding_group_gave_back_and_the_full_group_took_is_said() -> None:
    sc, steps = _run()
    items = _by_key(narrate(steps[1], steps[0], sc.config))
    move = items["group_move:8"]["text"]
    assert move["en"].startswith(
        "Block 8 moved between groups: at the end of step 1 it was in request a's sliding-window group "
        "(layer 1, window 8), whose window dropped it this step to the free queue; now request a's "
        "full-attention group (layer 0) holds it as its logical block 5"
    )
    assert "块 8 换了组：第 1 步结束时它在请求 a 的滑动窗口组（第 1 层，窗口 8）中" in move["zh"]
    assert "全注意力组（第 0 层）把它用作第 5 个逻辑块" in move["zh"]
    # b's full group took 14, which b's own window dropped; 7 and 6 went to sliding groups: no move
    assert "group_move:14" in items
    assert "group_move:7" not in items and "group_move:6" not in items
    # without the step before there is nothing to compare with
    assert not [k for k in _by_key(narrate(steps[1], None, sc.config)) if k.startswith("group_move")]


def test_admission_and_growth_name_each_groups_blocks() -> None:
    sc, steps = _run()
    first = _by_key(narrate(steps[0], None, sc.config))
    bids = steps[0].scheduler["block_ids"]["a"]
    full, sliding = (", ".join(map(str, g)) if len(g) < 3 else f"{g[0]}–{g[-1]}" for g in bids)
    en = first["new:a"]["text"]["en"]
    assert f"gets blocks {full} (layer 0, full attention) and {sliding} (layer 1, sliding window)" in en
    assert (
        f"拿到块 {full}（第 0 层，全注意力） 和 {sliding}（第 1 层，滑动窗口）"
        in first["new:a"]["text"]["zh"]
    )
    # the growth sentence of step 2 (one new block per group)
    grow = _by_key(narrate(steps[1], steps[0], sc.config))["grow"]["text"]
    assert "8 (layer 0, full attention) and 7 (layer 1, sliding window) for a" in grow["en"]
    assert "a 得到 8（第 0 层，全注意力） 和 7（第 1 层，滑动窗口）" in grow["zh"]


def test_one_group_says_nothing_of_groups() -> None:
    d = copy.deepcopy(ISSUE)
    del d["config"]["layer_types"], d["config"]["sliding_window"]
    sc = Scenario.from_dict(d)
    steps = list(make_engine(sc).run())
    for k, t in enumerate(steps[:3]):
        for it in narrate(t, steps[k - 1] if k else None, sc.config):
            assert not re.search(r"group|组", it["text"]["en"] + it["text"]["zh"]), it["text"]


def test_a_block_dropped_the_step_before_and_taken_by_a_full_group_now_is_said() -> None:
    sc, steps = _run()
    prev, t = copy.copy(steps[1]), copy.copy(steps[2])
    # step 2's window also dropped block 30, which waited in the free queue; at step 3 a's full
    # group takes it as its next block
    prev.scheduler = copy.deepcopy(prev.scheduler)
    prev.scheduler["window_drops"]["b"][0]["block_ids"] = [14, 30]
    prev.scheduler["window_drops"]["b"][0]["block_indices"] = [0, 1]
    t.scheduler = copy.deepcopy(t.scheduler)
    t.scheduler["block_ids"]["a"][0] = [*t.scheduler["block_ids"]["a"][0], 30]
    move = _by_key(narrate(t, prev, sc.config))["group_move:30"]
    assert move["text"]["en"].startswith(
        "Block 30 moved between groups: request b's sliding-window group (layer 1, window 8) dropped it in "
        "step 2 and it waited in the free queue; now request a's full-attention group (layer 0) holds it "
        f"as its logical block {len(t.scheduler['block_ids']['a'][0]) - 1}"
    )
    assert "请求 b 的滑动窗口组（第 1 层，窗口 8）在第 2 步丢弃了它" in move["text"]["zh"]
    assert [(r["kind"], r["id"]) for r in move["refs"]] == [("block", 30), ("request", "a"), ("request", "b")]
