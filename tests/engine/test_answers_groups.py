"""Predict, then reveal, on a KV cache group's block table (core/answers.py, core/answers_groups.py), on
the real engine: the gpt-oss style preset at step 2, where request a's sliding-window group (group 0,
the runner's `block_table`) has its first blocks dropped by the window.

vLLM sends the runner only each step's new block ids, so the runner's row keeps the ids the window
dropped (never read: their tokens lie before the window) while the scheduler's list
(`scheduler.block_ids`) holds the null block 0 there. A student who predicts zeros in the runner's
row gets the rule (the window's drop, the groups' order, what the runner hears), a hint, and the
cause from the trace: which step dropped the block, at how many computed tokens, the window and the
first position it keeps."""

from __future__ import annotations

import functools

from pagedviz.core import load_preset, make_engine
from pagedviz.core.answers import check_entries
from pagedviz.core.trace import StepTrace

PRESET = "demo-gpt-oss-sliding-window"  # group 0 slides (layer 0, window 8), group 1 is full


@functools.cache
def _run() -> list[StepTrace]:
    return list(make_engine(load_preset(PRESET)).run())


def test_the_step_drops_a_blocks_in_the_schedulers_list_not_in_the_runners_row() -> None:
    s1, s2 = _run()[0], _run()[1]
    assert s2.batch["req_ids"][0] == "a"
    before, after = s1.scheduler["block_ids"]["a"][0], s2.scheduler["block_ids"]["a"][0]
    drop = s2.scheduler["window_drops"]["a"][0]
    assert drop["group"] == 0 and sorted(drop["block_indices"]) == [0, 1, 2]
    assert [after[i] for i in drop["block_indices"]] == [0, 0, 0]
    row = s2.arrays["block_table"][0, : len(after)].tolist()
    assert row[: len(before)] == before and row[len(before) :] == after[len(before) :]


def test_a_guess_of_zeros_in_the_runners_row_gets_the_rule_then_the_drop_as_its_cause() -> None:
    steps = _run()
    t = steps[1]
    after = t.scheduler["block_ids"]["a"][0]  # the scheduler's list: [0, 0, 0, 4, 5, 2]
    out = check_entries(t, "block_table", list(range(len(after))), after, history=steps[:2])
    assert [e["correct"] for e in out["entries"]] == [False, False, False, True, True, True]
    assert [e["expected"] for e in out["entries"]] == [1, 2, 3, 4, 5, 2]
    rule = out["rule"]
    assert "sliding-window group replaces every block" in rule["en"] and "in group order" in rule["en"]
    assert "The runner hears only of new block ids" in rule["en"]
    assert "滑动窗口组先把" in rule["zh"] and "runner 只收到新块的 id" in rule["zh"]
    hint = out["entries"][1]["hint"]
    assert hint["en"] == "block_table[0][1] is request a's logical block 1 (its tokens 4–7)"
    why = out["entries"][1]["explanation"]
    assert why["en"] == (
        "block_table[0][1] = 2: the runner's row keeps the block it was given for request a's logical "
        "block 1. The scheduler's sliding-window group (layer 0, window 8) dropped it this step (logical "
        "block 1, token positions 4–7): at 20 computed tokens the window of 8 keeps positions 13 onward, "
        "so it put the null block 0 in that place in its own list (its list now: [0, 0, 0, 4, 5, 2]) and "
        "gave the block back to the free queue; but the runner hears only of new block ids, so its entry "
        "stays, and the sliding layer never reads it: its tokens lie before the window"
    )
    assert "调度器的滑动窗口组（第 0 层，窗口 8）本步丢弃了它（第 1 个逻辑块，token 位置 4–7）" in why["zh"]
    assert "已计算 20 个 token 时" in why["zh"] and "runner 只收到新块的 id" in why["zh"]
    # "Just show me": the new block at the end, one the window had just given back
    shown = check_entries(t, "block_table", [5], None, history=steps[:2])["entries"][0]["explanation"]
    assert shown["en"] == (
        "block_table[0][5] = 2: request a's sliding-window group (layer 0, window 8) took block 2 this "
        "step from the head of the free queue, where its own window had just put it back, as its logical "
        "block 5; its groups took their new blocks in group order: sliding-window group (layer 0, "
        "window 8) [2]; full-attention group (layer 1) [1]"
    )
    assert "它自己的窗口刚把它放回那里" in shown["zh"]


def test_a_block_dropped_at_an_earlier_step_is_told_with_that_step() -> None:
    steps = _run()
    k = next(t.step for t in steps[2:] if not t.scheduler.get("window_drops"))  # a step without drops
    t = steps[k - 1]
    out = check_entries(t, "block_table", [0], [0], history=steps[:k])
    why = out["entries"][0]["explanation"]
    assert (
        "The scheduler's sliding-window group (layer 0, window 8) dropped it at step 2 (logical block 0"
        in why["en"]
    )
    assert "在第 2 步丢弃了它" in why["zh"]


def test_one_group_keeps_the_plain_rule_and_cause() -> None:
    steps = list(make_engine(load_preset("seed-001")).run())
    out = check_entries(steps[0], "block_table", [12], [99], history=steps[:1])
    assert "sliding" not in out["rule"]["en"] and "window" not in out["entries"][0]["explanation"]["en"]
    assert "from the head of the free queue" in out["entries"][0]["explanation"]["en"]
